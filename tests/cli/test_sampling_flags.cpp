#include "cube3d/cli/sampling_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "expect_in_order.h"
#include "parsed_flags.h"

namespace cube3d {
namespace test_sampling_flags {

CliArgs with_sampling_flags() {
  CliArgs args("tool", "Does a thing.");
  args.option("--before", 1, "declared first", "B");
  add_sampling_flags(args,
                     {.guidance_scale = "the tool's guidance help", .seed = "the tool's seed"})
      .option("--after", 0, "declared last");
  return args;
}

// Each tool's --help is pinned by its own tests; here: the caller's texts, the shared --top-p
// text, the metavars and the order (between what the caller declared before and after).
TEST(SamplingFlags, HelpShowsTheCallersTextsInOrder) {
  const std::string help = with_sampling_flags().help();
  const std::vector<std::string> lines = {"--before B",
                                          "--guidance-scale G",
                                          "the tool's guidance help",
                                          "--top-p P",
                                          "nucleus sampling mass in (0, 1] (default: greedy)",
                                          "--seed N",
                                          "the tool's seed",
                                          "--after"};
  testing::expect_in_order(help, lines);
}

TEST(SamplingFlags, TakeOneValueEach) {
  const CliArgs args = testing::parsed_flags(
      with_sampling_flags(),
      {"--guidance-scale", "2.5", "--top-p", "0.9", "--seed", "7", "--after"});
  EXPECT_DOUBLE_EQ(args.get_double("--guidance-scale", 0), 2.5);
  EXPECT_DOUBLE_EQ(args.get_double("--top-p", 1), 0.9);
  EXPECT_EQ(args.get_uint("--seed", 0), 7u);
  EXPECT_TRUE(args.has("--after"));
}

TEST(SamplingFlags, MissingValueNamesTheFlag) {
  try {
    (void)testing::parsed_flags(with_sampling_flags(), {"--seed"});
    FAIL() << "parsed --seed without a value";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--seed expects 1 value(s)");
  }
}

}  // namespace test_sampling_flags
}  // namespace cube3d
