#include "cube3d/server/work/work_request.h"

namespace cube3d {

TaskTicket ticket_of(const WorkRequest& request) {
  return {request.request_id, request.client, request.end_user, request.priority};
}

}  // namespace cube3d
