// The one service behind every front door (gRPC, HTTP/JSON): admits a call (API key),
// validates its request, hands it to the scheduler as a Task, watches its deadline, and delivers
// its outcome (the mesh or a status) and its progress to the front door's observer. Validation,
// deadlines, cancellation, queue limits, metrics and the request log are therefore the same
// whichever way a request came in; a front door only translates its transport to and from this.
//
// Nothing here waits: start() returns at once and the outcome arrives by completion, on the
// scheduler's, the executor's or the core's timer thread, so that a call in flight costs the
// server a little memory and no thread of its own (a front door holds no thread per call either).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "cube3d/core/clock.h"
#include "cube3d/core/constants.h"
#include "cube3d/core/status.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/scheduler/task.h"
#include "cube3d/server/admission/api_keys.h"
#include "cube3d/server/admission/prompt_policy.h"
#include "cube3d/server/cache/result_cache.h"
#include "cube3d/server/observability/inference_statistics.h"
#include "cube3d/server/observability/metrics.h"
#include "cube3d/server/service/client_request.h"
#include "cube3d/server/service/mesh_answer.h"
#include "cube3d/server/service/model_identity.h"
#include "cube3d/server/service/request_policy.h"
#include "cube3d/server/service/result_key.h"
#include "cube3d/server/service/running_requests.h"
#include "cube3d/server/service/shared_work.h"
#include "cube3d/server/timing/timer_queue.h"
#include "cube3d/server/work/work_request.h"
#include "cube3d/server/work/work_result.h"

namespace cube3d {

struct ServiceOptions {
  // Also the deadline for requests without one and the largest response (policy.limits).
  RequestPolicy policy;
  bool log_prompts = false;
  int64_t tokens_per_shape = 0;  // T, for progress events
  // The result cache (cache.enabled): answers from the store given to use_cache(), and
  // identical requests in flight coalesced. Off: every request computes (BYPASS).
  bool cache_enabled = false;
  bool cache_shared_across_keys = false;  // else the API key's name scopes each entry
  // The text the model reads for a prompt (CLIP's clean-up and lower case), what the prompt
  // policy matches; unset: the prompt as sent.
  std::function<std::string(std::string_view)> model_text;
};

// Who a job's call is, when a replica runs again a job that another one admitted (its lease
// lapsed, jobs/job_service.h): the API key's name and the end user's pseudonym as they were then.
struct ResumedIdentity {
  std::string key_name;
  std::string end_user;  // pseudonym; "" for none
};

// What the core needs to know about the call a front door serves.
struct CallContext {
  // The caller's deadline (steady clock); time_point::max() for none (the core then applies
  // limits.default_deadline_ms).
  SteadyClock::time_point deadline = SteadyClock::time_point::max();
  const char* transport = "grpc";  // for the request log
  // The front door counts the outcome itself (gRPC: with the code the client finally saw);
  // false: the core counts the status it answers.
  bool outcome_counted_by_front_door = false;
  // The `authorization` metadata or header ("Bearer <key>"); empty when absent.
  std::string authorization;
  // The end user the caller acts for (`X-End-User-Id` header, `end-user-id` metadata), as sent;
  // unset when absent (sent empty is an error, not "no end user"). Checked and turned into a
  // pseudonym by the core. Sent more than once is an error too (a proxy that appends the
  // verified id would otherwise let a client's own first one through): end_user_count says how
  // many times it came.
  std::optional<std::string> end_user;
  size_t end_user_count = 0;
  // The W3C `traceparent` metadata or header, as the client sent it (parsed, and ignored when
  // invalid, for the log's trace_id); empty when absent.
  std::string traceparent;
  // Set by the job service alone, for a job taken over from another replica: the call is this
  // key's (it must still be configured) without `authorization`, and the key's request and
  // concurrency limits, met at the job's submission, are not applied again.
  std::optional<ResumedIdentity> resumed;
  // Set by the Open Inference Protocol's run alone: the request this call is one prompt of, in
  // the model statistics (a request of B prompts is one request of B inferences); null for a
  // request of its own.
  std::shared_ptr<InferenceStatistics::Group> statistics_group;
};

// How a call ended. `trailers` are for the transport's trailing metadata or response headers
// ("retry-after" over an API key's limit).
struct CallOutcome {
  Status status;
  MeshAnswer answer;  // when status.ok() (its body set); the doors render it
  std::vector<std::pair<std::string, std::string>> trailers;
};

// Where a call's news goes. Both run on whichever thread has it (a scheduler or executor thread,
// the core's timer thread, or the caller's own inside start() for what ends at once), one at a
// time and in order: every progress event before the outcome, none after. Neither is called
// under a lock of the call's, so either may call back into the call (cancel() from a progress
// event: the outcome is then told once that event returns). Neither may block: queue the news
// for the transport and return. A progress event that comes while another is being told is
// told after it, and only the newest one waiting (progress is a state, not a log).
struct CallObserver {
  // The event as a client sees it (progress_as_seen; the doors render it, wire/progress_codec.h
  // for the API's message, and need nothing else to do so).
  std::function<void(const TaskProgress&)> progress;  // may be empty
  std::function<void(CallOutcome)> done;              // exactly once
};

// A call in flight, as its front door holds it.
class ActiveCall {
 public:
  virtual ~ActiveCall() = default;
  // The caller went away (its connection closed, it cancelled, its write timed out): the job is
  // cancelled (dropped from the queue, or its decode slot freed) and `why` is the outcome that
  // is counted and logged, unless the call has already ended. Idempotent, any thread.
  virtual void cancel(const Status& why) = 0;
  virtual bool finished() const = 0;
};

// One progress event as a client sees it (stream, Server-Sent Events and a job alike): the
// total is the model's T before decoding knows one, and the meshing counts are set only while
// the mesh's occupancy field is evaluated.
TaskProgress progress_as_seen(const TaskProgress& progress, int64_t tokens_per_shape);

class Service {
 public:
  // The core answers UNAVAILABLE ("loading") until a scheduler is attached: the server
  // listens (and reports NOT_SERVING) while the model loads and warms up.
  // `codec` writes answers for the cache and measures them against limits.max_message_bytes
  // (the API's message: wire/answer_codec.h); it outlives the service.
  Service(ServiceOptions options, Metrics& metrics, const AnswerCodec& codec);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // `model` identifies what the scheduler runs (the cache's key, the response's provenance).
  void attach(Scheduler* scheduler, ModelIdentity model = {}) {
    model_ = std::move(model);
    scheduler_.store(scheduler);  // after model_: a call that sees the scheduler sees the model
  }
  // The result cache's store (may be null: coalescing only). Set before attach().
  void use_cache(ResultCache* cache) { cache_ = cache; }
  // With keys, every call must bring a known API key (auth.api_keys_file); null: open.
  void use_api_keys(ApiKeys* keys) { api_keys_.store(keys); }
  ApiKeys* api_keys() const { return api_keys_.load(); }
  // policy.prompt_denylist_file: prompts it refuses are answered PERMISSION_DENIED before they
  // are queued. Null: none.
  void use_prompt_policy(PromptPolicy* policy) { prompt_policy_.store(policy); }
  bool ready() const { return scheduler_.load() != nullptr; }
  // What the attached scheduler runs; read it only once ready() (set before the scheduler).
  const ModelIdentity& model() const { return model_; }
  const ServiceOptions& options() const { return options_; }
  Metrics& metrics() { return metrics_; }
  // Every request's outcome in the shape of Triton's statistics extension (the Open Inference
  // Protocol's model statistics).
  const InferenceStatistics& statistics() const { return statistics_; }
  // The statistics' tally of one request of `prompts` calls (CallContext::statistics_group);
  // the service must outlive it.
  std::shared_ptr<InferenceStatistics::Group> statistics_group(size_t prompts) {
    return std::make_shared<InferenceStatistics::Group>(statistics_, prompts);
  }
  // Deadlines of the core's calls, and the front doors' own timeouts (one thread for all).
  TimerQueue& timers() { return timers_; }

  // Who is asking, for calls that cost no work (polling a job): the API key's name ("" when the
  // server has no keys), or UNAUTHENTICATED.
  std::variant<std::string, Status> identify(const std::string& authorization) const;

  // Starts one request and returns at once; its outcome (OK with the response, or an error:
  // every error a client can cause maps to a status, never to a crash) and its progress go to
  // `observer`. The returned handle cancels it; dropping the handle does not.
  std::shared_ptr<ActiveCall> start(const ClientRequest& request, const CallContext& call,
                                    CallObserver observer);

 private:
  friend class ServiceCall;
  // The answer's body of a computed result, for `request` (the work's, validated: a member's
  // differs from it only in what the member stamps: its request id, cache status, timings).
  MeshBody body_of(const WorkResult& result, const WorkRequest& request) const;
  EffectiveParameters effective_of(const WorkRequest& request,
                                   const std::string& computed_by) const;
  // RESOURCE_EXHAUSTED for an answer over limits.max_message_bytes (`body_bytes`: its body's,
  // as the codec encoded it).
  Status check_size(const MeshAnswer& answer, int64_t body_bytes) const;

  // The work a call joins: an identical one in flight (coalesced) when `key` is set and one
  // runs, else a new one (registered under `key` when set) that the caller must submit.
  struct Joined {
    std::shared_ptr<SharedWork> work;
    SharedWork::MemberId member = 0;
    bool coalesced = false;
  };
  // Whether identical work (by `key`) is in flight now.
  bool in_flight(const ResultKey& key);
  Joined join_or_create(const std::optional<ResultKey>& key, const WorkRequest& request,
                        SteadyClock::time_point deadline, SharedWork::Member member);
  // A computed work's outcome: its result into the cache, and the key no longer in flight.
  // The shape tokens `request` decodes, guidance rows included.
  int64_t shape_tokens_of(const WorkRequest& request) const;
  // Charges the work, builds its one answer (null for an error), stores it in the cache and
  // forgets the work.
  std::shared_ptr<const WorkAnswer> work_done(const std::optional<ResultKey>& key, SharedWork& work,
                                              const WorkResult* result, const WorkRequest& request);

  ServiceOptions options_;
  const AnswerCodec& codec_;
  std::atomic<Scheduler*> scheduler_{nullptr};
  std::atomic<ApiKeys*> api_keys_{nullptr};
  std::atomic<PromptPolicy*> prompt_policy_{nullptr};
  // What a request is expected to cost the occupancy_points_per_minute buckets, by
  // resolution_base: a moving average of what meshes at that resolution took (the hierarchical
  // field's points depend on the surface, known only once computed).
  std::array<std::atomic<double>, kMaxResolutionBase + 1> points_by_resolution_{};
  int64_t expected_points(int64_t resolution_base) const;
  void observe_points(int64_t resolution_base, int64_t points);
  ModelIdentity model_;
  ResultCache* cache_ = nullptr;
  std::mutex in_flight_mutex_;
  // Entries leave when their work ends; a work whose callers all left before that (its job
  // cancelled) leaves an expired entry, swept every kInFlightSweep new works.
  std::map<ResultKey, std::weak_ptr<SharedWork>> in_flight_;
  int64_t works_since_sweep_ = 0;
  // The works running under their client's request_id, per key (retries join them).
  RunningRequests running_;
  Metrics& metrics_;
  InferenceStatistics statistics_;
  TimerQueue timers_;  // last: its thread stops first, before what its actions touch goes
};

}  // namespace cube3d
