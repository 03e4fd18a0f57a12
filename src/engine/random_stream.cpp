#include "cube3d/engine/random_stream.h"

#include <ATen/ATen.h>

namespace cube3d {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

float uniform_at(uint64_t seed, uint64_t counter) {
  // Two rounds: mixing the seed first keeps nearby seeds' streams unrelated.
  const uint64_t bits = splitmix64(splitmix64(seed) ^ counter);
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

at::Tensor uniform_stream(uint64_t seed, int64_t n) {
  at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
  float* data = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) data[i] = uniform_at(seed, static_cast<uint64_t>(i));
  return out;
}

}  // namespace cube3d
