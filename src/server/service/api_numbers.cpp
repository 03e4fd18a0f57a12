#include "cube3d/server/service/api_numbers.h"

#include <tuple>

#include "cube3d/core/enum_table.h"

namespace cube3d::api_numbers {
namespace {

// (ours, number) pairs: proto/cube3d/v1/mesh_service.proto's values, listed once.
constexpr EnumTable<MeshFormat, int32_t, 5> kFormats = {{{MeshFormat::kRaw, 1},
                                                         {MeshFormat::kObj, 2},
                                                         {MeshFormat::kPly, 3},
                                                         {MeshFormat::kGlb, 4},
                                                         {MeshFormat::kCompact, 5}}};
constexpr EnumTable<MeshFormat, std::string_view, 5> kFormatNames = {
    {{MeshFormat::kRaw, "MESH_FORMAT_RAW"},
     {MeshFormat::kObj, "MESH_FORMAT_OBJ"},
     {MeshFormat::kPly, "MESH_FORMAT_PLY"},
     {MeshFormat::kGlb, "MESH_FORMAT_GLB"},
     {MeshFormat::kCompact, "MESH_FORMAT_COMPACT"}}};
constexpr EnumTable<MeshProfile, int32_t, 2> kProfiles = {
    {{MeshProfile::kNone, 1}, {MeshProfile::kRoblox, 2}}};
constexpr EnumTable<MeshProfile, std::string_view, 2> kProfileNames = {
    {{MeshProfile::kNone, "MESH_PROFILE_NONE"}, {MeshProfile::kRoblox, "MESH_PROFILE_ROBLOX"}}};
constexpr EnumTable<MeshPivot, int32_t, 3> kPivots = {
    {{MeshPivot::kModelOrigin, 1}, {MeshPivot::kCenter, 2}, {MeshPivot::kBottomCenter, 3}}};
constexpr EnumTable<CompactPositions, int32_t, 2> kPositions = {
    {{CompactPositions::kFloat32, 1}, {CompactPositions::kQuantized16, 2}}};
constexpr EnumTable<TaskPriority, int32_t, 2> kPriorities = {
    {{TaskPriority::kInteractive, 1}, {TaskPriority::kBatch, 2}}};

// Every value of ours is in its table, so the fallback is never taken.
template <typename A, typename B, std::size_t N>
B must(const EnumTable<A, B, N>& table, A value) {
  return lookup(table, value).value_or(std::get<1>(table[0]));
}

}  // namespace

int32_t of(MeshFormat format) { return must(kFormats, format); }
int32_t of(MeshProfile profile) { return must(kProfiles, profile); }
int32_t of(MeshPivot pivot) { return must(kPivots, pivot); }
int32_t of(CompactPositions positions) { return must(kPositions, positions); }
int32_t of(TaskPriority priority) { return must(kPriorities, priority); }

std::optional<MeshFormat> mesh_format(int32_t number) { return reverse_lookup(kFormats, number); }
std::optional<MeshProfile> mesh_profile(int32_t number) {
  return reverse_lookup(kProfiles, number);
}
std::optional<MeshPivot> pivot(int32_t number) { return reverse_lookup(kPivots, number); }
std::optional<CompactPositions> compact_positions(int32_t number) {
  return reverse_lookup(kPositions, number);
}
std::optional<TaskPriority> priority(int32_t number) { return reverse_lookup(kPriorities, number); }

std::string_view name(MeshFormat format) { return must(kFormatNames, format); }
std::string_view name(MeshProfile profile) { return must(kProfileNames, profile); }

}  // namespace cube3d::api_numbers
