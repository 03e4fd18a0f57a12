// Turns a client's GenerateMeshRequest into a validated WorkRequest, or throws
// invalid_argument naming the offending field. Nothing a client sends gets past here unchecked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cube3d/scheduler/task.h"
#include "cube3d/server/service/request_policy.h"
#include "cube3d/server/work/work_request.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

// Throws cube3d::Error (kInvalidArgument) naming the field. The prompt is checked for UTF-8 here
// (a front door may hand over bytes that protobuf's parser would refuse: grpc's
// generate_request_bytes.h, the HTTP door's JSON).
WorkRequest validate_request(const v1::GenerateMeshRequest& request, const RequestPolicy& policy);

// A fresh request id (random hex) for requests that bring none.
std::string make_request_id();

MeshFormat from_proto(v1::MeshFormat format);
v1::MeshFormat to_proto(MeshFormat format);
MeshProfile from_proto(v1::MeshProfile profile);
v1::MeshProfile to_proto(MeshProfile profile);
MeshPivot from_proto(v1::Pivot pivot);
v1::Pivot to_proto(MeshPivot pivot);
CompactPositions from_proto(v1::CompactPositions positions);
v1::CompactPositions to_proto(CompactPositions positions);

}  // namespace cube3d
