// Which scripts a connection sends by SHA-1 (RedisScripts), without a Redis: the first run of a
// script goes in full, later ones as EVALSHA, an error reply teaches nothing, NOSCRIPT (a
// SCRIPT FLUSH) either sends the pipeline again or, when part of it may have run, says so, and a
// Redis that refuses EVALSHA itself gets every script in full.
#include "cube3d/server/redis/redis_scripts.h"

#include <gtest/gtest.h>

namespace cube3d::test_redis_scripts {

using Commands = std::vector<RedisScripts::Command>;
using Verdict = RedisScripts::Verdict;

RedisReply integer(int64_t value) {
  RedisReply reply;
  reply.type = RedisReply::Type::kInteger;
  reply.integer = value;
  return reply;
}

RedisReply error(std::string text) {
  RedisReply reply;
  reply.type = RedisReply::Type::kError;
  reply.text = std::move(text);
  return reply;
}

RedisReply noscript() { return error("NOSCRIPT No matching script. Please use EVAL."); }

// Runs `commands` through `scripts` once, every script answered `reply`.
void run_once(RedisScripts& scripts, const Commands& commands, const RedisReply& reply) {
  const RedisScripts::Outgoing sent = scripts.outgoing(commands);
  const std::vector<RedisReply> replies(commands.size(), reply);
  ASSERT_EQ(scripts.learn(commands, sent, replies), Verdict::kAnswered);
}

TEST(RedisScripts, Sha1IsTheNameRedisGivesAScript) {
  // SCRIPT LOAD "return 1" answers this in Redis' documentation.
  EXPECT_EQ(RedisScripts::sha1_hex("return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
}

TEST(RedisScripts, AScriptGoesInFullUntilItHasRunThenBySha) {
  RedisScripts scripts;
  const Commands commands = {{"EVAL", "return ARGV[1]", "0", "x"}, {"GET", "k"}};
  const RedisScripts::Outgoing first = scripts.outgoing(commands);
  EXPECT_EQ(first.commands[0], (RedisScripts::CommandView{"EVAL", "return ARGV[1]", "0", "x"}));
  EXPECT_EQ(first.by_sha, (std::vector<bool>{false, false}));
  EXPECT_EQ(scripts.learn(commands, first, {integer(1), integer(2)}), Verdict::kAnswered);
  EXPECT_EQ(scripts.held(), 1u);

  const RedisScripts::Outgoing second = scripts.outgoing(commands);
  EXPECT_EQ(
      second.commands[0],
      (RedisScripts::CommandView{"EVALSHA", RedisScripts::sha1_hex("return ARGV[1]"), "0", "x"}));
  EXPECT_EQ(second.commands[1], (RedisScripts::CommandView{"GET", "k"}));
  EXPECT_EQ(second.by_sha, (std::vector<bool>{true, false}));
}

TEST(RedisScripts, TheCommandNameIsReadWhateverItsCase) {
  RedisScripts scripts;
  const Commands commands = {{"eval", "return 1", "0"}};
  run_once(scripts, commands, integer(1));
  EXPECT_TRUE(scripts.outgoing(commands).by_sha[0]);
}

TEST(RedisScripts, AnErrorReplyLeavesTheScriptInFull) {
  // The error may be a script that does not compile, which Redis does not keep.
  RedisScripts scripts;
  const Commands commands = {{"EVAL", "return +", "0"}};
  run_once(scripts, commands, error("ERR Error compiling script (new function): user_script:1"));
  EXPECT_EQ(scripts.held(), 0u);
  EXPECT_FALSE(scripts.outgoing(commands).by_sha[0]);
}

TEST(RedisScripts, NoscriptWithOnlyReadsBesideIsSentAgainInFull) {
  RedisScripts scripts;
  const Commands commands = {{"EVAL", "return 1", "0"},
                             {"EVAL", "return 2", "0"},
                             {"WAIT", "1", "100"},
                             {"HGETALL", "counts"}};
  run_once(scripts, commands, integer(1));
  const RedisScripts::Outgoing sent = scripts.outgoing(commands);
  EXPECT_EQ(sent.by_sha, (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(scripts.learn(commands, sent, {noscript(), noscript(), integer(0), integer(0)}),
            Verdict::kSendAgain);
  EXPECT_EQ(scripts.held(), 0u);
  EXPECT_EQ(scripts.outgoing(commands).by_sha, (std::vector<bool>{false, false, false, false}));
}

TEST(RedisScripts, NoscriptBesideAWriteLeavesTheOutcomeUnknown) {
  RedisScripts scripts;
  const Commands commands = {{"EVAL", "return 1", "0"}, {"SET", "k", "v"}};
  run_once(scripts, commands, integer(1));
  const RedisScripts::Outgoing sent = scripts.outgoing(commands);
  RedisReply ok;
  ok.type = RedisReply::Type::kStatus;
  ok.text = "OK";
  EXPECT_EQ(scripts.learn(commands, sent, {noscript(), ok}), Verdict::kOutcomeUnknown);
  EXPECT_EQ(scripts.held(), 0u);
}

TEST(RedisScripts, NoscriptBesideAScriptThatRanLeavesTheOutcomeUnknown) {
  RedisScripts scripts;
  run_once(scripts, {{"EVAL", "return 1", "0"}}, integer(1));
  // The first goes by SHA-1 and is not found; the second, new, goes in full and runs.
  const Commands commands = {{"EVAL", "return 1", "0"}, {"EVAL", "return 2", "0"}};
  const RedisScripts::Outgoing sent = scripts.outgoing(commands);
  EXPECT_EQ(sent.by_sha, (std::vector<bool>{true, false}));
  EXPECT_EQ(scripts.learn(commands, sent, {noscript(), integer(2)}), Verdict::kOutcomeUnknown);
}

TEST(RedisScripts, ARedisThatRefusesEvalshaGetsEveryScriptInFull) {
  // Renamed away, or not in the user's ACL: the command did not run, so the pipeline is sent
  // again, and this connection stops asking.
  for (const std::string refusal :
       {"ERR unknown command 'EVALSHA', with args beginning with: 'e0e1' '0' ",
        "NOPERM this user has no permissions to run the 'evalsha' command"}) {
    RedisScripts scripts;
    const Commands commands = {{"EVAL", "return 1", "0"}, {"GET", "k"}};
    run_once(scripts, commands, integer(1));
    const RedisScripts::Outgoing sent = scripts.outgoing(commands);
    ASSERT_TRUE(sent.by_sha[0]);
    EXPECT_EQ(scripts.learn(commands, sent, {error(refusal), integer(0)}), Verdict::kSendAgain)
        << refusal;
    run_once(scripts, commands, integer(1));
    EXPECT_FALSE(scripts.outgoing(commands).by_sha[0]) << refusal;
  }
}

TEST(RedisScripts, AScriptsOwnRefusedCallIsItsAnswer) {
  // The script ran (up to the refused call): its error is the reply, not a reason to resend.
  RedisScripts scripts;
  const Commands commands = {{"EVAL", "return redis.call('SET', 'a', 'b')", "0"}};
  run_once(scripts, commands, integer(1));
  const RedisScripts::Outgoing sent = scripts.outgoing(commands);
  ASSERT_TRUE(sent.by_sha[0]);
  EXPECT_EQ(scripts.learn(commands, sent,
                          {error("ERR The user executing the script can't run this command or "
                                 "subcommand script: 0a9f, on @user_script:1.")}),
            Verdict::kAnswered);
  EXPECT_TRUE(scripts.outgoing(commands).by_sha[0]);
}

TEST(RedisScripts, ScriptsPastTheBoundAlwaysGoInFull) {
  RedisScripts scripts;
  for (size_t i = 0; i <= RedisScripts::kMostScripts; ++i) {
    run_once(scripts, {{"EVAL", "return " + std::to_string(i), "0"}}, integer(1));
  }
  EXPECT_EQ(scripts.held(), RedisScripts::kMostScripts);
  const std::string last = "return " + std::to_string(RedisScripts::kMostScripts);
  EXPECT_FALSE(scripts.outgoing({{"EVAL", last, "0"}}).by_sha[0]);
  EXPECT_TRUE(scripts.outgoing({{"EVAL", "return 0", "0"}}).by_sha[0]);
}

TEST(RedisScripts, AnEvalWithoutItsScriptIsLeftToRedis) {
  RedisScripts scripts;
  const Commands commands = {{"EVAL"}};
  run_once(scripts, commands, error("ERR wrong number of arguments for 'eval' command"));
  EXPECT_EQ(scripts.outgoing(commands).commands[0], (RedisScripts::CommandView{"EVAL"}));
}

}  // namespace cube3d::test_redis_scripts
