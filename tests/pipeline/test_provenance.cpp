// Provenance metadata: the public keys, in their order, omitted when unset, with the exact values
// the sampler and the model used.
#include "cube3d/pipeline/provenance.h"

#include <gtest/gtest.h>

#include <array>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/mesh_io.h"
#include "expect_error.h"

namespace cube3d {
namespace test_provenance {

std::vector<std::string> keys(const MeshMetadata& m) {
  std::vector<std::string> out;
  for (const MeshMetadataEntry& e : m.entries()) out.push_back(e.key);
  return out;
}

Provenance full() {
  Provenance p;
  p.prompt = "a red car";
  p.seed = 18446744073709551615u;
  p.top_p = 0.9;
  p.guidance_scale = 3.0;
  p.resolution_base = 8;
  p.bounding_box = std::array<float, 3>{1.925f, 0.5f, 1.0f};
  p.mesh_profile = MeshProfile::kRoblox;
  p.target_face_count = 20000;
  p.model = "open_model_v0.5";
  p.weights_digest = "ab12";
  p.server_version = "0.1.0 (3f2a9c1)";
  p.request_id = "req-1";
  return p;
}

TEST(Provenance, EveryKeyInItsOrder) {
  const MeshMetadata m = provenance_metadata(full());
  EXPECT_EQ(keys(m), (std::vector<std::string>{"prompt", "seed", "top_p", "guidance_scale",
                                               "resolution_base", "bounding_box", "mesh_profile",
                                               "target_face_count", "model", "weights_digest",
                                               "server_version", "request_id"}));
  EXPECT_EQ(std::get<std::string>(*m.find("prompt")), "a red car");
  EXPECT_EQ(std::get<uint64_t>(*m.find("seed")), 18446744073709551615u);
  EXPECT_EQ(std::get<double>(*m.find("guidance_scale")), 3.0);
  EXPECT_EQ(std::get<int64_t>(*m.find("resolution_base")), 8);
  EXPECT_EQ(std::get<std::string>(*m.find("mesh_profile")), "roblox");
  EXPECT_EQ(std::get<int64_t>(*m.find("target_face_count")), 20000);
  EXPECT_EQ(std::get<std::string>(*m.find("model")), "open_model_v0.5");
  EXPECT_EQ(std::get<std::string>(*m.find("weights_digest")), "ab12");
  EXPECT_EQ(std::get<std::string>(*m.find("server_version")), "0.1.0 (3f2a9c1)");
  EXPECT_EQ(std::get<std::string>(*m.find("request_id")), "req-1");
}

TEST(Provenance, FloatsAreTheValuesUsed) {
  const MeshMetadata m = provenance_metadata(full());
  // The sampler takes top_p as a float, the model the box: their exact doubles.
  EXPECT_EQ(std::get<double>(*m.find("top_p")), double{0.9f});
  EXPECT_EQ(metadata_json(*m.find("top_p")), "0.8999999761581421");
  EXPECT_EQ(std::get<std::vector<double>>(*m.find("bounding_box")),
            (std::vector<double>{double{1.925f}, 0.5, 1.0}));
  EXPECT_EQ(metadata_json(*m.find("bounding_box")), "[1.9249999523162842,0.5,1.0]");
  EXPECT_EQ(
      metadata_json(m),
      R"({"prompt":"a red car","seed":18446744073709551615,"top_p":0.8999999761581421,)"
      R"("guidance_scale":3.0,"resolution_base":8,"bounding_box":[1.9249999523162842,0.5,)"
      R"(1.0],"mesh_profile":"roblox","target_face_count":20000,"model":"open_model_v0.5",)"
      R"j("weights_digest":"ab12","server_version":"0.1.0 (3f2a9c1)","request_id":"req-1"})j");
}

TEST(Provenance, UnsetFieldsAreOmitted) {
  Provenance p;
  p.prompt = "a chair";
  p.model = "demo";
  const MeshMetadata m = provenance_metadata(p);
  EXPECT_EQ(keys(m), (std::vector<std::string>{"prompt", "seed", "guidance_scale",
                                               "resolution_base", "mesh_profile", "model"}));
  EXPECT_EQ(std::get<std::string>(*m.find("mesh_profile")), "none");
  EXPECT_EQ(std::get<uint64_t>(*m.find("seed")), 0u);
  // An empty prompt is still the prompt (an unconditional shape), not an omission.
  p.prompt.clear();
  EXPECT_EQ(std::get<std::string>(*provenance_metadata(p).find("prompt")), "");
}

TEST(Provenance, BadValuesAreRefusedNamingTheKey) {
  Provenance p = full();
  p.prompt = "bad \xFF";
  testing::expect_error([&] { (void)provenance_metadata(p); }, ErrorCode::kInvalidArgument,
                        "prompt");
  p = full();
  p.guidance_scale = std::numeric_limits<double>::infinity();
  EXPECT_THROW((void)provenance_metadata(p), Error);
}

TEST(Provenance, TheServerVersionNamesTheGenerator) {
  Mesh mesh;
  mesh.vertices = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  mesh.indices = {0, 1, 2};
  const std::string glb = encode_glb(mesh, provenance_metadata(full()));
  EXPECT_NE(glb.find(R"j("generator":"cube3d-server 0.1.0 (3f2a9c1)")j"), std::string::npos);
  EXPECT_NE(glb.find(R"("extras":{"prompt":"a red car","seed":18446744073709551615,)"),
            std::string::npos);
}

}  // namespace test_provenance
}  // namespace cube3d
