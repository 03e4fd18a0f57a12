// Turns a client's GenerateMeshRequest into a validated JobRequest, or throws
// invalid_argument naming the offending field. Nothing a client sends gets past here unchecked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cube3d/scheduler/job.h"
#include "cube3d/server/core/request_policy.h"
#include "cube3d/v1/mesh_service.pb.h"
#include "cube3d/v1/wire/request_wire.pb.h"

namespace cube3d {

// Throws cube3d::Error (kInvalidArgument) naming the field. The server reads requests as their
// wire twin (prompt as bytes: invalid UTF-8 reaches this check); the client's message is
// converted to it.
JobRequest validate_request(const v1::wire::GenerateMeshRequest& request,
                            const RequestPolicy& policy);
JobRequest validate_request(const v1::GenerateMeshRequest& request, const RequestPolicy& policy);

// A fresh request id (random hex) for requests that bring none.
std::string make_request_id();

MeshFormat from_proto(v1::MeshFormat format);
v1::MeshFormat to_proto(MeshFormat format);
MeshProfile from_proto(v1::MeshProfile profile);
v1::MeshProfile to_proto(MeshProfile profile);

}  // namespace cube3d
