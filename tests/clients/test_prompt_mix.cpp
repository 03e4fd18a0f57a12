// --prompt-mix: the spec's parsing (good and bad forms, read back from spec()), the counter-based
// uniform draw (SplitMix64's published outputs, so a seed means the same run everywhere), and
// the Zipf law: exact probabilities, frequencies of a large seeded sample close to them, rank 1
// the most frequent, the same draws for the same seed, N = 1 always rank 1.
#include "cube3d/clients/prompt_mix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "expect_error.h"

namespace cube3d {
namespace test_prompt_mix {

// --- parsing ---------------------------------------------------------------------------------

TEST(PromptMixParseTest, FixedAndZipfForms) {
  EXPECT_EQ(parse_prompt_mix("fixed"), PromptMix{});
  EXPECT_EQ(parse_prompt_mix("fixed").spec(), "fixed");

  const PromptMix a = parse_prompt_mix("zipf:50");
  EXPECT_EQ(a.kind, PromptMix::Kind::kZipf);
  EXPECT_EQ(a.distinct, 50u);
  EXPECT_DOUBLE_EQ(a.exponent, 1.0);  // the default
  EXPECT_EQ(a.spec(), "zipf:50:1");

  const PromptMix b = parse_prompt_mix("zipf:3:1.25");
  EXPECT_EQ(b.distinct, 3u);
  EXPECT_DOUBLE_EQ(b.exponent, 1.25);
  EXPECT_EQ(b.spec(), "zipf:3:1.25");
  EXPECT_EQ(parse_prompt_mix(b.spec()), b);  // spec() reads back

  EXPECT_DOUBLE_EQ(parse_prompt_mix("zipf:1:0").exponent, 0.0);  // uniform over one
  EXPECT_DOUBLE_EQ(parse_prompt_mix("zipf:7:2e0").exponent, 2.0);
  EXPECT_EQ(parse_prompt_mix("zipf:1000000").distinct, kMaxZipfPrompts);
}

TEST(PromptMixParseTest, BadFormsNameTheFlag) {
  const char* const kBad[] = {"",
                              "zipf",
                              "zipf:",
                              "zipf:0",
                              "zipf:x",
                              "zipf:-3",
                              "zipf:+3",
                              "zipf:3x",
                              "zipf: 3",
                              "zipf:3:",
                              "zipf:3:x",
                              "zipf:3:-1",
                              "zipf:3:inf",
                              "zipf:3:nan",
                              "zipf:3:1:2",
                              "zipf:1000001",
                              "zipf:99999999999999999999",
                              "uniform:3",
                              "Fixed",
                              "fixed:3",
                              "ZIPF:3"};
  for (const char* bad : kBad) {
    SCOPED_TRACE(bad);
    testing::expect_error([&] { parse_prompt_mix(bad); }, ErrorCode::kInvalidArgument,
                          "--prompt-mix");
  }
}

// --- the uniform draw ------------------------------------------------------------------------

TEST(CounterUniformTest, IsSplitMix64) {
  // SplitMix64 seeded with 0 outputs 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f
  // (the reference implementation's first three); the draw is their top 53 bits.
  const auto top53 = [](uint64_t x) { return static_cast<double>(x >> 11) * 0x1.0p-53; };
  EXPECT_EQ(counter_uniform(0, 0), top53(0xe220a8397b1dcdafULL));
  EXPECT_EQ(counter_uniform(0, 1), top53(0x6e789e6aa1b965f4ULL));
  EXPECT_EQ(counter_uniform(0, 2), top53(0x06c45d188009454fULL));
}

TEST(CounterUniformTest, InUnitIntervalAndDependsOnTheSeed) {
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    const double u = counter_uniform(42, i);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    if (u == counter_uniform(43, i)) ++same;
  }
  EXPECT_EQ(same, 0);
}

// --- the Zipf law ----------------------------------------------------------------------------

TEST(ZipfDistributionTest, ExactProbabilities) {
  const ZipfDistribution z(4, 1.0);
  const double h = 1.0 + 1.0 / 2 + 1.0 / 3 + 1.0 / 4;
  for (uint64_t k = 1; k <= 4; ++k) {
    EXPECT_NEAR(z.probability(k), (1.0 / static_cast<double>(k)) / h, 1e-15) << k;
  }
  EXPECT_EQ(z.probability(0), 0.0);
  EXPECT_EQ(z.probability(5), 0.0);
  const ZipfDistribution squared(3, 2.0);
  EXPECT_NEAR(squared.probability(2) / squared.probability(1), 0.25, 1e-15);
  EXPECT_NEAR(squared.probability(3) / squared.probability(1), 1.0 / 9, 1e-15);
  const ZipfDistribution uniform(5, 0.0);
  for (uint64_t k = 1; k <= 5; ++k) EXPECT_NEAR(uniform.probability(k), 0.2, 1e-15);
}

TEST(ZipfDistributionTest, RankOfCoversTheUnitInterval) {
  const ZipfDistribution z(3, 1.0);  // P = 6/11, 3/11, 2/11
  EXPECT_EQ(z.rank_of(0.0), 1u);
  EXPECT_EQ(z.rank_of(6.0 / 11 - 1e-9), 1u);
  EXPECT_EQ(z.rank_of(6.0 / 11 + 1e-9), 2u);
  EXPECT_EQ(z.rank_of(9.0 / 11 + 1e-9), 3u);
  EXPECT_EQ(z.rank_of(std::nextafter(1.0, 0.0)), 3u);
  EXPECT_EQ(z.rank_of(1.0), 3u);  // outside [0, 1): clamped, never past n
}

// Draws `samples` ranks of `z` under `seed`; counts[k] is how often rank k came (k = 1..n).
std::vector<uint64_t> sample(const ZipfDistribution& z, uint64_t seed, uint64_t samples) {
  std::vector<uint64_t> counts(z.n() + 1, 0);
  for (uint64_t i = 0; i < samples; ++i) {
    const uint64_t k = z.draw(seed, i);
    EXPECT_GE(k, 1u);
    EXPECT_LE(k, z.n());
    ++counts[k];
  }
  return counts;
}

TEST(ZipfDistributionTest, FrequenciesFollowTheLaw) {
  // Each rank's count is binomial(n, p): within 5 standard deviations of n p, which a correct
  // sampler misses with probability about 1e-6 per rank (and the seed is fixed anyway).
  constexpr uint64_t kSamples = 200000;
  for (const auto& [n, s] :
       std::vector<std::pair<uint64_t, double>>{{10, 1.0}, {50, 1.0}, {20, 1.5}, {8, 0.0}}) {
    SCOPED_TRACE("zipf:" + std::to_string(n) + ":" + std::to_string(s));
    const ZipfDistribution z(n, s);
    const std::vector<uint64_t> counts = sample(z, 12345, kSamples);
    double chi2 = 0;
    for (uint64_t k = 1; k <= n; ++k) {
      const double expected = static_cast<double>(kSamples) * z.probability(k);
      const double sd = std::sqrt(expected * (1 - z.probability(k)));
      EXPECT_NEAR(static_cast<double>(counts[k]), expected, 5 * sd) << "rank " << k;
      chi2 += (static_cast<double>(counts[k]) - expected) *
              (static_cast<double>(counts[k]) - expected) / expected;
    }
    // chi^2 with n - 1 degrees of freedom: mean n - 1, sd sqrt(2 (n - 1)); 6 sd is generous.
    const double dof = static_cast<double>(n - 1);
    EXPECT_LT(chi2, dof + 6 * std::sqrt(2 * dof));
    if (s > 0) {
      // Rank 1 is the most frequent, by a wide margin at these sizes.
      for (uint64_t k = 2; k <= n; ++k) EXPECT_GT(counts[1], counts[k]) << "rank " << k;
    }
  }
}

TEST(ZipfDistributionTest, TheHeadOfZipf50IsWhatACacheSees) {
  // zipf:50 (the bench's mix): the top rank takes 1 / H_50 = 22.2% of the requests, the top ten
  // 65.1%: most requests repeat a prompt sent before.
  const ZipfDistribution z(50, 1.0);
  double h50 = 0;
  for (int k = 1; k <= 50; ++k) h50 += 1.0 / k;
  EXPECT_NEAR(z.probability(1), 1.0 / h50, 1e-12);
  double top10 = 0;
  for (uint64_t k = 1; k <= 10; ++k) top10 += z.probability(k);
  EXPECT_NEAR(top10, 0.6510, 0.0001);
}

TEST(ZipfDistributionTest, DeterministicForASeed) {
  const ZipfDistribution z(50, 1.0);
  std::vector<uint64_t> a, b, c;
  for (uint64_t i = 0; i < 500; ++i) {
    a.push_back(z.draw(7, i));
    c.push_back(z.draw(8, i));
  }
  // Backwards: the draw of request i does not depend on the order of the calls.
  for (uint64_t i = 500; i-- > 0;) b.insert(b.begin(), ZipfDistribution(50, 1.0).draw(7, i));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(ZipfDistributionTest, OneRankIsAlwaysRankOne) {
  for (const double s : {0.0, 1.0, 3.0}) {
    const ZipfDistribution z(1, s);
    EXPECT_EQ(z.n(), 1u);
    EXPECT_DOUBLE_EQ(z.probability(1), 1.0);
    for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(z.draw(99, i), 1u);
  }
}

TEST(ZipfDistributionTest, AHugeExponentPutsEverythingOnRankOne) {
  const ZipfDistribution z(5, 5000.0);  // 2^-5000 underflows to 0: still a law
  EXPECT_DOUBLE_EQ(z.probability(1), 1.0);
  for (uint64_t i = 0; i < 100; ++i) EXPECT_EQ(z.draw(1, i), 1u);
}

TEST(ZipfDistributionTest, RejectsBadArguments) {
  EXPECT_THROW(ZipfDistribution(0, 1.0), Error);
  EXPECT_THROW(ZipfDistribution(kMaxZipfPrompts + 1, 1.0), Error);
  EXPECT_THROW(ZipfDistribution(3, -0.5), Error);
  EXPECT_THROW(ZipfDistribution(3, INFINITY), Error);
  EXPECT_THROW(ZipfDistribution(3, std::nan("")), Error);
}

// --- the prompts -----------------------------------------------------------------------------

TEST(ZipfPromptsTest, DistinctReadableAndInRankOrder) {
  const std::vector<std::string> p = zipf_prompts({"a chest", "a sword", "a chest"}, 5);
  EXPECT_EQ(p, (std::vector<std::string>{"a chest #1", "a sword #2", "a chest #3", "a chest #4",
                                         "a sword #5"}));
  const std::vector<std::string> many = zipf_prompts({"x"}, 1000);
  EXPECT_EQ(std::set<std::string>(many.begin(), many.end()).size(), 1000u);
  EXPECT_THROW(zipf_prompts({}, 3), Error);
}

}  // namespace test_prompt_mix
}  // namespace cube3d
