// GET /v1/usage: what the caller's own API key has used on this server since it started (each
// replica counts its own; /metrics has the same counters for every key, for an operator), and
// where its limits stand now:
//
//   {"key": "studio-a",
//    "requests": {"OK": 41, "RESOURCE_EXHAUSTED": 2},     // by the code the server answered
//    "shape_tokens": 83968, "occupancy_points": 9180000, // work computed for the key
//    "mesh_bytes": 10485760, "prompt_refusals": 1,
//    "running": 1,                                        // queued or running now
//    "limits": {"requests_per_minute": 60, "shape_tokens_per_minute": 40960, ...,
//               "priority": "interactive", "per_user": {...}},  // what the keys file sets
//    "remaining": {"requests": 12.5, "shape_tokens": -2048.0, ...}}  // bucket levels now (< 0:
//                                                                    // in debt)
//
// A server without API keys answers the same for its one anonymous caller (key ""). The call
// costs nothing and takes nothing from the key's limits; an unknown key is 401.
#pragma once

#include <memory>

#include "cube3d/server/httpd/http_server.h"
#include "cube3d/server/service/service.h"

namespace cube3d::http {

inline constexpr const char* kUsagePath = "/v1/usage";

void serve_usage(Service& service, const std::shared_ptr<Exchange>& ex);

}  // namespace cube3d::http
