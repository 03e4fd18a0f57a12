// Turns a client's request (as its door read it) into a validated WorkRequest, or throws
// invalid_argument naming the offending field. Nothing a client sends gets past here unchecked.
#pragma once

#include <string>

#include "cube3d/server/service/client_request.h"
#include "cube3d/server/service/request_policy.h"
#include "cube3d/server/work/work_request.h"

namespace cube3d {

// Throws cube3d::Error (kInvalidArgument) naming the field. The prompt is checked for UTF-8 here
// (a front door may hand over bytes that protobuf's parser would refuse: grpc's
// generate_request_bytes.h, the HTTP door's JSON).
WorkRequest validate_request(const ClientRequest& request, const RequestPolicy& policy);

// A fresh request id (random hex) for requests that bring none.
std::string make_request_id();

}  // namespace cube3d
