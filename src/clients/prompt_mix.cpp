#include "cube3d/clients/prompt_mix.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdio>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;  // SplitMix64's state increment

Error bad_mix(std::string_view text, const std::string& why) {
  return invalid_argument("--prompt-mix: " + why + ", got '" + std::string(text) +
                          "' (expected fixed, zipf:N or zipf:N:S)");
}

}  // namespace

std::string PromptMix::spec() const {
  if (kind == Kind::kFixed) return "fixed";
  char s[64];
  std::snprintf(s, sizeof s, "%g", exponent);
  return "zipf:" + std::to_string(distinct) + ":" + s;
}

PromptMix parse_prompt_mix(std::string_view text) {
  if (text == "fixed") return {};
  constexpr std::string_view kZipf = "zipf:";
  if (!text.starts_with(kZipf)) throw bad_mix(text, "unknown mix");
  const std::string_view rest = text.substr(kZipf.size());
  const size_t colon = rest.find(':');
  const std::string_view n_text = rest.substr(0, colon);
  PromptMix mix;
  mix.kind = PromptMix::Kind::kZipf;
  // from_chars alone would take a leading '-' or stop early; every character must be a digit.
  const auto [n_end, n_error] =
      std::from_chars(n_text.data(), n_text.data() + n_text.size(), mix.distinct);
  if (n_text.empty() || n_error != std::errc() || n_end != n_text.data() + n_text.size() ||
      !std::all_of(n_text.begin(), n_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw bad_mix(text, "N must be a positive integer");
  }
  if (mix.distinct < 1 || mix.distinct > kMaxZipfPrompts) {
    throw bad_mix(text, "N must be in 1.." + std::to_string(kMaxZipfPrompts));
  }
  if (colon != std::string_view::npos) {
    const std::string_view s_text = rest.substr(colon + 1);
    const auto [s_end, s_error] =
        std::from_chars(s_text.data(), s_text.data() + s_text.size(), mix.exponent);
    if (s_text.empty() || s_error != std::errc() || s_end != s_text.data() + s_text.size() ||
        !std::isfinite(mix.exponent) || mix.exponent < 0) {
      throw bad_mix(text, "S must be a finite number >= 0");
    }
  }
  return mix;
}

double counter_uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * kGoldenGamma;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

ZipfDistribution::ZipfDistribution(uint64_t n, double s) : exponent_(s) {
  if (n < 1 || n > kMaxZipfPrompts) {
    throw invalid_argument("a Zipf law needs 1.." + std::to_string(kMaxZipfPrompts) +
                           " ranks, got " + std::to_string(n));
  }
  if (!std::isfinite(s) || s < 0) {
    throw invalid_argument("a Zipf exponent must be finite and >= 0, got " + std::to_string(s));
  }
  cdf_.resize(n);
  double total = 0;
  for (uint64_t k = 1; k <= n; ++k) {
    total += std::pow(static_cast<double>(k), -s);
    cdf_[k - 1] = total;
  }
  for (double& c : cdf_) c /= total;
  // Rounding may leave the last a hair under 1, where a u close to 1 would find no rank.
  cdf_.back() = 1.0;
}

double ZipfDistribution::probability(uint64_t k) const {
  if (k < 1 || k > cdf_.size()) return 0;
  return k == 1 ? cdf_[0] : cdf_[k - 1] - cdf_[k - 2];
}

uint64_t ZipfDistribution::rank_of(double u) const {
  // The first rank whose cumulative probability exceeds u; u < 1 = the last, so there is one
  // (the clamp only guards a u outside [0, 1)).
  const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  const auto index = static_cast<uint64_t>(std::min(it - cdf_.begin(), std::ptrdiff_t(n() - 1)));
  return index + 1;
}

std::vector<std::string> zipf_prompts(const std::vector<std::string>& base, uint64_t n) {
  if (base.empty()) throw invalid_argument("a Zipf prompt mix needs at least one base prompt");
  std::vector<std::string> out;
  out.reserve(n);
  for (uint64_t k = 1; k <= n; ++k) {
    out.push_back(base[(k - 1) % base.size()] + " #" + std::to_string(k));
  }
  return out;
}

}  // namespace cube3d
