// The prompt policy: the denylist file's format and limits, how patterns match a normalised
// prompt, the refusal message, and swapping rules while prompts are being checked.
#include "cube3d/server/admission/prompt_policy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/error.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace cube3d {
namespace test_prompt_policy {

using testing::expect_error;
using Needles = std::vector<std::string>;

PromptDenylist parse(const std::string& text) { return PromptDenylist::parse(text, "deny.txt"); }

// Expects `list` to match each of `matched` and none of `unmatched`.
void expect_matching(const PromptDenylist& list, std::initializer_list<const char*> matched,
                     std::initializer_list<const char*> unmatched) {
  for (const char* prompt : matched) EXPECT_TRUE(list.matches(prompt)) << prompt;
  for (const char* prompt : unmatched) EXPECT_FALSE(list.matches(prompt)) << prompt;
}

TEST(PromptDenylist, SkipsCommentsAndBlankLines) {
  const PromptDenylist list = parse(
      "# weapons\n"
      "\n"
      "   \t\n"
      "  # an indented comment\n"
      "bomb\n"
      "#gun\n"
      "grenade");  // the last line needs no line end
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(list.source(), "deny.txt");
  EXPECT_TRUE(list.matches("a bomb"));
  EXPECT_TRUE(list.matches("a grenade"));
  EXPECT_FALSE(list.matches("a gun"));
  EXPECT_FALSE(list.matches("# weapons"));
  EXPECT_EQ(list.matching_line("a bomb"), 5);
  EXPECT_EQ(list.matching_line("a grenade"), 7);
  EXPECT_EQ(list.matching_line("a gun"), std::nullopt);
}

TEST(PromptDenylist, ReadsCrlfFilesAndStripsTrailingBlanksOnly) {
  const PromptDenylist list = parse(
      "\xEF\xBB\xBF"
      "bomb  \r\n\r\n gun\t\r\n");
  EXPECT_EQ(list.size(), 2u);
  EXPECT_TRUE(list.matches("bomb"));  // neither the blanks nor the '\r' belong to the pattern
  EXPECT_EQ(list.matching_line("bomb"), 1);
  // The leading space is part of " gun".
  expect_matching(list, {"a gun"}, {"gun", "shotgun"});
  EXPECT_EQ(list.matching_line("a gun"), 3);
}

TEST(PromptDenylist, MatchesAnywhereInThePrompt) {
  const PromptDenylist list = parse("bomb\n");
  EXPECT_TRUE(list.matches("bomb"));
  EXPECT_TRUE(list.matches("a red bomb on a table"));
  EXPECT_TRUE(list.matches("abombination"));  // unanchored: a word boundary is the rule's job
  EXPECT_FALSE(list.matches("a red car"));
  EXPECT_FALSE(list.matches(""));

  const PromptDenylist words = parse("\\bbombs?\\b\n");
  EXPECT_TRUE(words.matches("two bombs"));
  EXPECT_FALSE(words.matches("abombination"));
}

TEST(PromptDenylist, IsCaseInsensitive) {
  const PromptDenylist list = parse("BoMb\n");
  EXPECT_TRUE(list.matches("bomb"));
  EXPECT_TRUE(list.matches("a BOMB"));
  EXPECT_TRUE(parse("bomb\n").matches("Bomb"));
}

TEST(PromptDenylist, HonoursAnchors) {
  const PromptDenylist list = parse("^gun$\n^knife\n");
  expect_matching(list, {"gun", "knife rack"}, {"a gun", "gun rack", "a knife"});
  EXPECT_EQ(list.matching_line("knife"), 2);
}

TEST(PromptDenylist, MatchesUtf8Patterns) {
  const PromptDenylist list = parse("bombe\xCC\x81\nw\xC3\xA4hrung\n\xE7\x88\x86\xE5\xBC\xB9\n");
  EXPECT_EQ(list.size(), 3u);
  EXPECT_TRUE(list.matches("une bombe\xCC\x81 rouge"));
  EXPECT_TRUE(list.matches("eine w\xC3\xA4hrung"));
  EXPECT_TRUE(list.matches("eine W\xC3\x84HRUNG"));  // case folds beyond ASCII
  EXPECT_FALSE(list.matches("eine wahrung"));
  EXPECT_TRUE(list.matches("\xE4\xB8\x80\xE4\xB8\xAA\xE7\x88\x86\xE5\xBC\xB9"));
  EXPECT_EQ(list.matching_line("\xE7\x88\x86\xE5\xBC\xB9"), 3);
  // '.' is one code point, not one byte.
  EXPECT_TRUE(parse("^.$\n").matches("\xC3\xA4"));
}

TEST(PromptDenylist, ReportsTheFirstMatchingLine) {
  const PromptDenylist list = parse("red\n# comment\ncar\nred car\n");
  EXPECT_EQ(list.matching_line("a red car"), 1);
  EXPECT_EQ(list.matching_line("a blue car"), 3);
}

TEST(PromptDenylist, EmptyListMatchesNothing) {
  for (const PromptDenylist& list : {PromptDenylist(), parse(""), parse("# nothing yet\n\n")}) {
    EXPECT_EQ(list.size(), 0u);
    EXPECT_FALSE(list.matches(""));
    EXPECT_FALSE(list.matches("a bomb"));
    EXPECT_EQ(list.matching_line("a bomb"), std::nullopt);
  }
  EXPECT_EQ(PromptDenylist().source(), "");
}

TEST(PromptDenylist, InvalidPatternNamesFileAndLine) {
  expect_error([] { parse("# ok\nbomb\n(abc\n"); }, ErrorCode::kInvalidArgument,
               Needles{"deny.txt:3: ", "not a valid RE2 pattern", "missing )"});
  expect_error([] { parse("a{2,1}\n"); }, ErrorCode::kInvalidArgument, "deny.txt:1: ");
  expect_error([] { parse("\\q\n"); }, ErrorCode::kInvalidArgument,
               Needles{"deny.txt:1: ", "invalid escape sequence"});
  // Too large a program for one pattern.
  expect_error([] { parse("ok\n\\pL{1000}\n"); }, ErrorCode::kInvalidArgument,
               Needles{"deny.txt:2: ", "pattern too large"});
}

TEST(PromptDenylist, PatternThatMatchesTheEmptyStringIsRefused) {
  for (const char* pattern : {"bomb|", "x*", "(gun)?", "^"}) {
    expect_error([&] { parse("ok\n" + std::string(pattern) + "\n"); }, ErrorCode::kInvalidArgument,
                 Needles{"deny.txt:2: ", "matches the empty string"});
  }
  // A leading '#' is written escaped.
  EXPECT_TRUE(parse("\\#tag\n").matches("a #tag"));
}

TEST(PromptDenylist, InvalidUtf8NamesFileAndLine) {
  expect_error([] { parse("ok\nbad \xff byte\n"); }, ErrorCode::kInvalidArgument,
               Needles{"deny.txt:2: ", "not valid UTF-8", "byte 5"});
  // Invalid UTF-8 in a comment is harmless.
  EXPECT_EQ(parse("# \xff\nok\n").size(), 1u);
}

TEST(PromptDenylist, EnforcesItsLimits) {
  std::string many;
  for (size_t i = 0; i < PromptDenylist::kMaxPatterns; ++i) {
    many += "\\bw";
    many += std::to_string(i);
    many += "\\b\n";
  }
  const PromptDenylist full = parse(many);
  EXPECT_EQ(full.size(), PromptDenylist::kMaxPatterns);
  EXPECT_TRUE(full.matches("x w9999 y"));
  EXPECT_EQ(full.matching_line("w9999"), 10000);
  EXPECT_FALSE(full.matches("a red car"));
  expect_error([&] { parse(many + "one more\n"); }, ErrorCode::kInvalidArgument,
               Needles{"deny.txt: ", "more than 10000 patterns"});

  // The byte limit holds for comments too.
  const std::string big(PromptDenylist::kMaxFileBytes + 1, '#');
  expect_error([&] { parse(big); }, ErrorCode::kInvalidArgument,
               Needles{"deny.txt: ", "too large", "1048576"});
  testing::TempDir dir;
  const std::string path = dir.write("deny.txt", big);
  expect_error([&] { PromptDenylist::load(path); }, ErrorCode::kInvalidArgument,
               Needles{path, "too large"});
}

TEST(PromptDenylist, LoadsAFile) {
  testing::TempDir dir;
  const std::string path = dir.write("deny.txt", "# rules\nbomb\n");
  const PromptDenylist list = PromptDenylist::load(path);
  EXPECT_EQ(list.source(), path);
  EXPECT_EQ(list.size(), 1u);
  EXPECT_TRUE(list.matches("a bomb"));

  const std::string broken = dir.write("broken.txt", "bomb\n[a-\n");
  expect_error([&] { PromptDenylist::load(broken); }, ErrorCode::kInvalidArgument, broken + ":2: ");
}

TEST(PromptDenylist, MissingFileIsNotFound) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/absent.txt";
  expect_error([&] { PromptDenylist::load(path); }, ErrorCode::kNotFound,
               Needles{path, "no such prompt denylist file"});
  expect_error([&] { PromptDenylist::load(dir.path()); }, ErrorCode::kInvalidArgument, dir.path());
}

TEST(PromptDenylist, CopiesShareTheRules) {
  const PromptDenylist list = parse("bomb\n");
  const PromptDenylist copy = list;
  PromptDenylist moved = parse("gun\n");
  moved = PromptDenylist(copy);
  EXPECT_TRUE(copy.matches("bomb"));
  EXPECT_TRUE(moved.matches("bomb"));
  EXPECT_FALSE(moved.matches("gun"));
  EXPECT_TRUE(list.matches("bomb"));
  const PromptDenylist taken = std::move(moved);
  EXPECT_TRUE(taken.matches("bomb"));
  EXPECT_FALSE(moved.matches("bomb"));  // NOLINT(bugprone-use-after-move): defined as empty
  EXPECT_EQ(moved.size(), 0u);
}

TEST(PromptPolicy, RefusesWhatTheRulesMatch) {
  const PromptPolicy policy(parse("bomb\n^gun$\n"));
  EXPECT_EQ(policy.size(), 2u);
  EXPECT_TRUE(policy.refuses("a bomb"));
  EXPECT_TRUE(policy.refuses("gun"));
  EXPECT_FALSE(policy.refuses("a gun"));
  EXPECT_EQ(policy.current()->matching_line("gun"), 2);

  const PromptPolicy none{PromptDenylist()};
  EXPECT_EQ(none.size(), 0u);
  EXPECT_FALSE(none.refuses("a bomb"));
  EXPECT_FALSE(none.refuses(""));
}

TEST(PromptPolicy, RefusalMessageNamesThePolicyNotThePattern) {
  const std::string message(PromptPolicy::kRefusal);
  EXPECT_NE(message.find("policy.prompt_denylist_file"), std::string::npos);
  for (const char* leak : {"bomb", "deny.txt", ":1", "\\b"}) {
    EXPECT_EQ(message.find(leak), std::string::npos) << leak;
  }
}

TEST(PromptPolicy, ReplaceSwapsTheRules) {
  PromptPolicy policy(parse("bomb\n"));
  const std::shared_ptr<const PromptDenylist> before = policy.current();
  policy.replace(parse("gun\nknife\n"));
  EXPECT_EQ(policy.size(), 2u);
  EXPECT_FALSE(policy.refuses("a bomb"));
  EXPECT_TRUE(policy.refuses("a gun"));
  EXPECT_EQ(policy.current()->source(), "deny.txt");
  // Whoever holds the old rules keeps them whole.
  EXPECT_TRUE(before->matches("a bomb"));
  EXPECT_EQ(before->size(), 1u);
  policy.replace(PromptDenylist());
  EXPECT_FALSE(policy.refuses("a gun"));
}

TEST(PromptPolicy, RefusesIsSafeWhileRulesAreReplaced) {
  // Both rule sets refuse "bomb" and neither refuses "car"; "gun" depends on the moment.
  const PromptDenylist a = parse("bomb\ngun\n");
  const PromptDenylist b = parse("\\bbomb\\b\n");
  PromptPolicy policy(a);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::atomic<int> checks{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        if (!policy.refuses("a bomb")) ++wrong;
        if (policy.refuses("a car")) ++wrong;
        (void)policy.refuses("a gun");
        if (policy.size() == 0) ++wrong;
        ++checks;
      }
    });
  }
  // Swaps until the readers have overlapped plenty of them (no timing is assumed).
  for (int i = 0; i < 2000 || checks.load() < 2000; ++i) policy.replace(i % 2 == 0 ? b : a);
  policy.replace(a);
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(policy.refuses("a gun"));
}

}  // namespace test_prompt_policy
}  // namespace cube3d
