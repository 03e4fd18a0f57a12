#include "cube3d/server/grpc_call_counter.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <string_view>

#include "cube3d/server/grpc_status.h"

namespace cube3d {
namespace {

using grpc::experimental::InterceptionHookPoints;

// The call this thread is running, between PreSynchronousRequest and PostSynchronousRequest.
struct CallRecord {
  const grpc::ServerContextBase* context = nullptr;
  bool counted = true;  // false for gRPC's own services
  std::string sent_code;
  bool request_missing = false;
};
thread_local CallRecord t_call;

// gRPC's own services (health, reflection) are not requests to count.
bool counted_method(const char* method) {
  return method == nullptr || !std::string_view(method).starts_with("/grpc.");
}

class StatusInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit StatusInterceptor(grpc::experimental::ServerRpcInfo* info) : info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        t_call.context == info_->server_context()) {
      t_call.counted = counted_method(info_->method());
      t_call.sent_code = grpc_code_name(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;
};

class StatusInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // gRPC owns (and deletes) the interceptors it is given.
    return new StatusInterceptor(info);  // NOLINT(cppcoreguidelines-owning-memory)
  }
};

}  // namespace

GrpcCallCounter& GrpcCallCounter::install() {
  static GrpcCallCounter* const counter = [] {
    // gRPC takes ownership (whatever its header says: it holds the pointer in a shared_ptr
    // and deletes it at exit), so the instance is made for it and handed over.
    std::unique_ptr<GrpcCallCounter> owned(new GrpcCallCounter());
    GrpcCallCounter* const raw = owned.get();
    grpc::Server::SetGlobalCallbacks(owned.release());
    return raw;
  }();
  return *counter;
}

void GrpcCallCounter::set_count(Count count) {
  const std::lock_guard lock(mutex_);
  count_ = std::move(count);
}

GrpcCallCounter::Count GrpcCallCounter::count_snapshot() const {
  const std::lock_guard lock(mutex_);
  return count_;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
GrpcCallCounter::interceptor_factory() {
  return std::make_unique<StatusInterceptorFactory>();
}

void GrpcCallCounter::note_request_message_missing() { t_call.request_missing = true; }

std::string GrpcCallCounter::code_seen_by_client(const std::string& sent_code, bool cancelled,
                                                 bool deadline_passed, bool request_missing) {
  if (!cancelled && !sent_code.empty()) return sent_code;
  // The call ended without the server's status reaching the client.
  if (deadline_passed) return "DEADLINE_EXCEEDED";
  if (request_missing) return "RESOURCE_EXHAUSTED";
  return "CANCELLED";
}

bool GrpcCallCounter::deadline_reached(std::chrono::system_clock::time_point deadline) {
  return std::chrono::system_clock::now() + kDeadlineSlack >= deadline;
}

void GrpcCallCounter::PreSynchronousRequest(grpc::ServerContext* context) {
  t_call = CallRecord{};
  t_call.context = context;
}

void GrpcCallCounter::PostSynchronousRequest(grpc::ServerContext* context) {
  const CallRecord call = std::move(t_call);
  t_call = CallRecord{};
  if (!call.counted) return;
  const bool cancelled = context->IsCancelled();
  spdlog::debug("grpc call end: sent '{}' missing {} cancelled {}", call.sent_code,
                call.request_missing, cancelled);
  const bool deadline_passed = deadline_reached(context->deadline());
  const std::string code =
      code_seen_by_client(call.sent_code, cancelled, deadline_passed, call.request_missing);
  if (const Count count = count_snapshot()) count(code);
}

}  // namespace cube3d
