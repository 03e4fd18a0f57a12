#include "cube3d/clients/grpc_sender.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "cube3d/api/grpc_status.h"
#include "cube3d/clients/cache_status.h"
#include "cube3d/clients/call_retry.h"
#include "cube3d/clients/grpc_channel.h"
#include "cube3d/v1/mesh_service.grpc.pb.h"

namespace cube3d {
namespace {

class GrpcSender final : public RequestSender {
 public:
  GrpcSender(std::shared_ptr<v1::MeshService::Stub> stub, const SenderOptions& options,
             uint64_t jitter_seed)
      : stub_(std::move(stub)),
        deadline_(std::chrono::milliseconds(options.deadline_ms)),
        authorization_(bearer_authorization(options.api_key)),
        retry_(options.retry),
        rng_(jitter_seed) {}

  RequestRecord send(const v1::GenerateMeshRequest& request,
                     SteadyClock::time_point phase_start) override {
    RequestRecord record;
    // One deadline for the request, whatever its attempts: the caller's budget.
    const auto deadline = std::chrono::system_clock::now() + deadline_;
    const auto sent = SteadyClock::now();
    record.send_offset_s = ms_between(phase_start, sent) / 1000.0;
    const bool idempotent = !request.request_id().empty();
    for (int attempt = 1;; ++attempt) {
      record.attempts = static_cast<uint32_t>(attempt);
      const Attempt a = try_once(request, deadline, sent, record);
      if (!should_retry(retry_, attempt, a.status.error_code(), a.reached_decoding, idempotent)) {
        finish(record, a, sent);
        return record;
      }
      // The wait, cut to what the deadline leaves: an attempt past it answers
      // DEADLINE_EXCEEDED itself.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::system_clock::now());
      if (left.count() <= 0) {
        finish(record, a, sent);
        return record;
      }
      std::this_thread::sleep_for(std::min(retry_backoff(retry_, attempt, rng_), left));
    }
  }

 private:
  struct Attempt {
    grpc::Status status;
    bool have_result = false;
    bool reached_decoding = false;  // a decoding event (or the result) came: the work began
    double queue_ms = 0;
    CacheStatus cache = CacheStatus::kUnknown;
  };

  Attempt try_once(const v1::GenerateMeshRequest& request,
                   std::chrono::system_clock::time_point deadline, SteadyClock::time_point sent,
                   RequestRecord& record) {
    Attempt a;
    grpc::ClientContext context;
    context.set_deadline(deadline);
    if (!authorization_.empty()) context.AddMetadata("authorization", authorization_);
    const auto reader = stub_->GenerateMeshStream(&context, request);
    v1::GenerateMeshEvent event;
    while (reader->Read(&event)) {
      if (event.has_progress() && event.progress().stage() == v1::STAGE_DECODING) {
        a.reached_decoding = true;
        // From the request's first send: what the caller waited, retries included.
        if (!record.ttft_ms) record.ttft_ms = ms_since(sent);
      }
      if (event.has_result()) {
        a.have_result = true;
        a.reached_decoding = true;
        a.queue_ms = event.result().timings().queue_ms();
        a.cache = cache_status_of_proto(event.result().cache_status());
      }
    }
    a.status = reader->Finish();
    return a;
  }

  static void finish(RequestRecord& record, const Attempt& a, SteadyClock::time_point sent) {
    record.e2e_ms = ms_since(sent);
    record.status = grpc_code_name(a.status.error_code());
    // A stream that ends OK without a result is a server bug; it must not count as served.
    if (a.status.ok() && !a.have_result) record.status = "NO_RESULT";
    if (record.status == "OK") {
      record.queue_ms = a.queue_ms;
      record.cache = a.cache;
    }
  }

  const std::shared_ptr<v1::MeshService::Stub> stub_;
  const std::chrono::milliseconds deadline_;
  const std::string authorization_;  // "Bearer <key>" or empty
  const RetryPolicy retry_;
  std::mt19937_64 rng_;  // the backoff's jitter
};

class GrpcSenderFactory final : public SenderFactory {
 public:
  explicit GrpcSenderFactory(SenderOptions options) : options_(std::move(options)) {
    stub_ = v1::MeshService::NewStub(open_grpc_channel(options_.server, options_.tls));
  }

  std::unique_ptr<RequestSender> make_sender() const override {
    return std::make_unique<GrpcSender>(stub_, options_, next_seed_.fetch_add(1) + 1);
  }

 private:
  const SenderOptions options_;
  std::shared_ptr<v1::MeshService::Stub> stub_;  // thread-safe; shared by every sender
  mutable std::atomic<uint64_t> next_seed_{0};
};

}  // namespace

std::unique_ptr<SenderFactory> make_grpc_sender_factory(const SenderOptions& options) {
  return std::make_unique<GrpcSenderFactory>(options);
}

}  // namespace cube3d
