#include "cube3d/cli/cli_args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

CliArgs make() {
  CliArgs args("tool", "Does a thing.");
  args.option("--name", 1, "a name", "S")
      .option("--size", 1, "a size", "N")
      .option("--ratio", 1, "a ratio", "R")
      .option("--box", 3, "a box", "X")
      .option("--flag", 0, "a switch")
      .option("--set", 1, "repeatable", "K=V", /*repeatable=*/true);
  return args;
}

void parse(CliArgs& args, std::vector<const char*> words) {
  words.insert(words.begin(), "tool");
  args.parse(static_cast<int>(words.size()), words.data());
}

std::string error_of(std::vector<const char*> words) {
  CliArgs args = make();
  try {
    parse(args, std::move(words));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(CliArgs, ParsesValuesSwitchesAndRepeats) {
  CliArgs args = make();
  parse(args, {"--name", "a b", "--flag", "--box", "1", "2", "3", "--set", "x=1", "--set", "y=2",
               "--size", "-4", "--ratio", "0.5"});
  EXPECT_EQ(args.get("--name"), "a b");
  EXPECT_TRUE(args.has("--flag"));
  EXPECT_EQ(args.get_all("--box"), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(args.get_all("--set"), (std::vector<std::string>{"x=1", "y=2"}));
  EXPECT_EQ(args.get_int("--size", 0), -4);
  EXPECT_DOUBLE_EQ(args.get_double("--ratio", 0), 0.5);
  EXPECT_EQ(args.get("--missing-is-fallback", "fb"), "fb");
  EXPECT_EQ(args.get_uint("--absent", 7), 7u);
  EXPECT_FALSE(args.help_requested());
}

TEST(CliArgs, ErrorsNameTheOption) {
  EXPECT_EQ(error_of({"--nope"}), "unknown option '--nope' (see tool --help)");
  EXPECT_EQ(error_of({"--name", "a", "--name", "b"}), "--name given more than once");
  EXPECT_EQ(error_of({"--box", "1", "2"}), "--box expects 3 value(s)");
  CliArgs args = make();
  parse(args, {"--size", "12x", "--ratio", "inf"});
  EXPECT_THROW(args.get_int("--size", 0), Error);
  EXPECT_THROW(args.get_double("--ratio", 0), Error);
  CliArgs negative = make();
  parse(negative, {"--size", "-1"});
  try {
    negative.get_uint("--size", 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--size: expected a non-negative integer, got '-1'");
  }
}

TEST(CliArgs, HelpListsEveryOptionInOrder) {
  CliArgs args = make();
  parse(args, {"-h"});
  EXPECT_TRUE(args.help_requested());
  const std::string help = args.help();
  EXPECT_EQ(help.rfind("usage: tool [options]\nDoes a thing.\n", 0), 0u) << help;
  EXPECT_LT(help.find("--name S"), help.find("--box X X X"));
  EXPECT_NE(help.find("--set K=V ..."), std::string::npos);
}

int failing_body(int, char**) { throw not_found("x.yaml: no such file"); }
int crashing_body(int, char**) { throw std::runtime_error("boom"); }

TEST(CliArgs, RunToolMapsErrorsToExitCodes) {
  char name[] = "tool";
  char* argv[] = {name, nullptr};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_tool("tool", failing_body, 1, argv), 2);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "tool: NOT_FOUND: x.yaml: no such file\n");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_tool("tool", crashing_body, 1, argv), 1);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "tool: error: boom\n");
}

}  // namespace
}  // namespace cube3d
