#include "cube3d/mesh/mesh_format.h"

#include "cube3d/core/enum_table.h"

namespace cube3d {
namespace {

constexpr EnumTable<MeshFormat, std::string_view, 5> kMeshFormatNames = {{
    {MeshFormat::kRaw, "raw"},
    {MeshFormat::kObj, "obj"},
    {MeshFormat::kPly, "ply"},
    {MeshFormat::kGlb, "glb"},
    {MeshFormat::kCompact, "compact"},
}};

}  // namespace

std::string_view to_string(MeshFormat format) {
  return lookup(kMeshFormatNames, format).value_or("unknown");
}

std::optional<MeshFormat> mesh_format_from_name(std::string_view name) {
  return reverse_lookup(kMeshFormatNames, name);
}

}  // namespace cube3d
