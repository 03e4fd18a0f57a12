// A call's progress (service/service.h's CallObserver::progress, as a client sees it) as the
// API's Progress message: what the gRPC stream sends, the HTTP door's Server-Sent Events render
// and a job keeps.
#pragma once

#include "cube3d/scheduler/task.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

v1::Progress progress_message(const TaskProgress& progress);

}  // namespace cube3d
