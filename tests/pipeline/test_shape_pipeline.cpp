// The shape pipeline on the golden models (the official weights' occupancy fields) and the demo
// model: the dense field is the official one, the coarse-to-fine field gives the dense mesh where
// it matters with far fewer queries, progress and stopping work, and the stages report.
#include "cube3d/pipeline/shape_pipeline.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/grid.h"
#include "cube3d/mesh/marching_cubes.h"
#include "expect_error.h"
#include "golden_model.h"

namespace cube3d {
namespace test_shape_pipeline {

std::unique_ptr<Engine> golden_engine(const std::string& name) {
  const std::string dir = testing::golden_dir(name);
  EngineOptions options;
  options.gpt_weights = dir + "/shape_gpt.safetensors";
  options.shape_weights = dir + "/shape_tokenizer.safetensors";
  options.load_text_encoder = false;
  options.cuda_graphs = GraphMode::kOff;
  return Engine::load(load_model_config(dir + "/model.yaml"), options);
}

OccupancyOptions occupancy(bool hierarchical, int64_t chunk_points = 0) {
  OccupancyOptions o;
  o.sampling.hierarchical = hierarchical;
  o.chunk_points = chunk_points;
  return o;
}

at::Tensor golden_latents(const std::string& name) {
  return testing::read_all(testing::golden_dir(name) + "/expected.safetensors").at("latents");
}

// The share of `a`'s vertices that lie within `radius` of some vertex of `b` (a hash grid of
// cell `radius`, so the search is exact and fast).
double share_within(const Mesh& a, const Mesh& b, double radius) {
  if (a.vertex_count() == 0) return b.vertex_count() == 0 ? 1.0 : 0.0;
  const auto key = [&](int64_t x, int64_t y, int64_t z) {
    return (x * 73856093) ^ (y * 19349663) ^ (z * 83492791);
  };
  std::unordered_multimap<int64_t, size_t> cells;
  const auto cell = [&](float v) { return static_cast<int64_t>(std::floor(v / radius)); };
  for (size_t i = 0; i < b.vertex_count(); ++i) {
    cells.emplace(
        key(cell(b.vertices[3 * i]), cell(b.vertices[3 * i + 1]), cell(b.vertices[3 * i + 2])), i);
  }
  size_t close = 0;
  for (size_t i = 0; i < a.vertex_count(); ++i) {
    const float* p = &a.vertices[3 * i];
    bool found = false;
    for (int dx = -1; dx <= 1 && !found; ++dx) {
      for (int dy = -1; dy <= 1 && !found; ++dy) {
        for (int dz = -1; dz <= 1 && !found; ++dz) {
          const auto range =
              cells.equal_range(key(cell(p[0]) + dx, cell(p[1]) + dy, cell(p[2]) + dz));
          for (auto it = range.first; it != range.second && !found; ++it) {
            const float* q = &b.vertices[3 * it->second];
            const double d2 = (p[0] - q[0]) * (p[0] - q[0]) + (p[1] - q[1]) * (p[1] - q[1]) +
                              (p[2] - q[2]) * (p[2] - q[2]);
            found = d2 <= radius * radius;
          }
        }
      }
    }
    close += found ? 1 : 0;
  }
  return static_cast<double>(close) / static_cast<double>(a.vertex_count());
}

class GoldenShapes : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenShapes, DenseFieldIsTheOfficialGridAndTheDecodersOwn) {
  const auto engine = golden_engine(GetParam());
  const at::Tensor latents = golden_latents(GetParam());
  const OccupancyField field = evaluate_occupancy(*engine, latents, 4, occupancy(false, 1000));
  const at::Tensor values = at::from_blob(const_cast<float*>(field.values.data()), {17, 17, 17});
  const at::Tensor official =
      testing::read_all(testing::golden_dir(GetParam()) + "/expected.safetensors")
          .at("grid_logits_res4");
  EXPECT_LT(testing::max_abs_diff(values, official), 1e-4);
  // The same chunks as the model's own dense grid: the same numbers, bit for bit.
  EXPECT_TRUE(at::equal(values, engine->occupancy_grid(latents, 4, 1000)));
  EXPECT_EQ(field.report.points_evaluated, 17 * 17 * 17);
  EXPECT_EQ(field.report.dense_points, 17 * 17 * 17);
}

TEST_P(GoldenShapes, CoarseToFineGivesTheDenseMeshWithFewerQueries) {
  const auto engine = golden_engine(GetParam());
  const at::Tensor latents = golden_latents(GetParam());
  // r 7 on one model only: a dense 129^3 grid is seconds of CPU.
  const std::vector<int64_t> resolutions =
      GetParam() == "tiny_v01" ? std::vector<int64_t>{6, 7} : std::vector<int64_t>{6};
  for (const int64_t r : resolutions) {
    const OccupancyField dense = evaluate_occupancy(*engine, latents, r, occupancy(false));
    const OccupancyField fine = evaluate_occupancy(*engine, latents, r, occupancy(true));
    const int64_t n = grid_points_per_axis(r);
    const GridView dense_view{dense.values, {n, n, n}};
    const GridView fine_view{fine.values, {n, n, n}};
    if (!has_level_crossing(dense_view, 0.0f)) {
      // A field on one side of the level everywhere: no surface either way, and the refinement
      // stops after its coarsest level.
      EXPECT_FALSE(has_level_crossing(fine_view, 0.0f)) << GetParam() << " r " << r;
      EXPECT_EQ(fine.report.points_evaluated, 33 * 33 * 33) << GetParam() << " r " << r;
      continue;
    }
    const Mesh a = marching_cubes(dense_view);
    const Mesh b = marching_cubes(fine_view);
    const double voxel = 1.0;  // index units
    const double ab = share_within(a, b, voxel), ba = share_within(b, a, voxel);
    RecordProperty(GetParam() + "_r" + std::to_string(r) + "_points",
                   std::to_string(fine.report.points_evaluated) + "/" +
                       std::to_string(dense.report.points_evaluated));
    EXPECT_GE(ab, 0.99) << GetParam() << " r " << r;
    EXPECT_GE(ba, 0.99) << GetParam() << " r " << r;
    EXPECT_LT(fine.report.points_evaluated, dense.report.points_evaluated) << GetParam();
    EXPECT_EQ(fine.report.dense_points, dense.report.points_evaluated);
    // The filled points keep the dense side of the level almost everywhere (a feature thinner
    // than a coarse cell may flip a few).
    size_t same_side = 0;
    for (size_t i = 0; i < dense.values.size(); ++i) {
      same_side += (dense.values[i] > 0) == (fine.values[i] > 0) ? 1 : 0;
    }
    EXPECT_GE(static_cast<double>(same_side) / static_cast<double>(dense.values.size()), 0.999)
        << GetParam() << " r " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenShapes, ::testing::Values("tiny_v01", "tiny_v05"));

// --- the demo model: progress, stopping, the stages ---------------------------------------------

PromptRequest text(const std::string& prompt) {
  PromptRequest request;
  request.prompt = prompt;
  return request;
}

class DemoPipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions options;
    options.load_text_encoder = true;
    options.max_batch = 2;
    options.cuda_graphs = GraphMode::kOff;
    engine_ = Engine::load(load_model_config(testing::source_dir() + "/models/demo.yaml"), options);
  }
  static void TearDownTestSuite() { engine_.reset(); }
  static at::Tensor tokens(const std::string& prompt) {
    ShapePipeline pipeline(*engine_, {});
    GenerationOptions options;
    return pipeline.generate_tokens({text(prompt)}, options).generation.ids;
  }
  static inline std::unique_ptr<Engine> engine_;
};

TEST_F(DemoPipeline, ProgressIsMonotoneAndEndsAtThePointsEvaluated) {
  const at::Tensor ids = tokens("a wooden chair");
  for (const bool hierarchical : {false, true}) {
    ShapeOptions options;
    options.occupancy = occupancy(hierarchical, 2000);
    const ShapePipeline pipeline(*engine_, options);
    std::vector<OccupancyProgress> seen;
    ShapeRequest request;
    request.resolution_base = 6;
    const Shape shape =
        pipeline.make_shape(ids, request, [&](const OccupancyProgress& p) { seen.push_back(p); });
    ASSERT_GE(seen.size(), 3u) << hierarchical;
    for (size_t i = 1; i < seen.size(); ++i) {
      EXPECT_GE(seen[i].points_done, seen[i - 1].points_done);
      EXPECT_GE(seen[i].points_planned, seen[i - 1].points_planned);
      EXPECT_GE(seen[i].levels_done, seen[i - 1].levels_done);
    }
    for (const OccupancyProgress& p : seen) {
      EXPECT_LE(p.points_done, p.points_planned);
      EXPECT_LE(p.levels_done, p.levels_total);
    }
    EXPECT_EQ(seen.back().points_done, shape.report.occupancy.points_evaluated);
    EXPECT_EQ(seen.back().levels_done, seen.back().levels_total);
    EXPECT_EQ(seen.back().levels_total, hierarchical ? 6 - 5 + 1 : 1);
    // Chunks of 2000 points: one report per chunk at least.
    EXPECT_GE(static_cast<int64_t>(seen.size()), shape.report.occupancy.points_evaluated / 2000);
  }
}

TEST_F(DemoPipeline, StopsBetweenChunksAsCancelled) {
  const at::Tensor ids = tokens("a lamp");
  ShapeOptions options;
  options.occupancy = occupancy(false, 1000);
  const ShapePipeline pipeline(*engine_, options);
  int64_t chunks = 0;
  bool stop = false;
  ShapeRequest request;
  request.resolution_base = 5;
  try {
    (void)pipeline.make_shape(
        ids, request,
        [&](const OccupancyProgress&) {
          if (++chunks == 3) stop = true;
        },
        [&] { return stop; });
    FAIL() << "not stopped";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled) << e.what();
  }
  EXPECT_EQ(chunks, 3);  // nothing ran after the stop was asked for
}

TEST_F(DemoPipeline, MakesEveryFormatAndReportsTheStages) {
  const at::Tensor ids = tokens("a red car");
  const ShapePipeline pipeline(*engine_, {});
  ShapeRequest request;
  request.resolution_base = 6;
  request.format = MeshFormat::kRaw;
  const Shape raw = pipeline.make_shape(ids, request, {}, {}, /*keep_field=*/true);
  ASSERT_TRUE(raw.report.has_surface);
  EXPECT_GT(raw.mesh.face_count(), 0u);
  EXPECT_TRUE(raw.encoded.empty());
  EXPECT_EQ(raw.field.size(), 65u * 65u * 65u);
  EXPECT_GT(raw.report.occupancy_ms, 0);
  EXPECT_GE(raw.report.total_ms, raw.report.latents_ms + raw.report.occupancy_ms);
  EXPECT_EQ(raw.report.mesh.marching_cubes_faces >= raw.mesh.face_count(), true);
  request.format = MeshFormat::kGlb;
  const Shape glb = pipeline.make_shape(ids, request);
  EXPECT_EQ(glb.encoded.substr(0, 4), "glTF");
  EXPECT_TRUE(glb.field.empty());
  // Equal tokens, equal file: a shape's numbers never depend on anything else.
  EXPECT_EQ(pipeline.make_shape(ids, request).encoded, glb.encoded);
  request.target_faces = glb.mesh.face_count() / 4;
  const Shape small = pipeline.make_shape(ids, request);
  EXPECT_LT(small.mesh.face_count(), glb.mesh.face_count() / 2);
  EXPECT_LT(small.encoded.size(), glb.encoded.size());
}

TEST_F(DemoPipeline, TruncatedPromptsWarnAndAMissingEncoderIsAPrecondition) {
  ShapePipeline pipeline(*engine_, {});
  std::string many;
  for (int i = 0; i < 100; ++i) many += "chair ";
  const TokenBatch batch =
      pipeline.generate_tokens({text("a chair"), text(many)}, GenerationOptions{});
  ASSERT_EQ(batch.warnings.size(), 2u);
  EXPECT_TRUE(batch.warnings[0].empty());
  ASSERT_EQ(batch.warnings[1].size(), 1u);
  EXPECT_NE(batch.warnings[1][0].find("only the first 75 are used"), std::string::npos);
  EXPECT_EQ(batch.generation.ids.size(0), 2);

  EngineOptions options;
  options.load_text_encoder = false;
  const auto bare =
      Engine::load(load_model_config(testing::source_dir() + "/models/demo.yaml"), options);
  ShapePipeline no_text(*bare, {});
  try {
    (void)no_text.generate_tokens({text("a chair")}, GenerationOptions{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  }
}

// --- limits (a mesh profile's) and metadata: r 4 keeps each shape a fraction of a second ------

// Base 4, the resolution of this section.
ShapeRequest quick_request() {
  ShapeRequest request;
  request.resolution_base = 4;
  return request;
}

nlohmann::json glb_json(const std::string& bytes) {
  uint32_t length = 0;
  std::memcpy(&length, bytes.data() + 12, sizeof(length));
  return nlohmann::json::parse(bytes.substr(20, length));
}

std::string glb_bin(const std::string& bytes) {
  uint32_t length = 0;
  std::memcpy(&length, bytes.data() + 12, sizeof(length));
  return bytes.substr(20 + length);
}

MeshLimits max_faces(int64_t faces) {
  MeshLimits limits;
  limits.max_faces = faces;
  return limits;
}

TEST_F(DemoPipeline, AFaceLimitClampsTheTargetAndSaysSo) {
  const at::Tensor ids = tokens("a red car");
  const ShapePipeline pipeline(*engine_, {});
  ShapeRequest request = quick_request();
  const Shape plain = pipeline.make_shape(ids, request);
  // Under the default target (10000): not decimated without a limit.
  ASSERT_GT(plain.mesh.face_count(), 1000u);
  ASSERT_TRUE(plain.warnings.empty());

  // Limits that change nothing change no byte.
  request.limits = mesh_limits(MeshProfile::kRoblox);
  const Shape roblox = pipeline.make_shape(ids, request);
  EXPECT_EQ(roblox.encoded, plain.encoded);
  EXPECT_TRUE(roblox.warnings.empty());
  EXPECT_FALSE(roblox.report.mesh.capped);

  // The default target is over the limit: decimated to the limit.
  request.limits = max_faces(500);
  const Shape capped = pipeline.make_shape(ids, request);
  EXPECT_LE(capped.mesh.face_count(), 500u);
  EXPECT_GE(capped.mesh.face_count(), 450u);
  EXPECT_EQ(capped.report.mesh.simplification.target_faces, 500u);  // the target used
  EXPECT_EQ(capped.report.mesh.uncapped_target_faces, 10000u);
  ASSERT_FALSE(capped.warnings.empty());
  EXPECT_EQ(capped.warnings[0],
            "decimated to 500 faces (the mesh limits allow at most 500 triangles) instead of "
            "the default target 10000");
  // A second warning only if meshopt_simplify stopped over the limit and the sloppy pass ran.
  EXPECT_EQ(capped.warnings.size(), capped.report.mesh.faces_before_sloppy_pass > 0 ? 2u : 1u);

  // An explicit target over the limit is clamped to it: the same mesh.
  request.target_faces = 800;
  const Shape clamped = pipeline.make_shape(ids, request);
  ASSERT_FALSE(clamped.warnings.empty());
  EXPECT_EQ(clamped.warnings[0],
            "target_face_count 800 clamped to 500 (the mesh limits allow at most 500 triangles)");
  EXPECT_EQ(clamped.report.mesh.simplification.target_faces, 500u);
  EXPECT_EQ(clamped.encoded, capped.encoded);

  // Under the limit: as asked, no warning.
  request.target_faces = 300;
  const Shape under = pipeline.make_shape(ids, request);
  EXPECT_TRUE(under.warnings.empty());
  EXPECT_FALSE(under.report.mesh.capped);
  EXPECT_EQ(under.report.mesh.simplification.target_faces, 300u);
  EXPECT_LE(under.mesh.face_count(), 300u * 105 / 100);

  // A limit the mesh is already under: no decimation it did not have, no warning.
  request.target_faces.reset();
  request.limits = max_faces(static_cast<int64_t>(plain.mesh.face_count()));
  const Shape at_limit = pipeline.make_shape(ids, request);
  EXPECT_EQ(at_limit.encoded, plain.encoded);
  EXPECT_TRUE(at_limit.warnings.empty());

  // A target over the profile's limit is said to be clamped even when this mesh is smaller than
  // both (the same request on a larger shape would be), and the bytes do not change.
  request.limits = mesh_limits(MeshProfile::kRoblox);
  request.target_faces = 30000;
  const Shape asked_too_much = pipeline.make_shape(ids, request);
  EXPECT_EQ(asked_too_much.encoded, plain.encoded);
  ASSERT_EQ(asked_too_much.warnings.size(), 1u);
  EXPECT_EQ(asked_too_much.warnings[0],
            "target_face_count 30000 clamped to 20000 (mesh_profile roblox allows at most 20000 "
            "triangles)");
}

TEST_F(DemoPipeline, AFaceLimitDecimatesEvenWithSimplificationOff) {
  const at::Tensor ids = tokens("a red car");
  ShapeOptions options;
  options.mesh.postprocess = false;
  const ShapePipeline pipeline(*engine_, options);
  ShapeRequest request = quick_request();
  request.format = MeshFormat::kRaw;
  const Shape raw = pipeline.make_shape(ids, request);
  EXPECT_EQ(raw.mesh.face_count(), raw.report.mesh.marching_cubes_faces);
  ASSERT_GT(raw.mesh.face_count(), 500u);
  request.limits = max_faces(500);
  request.target_faces = 5000;  // simplification is off: only the limit applies
  const Shape limited = pipeline.make_shape(ids, request);
  EXPECT_LE(limited.mesh.face_count(), 500u);
  EXPECT_EQ(limited.report.mesh.simplification.target_faces, 500u);
  EXPECT_EQ(limited.report.mesh.simplification.faces_before, raw.mesh.face_count());
  ASSERT_FALSE(limited.warnings.empty());
  EXPECT_EQ(limited.warnings[0],
            "decimated to 500 faces (the mesh limits allow at most 500 triangles) although "
            "simplification is off");
}

TEST_F(DemoPipeline, VertexAndFileLimitsRefuseNamingTheLimit) {
  const at::Tensor ids = tokens("a red car");
  const ShapePipeline pipeline(*engine_, {});
  ShapeRequest request = quick_request();
  const Shape plain = pipeline.make_shape(ids, request);
  const int64_t vertices = static_cast<int64_t>(plain.mesh.vertex_count());
  const int64_t bytes = static_cast<int64_t>(plain.encoded.size());

  request.limits.max_vertices = vertices;  // at the limit: allowed
  request.limits.max_file_bytes = bytes;
  EXPECT_EQ(pipeline.make_shape(ids, request).encoded, plain.encoded);

  request.limits.max_vertices = vertices - 1;
  testing::expect_error([&] { (void)pipeline.make_shape(ids, request); },
                        ErrorCode::kResourceExhausted,
                        {"max_vertices", "mesh has " + std::to_string(vertices) + " vertices",
                         "over the " + std::to_string(vertices - 1) + " that the mesh limits"});
  request.limits.max_vertices.reset();
  request.limits.max_file_bytes = bytes - 1;
  testing::expect_error([&] { (void)pipeline.make_shape(ids, request); },
                        ErrorCode::kResourceExhausted,
                        {"max_file_bytes", "glb file of " + std::to_string(bytes) + " bytes",
                         std::to_string(bytes - 1)});
  // No file, no file limit.
  request.format = MeshFormat::kRaw;
  EXPECT_EQ(pipeline.make_shape(ids, request).mesh.face_count(), plain.mesh.face_count());

  // A limit below 1 is the caller's mistake, found before any work.
  request.limits = max_faces(0);
  testing::expect_error([&] { (void)pipeline.make_shape(ids, request); },
                        ErrorCode::kInvalidArgument,
                        std::vector<std::string>{"max_faces", "at least 1"});
  request.limits = MeshLimits{};
  request.limits.max_file_bytes = -5;
  testing::expect_error([&] { (void)pipeline.make_shape(ids, request); },
                        ErrorCode::kInvalidArgument, "max_file_bytes is -5");
}

TEST_F(DemoPipeline, MetadataGoesIntoTheFile) {
  const at::Tensor ids = tokens("a red car");
  const ShapePipeline pipeline(*engine_, {});
  ShapeRequest request = quick_request();
  const Shape plain = pipeline.make_shape(ids, request);
  request.metadata.add("prompt", "a red car").add("seed", uint64_t{7});
  const Shape with = pipeline.make_shape(ids, request);
  const nlohmann::json json = glb_json(with.encoded);
  EXPECT_EQ(json["asset"]["extras"], (nlohmann::json{{"prompt", "a red car"}, {"seed", 7}}));
  EXPECT_EQ(glb_bin(with.encoded), glb_bin(plain.encoded));  // the same mesh
  EXPECT_FALSE(glb_json(plain.encoded)["asset"].contains("extras"));
  request.format = MeshFormat::kObj;
  const Shape obj = pipeline.make_shape(ids, request);
  EXPECT_NE(obj.encoded.find("\n# cube3d provenance\n# prompt: \"a red car\"\n# seed: 7\nv "),
            std::string::npos);
}

TEST(OccupancyMode, ParsesAndNamesTheField) {
  EXPECT_TRUE(parse_occupancy_mode("hierarchical"));
  EXPECT_FALSE(parse_occupancy_mode("dense"));
  try {
    (void)parse_occupancy_mode("sparse", "mesh.occupancy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "mesh.occupancy: 'sparse' is not dense or hierarchical");
  }
}

}  // namespace test_shape_pipeline
}  // namespace cube3d
