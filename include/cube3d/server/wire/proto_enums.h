// Our values as the API's messages' enums, both ways: the doors' side of service/api_numbers.h.
// The numbers are listed once, there; proto_enums.cpp checks at compile time that each is the
// message's own.
#pragma once

#include "cube3d/mesh/compact_mesh.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/mesh/mesh_frame.h"
#include "cube3d/mesh/mesh_profile.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

v1::MeshFormat to_proto(MeshFormat format);
v1::MeshProfile to_proto(MeshProfile profile);
v1::Pivot to_proto(MeshPivot pivot);
v1::CompactPositions to_proto(CompactPositions positions);

// Throws invalid_argument naming the field for UNSPECIFIED and for numbers the API does not
// define (a message read from the wire may hold any number).
MeshFormat from_proto(v1::MeshFormat format);

}  // namespace cube3d
