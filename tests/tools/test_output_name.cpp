#include "cube3d/tools/output_name.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "cube3d/core/error.h"
#include "temp_dir.h"

namespace cube3d {
namespace test_output_name {

OutputKey base_key() {
  OutputKey k;
  k.model = "model";
  k.prompt = "a red dragon";
  k.guidance_scale = 3.0;
  k.resolution_base = 8;
  k.occupancy = "hierarchical";
  k.single_stream_decode = "causal";
  k.device = "cpu";
  k.dtype = "float32";
  return k;
}

TEST(OutputNameTest, Sha256OfKnownText) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(OutputNameTest, DigestAndExtension) {
  const OutputKey k = base_key();
  const std::string name = output_name(k);
  EXPECT_EQ(name, sha256_hex(output_key_material(k)).substr(0, kOutputNameDigits) + ".glb");
  EXPECT_EQ(output_name(k), name);  // stable
  OutputKey obj = k;
  obj.format = MeshFormat::kObj;
  EXPECT_EQ(output_name(obj).substr(kOutputNameDigits), ".obj");
}

TEST(OutputNameTest, EverySettingChangesTheName) {
  std::set<std::string> names = {output_name(base_key())};
  const auto add = [&](auto change) {
    OutputKey k = base_key();
    change(k);
    EXPECT_TRUE(names.insert(output_name(k)).second) << output_key_material(k);
  };
  add([](OutputKey& k) { k.model = "other"; });
  add([](OutputKey& k) { k.prompt = "a red dragon!"; });
  add([](OutputKey& k) { k.guidance_scale = 0; });
  add([](OutputKey& k) { k.top_p = 0.9; });
  add([](OutputKey& k) { k.top_p = 0.9000000000000001; });
  add([](OutputKey& k) { k.seed = 1; });
  add([](OutputKey& k) { k.bounding_box = std::array<float, 3>{1, 1, 1}; });
  add([](OutputKey& k) { k.resolution_base = 7; });
  add([](OutputKey& k) { k.target_face_count = 500; });
  add([](OutputKey& k) { k.mesh_profile = MeshProfile::kRoblox; });
  add([](OutputKey& k) { k.postprocess = false; });
  add([](OutputKey& k) { k.occupancy = "dense"; });
  add([](OutputKey& k) { k.single_stream_decode = "reference"; });
  add([](OutputKey& k) { k.kv_cache = false; });
  add([](OutputKey& k) { k.device = "cuda"; });
  add([](OutputKey& k) { k.dtype = "bfloat16"; });
}

TEST(OutputNameTest, ModelIdentityIsTheConfigAndTheWeightFilesNamesAndSizes) {
  cube3d::testing::TempDir dir;
  const std::string config = dir.write("a/model.yaml", "gpt_model: {}\n");
  const std::string weights = dir.write("a/shape_gpt.safetensors", "12345");
  const std::string moved = dir.write("b/shape_gpt.safetensors", "54321");
  const std::string bigger = dir.write("c/shape_gpt.safetensors", "123456");
  const std::string id = model_identity(config, weights, "", "", "");
  EXPECT_NE(id.find(sha256_hex("gpt_model: {}\n")), std::string::npos);
  EXPECT_NE(id.find("shape_gpt.safetensors:5"), std::string::npos);
  EXPECT_EQ(model_identity(config, moved, "", "", ""), id);  // another folder, same size
  EXPECT_NE(model_identity(config, bigger, "", "", ""), id);
  EXPECT_NE(model_identity(config, "", "", "", ""), id);
  EXPECT_THROW(model_identity(dir.path() + "/missing.yaml", "", "", "", ""), Error);
}

}  // namespace test_output_name
}  // namespace cube3d
