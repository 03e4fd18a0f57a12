// The request the service and the executor share: torch-free, gRPC-free, the one shape a request
// has between the service's validation and the executor (docs/architecture.md, the walk of one
// request). The doors never see it: they speak the API's messages to the service.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/mesh/compact_mesh.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/mesh/mesh_frame.h"
#include "cube3d/mesh/mesh_profile.h"
#include "cube3d/scheduler/task.h"

namespace cube3d {

// One request as the service validated it (in range, finite, UTF-8): what the executor makes a
// shape of. Its scheduling fields (request_id, client, end_user, priority) also make the
// scheduler's TaskTicket (ticket_of); the rest travels as the Task's payload, which only the
// executor reads.
struct WorkRequest {
  std::string request_id;
  // Who asked (the API key's name; empty without API keys): the scheduler takes waiting tasks
  // from each client in turn, so one client's flood delays the others by at most its share.
  std::string client;
  // The end user the client asks for (a player behind a game server's key), as a pseudonym
  // (never the id the client sent); empty for none. Within a client the scheduler takes
  // waiting tasks from each end user in turn, as it does across clients.
  std::string end_user;
  TaskPriority priority = TaskPriority::kInteractive;
  std::string prompt;
  double guidance_scale = kDefaultGuidanceScale;
  std::optional<double> top_p;  // unset: greedy
  uint64_t seed = 0;
  std::optional<std::array<float, 3>> bounding_box;  // normalised (longest side 1.925)
  int64_t resolution_base = kDefaultResolutionBase;
  MeshFormat format = MeshFormat::kGlb;
  std::optional<int64_t> target_face_count;  // unset: the configured default
  bool return_shape_tokens = false;
  // The mesh's arrays (WorkResult::vertices, indices) whatever the format (level 0).
  bool return_raw_mesh = false;
  MeshProfile mesh_profile = MeshProfile::kNone;  // its limits apply in the mesh stage
  bool bypass_cache = false;                      // the server's result cache is not used
  CompactMeshOptions compact;                     // with kCompact
  MeshPivot pivot = MeshPivot::kModelOrigin;
  // Levels of detail after the first (target_face_count's): levels 1, 2, ..., each target below
  // the one before; empty: one level.
  std::vector<int64_t> lod_face_counts;
};

// What the scheduler schedules `request` by.
TaskTicket ticket_of(const WorkRequest& request);

}  // namespace cube3d
