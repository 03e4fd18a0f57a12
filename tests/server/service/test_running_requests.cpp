// The table of works running under a client's request id: found while the work runs (same
// request or not), per API key, never once the work has ended or been cancelled.
#include "cube3d/server/service/running_requests.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace cube3d {
namespace test_running_requests {

std::shared_ptr<SharedWork> make_work() {
  WorkRequest request;
  request.request_id = "r";
  return SharedWork::make(request, SteadyClock::now() + std::chrono::seconds(60),
                          [](SharedWork&, const WorkResult*, const Error*) {
                            return std::shared_ptr<const WorkAnswer>();
                          });
}

ResultKey key_of(uint8_t byte) {
  ResultKey key{};
  key.fill(byte);
  return key;
}

TEST(RunningRequests, FindsTheWorkUnderItsIdAndTellsTheSameRequestFromAnother) {
  RunningRequests running;
  EXPECT_FALSE(running.find("studio-a", "id-1", key_of(1)));
  const auto work = make_work();
  const auto member = work->join({}, SteadyClock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(member);
  running.add("studio-a", "id-1", key_of(1), work);
  const auto same = running.find("studio-a", "id-1", key_of(1));
  ASSERT_TRUE(same);
  EXPECT_EQ(same->work, work);
  EXPECT_TRUE(same->same_request);
  const auto other = running.find("studio-a", "id-1", key_of(2));
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->same_request);
  // Another key's id of the same name is another request.
  EXPECT_FALSE(running.find("studio-b", "id-1", key_of(1)));
  EXPECT_FALSE(running.find("studio-a", "id-2", key_of(1)));
}

TEST(RunningRequests, AnEndedOrCancelledWorkIsNeverFound) {
  RunningRequests running;
  const auto finished = make_work();
  running.add("", "done", key_of(1), finished);
  WorkResult result;
  finished->job()->succeed(result);
  EXPECT_FALSE(running.find("", "done", key_of(1)));

  const auto cancelled = make_work();
  const auto member = cancelled->join({}, SteadyClock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(member);
  running.add("", "left", key_of(1), cancelled);
  cancelled->leave(*member);                          // the last member out cancels the job
  EXPECT_FALSE(running.find("", "left", key_of(2)));  // not even as another request
}

TEST(RunningRequests, EntriesOfEndedWorksAreSweptSoTheTableStaysSmall) {
  RunningRequests running;
  const auto live = make_work();
  const auto member = live->join({}, SteadyClock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(member);
  running.add("", "live", key_of(1), live);
  for (int i = 0; i < 1000; ++i) {
    running.add("", "gone-" + std::to_string(i), key_of(1), make_work());  // freed at once
  }
  EXPECT_LT(running.size(), 300u);
  EXPECT_TRUE(running.find("", "live", key_of(1)));
}

}  // namespace test_running_requests
}  // namespace cube3d
