#include "cube3d/core/mesh_format.h"

#include <array>
#include <utility>

namespace cube3d {
namespace {

constexpr std::array<std::pair<std::string_view, MeshFormat>, 4> kNames = {{
    {"raw", MeshFormat::kRaw},
    {"obj", MeshFormat::kObj},
    {"ply", MeshFormat::kPly},
    {"glb", MeshFormat::kGlb},
}};

}  // namespace

std::string_view to_string(MeshFormat format) {
  for (const auto& [name, value] : kNames) {
    if (value == format) return name;
  }
  return "unknown";
}

std::optional<MeshFormat> mesh_format_from_name(std::string_view name) {
  for (const auto& [text, value] : kNames) {
    if (text == name) return value;
  }
  return std::nullopt;
}

}  // namespace cube3d
