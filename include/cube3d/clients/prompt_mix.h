// Which prompt each cube3d-loadgen request carries (--prompt-mix):
//   fixed       the prompts in turn: request i gets prompt i mod the prompt count (the default);
//   zipf:N[:S]  a skewed draw, as players repeat popular prompts: N distinct prompts, prompt k
//               (1-based) drawn with probability proportional to 1 / k^S (S defaults to 1).
// A result cache answers repeated requests from memory, so its benefit depends on how skewed
// the traffic is; a Zipf law is the usual model of popularity.
//
// The draw of request i is a pure function of (seed, i), not a stream consumed in send order:
// the open loop builds requests on many threads at once, and a run must still be reproducible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cube3d {

struct PromptMix {
  enum class Kind { kFixed, kZipf };
  Kind kind = Kind::kFixed;
  uint64_t distinct = 0;  // zipf: N
  double exponent = 1.0;  // zipf: S

  // "fixed" or "zipf:N:S" (S as %g), a form parse_prompt_mix reads back to the same mix.
  std::string spec() const;
  bool operator==(const PromptMix&) const = default;
};

// The most distinct prompts of a Zipf mix: every one of them is built before the run.
inline constexpr uint64_t kMaxZipfPrompts = 1000000;

// "fixed", "zipf:N" or "zipf:N:S" with N an integer in 1..kMaxZipfPrompts and S a finite
// number >= 0 (0: uniform). Anything else throws invalid_argument naming --prompt-mix.
PromptMix parse_prompt_mix(std::string_view text);

// The i-th output (0-based) of SplitMix64 seeded with `seed`, as a double in [0, 1) (its top 53
// bits). SplitMix64's state only advances by a constant, so output i is computed directly.
double counter_uniform(uint64_t seed, uint64_t i);

// The Zipf law over ranks 1..n with exponent s: P(k) = k^-s / sum_j j^-s.
class ZipfDistribution {
 public:
  // Throws invalid_argument for n outside 1..kMaxZipfPrompts or s negative or not finite.
  ZipfDistribution(uint64_t n, double s);

  uint64_t n() const { return cdf_.size(); }
  double exponent() const { return exponent_; }
  // P(k) for k in 1..n (0 outside).
  double probability(uint64_t k) const;
  // The rank (1..n) whose cumulative interval holds u in [0, 1): inverse-CDF sampling.
  uint64_t rank_of(double u) const;
  // Request i's rank under `seed`: rank_of(counter_uniform(seed, i)).
  uint64_t draw(uint64_t seed, uint64_t i) const { return rank_of(counter_uniform(seed, i)); }

 private:
  double exponent_;
  std::vector<double> cdf_;  // cdf_[k - 1] = P(rank <= k); the last is exactly 1
};

// The N distinct prompts of a Zipf mix made from `base` (at least one): prompt k (1-based) is
// "<base[(k - 1) mod base.size()]> #k", readable and distinct even when base has repeats.
std::vector<std::string> zipf_prompts(const std::vector<std::string>& base, uint64_t n);

}  // namespace cube3d
