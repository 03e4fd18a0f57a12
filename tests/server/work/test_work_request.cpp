// The work the service hands the scheduler: the scheduler schedules it by its ticket (id, client,
// end user, priority) and carries the rest as an opaque payload and result, which only the
// executor and the service read back, each as its own type.
#include "cube3d/server/work/work_request.h"

#include <gtest/gtest.h>

#include <any>
#include <memory>
#include <optional>

#include "cube3d/server/work/work_result.h"

namespace cube3d {
namespace {

WorkRequest a_request() {
  WorkRequest request;
  request.request_id = "req-1";
  request.client = "studio-a";
  request.end_user = "player-7";
  request.priority = TaskPriority::kBatch;
  request.prompt = "a chair";
  request.resolution_base = 7;
  request.format = MeshFormat::kObj;
  return request;
}

TEST(WorkRequest, ItsTicketIsWhatTheSchedulerSchedulesBy) {
  const TaskTicket ticket = ticket_of(a_request());
  EXPECT_EQ(ticket.request_id, "req-1");
  EXPECT_EQ(ticket.client, "studio-a");
  EXPECT_EQ(ticket.end_user, "player-7");
  EXPECT_EQ(ticket.priority, TaskPriority::kBatch);
}

TEST(WorkRequest, TheTaskCarriesItAndItsResultUnread) {
  std::optional<WorkResult> got;
  const WorkRequest request = a_request();
  Task task(ticket_of(request), request, SteadyClock::time_point::max(), {},
            [&got](const std::any* result, const Error* error) {
              ASSERT_EQ(error, nullptr);
              ASSERT_NE(result, nullptr);
              got = std::any_cast<const WorkResult&>(*result);
            });
  // The executor reads the payload as the request it is.
  const WorkRequest& payload = task.payload<WorkRequest>();
  EXPECT_EQ(payload.prompt, "a chair");
  EXPECT_EQ(payload.resolution_base, 7);
  EXPECT_EQ(payload.format, MeshFormat::kObj);
  // Read as another type, it is refused, not reinterpreted.
  EXPECT_THROW((void)task.payload<WorkResult>(), std::bad_any_cast);
  WorkResult result;
  result.request_id = payload.request_id;
  result.face_count = 12;
  task.succeed(std::move(result));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->request_id, "req-1");
  EXPECT_EQ(got->face_count, 12);
}

}  // namespace
}  // namespace cube3d
