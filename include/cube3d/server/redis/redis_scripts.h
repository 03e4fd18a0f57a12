// Which Lua scripts the Redis at the other end of one connection holds, so that a script's text
// crosses the wire once per connection instead of with every call. The stores send
// `EVAL <text> ...` (a job store script with its prelude is 6 to 8 KB, and every progress update,
// poll and renewal is one); once a script has run on a connection, the connection sends it as
// `EVALSHA <its SHA-1> ...` (40 bytes), which Redis answers from its script cache.
//
// Redis keeps what EVAL ran until SCRIPT FLUSH or a restart. A restart breaks the connection,
// and a new connection starts out knowing no script. After SCRIPT FLUSH an EVALSHA is answered
// NOSCRIPT and does not run: when none of a pipeline's scripts ran and its other commands only
// read (WAIT, GET, HGETALL, ...), the pipeline is sent again with every script in full;
// otherwise part of it may have run, and its outcome is unknown (the connection reports that as
// a failure, as it does a lost reply). A Redis that refuses EVALSHA itself (renamed away, or not
// granted by the user's ACL) is answered the same way, and the connection sends every script in
// full from then on.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cube3d/server/redis/redis_reply.h"

namespace cube3d {

class RedisScripts {
 public:
  using Command = std::vector<std::string>;
  using CommandView = std::vector<std::string_view>;

  // A pipeline as it goes out: views into the caller's commands and into this object's SHA-1s,
  // valid while both live.
  struct Outgoing {
    std::vector<CommandView> commands;
    std::vector<bool> by_sha;  // each command: sent as EVALSHA
  };
  enum class Verdict {
    kAnswered,        // the replies are the pipeline's
    kSendAgain,       // NOSCRIPT, and nothing that ran changed anything: send it once more
    kOutcomeUnknown,  // NOSCRIPT, and some of it may have run
  };

  // Distinct scripts remembered per connection; a script past them always goes in full (the
  // stores use a dozen fixed ones: this bounds a caller that builds scripts on the fly).
  static constexpr size_t kMostScripts = 64;

  // `commands` as they go out: each EVAL of a script this connection has run as EVALSHA.
  Outgoing outgoing(const std::vector<Command>& commands);
  // What the replies of `sent` tell: a script answered without an error reply is held from now
  // on (an error reply may be a script that did not compile); NOSCRIPT means Redis lost its
  // scripts, and none is held any more; EVALSHA refused itself means none ever will be.
  Verdict learn(const std::vector<Command>& commands, const Outgoing& sent,
                const std::vector<RedisReply>& replies);
  // Scripts this connection would send as EVALSHA now.
  size_t held() const;

  // A script's SHA-1 as Redis names it: 40 lower-case hex digits.
  static std::string sha1_hex(std::string_view text);

 private:
  struct Script {
    std::string sha1;
    bool held = false;
  };
  std::unordered_map<std::string, Script> scripts_;  // by text
  bool sha_refused_ = false;                         // Redis refuses EVALSHA itself
};

}  // namespace cube3d
