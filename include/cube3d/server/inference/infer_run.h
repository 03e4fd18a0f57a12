// One Open Inference Protocol request running on the service: each prompt of its plan is one
// service call (validated, admitted, cached, coalesced and scheduled as any request is), and
// the answer comes once every prompt has its mesh. A batch is one inference: the first prompt
// that fails fails it, in the protocol's words (infer_plan.h in_protocol_terms), and the
// others' work is cancelled.
//
// Like a service call, it never waits: start() returns at once, and the outcome comes on
// whichever thread ends the last prompt's call (or the caller's own, inside start(), for what
// ends at once).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/core/status.h"
#include "cube3d/scheduler/task.h"
#include "cube3d/server/inference/infer_answer.h"
#include "cube3d/server/inference/infer_messages.h"
#include "cube3d/server/inference/infer_plan.h"
#include "cube3d/server/service/ordered_teller.h"
#include "cube3d/server/service/service.h"

namespace cube3d::inference {

struct InferOutcome {
  Status status;
  InferAnswer answer;     // when status.ok()
  bool progress = false;  // the request asked for progress reports (its parameter progress)
  // The failing call's trailers ("retry-after" over an API key's limit).
  std::vector<std::pair<std::string, std::string>> trailers;
};

// Where a run's news goes: each prompt's progress (its place in the batch), then the outcome,
// exactly once. Called one at a time, never after the outcome, and never under a lock of the
// run's: either may call back into the run (cancel). Neither may block (as CallObserver). A
// prompt's progress that comes while another report is being told waits, the newest per prompt.
struct InferObserver {
  std::function<void(size_t index, const v1::Progress&)> progress;  // may be empty
  std::function<void(InferOutcome)> done;
};

class InferRun final : public ActiveCall, public std::enable_shared_from_this<InferRun> {
 public:
  // Starts every prompt's call on `service` with `call` (its deadline, credentials, end user).
  static std::shared_ptr<InferRun> start(Service& service, InferRequest request,
                                         ModelDescription model, InferPlan plan,
                                         const CallContext& call, InferObserver observer);

  InferRun(Service& service, InferRequest request, ModelDescription model, InferPlan plan,
           InferObserver observer);
  // Cancels every prompt's call; the outcome is `why` unless it has come already.
  void cancel(const Status& why) override;
  bool finished() const override;

 private:
  void launch(const CallContext& call);
  void prompt_done(size_t index, CallOutcome outcome);
  void prompt_progress(size_t index, const v1::Progress& progress);
  // Cancels the calls started so far (the run's own failure, or its caller's cancel).
  void cancel_all(const Status& why);
  // Ends the run: the outcome to the observer, after any progress report in flight.
  void deliver(InferOutcome outcome);

  Service& service_;
  const InferRequest request_;
  const ModelDescription model_;
  const InferPlan plan_;

  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<ActiveCall>> calls_;
  std::vector<v1::GenerateMeshResponse> responses_;
  size_t remaining_ = 0;  // prompts whose call has not ended
  std::optional<InferOutcome> failure_;
  bool done_ = false;
  // A failure's cancellation of the other prompts, run on the service's timer thread: not from
  // inside the failed call's outcome, so that one call's end does not nest the others'.
  TimerQueue::Timer cancel_rest_;
  // Prompts report from several threads; the observer hears one report at a time, outside
  // mutex_, the outcome last; of a prompt's progress waiting, the newest (ordered_teller.h).
  OrderedTeller<v1::Progress, InferOutcome, size_t> teller_;
};

}  // namespace cube3d::inference
