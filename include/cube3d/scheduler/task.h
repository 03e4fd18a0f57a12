// One client request as the scheduler sees it: the validated parameters, its deadline and
// cancellation flag, and the callbacks that report progress and deliver exactly one outcome.
// Free of gRPC and libtorch so that the scheduler builds and tests fast with a fake executor.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/core/clock.h"
#include "cube3d/core/compact_mesh.h"
#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/core/mesh_format.h"
#include "cube3d/core/mesh_frame.h"
#include "cube3d/core/mesh_profile.h"

namespace cube3d {

// Interactive work (a player waiting in a game) is admitted before batch work (a studio's
// overnight catalog); batch work that has waited SchedulerConfig::batch_max_wait_ms is admitted
// as if it were interactive, so that it cannot starve.
enum class TaskPriority { kInteractive, kBatch };
const char* to_string(TaskPriority priority);

// Already validated by the server: in range, finite, UTF-8.
struct TaskRequest {
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
  // The mesh's arrays (TaskResult::vertices, indices) whatever the format (level 0).
  bool return_raw_mesh = false;
  MeshProfile mesh_profile = MeshProfile::kNone;  // its limits apply in the mesh stage
  bool bypass_cache = false;                      // the server's result cache is not used
  CompactMeshOptions compact;                     // with kCompact
  MeshPivot pivot = MeshPivot::kModelOrigin;
  // Levels of detail after the first (target_face_count's): levels 1, 2, ..., each target below
  // the one before; empty: one level.
  std::vector<int64_t> lod_face_counts;
};

enum class TaskStage { kQueued, kTextEncoding, kDecoding, kMeshing, kDone };

struct TaskProgress {
  TaskStage stage = TaskStage::kQueued;
  int64_t tokens_done = 0;
  int64_t tokens_total = 0;
  // kMeshing: occupancy points evaluated / planned so far, refinement levels done / in all.
  int64_t points_done = 0;
  int64_t points_planned = 0;
  int64_t levels_done = 0;
  int64_t levels_total = 0;
};

struct TaskTimings {
  double queue_ms = 0, text_encoding_ms = 0, prefill_ms = 0, decode_ms = 0, tpot_ms = 0,
         mesh_ms = 0, occupancy_ms = 0, total_ms = 0;
};

// A mesh's axis-aligned box, in model units after the pivot (all zero without vertices).
struct TaskMeshBounds {
  std::array<float, 3> min{0, 0, 0};
  std::array<float, 3> max{0, 0, 0};
  bool operator==(const TaskMeshBounds&) const = default;
};

// A further level of detail (TaskRequest::lod_face_counts), in the request's format.
struct TaskLevel {
  int64_t target_face_count = 0;  // after the profile's cap
  std::vector<float> vertices;    // kRaw
  std::vector<uint32_t> indices;  // kRaw
  std::string encoded;            // the other formats
  int64_t vertex_count = 0;
  int64_t face_count = 0;
  TaskMeshBounds bounds;
};

struct TaskResult {
  std::string request_id;
  MeshFormat format = MeshFormat::kGlb;
  // xyz, world coordinates after the pivot (kRaw, or TaskRequest::return_raw_mesh)
  std::vector<float> vertices;
  std::vector<uint32_t> indices;  // three per triangle (as vertices)
  std::string encoded;            // OBJ / PLY / GLB / compact bytes
  int64_t vertex_count = 0;
  int64_t face_count = 0;
  TaskMeshBounds bounds;              // of this mesh (level 0)
  std::vector<TaskLevel> lods;        // levels 1, 2, ...
  int64_t occupancy_points = 0;       // occupancy queries evaluated for the mesh
  std::vector<int64_t> shape_tokens;  // when asked for
  int64_t batch_bucket = 0;
  std::vector<std::string> warnings;
  TaskTimings timings;
};

class Task {
 public:
  using ProgressFn = std::function<void(const TaskProgress&)>;
  using DoneFn = std::function<void(const TaskResult*, const Error*)>;

  Task(TaskRequest request, SteadyClock::time_point deadline, ProgressFn on_progress,
       DoneFn on_done)
      : request_(std::move(request)),
        enqueued_(SteadyClock::now()),
        deadline_(deadline.time_since_epoch().count()),
        on_progress_(std::move(on_progress)),
        on_done_(std::move(on_done)) {}

  const TaskRequest& request() const { return request_; }
  SteadyClock::time_point enqueued() const { return enqueued_; }
  SteadyClock::time_point deadline() const {
    return SteadyClock::time_point(SteadyClock::duration(deadline_.load()));
  }
  bool expired(SteadyClock::time_point now = SteadyClock::now()) const { return now >= deadline(); }
  // A task shared by several callers (identical requests coalesced) lives as long as the
  // latest of their deadlines: a caller that joins later with more time moves it out.
  void extend_deadline(SteadyClock::time_point deadline) {
    const SteadyClock::rep wanted = deadline.time_since_epoch().count();
    SteadyClock::rep now = deadline_.load();
    while (now < wanted && !deadline_.compare_exchange_weak(now, wanted)) {
    }
  }

  // The client went away (or the server is shutting down): its work is dropped.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  bool finished() const { return finished_.load(); }

  void progress(const TaskProgress& p) const {
    if (on_progress_ && !finished_.load()) on_progress_(p);
  }
  // Exactly one of these delivers the outcome; later calls are ignored (so a task that is both
  // cancelled and completed by a racing path reports once).
  void succeed(const TaskResult& result) { deliver(&result, nullptr); }
  void fail(const Error& error) { deliver(nullptr, &error); }

 private:
  void deliver(const TaskResult* result, const Error* error) {
    bool expected = false;
    if (!finished_.compare_exchange_strong(expected, true)) return;
    if (on_done_) on_done_(result, error);
  }

  TaskRequest request_;
  SteadyClock::time_point enqueued_;
  std::atomic<SteadyClock::rep> deadline_;
  ProgressFn on_progress_;
  DoneFn on_done_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finished_{false};
};

}  // namespace cube3d
