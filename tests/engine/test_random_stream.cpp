// The per-request random stream: a pure function of (seed, counter), so sampling never depends
// on batch composition. Checked against an independent splitmix64, for range, for independence
// across seeds and counters, and for rough uniformity.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "cube3d/engine/random_stream.h"

namespace cube3d {
namespace test_random_stream {

// Written out again from the published splitmix64 constants, so a change to the library's
// mixing (which would silently change every sampled mesh for a given seed) fails here.
uint64_t reference_splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float reference_uniform(uint64_t seed, uint64_t counter) {
  const uint64_t bits = reference_splitmix64(reference_splitmix64(seed) ^ counter);
  return static_cast<float>(bits >> 40) / 16777216.0f;
}

TEST(RandomStream, MatchesIndependentSplitmixReference) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xDEADBEEFull, ~0ull}) {
    for (uint64_t counter : {0ull, 1ull, 7ull, 1000ull, ~0ull}) {
      EXPECT_EQ(uniform_at(seed, counter), reference_uniform(seed, counter))
          << "seed " << seed << " counter " << counter;
    }
  }
}

TEST(RandomStream, IsDeterministicAcrossCalls) {
  // A pure function: the same (seed, counter) gives the same float however often it is asked
  // and whatever was drawn in between.
  const float first = uniform_at(123, 45);
  for (int i = 0; i < 100; ++i) (void)uniform_at(static_cast<uint64_t>(i), 45);
  EXPECT_EQ(uniform_at(123, 45), first);
  EXPECT_TRUE(at::equal(uniform_stream(123, 64), uniform_stream(123, 64)));
}

TEST(RandomStream, ValuesLieInHalfOpenUnitIntervalOn24BitGrid) {
  for (uint64_t seed : {0ull, 3ull, ~0ull}) {
    for (uint64_t counter = 0; counter < 5000; ++counter) {
      const float u = uniform_at(seed, counter);
      ASSERT_GE(u, 0.0f);
      ASSERT_LT(u, 1.0f);
      // 24 random bits: u * 2^24 is an integer, so the value is exact in float32.
      const float scaled = u * 16777216.0f;
      ASSERT_EQ(scaled, std::floor(scaled)) << "seed " << seed << " counter " << counter;
    }
  }
}

TEST(RandomStream, DiffersAcrossSeeds) {
  // Neighbouring seeds must give unrelated streams: almost no position may coincide.
  int equal = 0;
  for (uint64_t counter = 0; counter < 1000; ++counter) {
    equal += uniform_at(1, counter) == uniform_at(2, counter) ? 1 : 0;
  }
  EXPECT_LE(equal, 2);
  EXPECT_NE(uniform_at(0, 0), uniform_at(1, 0));
}

TEST(RandomStream, DiffersAcrossCounters) {
  std::set<float> values;
  for (uint64_t counter = 0; counter < 1000; ++counter) values.insert(uniform_at(7, counter));
  // 1000 draws from 2^24 values: a collision or two is possible, many are not.
  EXPECT_GE(values.size(), 995u);
}

TEST(RandomStream, StreamEqualsPointwiseDraws) {
  const int64_t n = 257;
  const at::Tensor stream = uniform_stream(99, n);
  ASSERT_EQ(stream.dim(), 1);
  ASSERT_EQ(stream.size(0), n);
  EXPECT_EQ(stream.scalar_type(), at::kFloat);
  EXPECT_TRUE(stream.device().is_cpu());
  const float* data = stream.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(data[i], uniform_at(99, static_cast<uint64_t>(i))) << "index " << i;
  }
  // A longer stream extends a shorter one: draws never depend on how many are asked for.
  EXPECT_TRUE(at::equal(uniform_stream(99, 10), stream.narrow(0, 0, 10)));
  EXPECT_EQ(uniform_stream(99, 0).numel(), 0);
}

TEST(RandomStream, IsRoughlyUniform) {
  const at::Tensor u = uniform_stream(2024, 10000).to(at::kDouble);
  const double mean = u.mean().item<double>();
  EXPECT_NEAR(mean, 0.5, 0.02);
  // Variance of U(0, 1) is 1/12; each quarter of [0, 1) gets about a quarter of the draws.
  EXPECT_NEAR(u.var().item<double>(), 1.0 / 12.0, 0.01);
  for (int q = 0; q < 4; ++q) {
    const int64_t count = u.ge(q * 0.25).logical_and(u.lt((q + 1) * 0.25)).sum().item<int64_t>();
    EXPECT_NEAR(static_cast<double>(count), 2500.0, 200.0) << "quarter " << q;
  }
}

TEST(RandomStream, NeighbouringSeedsAreUncorrelated) {
  const at::Tensor a = uniform_stream(5, 10000).to(at::kDouble);
  const at::Tensor b = uniform_stream(6, 10000).to(at::kDouble);
  const double cov = ((a - a.mean()) * (b - b.mean())).mean().item<double>();
  const double corr = cov / (a.std().item<double>() * b.std().item<double>());
  EXPECT_LT(std::abs(corr), 0.05);
}

}  // namespace test_random_stream
}  // namespace cube3d
