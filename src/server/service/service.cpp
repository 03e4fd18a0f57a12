#include "cube3d/server/service/service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>

#include "cube3d/core/enum_table.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/admission/end_user.h"
#include "cube3d/server/service/ordered_teller.h"
#include "cube3d/server/service/request_validation.h"

namespace cube3d {
namespace {

// How often (in new works) join_or_create() drops the in-flight entries of works that every
// caller left before they ended: a bound on that garbage, at a scan per this many works.
constexpr int64_t kInFlightSweep = 256;

// Whether a request asked for anything of the size contract (a pivot, levels of detail, the compact
// encoding): only then does its answer carry bounds, up_axis and effective.pivot, so that every
// other answer stays byte for byte what it was before them.
bool states_frame(const WorkRequest& r) {
  return r.format == MeshFormat::kCompact || r.pivot != MeshPivot::kModelOrigin ||
         !r.lod_face_counts.empty();
}

}  // namespace

TaskProgress progress_as_seen(const TaskProgress& p, int64_t tokens_per_shape) {
  TaskProgress seen;
  seen.stage = p.stage;
  seen.tokens_done = p.tokens_done;
  // Stages before decoding know no token counts; the total is the model's T anyway.
  seen.tokens_total = p.tokens_total > 0 ? p.tokens_total : tokens_per_shape;
  if (p.stage == TaskStage::kMeshing && p.levels_total > 0) {
    seen.points_done = p.points_done;
    seen.points_planned = p.points_planned;
    seen.levels_done = p.levels_done;
    seen.levels_total = p.levels_total;
  }
  return seen;
}

// One call from start() to its outcome. Owned by its work's member callbacks (until the work is
// done), by a pending cache lookup, and by the front door's handle; it holds its work only until
// the call ends, so nothing keeps the two alive in a cycle once either side is done.
class ServiceCall final : public ActiveCall, public std::enable_shared_from_this<ServiceCall> {
 public:
  ServiceCall(Service& core, const ClientRequest& request, const CallContext& call,
              CallObserver observer)
      : core_(core),
        start_(SteadyClock::now()),
        counted_by_front_door_(call.outcome_counted_by_front_door),
        statistics_group_(call.statistics_group),
        traceparent_(call.traceparent),
        via_(call.transport),
        // The client's id is logged only once validated (then it is plain [A-Za-z0-9._:-]);
        // before that, a short escaped excerpt: a raw id could forge log lines or flood the log.
        client_request_id_(!request.request_id.empty()),
        unvalidated_id_(request.request_id.empty()
                            ? std::string("-")
                            : "- (request_id '" + printable(request.request_id, 64) + "')"),
        teller_(std::move(observer.progress), std::move(observer.done)) {}

  // The admission, validation and lookup or submission of start(); the outcome may come before
  // it returns.
  void begin(const ClientRequest& request, const CallContext& call);

  void cancel(const Status& why) override {
    leave_work();
    finish(why);
  }

  bool finished() const override {
    const std::lock_guard lock(mutex_);
    return done_;
  }

 private:
  // The checks of begin(), in order, each a refusal (the call's answer) or nothing: who is
  // asking (the API key, or the key a resumed job was admitted as), the end user it acts for
  // (`end_user`: its pseudonym), the request itself, the key's request and concurrency limits
  // (`ticket`: the call's place), the prompt policy, and the model being loaded (with the
  // call's deadline set).
  std::optional<Status> identify_key(const CallContext& call, ApiKeys* keys);
  std::optional<Status> identify_end_user(const CallContext& call, std::string& end_user);
  std::optional<Status> validate(const ClientRequest& request, std::string end_user);
  std::optional<Status> admit(const CallContext& call, ApiKeys* keys, ApiKeys::Ticket& ticket);
  std::optional<Status> check_prompt_policy();
  std::optional<Status> check_loaded(const CallContext& call);
  // What follows the checks: the deadline's timer, then the cache lookup or the computation.
  void arm_deadline();
  void look_up_or_compute();
  // After the cache lookup (inline, or on the cache's I/O thread for the disk tier).
  void after_lookup(ResultCache::Value cached);
  // Joins the identical work in flight or starts one; submits a new one to the scheduler. A
  // call that would start one is first checked against its key's work limits.
  void compute(bool use_cache);
  std::optional<Status> over_work_limits(bool use_cache);
  void on_progress(const TaskProgress& p);
  void on_deadline();
  // Out of the work (the last member out cancels it: the scheduler drops the job, or the
  // executor stops the batch once every request in it is gone).
  void leave_work();
  // The one end of the call: counts, logs and tells the observer, once.
  // `answer` (with `result`) is the work's one answer, `cached` a cached answer's body (and its
  // encoded size); neither for an error.
  void finish(const Status& status, const WorkResult* result = nullptr,
              const WorkAnswer* answer = nullptr, const CachedBody* cached = nullptr);
  // finish()'s two halves, under mutex_: the outcome (the work's answer or the cached body,
  // stamped with this call's request id and cache status, its size checked), then what is
  // counted and logged of it.
  CallOutcome outcome_locked(const Status& status, const WorkResult* result,
                             const WorkAnswer* answer, const CachedBody* cached, double total_ms);
  void count_locked(const CallOutcome& outcome, const WorkResult* result, double total_ms);

  Service& core_;
  const SteadyClock::time_point start_;
  const bool counted_by_front_door_;
  // The request this call is one prompt of, for the model statistics; null: its own.
  const std::shared_ptr<InferenceStatistics::Group> statistics_group_;
  const std::string traceparent_;
  std::string via_;  // "grpc", or "grpc, key studio-a" once the key is known
  std::string key_name_;
  bool counted_for_key_ = false;  // authenticated (or no keys): its answer counts in key usage
  std::string request_id_;        // once validated
  const bool client_request_id_;  // the client chose it (else the server made one)
  const std::string unvalidated_id_;
  WorkRequest request_;  // once validated
  SteadyClock::time_point deadline_ = SteadyClock::time_point::max();
  std::optional<ResultKey> key_;  // when the cache is used
  std::vector<std::pair<std::string, std::string>> trailers_;

  mutable std::mutex mutex_;
  bool done_ = false;
  // The observer, told outside mutex_ one event at a time and in order (ordered_teller.h).
  OrderedTeller<TaskProgress, CallOutcome> teller_;
  bool running_ = false;  // past the queue, counted in cube3d_requests_running
  CacheStatus cache_status_ = CacheStatus::kBypass;
  std::shared_ptr<SharedWork> work_;
  SharedWork::MemberId member_ = 0;
  ApiKeys::Ticket ticket_;  // one of the key's concurrent places, until the call ends
  TimerQueue::Timer deadline_timer_;
};

void ServiceCall::begin(const ClientRequest& request, const CallContext& call) {
  // This call's log lines carry its trace id, then its key's name and its request id.
  const LogContext log_scope({.traceparent = traceparent_});
  // Who is asking comes first: an unauthenticated caller learns nothing about its request.
  ApiKeys* const keys = core_.api_keys_.load();
  std::string end_user;
  ApiKeys::Ticket ticket;
  std::optional<Status> refusal = identify_key(call, keys);
  if (!refusal) refusal = identify_end_user(call, end_user);
  if (!refusal) refusal = validate(request, std::move(end_user));
  if (!refusal) refusal = admit(call, keys, ticket);
  if (!refusal) refusal = check_prompt_policy();
  if (!refusal) refusal = check_loaded(call);
  if (refusal) return finish(*refusal);
  {
    const std::lock_guard lock(mutex_);
    ticket_ = std::move(ticket);
  }
  arm_deadline();
  look_up_or_compute();
}

std::optional<Status> ServiceCall::identify_key(const CallContext& call, ApiKeys* keys) {
  if (call.resumed) {
    // A job another replica admitted: the key it was admitted as, if it still exists.
    key_name_ = call.resumed->key_name;
    if (keys && !keys->standing(key_name_)) {
      return Status(ErrorCode::kUnauthenticated,
                    "the API key \"" + printable(key_name_) +
                        "\" that submitted this job is no longer configured");
    }
    if (keys) via_ += ", key " + key_name_;
  } else if (keys) {
    auto who = keys->identify(call.authorization);
    if (auto* refused = std::get_if<ApiKeys::Refusal>(&who)) {
      return Status(ErrorCode::kUnauthenticated, refused->message);
    }
    key_name_ = std::move(std::get<std::string>(who));
    via_ += ", key " + key_name_;
  }
  counted_for_key_ = true;  // from here on, the answer is the key's (usage by key)
  return std::nullopt;
}

std::optional<Status> ServiceCall::identify_end_user(const CallContext& call,
                                                     std::string& end_user) {
  // Its pseudonym: the id as sent is never logged nor kept.
  if (call.resumed) {
    end_user = call.resumed->end_user;
    if (!end_user.empty()) via_ += ", user " + end_user;
  } else if (call.end_user) {
    try {
      check_end_user_id(*call.end_user, call.end_user_count);
    } catch (const Error& e) {
      return Status(e);
    }
    end_user = end_user_pseudonym(key_name_, *call.end_user);
    via_ += ", user " + end_user;
  }
  return std::nullopt;
}

std::optional<Status> ServiceCall::validate(const ClientRequest& request, std::string end_user) {
  try {
    request_ = validate_request(request, core_.options_.policy);
  } catch (const Error& e) {
    return Status(e);
  }
  request_.client = key_name_;
  request_.end_user = std::move(end_user);
  request_id_ = request_.request_id;
  if (core_.options_.log_prompts) {
    LogContext::set_api_key(key_name_);
    LogContext::set_request_id(request_id_);
    spdlog::info("request {} prompt: {}", request_id_,
                 printable(request_.prompt, request_.prompt.size()));
  }
  return std::nullopt;
}

std::optional<Status> ServiceCall::admit(const CallContext& call, ApiKeys* keys,
                                         ApiKeys::Ticket& ticket) {
  // The key's request and concurrency limits (its work limits come once it is known that this
  // call computes: a cache hit or a coalesced answer needs no work). A resumed job met them
  // when it was submitted.
  if (!keys || call.resumed) return std::nullopt;
  ApiKeys::Demand demand;
  demand.end_user = request_.end_user;
  auto admitted = keys->admit(call.authorization, demand);
  if (auto* refused = std::get_if<ApiKeys::Refusal>(&admitted)) {
    if (refused->unauthenticated) {  // the key went (SIGHUP) since it was identified
      return Status(ErrorCode::kUnauthenticated, refused->message);
    }
    const std::string seconds = std::to_string(refused->retry_after_s);
    trailers_.emplace_back("retry-after", seconds);
    return Status(ErrorCode::kResourceExhausted,
                  refused->message + "; retry after " + seconds + " s");
  }
  ticket = std::move(std::get<ApiKeys::Ticket>(admitted));
  if (ticket.batch_only()) request_.priority = TaskPriority::kBatch;
  return std::nullopt;
}

std::optional<Status> ServiceCall::check_prompt_policy() {
  // The prompt policy sees what the model would read, before any work is queued.
  PromptPolicy* const policy = core_.prompt_policy_.load();
  if (!policy) return std::nullopt;
  std::string text = request_.prompt;
  try {
    // Validated UTF-8 already; a failure here still answers the call rather than escaping.
    if (core_.options_.model_text) text = core_.options_.model_text(request_.prompt);
  } catch (const Error& e) {
    return Status(e);
  }
  if (policy->refuses(text)) {
    core_.metrics_.key_prompt_refused(key_name_);
    return Status(ErrorCode::kPermissionDenied, std::string(PromptPolicy::kRefusal));
  }
  return std::nullopt;
}

std::optional<Status> ServiceCall::check_loaded(const CallContext& call) {
  const int64_t default_ms = core_.options_.policy.limits.default_deadline_ms;
  deadline_ = call.deadline != SteadyClock::time_point::max() || default_ms <= 0
                  ? call.deadline
                  : start_ + std::chrono::milliseconds(default_ms);
  if (!core_.scheduler_.load()) {
    return Status(ErrorCode::kUnavailable,
                  "the model is still loading; retry when health reports SERVING");
  }
  return std::nullopt;
}

void ServiceCall::arm_deadline() {
  if (deadline_ == SteadyClock::time_point::max()) return;
  const std::weak_ptr<ServiceCall> weak = shared_from_this();
  TimerQueue::Timer timer = core_.timers_.schedule(deadline_, [weak] {
    if (const auto call = weak.lock()) call->on_deadline();
  });
  const std::lock_guard lock(mutex_);
  // A call that ended meanwhile keeps no timer (it would only fire into a finished call).
  if (!done_) deadline_timer_ = std::move(timer);
}

void ServiceCall::look_up_or_compute() {
  const bool use_cache = core_.options_.cache_enabled && !request_.bypass_cache;
  if (!use_cache) return compute(false);
  key_ = result_key(request_, core_.model_,
                    core_.options_.cache_shared_across_keys ? std::string_view() : key_name_);
  ResultCache* const cache = core_.cache_;
  if (!cache) return compute(true);
  // The lookup owns the call until it answers (inline for memory, later for the disk tier).
  // With a shared tier the lookup may wait (no thread) for another replica's computation of
  // the same key, never past this call's deadline.
  cache->lookup(*key_, deadline_, [self = shared_from_this()](ResultCache::Value cached) {
    self->after_lookup(std::move(cached));
  });
}

void ServiceCall::after_lookup(ResultCache::Value cached) {
  if (finished()) return;  // cancelled or timed out while the disk was read
  if (cached) {
    if (std::optional<MeshBody> body = core_.codec_.decode(*cached)) {
      // What a computed answer's last progress says (the executor's), so that a job or a stream
      // answered from the cache reads as done with every token, not as still queued.
      const int64_t tokens = core_.options_.tokens_per_shape;
      on_progress({TaskStage::kDone, tokens, tokens});
      const CachedBody hit{std::make_shared<const MeshBody>(std::move(*body)),
                           static_cast<int64_t>(cached->size())};
      return finish(Status(), nullptr, nullptr, &hit);
    }
    // The store checks its entries; a payload that still does not parse is dropped, not served.
    spdlog::warn("request {}: a cache entry does not parse; recomputing", request_id_);
    if (core_.cache_) core_.cache_->erase(*key_);
  }
  compute(true);
}

std::optional<Status> ServiceCall::over_work_limits(bool use_cache) {
  ApiKeys* const keys = core_.api_keys_.load();
  if (!keys) return std::nullopt;
  // Joining identical work in flight costs nothing. (Looked at before joining: the work may end
  // in between, and this call then computes unchecked, once.)
  if (use_cache && core_.in_flight(*key_)) return std::nullopt;
  const ApiKeys::Work work{core_.shape_tokens_of(request_),
                           core_.expected_points(request_.resolution_base)};
  const std::optional<ApiKeys::Refusal> refused =
      keys->check_work(key_name_, request_.end_user, work);
  if (!refused) return std::nullopt;
  const std::string seconds = std::to_string(refused->retry_after_s);
  {
    const std::lock_guard lock(mutex_);
    trailers_.emplace_back("retry-after", seconds);
  }
  return Status(ErrorCode::kResourceExhausted,
                refused->message + "; retry after " + seconds + " s");
}

void ServiceCall::compute(bool use_cache) {
  const std::shared_ptr<ServiceCall> self = shared_from_this();
  SharedWork::Member member;
  member.progress = [self](const TaskProgress& p) { self->on_progress(p); };
  member.done = [self](const WorkResult* result, const Error* error, const WorkAnswer* answer) {
    if (error) return self->finish(Status(*error));
    if (!answer) return self->finish(Status(ErrorCode::kInternal, "the work ended with no answer"));
    self->finish(Status(), result, answer);
  };
  // A retry of a request still running under the client's id joins it (whether or not the
  // cache is on); the id reused for another request while the first runs is refused.
  std::optional<ResultKey> id_key;
  Service::Joined joined;
  if (client_request_id_) {
    id_key = key_ ? *key_ : result_key(request_, core_.model_, key_name_);
    if (const auto running = core_.running_.find(key_name_, request_id_, *id_key)) {
      if (!running->same_request) {
        return finish(Status(ErrorCode::kAlreadyExists,
                             "request_id '" + request_id_ +
                                 "' is already running for this API key with other "
                                 "parameters; send another request_id for another "
                                 "request"));
      }
      if (const auto id = running->work->join(member, deadline_)) {
        joined = {running->work, *id, true};
      }
    }
  }
  if (!joined.work) {
    if (const std::optional<Status> refused = over_work_limits(use_cache)) {
      return finish(*refused);
    }
    joined = core_.join_or_create(use_cache ? key_ : std::nullopt, request_, deadline_, member);
    if (id_key && !joined.coalesced) {
      core_.running_.add(key_name_, request_id_, *id_key, joined.work);
    }
  }
  {
    const std::lock_guard lock(mutex_);
    cache_status_ = joined.coalesced ? CacheStatus::kCoalesced
                    : !use_cache     ? CacheStatus::kBypass
                                     : CacheStatus::kMiss;
    if (!done_) {
      work_ = joined.work;
      member_ = joined.member;
    }
  }
  // Ended meanwhile (deadline, cancel): out of the work again, so that it does not run for us.
  if (finished()) joined.work->leave(joined.member);
  if (joined.coalesced) return;
  Scheduler* const scheduler = core_.scheduler_.load();
  try {
    scheduler->submit(joined.work->job());
  } catch (const Error& e) {
    // Every member hears it, those that joined since too (the work is theirs as well).
    joined.work->fail(e);
  }
}

void ServiceCall::on_progress(const TaskProgress& p) {
  std::unique_lock lock(mutex_);
  if (done_) return;
  if (p.stage != TaskStage::kQueued && p.stage != TaskStage::kDone && !running_) {
    running_ = true;
    core_.metrics_.request_running(+1);
  }
  teller_.progress(std::move(lock), progress_as_seen(p, core_.options_.tokens_per_shape));
}

void ServiceCall::leave_work() {
  std::shared_ptr<SharedWork> work;
  SharedWork::MemberId member = 0;
  {
    const std::lock_guard lock(mutex_);
    work = std::move(work_);
    member = member_;
  }
  if (work) work->leave(member);
}

void ServiceCall::on_deadline() {
  if (finished()) return;
  leave_work();
  finish(Status(ErrorCode::kDeadlineExceeded,
                "deadline exceeded after " +
                    std::to_string(static_cast<int64_t>(ms_between(start_, SteadyClock::now()))) +
                    " ms"));
}

void ServiceCall::finish(const Status& status_in, const WorkResult* result,
                         const WorkAnswer* answer, const CachedBody* cached) {
  std::unique_lock lock(mutex_);
  if (done_) return;
  done_ = true;
  if (running_) core_.metrics_.request_running(-1);
  running_ = false;
  deadline_timer_.cancel();
  work_.reset();
  // The key's concurrent place is free from here on (a retry may follow at once).
  ticket_ = ApiKeys::Ticket();
  const double total_ms = ms_between(start_, SteadyClock::now());
  CallOutcome outcome = outcome_locked(status_in, result, answer, cached, total_ms);
  count_locked(outcome, result, total_ms);
  teller_.outcome(std::move(lock), std::move(outcome));
}

CallOutcome ServiceCall::outcome_locked(const Status& status_in, const WorkResult* result,
                                        const WorkAnswer* answer, const CachedBody* cached,
                                        double total_ms) {
  CallOutcome outcome;
  outcome.status = status_in;
  outcome.trailers = std::move(trailers_);
  if (status_in.ok() && result && answer) {
    outcome.status = answer->status;
    if (outcome.status.ok()) {
      // The work's, stamped with this call's own.
      outcome.answer = {.body = answer->body,
                        .request_id = request_id_,
                        .cache_status = cache_status_,
                        .timings = result->timings,
                        .batch_bucket = result->batch_bucket};
      outcome.status = core_.check_size(outcome.answer, answer->body_bytes);
    }
  } else if (status_in.ok() && cached) {
    cache_status_ = CacheStatus::kHit;
    outcome.answer = {.body = cached->body,
                      .request_id = request_id_,
                      .cache_status = cache_status_,
                      .timings = {.total_ms = total_ms},
                      .batch_bucket = 0};
    outcome.status = core_.check_size(outcome.answer, cached->bytes);
    if (outcome.status.ok()) {
      core_.metrics_.cache_hit_bytes(core_.codec_.message_bytes(outcome.answer, cached->bytes));
    }
  }
  if (!outcome.status.ok()) outcome.answer = MeshAnswer();
  return outcome;
}

void ServiceCall::count_locked(const CallOutcome& outcome, const WorkResult* result,
                               double total_ms) {
  const Status& status = outcome.status;

  // The end of a call may come on any thread: its log lines carry the call's own context.
  const LogContext log_scope(
      {.request_id = request_id_, .api_key = key_name_, .traceparent = traceparent_});
  const std::string code(to_string(status.code()));
  if (!counted_by_front_door_) core_.metrics_.request_finished(code);
  if (counted_for_key_) {
    core_.metrics_.key_request(key_name_, code);
    if (status.ok()) core_.metrics_.key_mesh_bytes(key_name_, mesh_bytes(*outcome.answer.body));
  }
  if (status.ok() && result) {
    const WorkTimings& t = result->timings;
    const InferenceStatistics::Computed computed{
        .total_ms = total_ms,
        .queue_ms = t.queue_ms,
        .input_ms = t.text_encoding_ms + t.prefill_ms,
        .infer_ms = t.decode_ms,
        .output_ms = t.mesh_ms,
        .batch_bucket = result->batch_bucket,
        .executed = cache_status_ != CacheStatus::kCoalesced,
        .cache_miss = cache_status_ == CacheStatus::kMiss};
    if (statistics_group_) {
      statistics_group_->computed(computed);
    } else {
      core_.statistics_.computed(computed);
    }
    core_.metrics_.cache_answer(cache_status_name(cache_status_));
    core_.metrics_.observe_request_seconds(total_ms / 1000.0);
    core_.metrics_.observe_queue_seconds(result->timings.queue_ms / 1000.0);
    core_.metrics_.observe_mesh_seconds(result->timings.mesh_ms / 1000.0);
    spdlog::info(
        "request {} OK ({}{}) bucket {} queue {:.1f} ms text {:.1f} ms prefill {:.1f} ms "
        "TPOT {:.3f} ms mesh {:.1f} ms total {:.1f} ms ({} faces)",
        request_id_, via_,
        cache_status_ == CacheStatus::kCoalesced ? ", coalesced with " + result->request_id
                                                 : std::string(),
        result->batch_bucket, result->timings.queue_ms, result->timings.text_encoding_ms,
        result->timings.prefill_ms, result->timings.tpot_ms, result->timings.mesh_ms, total_ms,
        result->face_count);
  } else if (status.ok()) {
    if (statistics_group_) {
      statistics_group_->cache_hit();
    } else {
      core_.statistics_.cache_hit(total_ms);
    }
    core_.metrics_.cache_answer(cache_status_name(CacheStatus::kHit));
    core_.metrics_.observe_request_seconds(total_ms / 1000.0);
    spdlog::info("request {} OK ({}, cache hit of {}) total {:.1f} ms ({} faces)", request_id_,
                 via_, outcome.answer.body->effective.computed_by_request_id, total_ms,
                 outcome.answer.body->face_count);
  } else {
    if (statistics_group_) {
      statistics_group_->failed();
    } else {
      core_.statistics_.failed(total_ms);
    }
    spdlog::info("request {} {} ({}) after {:.1f} ms: {}",
                 request_id_.empty() ? unvalidated_id_ : request_id_, code, via_, total_ms,
                 status.message());
  }
}

Service::Service(ServiceOptions options, Metrics& metrics, const AnswerCodec& codec)
    : options_(std::move(options)), codec_(codec), metrics_(metrics) {}

Service::~Service() = default;

std::shared_ptr<ActiveCall> Service::start(const ClientRequest& request, const CallContext& call,
                                           CallObserver observer) {
  auto active = std::make_shared<ServiceCall>(*this, request, call, std::move(observer));
  active->begin(request, call);
  return active;
}

std::variant<std::string, Status> Service::identify(const std::string& authorization) const {
  ApiKeys* const keys = api_keys_.load();
  if (!keys) return std::string();
  auto who = keys->identify(authorization);
  if (auto* refused = std::get_if<ApiKeys::Refusal>(&who)) {
    return Status(ErrorCode::kUnauthenticated, refused->message);
  }
  return std::move(std::get<std::string>(who));
}

bool Service::in_flight(const ResultKey& key) {
  const std::lock_guard lock(in_flight_mutex_);
  const auto it = in_flight_.find(key);
  return it != in_flight_.end() && !it->second.expired();
}

Service::Joined Service::join_or_create(const std::optional<ResultKey>& key,
                                        const WorkRequest& request,
                                        SteadyClock::time_point deadline,
                                        SharedWork::Member member) {
  const std::lock_guard lock(in_flight_mutex_);
  if (key) {
    const auto it = in_flight_.find(*key);
    if (it != in_flight_.end()) {
      if (const std::shared_ptr<SharedWork> work = it->second.lock()) {
        if (const auto id = work->join(member, deadline)) return {work, *id, true};
      }
      in_flight_.erase(it);  // ended, or every caller left: not joinable
    }
  }
  // With a shared cache tier, this replica claims the key while the work lives, so that the
  // other replicas wait for its result instead of computing it too (the claim goes with the
  // work's outcome callback: when the work ends, or when every caller has left it).
  std::shared_ptr<ResultCache::Claim> claim = key && cache_ ? cache_->claim(*key) : nullptr;
  // The job's request is the first caller's (its id goes into the mesh file's provenance).
  std::shared_ptr<SharedWork> work = SharedWork::make(
      request, deadline,
      [this, key, request, claim](SharedWork& done, const WorkResult* result, const Error*) {
        return work_done(key, done, result, request);
      });
  const auto id = work->join(std::move(member), deadline);
  if (key) {
    in_flight_[*key] = work;
    if (++works_since_sweep_ >= kInFlightSweep) {
      works_since_sweep_ = 0;
      std::erase_if(in_flight_, [](const auto& entry) { return entry.second.expired(); });
    }
  }
  return {work, id.value_or(0), false};
}

int64_t Service::shape_tokens_of(const WorkRequest& request) const {
  // Classifier-free guidance decodes a second (unconditional) row beside each request's own.
  return options_.tokens_per_shape * (request.guidance_scale > 0 ? 2 : 1);
}

int64_t Service::expected_points(int64_t resolution_base) const {
  if (resolution_base < 0 || resolution_base > kMaxResolutionBase) return 0;
  return static_cast<int64_t>(points_by_resolution_[static_cast<size_t>(resolution_base)].load());
}

void Service::observe_points(int64_t resolution_base, int64_t points) {
  if (resolution_base < 0 || resolution_base > kMaxResolutionBase) return;
  std::atomic<double>& average = points_by_resolution_[static_cast<size_t>(resolution_base)];
  const double before = average.load();
  // A racing update may be lost; the estimate stays an estimate.
  average.store(before == 0 ? static_cast<double>(points)
                            : 0.8 * before + 0.2 * static_cast<double>(points));
}

std::shared_ptr<const WorkAnswer> Service::work_done(const std::optional<ResultKey>& key,
                                                     SharedWork& work, const WorkResult* result,
                                                     const WorkRequest& request) {
  // The work is charged to the key (and end user) that started it, before any caller hears
  // of it, so that a caller's next request already meets the bucket this one emptied.
  if (result) {
    const int64_t tokens = shape_tokens_of(request);
    metrics_.key_work(request.client, tokens, result->occupancy_points);
    observe_points(request.resolution_base, result->occupancy_points);
    if (ApiKeys* const keys = api_keys_.load()) {
      keys->charge(request.client, request.end_user, tokens, result->occupancy_points);
    }
  }
  // The entry first, then out of flight: a caller that finds the work ended looks again and
  // finds the entry.
  // The one answer, built here for every member (and the cache) alike.
  std::shared_ptr<WorkAnswer> answer;
  std::string encoded;  // the body as the cache keeps it, the same for every caller
  if (result) {
    answer = std::make_shared<WorkAnswer>();
    answer->body = std::make_shared<const MeshBody>(body_of(*result, request));
    if (key && cache_) {
      encoded = codec_.encode(*answer->body);
      answer->body_bytes = static_cast<int64_t>(encoded.size());
    } else {
      answer->body_bytes = codec_.body_bytes(*answer->body);
    }
    // As the work's own caller would get it (each member checks its own again).
    answer->status = check_size({.body = answer->body,
                                 .request_id = request.request_id,
                                 .cache_status = CacheStatus::kMiss,
                                 .timings = result->timings,
                                 .batch_bucket = result->batch_bucket},
                                answer->body_bytes);
  }
  if (key && answer && answer->status.ok() && cache_) cache_->insert(*key, std::move(encoded));
  if (key) {
    const std::lock_guard lock(in_flight_mutex_);
    const auto it = in_flight_.find(*key);
    if (it != in_flight_.end()) {
      const std::shared_ptr<SharedWork> current = it->second.lock();
      if (!current || current.get() == &work) in_flight_.erase(it);
    }
  }
  return answer;
}

EffectiveParameters Service::effective_of(const WorkRequest& r,
                                          const std::string& computed_by) const {
  EffectiveParameters e;
  e.guidance_scale = static_cast<float>(r.guidance_scale);
  if (r.top_p) e.top_p = static_cast<float>(*r.top_p);
  e.seed = r.seed;
  e.bounding_box = r.bounding_box;
  e.resolution_base = static_cast<int32_t>(r.resolution_base);
  e.format = r.format;
  const std::optional<int64_t> most = mesh_limits(r.mesh_profile).max_faces;
  const auto capped = [&most](int64_t faces) {
    return static_cast<uint32_t>(most ? std::min(faces, *most) : faces);
  };
  if (r.target_face_count) {
    e.target_face_count = capped(*r.target_face_count);
    if (!r.lod_face_counts.empty()) e.lod_face_counts.push_back(capped(*r.target_face_count));
  }
  for (const int64_t faces : r.lod_face_counts) e.lod_face_counts.push_back(capped(faces));
  e.mesh_profile = r.mesh_profile;
  if (states_frame(r)) e.pivot = r.pivot;
  if (r.format == MeshFormat::kCompact) e.compact = r.compact;
  e.model = model_.name;
  e.weights_digest = model_.weights_digest;
  e.server_version = model_.server_version;
  e.computed_by_request_id = computed_by;
  return e;
}

MeshBody Service::body_of(const WorkResult& result, const WorkRequest& request) const {
  MeshBody body;
  body.format = result.format;
  if (result.format == MeshFormat::kRaw || request.return_raw_mesh) {
    body.has_raw = true;
    body.vertices = result.vertices;
    body.indices = result.indices;
  }
  if (result.format != MeshFormat::kRaw) body.encoded = result.encoded;
  body.vertex_count = result.vertex_count;
  body.face_count = result.face_count;
  if (states_frame(request)) body.bounds = result.bounds;
  body.lods = result.lods;
  for (WorkLevel& level : body.lods) {
    // A level carries its arrays for kRaw and its file otherwise, never both.
    if (result.format == MeshFormat::kRaw) {
      level.encoded.clear();
    } else {
      level.vertices.clear();
      level.indices.clear();
    }
  }
  body.occupancy_points = result.occupancy_points;
  body.shape_tokens = result.shape_tokens;
  body.warnings = result.warnings;
  body.effective = effective_of(request, result.request_id);
  return body;
}

Status Service::check_size(const MeshAnswer& answer, int64_t body_bytes) const {
  const int64_t bytes = codec_.message_bytes(answer, body_bytes);
  if (bytes > options_.policy.limits.max_message_bytes) {
    return Status(ErrorCode::kResourceExhausted,
                  "the mesh response is " + std::to_string(bytes) + " bytes, over the server's " +
                      std::to_string(options_.policy.limits.max_message_bytes) +
                      "-byte message limit; ask for less: a lower resolution_base, a smaller "
                      "target_face_count, or an encoded format (GLB) instead of RAW");
  }
  return Status();
}

}  // namespace cube3d
