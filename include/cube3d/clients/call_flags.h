// The flags of every call cube3d-client and cube3d-loadgen make, declared and read once here so
// that their names, default, range, environment variable and the way the key is sent cannot
// drift apart between the two tools:
//   --max-attempts N  attempts of a call that fails UNAVAILABLE, the first included: 1..10
//                     (default RetryPolicy's 5; call_retry.h)
//   --api-key KEY     (or $CUBE3D_API_KEY) sent as `authorization: Bearer <key>`
//                     (bearer_authorization, request_sender.h)
// The first words of --max-attempts' help stay each tool's own (which calls it covers).
#pragma once

#include <string>

#include "cube3d/cli/cli_args.h"
#include "cube3d/clients/call_retry.h"

namespace cube3d {

struct CallFlagsHelp {
  // What --max-attempts counts, e.g. "gRPC: attempts per request when it fails UNAVAILABLE";
  // the range and default follow.
  std::string max_attempts;
};

// Declares --max-attempts and --api-key, in this order, after what `args` has.
CliArgs& add_call_flags(CliArgs& args, const CallFlagsHelp& help);

// --max-attempts (default RetryPolicy{}.max_attempts), checked by retry_policy_with_attempts.
RetryPolicy retry_policy_from_args(const CliArgs& args);

// --api-key (or $CUBE3D_API_KEY); "" for none.
std::string api_key_from_args(const CliArgs& args);

}  // namespace cube3d
