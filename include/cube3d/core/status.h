// An outcome in the service's own words: OK, or an error code and a message that names what is
// at fault. What the service core, the job store and the HTTP door pass around; the gRPC door
// maps it to a grpc::Status once (api/grpc_status.h), the HTTP door to an HTTP status once
// (http/http_status.h). Errors are thrown as cube3d::Error where they are found; a Status is what
// an asynchronous outcome carries to the caller.
#pragma once

#include <string>
#include <utility>

#include "cube3d/core/error.h"

namespace cube3d {

class Status {
 public:
  Status() = default;  // OK
  Status(ErrorCode code, std::string message, ErrorReason reason = ErrorReason::kNone)
      : code_(code), message_(std::move(message)), reason_(reason) {}
  explicit Status(const Error& error)
      : code_(error.code()), message_(error.what()), reason_(error.reason()) {}

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  ErrorReason reason() const { return reason_; }
  bool operator==(const Status&) const = default;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  ErrorReason reason_ = ErrorReason::kNone;
};

}  // namespace cube3d
