#include "cube3d/core/error.h"

#include <array>
#include <optional>

#include "cube3d/core/enum_table.h"

namespace cube3d {

namespace {

// google.rpc.Code's names, by number: what both APIs show.
constexpr std::array<std::string_view, 17> kCanonicalNames = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};
constexpr int kUnknown = 2;

// Each of our codes' number in google.rpc.Code.
constexpr EnumTable<ErrorCode, int, 13> kCanonicalCodes = {{{ErrorCode::kOk, 0},
                                                            {ErrorCode::kCancelled, 1},
                                                            {ErrorCode::kInvalidArgument, 3},
                                                            {ErrorCode::kDeadlineExceeded, 4},
                                                            {ErrorCode::kNotFound, 5},
                                                            {ErrorCode::kAlreadyExists, 6},
                                                            {ErrorCode::kPermissionDenied, 7},
                                                            {ErrorCode::kResourceExhausted, 8},
                                                            {ErrorCode::kFailedPrecondition, 9},
                                                            {ErrorCode::kUnimplemented, 12},
                                                            {ErrorCode::kInternal, 13},
                                                            {ErrorCode::kUnavailable, 14},
                                                            {ErrorCode::kUnauthenticated, 16}}};

}  // namespace

std::string_view to_string(ErrorCode code) { return canonical_code_name(canonical_code(code)); }

int canonical_code(ErrorCode code) { return lookup(kCanonicalCodes, code).value_or(kUnknown); }

std::optional<ErrorCode> error_code_of_canonical(int number) {
  return reverse_lookup(kCanonicalCodes, number);
}

std::string_view canonical_code_name(int number) {
  const bool known = number >= 0 && number < static_cast<int>(kCanonicalNames.size());
  return kCanonicalNames[known ? number : kUnknown];
}

Error::Error(ErrorCode code, const std::string& message, ErrorReason reason)
    : std::runtime_error(message), code_(code), reason_(reason) {}

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
Error queue_full(const std::string& message) {
  return Error(ErrorCode::kResourceExhausted, message, ErrorReason::kQueueFull);
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
