// Provenance: what a shape was made from and with, as mesh metadata for its file (mesh_io.h
// writes it into GLB asset.extras and OBJ / PLY header comments), so that a file found later
// says which prompt, seed and settings reproduce it.
//
// The keys are a public contract (clients parse them; the README documents them). In this
// order, each written once:
//   prompt             string  the text prompt, as given
//   seed               uint64  the top-p sampling seed (written also when greedy, where it is
//                              unused)
//   top_p              double  the nucleus mass the sampler used; omitted when greedy
//   guidance_scale     double  classifier-free guidance scale (0: off)
//   resolution_base    int64   the occupancy grid has 2^resolution_base + 1 points per axis
//   bounding_box       [double, double, double]  the normalised box the model got; omitted
//                              when none
//   mesh_profile       string  "none" | "roblox" (mesh/mesh_profile.h's names)
//   target_face_count  int64   the decimation target the request asked for; omitted when unset
//                              (the target used is in the report, and in a warning when a
//                              profile clamped it)
//   pivot              string  "center" | "bottom_center" (mesh/mesh_frame.h): where the origin
//                              was moved; omitted for the model's own origin
//   lod_face_counts    [double, ...]  the further levels of detail asked for (levels 1, 2, ...);
//                              omitted when none
//   lod_level          int64   which of those levels the file holds (1, 2, ...); added by the
//                              shape pipeline to a further level's file, omitted for level 0
//   model              string  the model config's name
//   weights_digest     string  hex digest of the weights; omitted when empty
//   server_version     string  the software that made the file; omitted when empty
//   request_id         string  the server's id of the request; omitted when empty
//
// Numbers are the exact values used, written so they read back to the same double: the sampler
// and the model take top_p and the bounding box as 32-bit floats, so those are written as the
// double of that float (top_p 0.9 reads back as 0.8999999761581421), not as the decimal asked for.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/mesh/mesh_frame.h"
#include "cube3d/mesh/mesh_metadata.h"
#include "cube3d/mesh/mesh_profile.h"

namespace cube3d {

struct Provenance {
  std::string prompt;
  uint64_t seed = 0;
  std::optional<double> top_p;  // unset: greedy
  double guidance_scale = 0;
  int64_t resolution_base = 0;
  std::optional<std::array<float, 3>> bounding_box;
  MeshProfile mesh_profile = MeshProfile::kNone;
  std::optional<int64_t> target_face_count;
  std::string model;           // model config name
  std::string weights_digest;  // hex; empty: omitted
  std::string server_version;  // empty: omitted
  std::string request_id;      // empty: omitted
  MeshPivot pivot = MeshPivot::kModelOrigin;
  std::vector<int64_t> lod_face_counts;  // levels 1, 2, ...; empty: omitted
};

// The entries above, in that order. Throws invalid_argument when the prompt is not valid UTF-8
// or a number is not finite (MeshMetadata::add).
MeshMetadata provenance_metadata(const Provenance& p);

}  // namespace cube3d
