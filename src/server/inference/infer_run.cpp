#include "cube3d/server/inference/infer_run.h"

#include <chrono>

#include "cube3d/core/error.h"
#include "cube3d/server/wire/answer_codec.h"
#include "cube3d/server/wire/progress_codec.h"
#include "cube3d/server/wire/request_codec.h"

namespace cube3d::inference {
namespace {

Status batch_failed() {
  return Status(ErrorCode::kCancelled, "another prompt of its batch failed");
}

}  // namespace

std::shared_ptr<InferRun> InferRun::start(Service& service, InferRequest request,
                                          ModelDescription model, InferPlan plan,
                                          const CallContext& call, InferObserver observer) {
  auto run = std::make_shared<InferRun>(service, std::move(request), std::move(model),
                                        std::move(plan), std::move(observer));
  run->launch(call);
  return run;
}

InferRun::InferRun(Service& service, InferRequest request, ModelDescription model, InferPlan plan,
                   InferObserver observer)
    : service_(service),
      request_(std::move(request)),
      model_(std::move(model)),
      plan_(std::move(plan)),
      calls_(plan_.requests.size()),
      responses_(plan_.requests.size()),
      remaining_(plan_.requests.size()),
      teller_(std::move(observer.progress), std::move(observer.done)) {}

void InferRun::launch(const CallContext& request_call) {
  const std::shared_ptr<InferRun> self = shared_from_this();
  const size_t batch = plan_.requests.size();
  // Each prompt is a call of its own; the statistics count them as this one request.
  CallContext call = request_call;
  call.statistics_group = service_.statistics_group(batch);
  // Read before any call can end. Progress only for a request that asks (its parameter).
  const bool reports = teller_.listens_to_progress() && plan_.progress;
  for (size_t i = 0; i < batch; ++i) {
    {
      const std::lock_guard lock(mutex_);
      if (failure_) {
        // An earlier prompt failed (or the caller cancelled): the rest are not started, and
        // count as ended.
        remaining_ -= batch - i;
        call.statistics_group->not_made(batch - i);
        break;
      }
    }
    CallObserver observer;
    if (reports) {
      observer.progress = [self, i](const TaskProgress& p) {
        self->prompt_progress(i, progress_message(p));
      };
    }
    observer.done = [self, i](CallOutcome outcome) { self->prompt_done(i, std::move(outcome)); };
    // Not under mutex_: the service may end the call at once, inside start().
    std::shared_ptr<ActiveCall> active =
        service_.start(client_request_of(plan_.requests[i]), call, std::move(observer));
    bool cancel_it = false;
    {
      const std::lock_guard lock(mutex_);
      if (!done_) calls_[i] = active;
      cancel_it = failure_.has_value();
    }
    if (cancel_it) active->cancel(batch_failed());
  }
  // Every prompt may have ended already (refused at once, or not started).
  std::optional<InferOutcome> outcome;
  {
    const std::lock_guard lock(mutex_);
    if (remaining_ != 0 || done_) return;
    done_ = true;
    outcome = std::move(failure_);
    calls_.clear();
  }
  if (outcome) deliver(std::move(*outcome));
}

void InferRun::prompt_progress(size_t index, const v1::Progress& progress) {
  std::unique_lock lock(mutex_);
  if (done_ || failure_) return;
  teller_.progress(std::move(lock), index, progress);
}

void InferRun::prompt_done(size_t index, CallOutcome outcome) {
  std::optional<InferOutcome> result;
  {
    const std::lock_guard lock(mutex_);
    if (done_) return;
    if (outcome.status.ok()) {
      responses_[index] = response_message(outcome.answer);
    } else if (!failure_) {
      // The first failure is the batch's; the others' (cancelled by it) are not news.
      InferOutcome failed;
      failed.status = Status(outcome.status.code(),
                             in_protocol_terms(outcome.status.message(), index, responses_.size()));
      failed.trailers = std::move(outcome.trailers);
      failure_ = std::move(failed);
      if (remaining_ > 1) {
        const std::weak_ptr<InferRun> weak = weak_from_this();
        cancel_rest_ = service_.timers().schedule_after(std::chrono::milliseconds(0), [weak] {
          if (const auto run = weak.lock()) run->cancel_all(batch_failed());
        });
      }
    }
    if (--remaining_ > 0) return;
    done_ = true;
    if (failure_) {
      result = std::move(failure_);
    } else {
      result.emplace();
      result->progress = plan_.progress;
      try {
        result->answer = answer_of(request_, model_, plan_, responses_);
      } catch (const Error& e) {
        result->status = Status(e);
      }
    }
    calls_.clear();
    responses_.clear();
  }
  deliver(std::move(*result));
}

void InferRun::deliver(InferOutcome outcome) {
  // After any progress report in flight, and none after (done_ is set).
  std::unique_lock lock(mutex_);
  teller_.outcome(std::move(lock), std::move(outcome));
}

void InferRun::cancel_all(const Status& why) {
  std::vector<std::shared_ptr<ActiveCall>> calls;
  {
    const std::lock_guard lock(mutex_);
    calls = calls_;
  }
  // Outside mutex_: a call's cancel may end it at once, into prompt_done.
  for (const auto& call : calls) {
    if (call) call->cancel(why);
  }
}

void InferRun::cancel(const Status& why) {
  {
    const std::lock_guard lock(mutex_);
    if (done_) return;
    if (!failure_) {
      InferOutcome cancelled;
      cancelled.status = why;
      failure_ = std::move(cancelled);
    }
  }
  cancel_all(why);
}

bool InferRun::finished() const {
  const std::lock_guard lock(mutex_);
  return done_;
}

}  // namespace cube3d::inference
