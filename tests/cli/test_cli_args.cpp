#include "cube3d/cli/cli_args.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/cli/version.h"
#include "cube3d/core/error.h"
#include "parsed_flags.h"
#include "scoped_env.h"

namespace cube3d {
namespace test_cli_args {

using cube3d::testing::ScopedEnv;

CliArgs make() {
  CliArgs args("tool", "Does a thing.");
  args.option("--name", 1, "a name", "S")
      .option("--size", 1, "a size", "N")
      .env("CUBE3D_TEST_SIZE")
      .option("--ratio", 1, "a ratio", "R")
      .option("--box", 3, "a box", "X")
      .option("--flag", 0, "a switch")
      .env("CUBE3D_TEST_FLAG")
      .option("--set", 1, "repeatable", "K=V", /*repeatable=*/true);
  return args;
}

CliArgs parsed(std::vector<const char*> words) {
  return testing::parsed_flags(make(), std::move(words));
}

std::string error_of(std::vector<const char*> words) {
  try {
    (void)parsed(std::move(words));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(CliArgs, ParsesValuesSwitchesAndRepeats) {
  const ScopedEnv no_size("CUBE3D_TEST_SIZE", nullptr);
  const CliArgs args = parsed({"--name", "a b", "--flag", "--box", "1", "2", "3", "--set", "x=1",
                               "--set", "y=2", "--size", "-4", "--ratio", "0.5"});
  EXPECT_EQ(args.get("--name"), "a b");
  EXPECT_TRUE(args.has("--flag"));
  EXPECT_EQ(args.get_all("--box"), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(args.get_all("--set"), (std::vector<std::string>{"x=1", "y=2"}));
  EXPECT_EQ(args.get_int("--size", 0), -4);
  EXPECT_DOUBLE_EQ(args.get_double("--ratio", 0), 0.5);
  EXPECT_EQ(args.get("--missing-is-fallback", "fb"), "fb");
  EXPECT_EQ(args.get_uint("--absent", 7), 7u);
  EXPECT_FALSE(args.help_requested());
  // A comma list stays one value (--batch-buckets 1,2,4).
  EXPECT_EQ(parsed({"--name", "1,2,4"}).get("--name"), "1,2,4");
}

TEST(CliArgs, TakesNameEqualsValue) {
  const ScopedEnv no_size("CUBE3D_TEST_SIZE", nullptr);
  const CliArgs args = parsed(
      {"--name=a=b", "--size=-4", "--box=1", "2", "3", "--set=x=1", "--ratio=0.25", "--flag=true"});
  EXPECT_EQ(args.get("--name"), "a=b");  // only the first '=' splits
  EXPECT_EQ(args.get_int("--size", 0), -4);
  EXPECT_EQ(args.get_all("--box"), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(args.get_all("--set"), (std::vector<std::string>{"x=1"}));
  EXPECT_DOUBLE_EQ(args.get_double("--ratio", 0), 0.25);
  EXPECT_TRUE(args.has("--flag"));
  // An explicit empty value stays empty instead of taking the next word.
  const CliArgs empty = parsed({"--name=", "--flag"});
  EXPECT_TRUE(empty.has("--name"));
  EXPECT_EQ(empty.get("--name", "fallback"), "");
  EXPECT_TRUE(empty.has("--flag"));
  EXPECT_FALSE(parsed({"--flag=false"}).has("--flag"));
}

TEST(CliArgs, LastOccurrenceWinsUnlessRepeatable) {
  const CliArgs args = parsed({"--name", "a", "--name=b", "--box", "1", "2", "3", "--box", "4", "5",
                               "6", "--set", "x=1", "--set=y=2", "--set", "x=3"});
  EXPECT_EQ(args.get("--name"), "b");
  EXPECT_EQ(args.get_all("--name"), (std::vector<std::string>{"b"}));
  EXPECT_EQ(args.get_all("--box"), (std::vector<std::string>{"4", "5", "6"}));
  EXPECT_EQ(args.get_all("--set"), (std::vector<std::string>{"x=1", "y=2", "x=3"}));
  EXPECT_FALSE(parsed({"--flag", "--flag=false"}).has("--flag"));
  EXPECT_TRUE(parsed({"--flag=no", "--flag"}).has("--flag"));
}

TEST(CliArgs, EnvironmentStandsInForAnAbsentFlag) {
  {
    const ScopedEnv size("CUBE3D_TEST_SIZE", "12");
    const ScopedEnv flag("CUBE3D_TEST_FLAG", "1");
    const CliArgs from_env = parsed({});
    EXPECT_TRUE(from_env.has("--size"));
    EXPECT_EQ(from_env.get_int("--size", 0), 12);
    EXPECT_EQ(from_env.source("--size"), "CUBE3D_TEST_SIZE (for --size)");
    EXPECT_TRUE(from_env.has("--flag"));
    // The flag beats the variable.
    const CliArgs flagged = parsed({"--size", "7", "--flag=false"});
    EXPECT_EQ(flagged.get_int("--size", 0), 7);
    EXPECT_EQ(flagged.source("--size"), "--size");
    EXPECT_FALSE(flagged.has("--flag"));
  }
  {
    const ScopedEnv empty("CUBE3D_TEST_SIZE", "");  // empty counts as unset
    EXPECT_FALSE(parsed({}).has("--size"));
  }
  {
    const ScopedEnv bad("CUBE3D_TEST_SIZE", "12x");
    const CliArgs args = parsed({});
    try {
      args.get_int("--size", 0);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "CUBE3D_TEST_SIZE (for --size): expected an integer, got '12x'");
    }
  }
  {
    CliArgs box("tool", "Does a thing.");
    box.option("--box", 3, "a box", "X");
    EXPECT_THROW(box.env("CUBE3D_TEST_BOX"), Error);  // one variable, one value
  }
  {
    const ScopedEnv bad("CUBE3D_TEST_FLAG", "maybe");
    EXPECT_EQ(error_of({}),
              "CUBE3D_TEST_FLAG (for --flag) is a switch: expected no value (or true/false), got "
              "'maybe'");
  }
}

TEST(CliArgs, ErrorsNameTheOption) {
  EXPECT_EQ(error_of({"--nope"}), "unknown option '--nope' (see tool --help)");
  EXPECT_EQ(error_of({"--nope=3"}), "unknown option '--nope' (see tool --help)");
  EXPECT_EQ(error_of({"--nam", "x"}), "unknown option '--nam' (did you mean --name?)");
  EXPECT_EQ(error_of({"--verison"}), "unknown option '--verison' (did you mean --version?)");
  EXPECT_EQ(error_of({"stray"}),
            "unexpected argument 'stray': tool takes only options (see tool --help)");
  EXPECT_EQ(error_of({"--box", "1", "2"}), "--box expects 3 value(s)");
  EXPECT_EQ(error_of({"--name"}), "--name expects 1 value(s)");
  EXPECT_EQ(error_of({"--flag=maybe"}),
            "--flag is a switch: expected no value (or true/false), got 'maybe'");
  const CliArgs args = parsed({"--size", "12x", "--ratio", "inf"});
  EXPECT_THROW(args.get_int("--size", 0), Error);
  EXPECT_THROW(args.get_double("--ratio", 0), Error);
  const CliArgs negative = parsed({"--size", "-1"});
  try {
    negative.get_uint("--size", 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--size: expected a non-negative integer, got '-1'");
  }
}

TEST(CliArgs, HelpListsEveryOptionInOrder) {
  const CliArgs args = parsed({"-h", "--nope"});  // help is answered before other words are checked
  EXPECT_TRUE(args.help_requested());
  const std::string help = args.help();
  EXPECT_EQ(help.rfind("usage: tool [options]\nDoes a thing.\n", 0), 0u) << help;
  EXPECT_LT(help.find("--name S"), help.find("--box X X X"));
  EXPECT_NE(help.find("--set K=V ..."), std::string::npos);
  EXPECT_NE(help.find("a size [env: CUBE3D_TEST_SIZE]"), std::string::npos) << help;
  EXPECT_NE(help.find("--version"), std::string::npos);
  EXPECT_NE(help.find("--name=VALUE"), std::string::npos);
  EXPECT_NE(help.find("keeps its last value"), std::string::npos);
  EXPECT_NE(help.find("the flag beats the variable"), std::string::npos);
  EXPECT_FALSE(parsed({}).help_requested());
  EXPECT_TRUE(parsed({"--version", "--help"}).help_requested());  // help wins
}

TEST(CliArgs, VersionNamesTheToolVersionAndRevision) {
  const CliArgs args = make();
  EXPECT_EQ(args.version(), std::string("tool ") + project_version() + " (" + git_revision() + ")");
  EXPECT_TRUE(std::regex_match(args.version(), std::regex(R"(tool \d+\.\d+\.\d+ \(\S+\))")))
      << args.version();
  EXPECT_FALSE(std::string(git_revision()).empty());
  // parse() answers --version (even beside an unknown option) with a CliAnswer ...
  try {
    parsed({"--nope", "--version"});
    FAIL();
  } catch (const CliAnswer& answer) {
    EXPECT_EQ(answer.text(), args.version() + "\n");
  }
}

// run_tool on "tool", with `flag` when it is not empty: its exit code and what it printed on
// stdout.
std::pair<int, std::string> run_captured(int (*body)(int, char**), std::string flag = "") {
  std::string name = "tool";
  char* argv[] = {name.data(), flag.empty() ? nullptr : flag.data(), nullptr};
  ::testing::internal::CaptureStdout();
  const int code = run_tool("tool", body, flag.empty() ? 1 : 2, argv);
  return {code, ::testing::internal::GetCapturedStdout()};
}

int version_body(int argc, char** argv) {
  CliArgs args = make();
  args.parse(argc, argv);
  return 5;
}

TEST(CliArgs, RunToolPrintsTheVersionAndExitsZero) {
  // ... which run_tool prints to stdout, exit code 0: no tool needs code of its own for it.
  EXPECT_EQ(run_captured(version_body, "--version"),
            (std::pair<int, std::string>{0, make().version() + "\n"}));
  EXPECT_EQ(run_captured(version_body).first, 5);
}

int help_body(int argc, char** argv) {
  CliArgs args = make();
  args.parse_answering_help(argc, argv);
  return 6;
}

TEST(CliArgs, ParseAnsweringHelpPrintsTheHelpThroughRunTool) {
  EXPECT_EQ(run_captured(help_body, "-h"), (std::pair<int, std::string>{0, make().help()}));
  EXPECT_EQ(run_captured(help_body).first, 6);  // no --help: the tool runs
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

}  // namespace test_cli_args
}  // namespace cube3d
