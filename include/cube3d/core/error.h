// Errors thrown by every layer. Each carries a code that the server maps to a gRPC status once,
// at the service boundary, and a message that names the file, tensor or field at fault.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cube3d {

// The service's own words for an outcome (the gRPC door maps them to gRPC codes, the HTTP door
// to HTTP statuses, each in one function); to_string gives the names both APIs show
// ("INVALID_ARGUMENT").
enum class ErrorCode {
  kOk,                  // no error: only a Status holds it, never an Error
  kInvalidArgument,     // bad input from a caller or a bad file (names the field / tensor)
  kNotFound,            // a file or tensor that should exist does not
  kFailedPrecondition,  // the system is not in a state that allows the call (no GPU, ...)
  kResourceExhausted,   // a limit was hit (memory, sizes)
  kUnimplemented,       // an option that a later component provides
  kInternal,            // a bug: an invariant of ours broke
  kCancelled,           // the caller went away; its work was dropped
  kDeadlineExceeded,    // the request's deadline passed before it could finish
  kUnavailable,         // the server cannot take work now (shutting down); retry elsewhere
  kUnauthenticated,     // no credentials, or credentials the server does not know
  kPermissionDenied,    // known, and refused: the prompt policy, a playground origin
  kAlreadyExists,       // an id that is taken (a request_id reused for another request)
};

std::string_view to_string(ErrorCode code);
// The code's number in google.rpc.Code, the numbering gRPC's status codes and the API's
// JobError.code share (OK 0, CANCELLED 1, INVALID_ARGUMENT 3, ...).
int canonical_code(ErrorCode code);
// The code with that number; nullopt for the numbers the service never uses (UNKNOWN, ABORTED,
// OUT_OF_RANGE, DATA_LOSS) and for any other.
std::optional<ErrorCode> error_code_of_canonical(int number);
// google.rpc.Code's name of a number ("INVALID_ARGUMENT"), "UNKNOWN" for one it does not have.
std::string_view canonical_code_name(int number);

// Why, where a code alone does not tell a caller what to do: the doors act on it (a full queue's
// 429 carries the scheduler's Retry-After; another RESOURCE_EXHAUSTED, such as an answer over
// the message limit, is not worth retrying as it is).
enum class ErrorReason {
  kNone,
  kQueueFull,  // the scheduler's queue (or the batch priority's share of it) is full
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, ErrorReason reason = ErrorReason::kNone);
  ErrorCode code() const noexcept { return code_; }
  ErrorReason reason() const noexcept { return reason_; }

 private:
  ErrorCode code_;
  ErrorReason reason_;
};

// Shorthands keep throw sites short: throw invalid_argument("model.yaml: gpt_model.n_head ...").
Error invalid_argument(const std::string& message);
Error not_found(const std::string& message);
Error failed_precondition(const std::string& message);
Error resource_exhausted(const std::string& message);
// RESOURCE_EXHAUSTED with ErrorReason::kQueueFull: the scheduler's refusal, worth a retry soon.
Error queue_full(const std::string& message);
Error unimplemented(const std::string& message);
Error internal_error(const std::string& message);
Error cancelled(const std::string& message);
Error deadline_exceeded(const std::string& message);
Error unavailable(const std::string& message);
Error unauthenticated(const std::string& message);

// Throws invalid_argument "<key>: <value> is outside [<min>, <max>]" when value is not in the
// closed range: the one wording of every settings struct's range checks.
void require_in_range(std::string_view key, int64_t value, int64_t min, int64_t max);

}  // namespace cube3d
