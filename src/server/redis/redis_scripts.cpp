#include "cube3d/server/redis/redis_scripts.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <span>

#include "cube3d/core/error.h"
#include "cube3d/core/sha256.h"

namespace cube3d {
namespace {

bool command_named(const RedisScripts::Command& command, std::string_view name) {
  return !command.empty() && std::equal(command[0].begin(), command[0].end(), name.begin(),
                                        name.end(), [](char a, char b) {
                                          return std::toupper(static_cast<unsigned char>(a)) == b;
                                        });
}

bool is_eval_command(const RedisScripts::Command& command) {
  return command.size() >= 2 && command_named(command, "EVAL");
}

bool noscript_reply(const RedisReply& reply) {
  return reply.error() && reply.text.starts_with("NOSCRIPT");
}

std::string reply_lower_case(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// EVALSHA itself refused, so it did not run: renamed away ("ERR unknown command 'EVALSHA', ...")
// or not granted by the user's ACL ("NOPERM ... no permissions to run the 'evalsha' command").
// A script's own refused call names that call's command instead, never 'evalsha'.
bool evalsha_refused_reply(const RedisReply& reply) {
  if (!reply.error()) return false;
  const std::string text = reply_lower_case(reply.text);
  return (text.starts_with("err unknown command 'evalsha'") || text.starts_with("noperm")) &&
         text.find("'evalsha'") != std::string::npos;
}

// Commands that change nothing, so running one again when its pipeline is sent once more is
// harmless (WAIT only counts replicas).
bool reads_only_command(const RedisScripts::Command& command) {
  constexpr std::array<std::string_view, 10> kReads = {"GET",  "MGET", "HGET", "HGETALL", "EXISTS",
                                                       "PTTL", "TTL",  "TIME", "PING",    "WAIT"};
  return std::any_of(kReads.begin(), kReads.end(),
                     [&](std::string_view name) { return command_named(command, name); });
}

}  // namespace

std::string RedisScripts::sha1_hex(std::string_view text) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_Digest(text.data(), text.size(), digest.data(), &length, EVP_sha1(), nullptr) != 1) {
    throw internal_error("redis: OpenSSL cannot compute a script's SHA-1");
  }
  return hex_of(std::span<const uint8_t>(digest.data(), length));
}

RedisScripts::Outgoing RedisScripts::outgoing(const std::vector<Command>& commands) {
  Outgoing out;
  out.commands.reserve(commands.size());
  out.by_sha.reserve(commands.size());
  for (const Command& command : commands) {
    CommandView view(command.begin(), command.end());
    bool by_sha = false;
    if (!sha_refused_ && is_eval_command(command)) {
      auto it = scripts_.find(command[1]);
      if (it == scripts_.end() && scripts_.size() < kMostScripts) {
        it = scripts_.emplace(command[1], Script{sha1_hex(command[1])}).first;
      }
      if (it != scripts_.end() && it->second.held) {
        view[0] = "EVALSHA";
        view[1] = it->second.sha1;
        by_sha = true;
      }
    }
    out.commands.push_back(std::move(view));
    out.by_sha.push_back(by_sha);
  }
  return out;
}

RedisScripts::Verdict RedisScripts::learn(const std::vector<Command>& commands,
                                          const Outgoing& sent,
                                          const std::vector<RedisReply>& replies) {
  const size_t n = std::min(commands.size(), replies.size());
  // The commands sent by SHA-1 that Redis did not run: it lost the script, or refused EVALSHA.
  std::vector<bool> not_run(n, false);
  bool any_not_run = false;
  for (size_t i = 0; i < n; ++i) {
    if (!sent.by_sha[i]) continue;
    const bool refused = evalsha_refused_reply(replies[i]);
    sha_refused_ = sha_refused_ || refused;
    not_run[i] = refused || noscript_reply(replies[i]);
    any_not_run = any_not_run || not_run[i];
  }
  if (!any_not_run) {
    // Scripts sent in full that ran are held now (those sent by SHA-1 already were).
    for (size_t i = 0; i < n; ++i) {
      if (sent.by_sha[i] || !is_eval_command(commands[i]) || replies[i].error()) continue;
      if (const auto it = scripts_.find(commands[i][1]); it != scripts_.end()) {
        it->second.held = true;
      }
    }
    return Verdict::kAnswered;
  }
  for (auto& [text, script] : scripts_) script.held = false;
  for (size_t i = 0; i < n; ++i) {
    if (is_eval_command(commands[i]) ? !not_run[i] : !reads_only_command(commands[i])) {
      return Verdict::kOutcomeUnknown;
    }
  }
  return Verdict::kSendAgain;
}

size_t RedisScripts::held() const {
  return static_cast<size_t>(std::count_if(scripts_.begin(), scripts_.end(),
                                           [](const auto& entry) { return entry.second.held; }));
}

}  // namespace cube3d
