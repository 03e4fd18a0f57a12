// Our values as the API numbers and names them (proto/cube3d/v1/mesh_service.proto's enums),
// both ways, without the API's messages: what a ClientRequest carries, what validation reads and
// names in its messages, and what the doors' codecs turn into the messages' enums
// (wire/proto_enums.h checks at compile time that every number here is the message's).
// 0, UNSPECIFIED, is never one of ours: each field says what it stands for.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "cube3d/mesh/compact_mesh.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/mesh/mesh_frame.h"
#include "cube3d/mesh/mesh_profile.h"
#include "cube3d/scheduler/task.h"

namespace cube3d::api_numbers {

// The API's number of a value (never 0).
int32_t of(MeshFormat format);
int32_t of(MeshProfile profile);
int32_t of(MeshPivot pivot);
int32_t of(CompactPositions positions);
int32_t of(TaskPriority priority);

// The value an API number stands for; nullopt for 0 and for numbers the API does not define.
std::optional<MeshFormat> mesh_format(int32_t number);
std::optional<MeshProfile> mesh_profile(int32_t number);
std::optional<MeshPivot> pivot(int32_t number);
std::optional<CompactPositions> compact_positions(int32_t number);
std::optional<TaskPriority> priority(int32_t number);

// The API's name of a value, as its messages and JSON spell it: "MESH_FORMAT_GLB".
std::string_view name(MeshFormat format);
std::string_view name(MeshProfile profile);

}  // namespace cube3d::api_numbers
