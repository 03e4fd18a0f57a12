// Precompiled header for every translation unit that touches libtorch. Only the ATen
// tensor API: <torch/torch.h> would triple the compile time and is never needed here.
#pragma once
#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>
