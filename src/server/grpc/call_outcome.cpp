#include "cube3d/server/grpc/call_outcome.h"

namespace cube3d::grpc_outcome {

std::string code_seen_by_client(const std::string& sent_code, bool cancelled, bool deadline_passed,
                                bool request_missing) {
  if (!cancelled && !sent_code.empty()) return sent_code;
  // The call ended without the server's status reaching the client.
  if (deadline_passed) return "DEADLINE_EXCEEDED";
  // The transport refused the message (over the receive limit) and failed the call: its
  // client reads RESOURCE_EXHAUSTED.
  if (request_missing) return "RESOURCE_EXHAUSTED";
  return "CANCELLED";
}

bool deadline_reached(std::chrono::system_clock::time_point deadline) {
  return std::chrono::system_clock::now() + kDeadlineSlack >= deadline;
}

}  // namespace cube3d::grpc_outcome
