// The API's GenerateMeshRequest message as the service's ClientRequest: what the gRPC door reads
// off the wire, the HTTP door out of its JSON, a job out of its stored message and the Open
// Inference Protocol's plan out of its tensors. Nothing is checked here (the service validates
// the ClientRequest, naming the field); nothing is lost either: an unset optional stays unset
// and an enum keeps its number, known or not.
#pragma once

#include "cube3d/server/service/client_request.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

ClientRequest client_request_of(const v1::GenerateMeshRequest& message);

}  // namespace cube3d
