// Counts every gRPC call to the mesh API, and every call to a method the server does not have,
// exactly once, with the status code its client saw: also when no handler of ours ran (an
// unknown method, a request over the transport's size limit, a request that does not parse, no
// free handler thread) and when the client's deadline passed or it cancelled, whatever the
// handler answered then.
//
// How: gRPC's synchronous server runs each call on one thread: Server::GlobalCallbacks'
// PreSynchronousRequest, then the handler (ours, or gRPC's own error handler), the sending of
// the status (which a server interceptor sees at PRE_SEND_STATUS), then PostSynchronousRequest.
// The callbacks bracket a thread-local record of the call; at Post the status has gone out and
// ServerContext::IsCancelled() says whether the client got it or saw the call end otherwise
// (its deadline, its cancellation, or the transport refusing the request).
//
// Not counted: gRPC's own services (health, reflection): probes every few seconds would dilute
// the error rate that the request counter feeds.
#pragma once

#include <grpcpp/server.h>
#include <grpcpp/support/server_interceptor.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace cube3d {

class GrpcCallCounter final : public grpc::Server::GlobalCallbacks {
 public:
  using Count = std::function<void(const std::string& code)>;

  // The one instance: gRPC takes its global callbacks once per process, before the first
  // server is built; `count` (called on gRPC's threads) may be set later and replaced.
  static GrpcCallCounter& install();
  void set_count(Count count);

  // For ServerBuilder::experimental().SetInterceptorCreators: sees each call's method and the
  // status it sends.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> interceptor_factory();

  // Called by a handler on its thread when its unary call arrived without a request message:
  // with the call cancelled, the transport refused the message (over the receive limit) and
  // the client saw RESOURCE_EXHAUSTED.
  static void note_request_message_missing();

  // The code a client saw, from what the server knows at the end of a call (a pure function,
  // tested on its own). sent_code: the code the server sent (empty when it sent none);
  // cancelled: the call did not end with that status; deadline_passed: the client's deadline
  // is behind us; request_missing: a unary call without its request message.
  static std::string code_seen_by_client(const std::string& sent_code, bool cancelled,
                                         bool deadline_passed, bool request_missing);

  // Whether a cancelled call ended by its deadline: the client's own deadline fires (and it
  // cancels) a little before the server's copy (taken when the headers arrived) does, so a
  // cancellation within kDeadlineSlack of the deadline is the deadline.
  static constexpr std::chrono::milliseconds kDeadlineSlack{100};
  static bool deadline_reached(std::chrono::system_clock::time_point deadline);

  void PreSynchronousRequest(grpc::ServerContext* context) override;
  void PostSynchronousRequest(grpc::ServerContext* context) override;

 private:
  GrpcCallCounter() = default;
  Count count_snapshot() const;

  mutable std::mutex mutex_;
  Count count_;
};

}  // namespace cube3d
