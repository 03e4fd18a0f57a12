#include "cube3d/clients/call_flags.h"

namespace cube3d {

CliArgs& add_call_flags(CliArgs& args, const CallFlagsHelp& help) {
  const std::string default_attempts = std::to_string(RetryPolicy{}.max_attempts);
  return args
      .option("--max-attempts", 1,
              help.max_attempts + ", the first included: 1.." + std::to_string(kMaxCallAttempts) +
                  " (default " + default_attempts + "; 1: never again)",
              "N")
      .option("--api-key", 1, "API key, sent as 'authorization: Bearer <key>'", "KEY")
      .env("CUBE3D_API_KEY");
}

RetryPolicy retry_policy_from_args(const CliArgs& args) {
  return retry_policy_with_attempts(args.get_int("--max-attempts", RetryPolicy{}.max_attempts));
}

std::string api_key_from_args(const CliArgs& args) { return args.get("--api-key"); }

}  // namespace cube3d
