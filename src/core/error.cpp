#include "cube3d/core/error.h"

namespace cube3d {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case ErrorCode::kNotFound:
      return "NOT_FOUND";
    case ErrorCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case ErrorCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case ErrorCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case ErrorCode::kInternal:
      return "INTERNAL";
    case ErrorCode::kCancelled:
      return "CANCELLED";
    case ErrorCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case ErrorCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case ErrorCode::kUnavailable:
      return "UNAVAILABLE";
  }
  return "UNKNOWN";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

Error invalid_argument(const std::string& message) {
  return Error(ErrorCode::kInvalidArgument, message);
}
Error not_found(const std::string& message) { return Error(ErrorCode::kNotFound, message); }
Error failed_precondition(const std::string& message) {
  return Error(ErrorCode::kFailedPrecondition, message);
}
Error resource_exhausted(const std::string& message) {
  return Error(ErrorCode::kResourceExhausted, message);
}
Error unimplemented(const std::string& message) {
  return Error(ErrorCode::kUnimplemented, message);
}
Error internal_error(const std::string& message) { return Error(ErrorCode::kInternal, message); }
Error cancelled(const std::string& message) { return Error(ErrorCode::kCancelled, message); }
Error deadline_exceeded(const std::string& message) {
  return Error(ErrorCode::kDeadlineExceeded, message);
}
Error unavailable(const std::string& message) { return Error(ErrorCode::kUnavailable, message); }
Error unauthenticated(const std::string& message) {
  return Error(ErrorCode::kUnauthenticated, message);
}

void require_in_range(std::string_view key, int64_t value, int64_t min, int64_t max) {
  if (value < min || value > max) {
    throw invalid_argument(std::string(key) + ": " + std::to_string(value) + " is outside [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
}

}  // namespace cube3d
