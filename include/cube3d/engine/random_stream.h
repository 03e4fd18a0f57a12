// Per-request random numbers for top-p sampling: a counter-based stream (splitmix64 of the
// seed and the token index), so a request's draws depend only on its own seed and never on
// which other requests share its batch or on how many draws they made.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace cube3d {

// Uniform in [0, 1): 24 random bits, so the value is exact in float32 and never rounds to 1.
float uniform_at(uint64_t seed, uint64_t counter);

// The first n draws of a request's stream: [n] float32 (CPU).
at::Tensor uniform_stream(uint64_t seed, int64_t n);

}  // namespace cube3d
