#include "cube3d/engine/decode_kernels.h"

#include <string_view>

#include "cube3d/core/enum_table.h"

namespace cube3d {
namespace {

constexpr EnumTable<DecodeKernels, std::string_view, 2> kDecodeKernelNames = {
    {{DecodeKernels::kTorch, "torch"}, {DecodeKernels::kTriton, "triton"}}};

}  // namespace

DecodeKernels parse_decode_kernels(const std::string& text, const std::string& field) {
  return parse_enum(kDecodeKernelNames, text, field);
}

std::string to_string(DecodeKernels kernels) {
  return std::string(lookup(kDecodeKernelNames, kernels).value_or("?"));
}

}  // namespace cube3d
