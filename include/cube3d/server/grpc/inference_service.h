// The Open Inference Protocol's gRPC service, inference.GRPCInferenceService
// (proto/inference/grpc_service.proto), on the server's gRPC listener beside MeshService, over
// the one service through inference/inference_endpoint.h (the same API keys, end users, quotas,
// prompt policy, cache and metrics as every call).
//
//   ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig,
//   ModelStatistics, RepositoryIndex   answered at once
//   ModelInfer                         one inference: the answer when every prompt's mesh is made
//   ModelStreamInfer                   inferences over one stream, each answered as it ends (an
//                                      error as error_message, and the stream goes on); with
//                                      the request parameter progress: true, progress responses
//                                      first (parameters stage, tokens_done, tokens_total,
//                                      prompt; triton_final_response false), then the answer
//                                      (triton_final_response true)
//
// Like MeshService's, the methods are registered by hand on gRPC's callback API and read their
// requests as bytes (so that bytes that are no message are INVALID_ARGUMENT, not INTERNAL); no
// call holds a thread while it waits. A stream reads its next request only while fewer than
// kMaxStreamInferences of its requests are in flight, so a client that sends faster than the
// model works is slowed by gRPC's flow control, not buffered. Responses that the client does not
// take within grpc.write_timeout_ms cancel the stream. A stream that has not sent its first
// request counts against grpc.max_calls_awaiting_message with the mesh calls (awaiting_calls.h).
#pragma once

#include <grpcpp/impl/service_type.h>

#include <cstdint>
#include <functional>
#include <string>

#include "cube3d/server/grpc/awaiting_calls.h"
#include "cube3d/server/grpc/grpc_options.h"
#include "cube3d/server/inference/inference_endpoint.h"

namespace cube3d {

inline constexpr const char* kInferenceServiceName = "inference.GRPCInferenceService";
// Requests of one ModelInferStream in flight at once.
inline constexpr int64_t kMaxStreamInferences = 64;

class InferenceServiceImpl final : public grpc::Service {
 public:
  using Count = std::function<void(const std::string& code)>;
  // `endpoint`, `timers` and `awaiting` must outlive the service; `count` gets the code of each
  // inference refused before it reached the service (the service counts the rest, prompt by
  // prompt). A ModelStreamInfer stream counts in `awaiting` until its first request arrives.
  InferenceServiceImpl(inference::InferenceEndpoint& endpoint, TimerQueue& timers,
                       AwaitingCalls& awaiting, GrpcOptions options, Count count);

  inference::InferenceEndpoint& endpoint() { return endpoint_; }
  TimerQueue& timers() { return timers_; }
  AwaitingCalls& awaiting() { return awaiting_; }
  const GrpcOptions& options() const { return options_; }
  void count(const std::string& code) const {
    if (count_) count_(code);
  }
  // grpc::Service's registration, for the methods' helpers (inference_service.cpp).
  using grpc::Service::AddMethod;
  using grpc::Service::MarkMethodCallback;

 private:
  inference::InferenceEndpoint& endpoint_;
  TimerQueue& timers_;
  AwaitingCalls& awaiting_;
  const GrpcOptions options_;
  const Count count_;
};

}  // namespace cube3d
