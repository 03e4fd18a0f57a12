#include "cube3d/clients/grpc_sender.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "cube3d/api/grpc_status.h"
#include "cube3d/clients/cache_status.h"
#include "cube3d/v1/mesh_service.grpc.pb.h"

namespace cube3d {
namespace {

class GrpcSender final : public RequestSender {
 public:
  GrpcSender(std::shared_ptr<v1::MeshService::Stub> stub, const SenderOptions& options)
      : stub_(std::move(stub)),
        deadline_(std::chrono::milliseconds(options.deadline_ms)),
        authorization_(options.api_key.empty() ? "" : "Bearer " + options.api_key) {}

  RequestRecord send(const v1::GenerateMeshRequest& request,
                     SteadyClock::time_point phase_start) override {
    RequestRecord record;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline_);
    if (!authorization_.empty()) context.AddMetadata("authorization", authorization_);
    const auto sent = SteadyClock::now();
    record.send_offset_s = ms_between(phase_start, sent) / 1000.0;
    const auto reader = stub_->GenerateMeshStream(&context, request);
    v1::GenerateMeshEvent event;
    bool have_result = false;
    double queue_ms = 0;
    CacheStatus cache = CacheStatus::kUnknown;
    while (reader->Read(&event)) {
      if (event.has_progress() && !record.ttft_ms &&
          event.progress().stage() == v1::STAGE_DECODING) {
        record.ttft_ms = ms_since(sent);
      }
      if (event.has_result()) {
        have_result = true;
        queue_ms = event.result().timings().queue_ms();
        cache = cache_status_of_proto(event.result().cache_status());
      }
    }
    const grpc::Status status = reader->Finish();
    record.e2e_ms = ms_since(sent);
    record.status = grpc_code_name(status.error_code());
    // A stream that ends OK without a result is a server bug; it must not count as served.
    if (status.ok() && !have_result) record.status = "NO_RESULT";
    if (record.status == "OK") {
      record.queue_ms = queue_ms;
      record.cache = cache;
    }
    return record;
  }

 private:
  const std::shared_ptr<v1::MeshService::Stub> stub_;
  const std::chrono::milliseconds deadline_;
  const std::string authorization_;  // "Bearer <key>" or empty
};

class GrpcSenderFactory final : public SenderFactory {
 public:
  explicit GrpcSenderFactory(SenderOptions options) : options_(std::move(options)) {
    grpc::ChannelArguments channel_args;
    channel_args.SetMaxReceiveMessageSize(-1);  // a large mesh is a large reply
    stub_ = v1::MeshService::NewStub(grpc::CreateCustomChannel(
        options_.server, grpc::InsecureChannelCredentials(), channel_args));
  }

  std::unique_ptr<RequestSender> make_sender() const override {
    return std::make_unique<GrpcSender>(stub_, options_);
  }

 private:
  const SenderOptions options_;
  std::shared_ptr<v1::MeshService::Stub> stub_;  // thread-safe; shared by every sender
};

}  // namespace

std::unique_ptr<SenderFactory> make_grpc_sender_factory(const SenderOptions& options) {
  return std::make_unique<GrpcSenderFactory>(options);
}

}  // namespace cube3d
