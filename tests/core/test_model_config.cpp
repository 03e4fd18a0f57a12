// Model config loading: the shipped and golden files, the official defaults, and one test per
// kind of error, each checking the error code and that the message names the key at fault.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/model_config.h"
#include "expect_error.h"

namespace cube3d {
namespace test_model_config {

// A complete, valid config (the golden tiny_v01 sizes). Each error test swaps in one bad line,
// so a failure can only come from that line.
constexpr const char* kGptValid = R"(gpt_model:
  n_layer: 3
  n_single_layer: 1
  rope_theta: 10000.0
  n_head: 4
  n_embd: 64
  bias: true
  eps: 1e-06
  shape_model_vocab_size: 64
  text_model_embed_dim: 32
  use_pooled_text_embed: false
  shape_model_embed_dim: 8
  encoder_with_cls_token: true
  use_bbox: false
)";

constexpr const char* kShapeValid = R"(shape_model:
  encoder_with_cls_token: true
  num_encoder_latents: 16
  num_decoder_latents: 0
  embed_dim: 8
  width: 64
  num_heads: 4
  out_dim: 1
  eps: 1e-06
  num_freqs: 8
  point_feats: 3
  embed_point_feats: false
  num_encoder_layers: 2
  encoder_cross_attention_levels: [0]
  num_decoder_layers: 2
  num_codes: 64
)";

std::string valid_yaml() { return std::string(kGptValid) + kShapeValid; }

// The valid YAML with the first occurrence of `from` replaced by `to` (which may be empty).
std::string with(const std::string& from, const std::string& to) {
  std::string text = valid_yaml();
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "fixture has no '" << from << "'";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Runs `parse_model_config` on `yaml` and expects a cube3d::Error with `code` whose message
// contains every one of `needles`.
void expect_error(const std::string& yaml, ErrorCode code,
                  std::initializer_list<std::string> needles) {
  SCOPED_TRACE(yaml);
  std::vector<std::string> all(needles);
  all.push_back("inline.yaml");
  testing::expect_error([&] { (void)parse_model_config(yaml, "inline.yaml"); }, code, all);
}

void expect_invalid(const std::string& yaml, std::initializer_list<std::string> needles) {
  expect_error(yaml, ErrorCode::kInvalidArgument, needles);
}

// --- files that load ----------------------------------------------------------------------

TEST(ModelConfigFiles, ShippedV01) {
  const std::string path = CUBE3D_SOURCE_DIR "/models/cube3d-v0.1.yaml";
  const ModelConfig config = load_model_config(path);
  EXPECT_EQ(config.source, path);
  EXPECT_EQ(config.gpt.n_layer, 23);
  EXPECT_EQ(config.gpt.n_single_layer, 1);
  EXPECT_DOUBLE_EQ(config.gpt.rope_theta, 10000.0);
  EXPECT_EQ(config.gpt.n_head, 12);
  EXPECT_EQ(config.gpt.n_embd, 1536);
  EXPECT_EQ(config.gpt.head_dim(), 128);
  EXPECT_TRUE(config.gpt.bias);
  EXPECT_DOUBLE_EQ(config.gpt.eps, 1e-6);
  EXPECT_EQ(config.gpt.shape_model_vocab_size, 16384);
  EXPECT_EQ(config.gpt.vocab_size(), 16387);
  EXPECT_EQ(config.gpt.text_model_embed_dim, 768);
  EXPECT_FALSE(config.gpt.use_pooled_text_embed);
  EXPECT_EQ(config.gpt.shape_model_embed_dim, 32);
  EXPECT_TRUE(config.gpt.encoder_with_cls_token);
  EXPECT_FALSE(config.gpt.use_bbox);

  EXPECT_TRUE(config.shape.encoder_with_cls_token);
  EXPECT_EQ(config.shape.num_encoder_latents, 512);
  EXPECT_EQ(config.shape.num_decoder_latents, 0);
  EXPECT_EQ(config.shape.embed_dim, 32);
  EXPECT_EQ(config.shape.width, 768);
  EXPECT_EQ(config.shape.num_heads, 12);
  EXPECT_EQ(config.shape.out_dim, 1);
  EXPECT_DOUBLE_EQ(config.shape.eps, 1e-6);
  EXPECT_EQ(config.shape.num_freqs, 128);
  EXPECT_EQ(config.shape.fourier_dim(), 3 * 257);
  EXPECT_EQ(config.shape.point_feats, 3);
  EXPECT_FALSE(config.shape.embed_point_feats);
  EXPECT_EQ(config.shape.num_encoder_layers, 13);
  EXPECT_EQ(config.shape.encoder_cross_attention_levels, (std::vector<int64_t>{0, 2, 4, 8}));
  EXPECT_EQ(config.shape.num_decoder_layers, 24);
  EXPECT_EQ(config.shape.num_codes, 16384);

  EXPECT_EQ(config.text_model_name, "openai/clip-vit-large-patch14");
  EXPECT_FALSE(config.random_weights_seed.has_value());
  EXPECT_EQ(config.cond_len(), 77);
}

TEST(ModelConfigFiles, ShippedV05) {
  const ModelConfig config = load_model_config(CUBE3D_SOURCE_DIR "/models/cube3d-v0.5.yaml");
  EXPECT_TRUE(config.gpt.use_bbox);
  EXPECT_EQ(config.shape.num_encoder_latents, 1024);
  EXPECT_EQ(config.cond_len(), 78);
  // Everything else is v0.1's.
  const ModelConfig v01 = load_model_config(CUBE3D_SOURCE_DIR "/models/cube3d-v0.1.yaml");
  EXPECT_EQ(config.gpt.n_layer, v01.gpt.n_layer);
  EXPECT_EQ(config.gpt.n_embd, v01.gpt.n_embd);
  EXPECT_EQ(config.shape.width, v01.shape.width);
  EXPECT_EQ(config.shape.num_decoder_layers, v01.shape.num_decoder_layers);
  EXPECT_EQ(config.shape.num_codes, v01.shape.num_codes);
  EXPECT_FALSE(config.random_weights_seed.has_value());
}

TEST(ModelConfigFiles, ShippedDemo) {
  const ModelConfig config = load_model_config(CUBE3D_SOURCE_DIR "/models/demo.yaml");
  ASSERT_TRUE(config.random_weights_seed.has_value());
  EXPECT_EQ(*config.random_weights_seed, 20251201u);
  EXPECT_EQ(config.gpt.n_layer, 4);
  EXPECT_EQ(config.gpt.n_single_layer, 1);
  EXPECT_DOUBLE_EQ(config.gpt.rope_theta, 10000.0);
  EXPECT_EQ(config.gpt.n_head, 4);
  EXPECT_EQ(config.gpt.n_embd, 128);
  EXPECT_TRUE(config.gpt.bias);
  EXPECT_EQ(config.gpt.shape_model_vocab_size, 256);
  EXPECT_EQ(config.gpt.text_model_embed_dim, 64);
  EXPECT_EQ(config.gpt.shape_model_embed_dim, 16);
  EXPECT_FALSE(config.gpt.use_bbox);
  EXPECT_EQ(config.shape.num_encoder_latents, 64);
  EXPECT_EQ(config.shape.embed_dim, 16);
  EXPECT_EQ(config.shape.width, 128);
  EXPECT_EQ(config.shape.num_heads, 4);
  EXPECT_EQ(config.shape.num_freqs, 16);
  EXPECT_EQ(config.shape.num_encoder_layers, 2);
  EXPECT_EQ(config.shape.encoder_cross_attention_levels, (std::vector<int64_t>{0}));
  EXPECT_EQ(config.shape.num_decoder_layers, 2);
  EXPECT_EQ(config.shape.num_codes, 256);
}

TEST(ModelConfigFiles, GoldenTinyV01) {
  const ModelConfig config = load_model_config(CUBE3D_TEST_DATA_DIR "/golden/tiny_v01/model.yaml");
  EXPECT_EQ(config.gpt.n_layer, 3);
  EXPECT_EQ(config.gpt.n_single_layer, 1);
  EXPECT_EQ(config.gpt.n_head, 4);
  EXPECT_EQ(config.gpt.n_embd, 64);
  EXPECT_EQ(config.gpt.shape_model_vocab_size, 64);
  EXPECT_EQ(config.gpt.text_model_embed_dim, 32);
  EXPECT_DOUBLE_EQ(config.gpt.eps, 1e-6);  // written `1e-06`
  EXPECT_FALSE(config.gpt.use_bbox);
  EXPECT_EQ(config.shape.num_encoder_latents, 16);
  EXPECT_EQ(config.shape.num_freqs, 8);
  EXPECT_EQ(config.shape.num_codes, 64);
  EXPECT_FALSE(config.random_weights_seed.has_value());
}

TEST(ModelConfigFiles, GoldenTinyV05) {
  const ModelConfig config = load_model_config(CUBE3D_TEST_DATA_DIR "/golden/tiny_v05/model.yaml");
  EXPECT_EQ(config.gpt.n_layer, 3);
  EXPECT_EQ(config.gpt.n_embd, 64);
  EXPECT_TRUE(config.gpt.use_bbox);
  EXPECT_EQ(config.shape.num_encoder_latents, 24);
  EXPECT_EQ(config.cond_len(), 78);
}

// --- parsing details ----------------------------------------------------------------------

TEST(ModelConfigParse, SourceIsRecorded) {
  EXPECT_EQ(parse_model_config(valid_yaml(), "somewhere.yaml").source, "somewhere.yaml");
}

TEST(ModelConfigParse, OfficialDefaultsForMissingOptionalKeys) {
  // Only the required keys: everything else takes the official dataclass default.
  const ModelConfig config = parse_model_config(R"(
gpt_model:
  n_layer: 2
  n_head: 2
  n_embd: 32
  shape_model_vocab_size: 16
  shape_model_embed_dim: 4
  text_model_embed_dim: 8
shape_model:
  num_encoder_latents: 8
  embed_dim: 4
  width: 32
  num_heads: 2
  num_freqs: 4
  num_decoder_layers: 1
  num_codes: 16
)",
                                                "defaults.yaml");
  EXPECT_EQ(config.gpt.n_single_layer, 0);
  EXPECT_DOUBLE_EQ(config.gpt.rope_theta, 1000.0);
  EXPECT_FALSE(config.gpt.bias);
  EXPECT_DOUBLE_EQ(config.gpt.eps, 1e-6);
  EXPECT_FALSE(config.gpt.use_pooled_text_embed);
  EXPECT_TRUE(config.gpt.encoder_with_cls_token);
  EXPECT_FALSE(config.gpt.use_bbox);
  EXPECT_EQ(config.shape.num_decoder_latents, 256);
  EXPECT_EQ(config.shape.out_dim, 1);
  EXPECT_DOUBLE_EQ(config.shape.eps, 1e-6);
  EXPECT_EQ(config.shape.point_feats, 0);
  EXPECT_FALSE(config.shape.embed_point_feats);
  EXPECT_EQ(config.shape.num_encoder_layers, 1);
  EXPECT_TRUE(config.shape.encoder_cross_attention_levels.empty());
  EXPECT_TRUE(config.shape.encoder_with_cls_token);
  EXPECT_EQ(config.text_model_name, "openai/clip-vit-large-patch14");
  EXPECT_FALSE(config.random_weights_seed.has_value());
}

TEST(ModelConfigParse, FloatSpellings) {
  for (const char* eps : {"1e-06", "1.e-6", "1.0e-6", "0.000001", "+1e-6"}) {
    const ModelConfig config =
        parse_model_config(with("  eps: 1e-06\n", std::string("  eps: ") + eps + "\n"), "eps.yaml");
    EXPECT_DOUBLE_EQ(config.gpt.eps, 1e-6) << eps;
  }
  // An integer is a fine float.
  EXPECT_DOUBLE_EQ(
      parse_model_config(with("rope_theta: 10000.0", "rope_theta: 500"), "t.yaml").gpt.rope_theta,
      500.0);
}

TEST(ModelConfigParse, BoolSpellings) {
  // The official files write both `true` and `False`.
  EXPECT_TRUE(parse_model_config(with("bias: true", "bias: True"), "b.yaml").gpt.bias);
  EXPECT_FALSE(parse_model_config(with("bias: true", "bias: False"), "b.yaml").gpt.bias);
  EXPECT_FALSE(parse_model_config(with("bias: true", "bias: FALSE"), "b.yaml").gpt.bias);
}

TEST(ModelConfigParse, CheckpointPathIsAcceptedAndIgnored) {
  const ModelConfig config = parse_model_config(
      with("gpt_model:\n", "gpt_model:\n  checkpoint_path: \"/some/where.safetensors\"\n"),
      "c.yaml");
  EXPECT_EQ(config.gpt.n_layer, 3);
}

TEST(ModelConfigParse, RandomWeightsSeed) {
  const std::string yaml = "random_weights_seed: 7\n" + valid_yaml();
  EXPECT_EQ(parse_model_config(yaml, "s.yaml").random_weights_seed, 7u);
  EXPECT_FALSE(parse_model_config("random_weights_seed: null\n" + valid_yaml(), "s.yaml")
                   .random_weights_seed.has_value());
  expect_invalid("random_weights_seed: -1\n" + valid_yaml(), {"random_weights_seed"});
  expect_invalid("random_weights_seed: 1.5\n" + valid_yaml(), {"random_weights_seed"});
}

TEST(ModelConfigParse, TextModelName) {
  const ModelConfig config = parse_model_config(
      valid_yaml() + "text_model_pretrained_model_name_or_path: /models/clip\n", "t.yaml");
  EXPECT_EQ(config.text_model_name, "/models/clip");
  expect_invalid(valid_yaml() + "text_model_pretrained_model_name_or_path: [a]\n",
                 {"text_model_pretrained_model_name_or_path"});
}

TEST(ModelConfigParse, ValidateAcceptsLoadedConfig) {
  const ModelConfig config = parse_model_config(valid_yaml(), "v.yaml");
  EXPECT_NO_THROW(validate_model_config(config));
}

TEST(ModelConfigParse, ValidateChecksConfigsBuiltInCode) {
  ModelConfig config = parse_model_config(valid_yaml(), "");
  config.gpt.n_head = 0;
  testing::expect_error([&] { validate_model_config(config); }, ErrorCode::kInvalidArgument,
                        "gpt_model.n_head");
}

// --- errors: keys -------------------------------------------------------------------------

TEST(ModelConfigErrors, UnknownTopLevelKey) {
  expect_invalid(valid_yaml() + "text_model: clip\n", {"unknown key text_model"});
}

TEST(ModelConfigErrors, UnknownNestedKey) {
  expect_invalid(with("  n_layer: 3\n", "  n_layerz: 3\n  n_layer: 3\n"),
                 {"unknown key gpt_model.n_layerz", "did you mean gpt_model.n_layer"});
  expect_invalid(with("  num_codes: 64\n", "  num_codes: 64\n  dropout: 0.1\n"),
                 {"unknown key shape_model.dropout"});
}

TEST(ModelConfigErrors, MissingRequiredKey) {
  expect_invalid(with("  width: 64\n", ""), {"missing required key shape_model.width"});
  expect_invalid(with("  n_head: 4\n", ""), {"missing required key gpt_model.n_head"});
  expect_invalid(kGptValid, {"missing required key shape_model"});
}

TEST(ModelConfigErrors, DuplicateKey) {
  expect_invalid(with("  n_head: 4\n", "  n_head: 4\n  n_head: 8\n"),
                 {"duplicate key gpt_model.n_head"});
}

// --- errors: types ------------------------------------------------------------------------

TEST(ModelConfigErrors, WrongTypeInt) {
  expect_invalid(with("n_head: 4", "n_head: 12.5"),
                 {"gpt_model.n_head: expected an integer, got '12.5'"});
  expect_invalid(with("n_head: 4", "n_head: abc"), {"gpt_model.n_head", "'abc'"});
  expect_invalid(with("n_head: 4", "n_head: true"), {"gpt_model.n_head", "'true'"});
  expect_invalid(with("n_head: 4", "n_head: \"4\""), {"gpt_model.n_head", "string"});
  expect_invalid(with("n_head: 4", "n_head:"), {"gpt_model.n_head", "null"});
  expect_invalid(with("n_head: 4", "n_head: 99999999999999999999999"),
                 {"gpt_model.n_head", "out of range"});
  expect_invalid(with("encoder_cross_attention_levels: [0]", "encoder_cross_attention_levels: [x]"),
                 {"shape_model.encoder_cross_attention_levels[0]"});
  expect_invalid(with("encoder_cross_attention_levels: [0]", "encoder_cross_attention_levels: 0"),
                 {"shape_model.encoder_cross_attention_levels", "list"});
}

TEST(ModelConfigErrors, WrongTypeBool) {
  expect_invalid(with("use_bbox: false", "use_bbox: 0"),
                 {"gpt_model.use_bbox: expected true or false"});
  expect_invalid(with("embed_point_feats: false", "embed_point_feats: nope"),
                 {"shape_model.embed_point_feats"});
}

TEST(ModelConfigErrors, WrongTypeFloat) {
  expect_invalid(with("rope_theta: 10000.0", "rope_theta: big"),
                 {"gpt_model.rope_theta: expected a number, got 'big'"});
  expect_invalid(with("  eps: 1e-06\n  num_freqs", "  eps: [1]\n  num_freqs"),
                 {"shape_model.eps", "a list"});
}

TEST(ModelConfigErrors, WrongTypeMapping) {
  expect_invalid(std::string("gpt_model: 3\n") + kShapeValid,
                 {"gpt_model: expected a mapping, got '3'"});
  expect_invalid(std::string(kGptValid) + "shape_model: [1, 2]\n", {"shape_model", "mapping"});
  expect_invalid("- 1\n- 2\n", {"top level", "mapping"});
  expect_invalid("", {"empty"});
}

TEST(ModelConfigErrors, YamlSyntaxError) {
  expect_invalid(with("  n_embd: 64\n", "  n_embd: [64\n"), {"YAML syntax error", "line"});
  expect_invalid(with("  bias: true\n", "   bias: true\n"), {"YAML syntax error", "column"});
}

TEST(ModelConfigErrors, MissingFile) {
  const std::string path = CUBE3D_TEST_DATA_DIR "/no/such/model.yaml";
  testing::expect_error([&] { (void)load_model_config(path); }, ErrorCode::kNotFound, path);
}

TEST(ModelConfigErrors, DirectoryIsNotAConfig) {
  const std::string folder = CUBE3D_TEST_DATA_DIR "/golden";
  testing::expect_error([&] { (void)load_model_config(folder); }, ErrorCode::kInvalidArgument,
                        folder);
}

// --- errors: values -----------------------------------------------------------------------

TEST(ModelConfigErrors, NotDivisible) {
  expect_invalid(with("n_head: 4", "n_head: 12"),
                 {"gpt_model.n_embd (64) is not divisible by gpt_model.n_head (12)"});
  expect_invalid(with("num_heads: 4", "num_heads: 5"),
                 {"shape_model.width (64) is not divisible by shape_model.num_heads (5)"});
}

TEST(ModelConfigErrors, OddHeadDim) {
  // 64 / 64 = 1 channel per head: RoPE needs pairs.
  expect_invalid(with("n_head: 4", "n_head: 64"), {"gpt_model.n_head", "even"});
  // The decoder has no RoPE: an odd head dim is fine there (64 / 64 = 1).
  EXPECT_NO_THROW(parse_model_config(with("num_heads: 4", "num_heads: 64"), "odd.yaml"));
}

TEST(ModelConfigErrors, VocabMismatch) {
  expect_invalid(with("num_codes: 64", "num_codes: 32"),
                 {"gpt_model.shape_model_vocab_size (64)", "shape_model.num_codes (32)"});
}

TEST(ModelConfigErrors, EmbedDimMismatch) {
  expect_invalid(with("  embed_dim: 8\n", "  embed_dim: 16\n"),
                 {"gpt_model.shape_model_embed_dim (8)", "shape_model.embed_dim (16)"});
}

TEST(ModelConfigErrors, NegativeOrZeroSize) {
  expect_invalid(with("n_layer: 3", "n_layer: 0"), {"gpt_model.n_layer (0) must be positive"});
  expect_invalid(with("width: 64", "width: -64"), {"shape_model.width (-64) must be positive"});
  expect_invalid(with("n_single_layer: 1", "n_single_layer: -1"),
                 {"gpt_model.n_single_layer (-1) must not be negative"});
  // These may be zero.
  EXPECT_NO_THROW(parse_model_config(with("n_single_layer: 1", "n_single_layer: 0"), "z.yaml"));
  EXPECT_NO_THROW(parse_model_config(with("point_feats: 3", "point_feats: 0"), "z.yaml"));
}

TEST(ModelConfigErrors, AbsurdSize) {
  expect_invalid(with("n_embd: 64", "n_embd: 6400000"), {"gpt_model.n_embd", "limit"});
  expect_invalid(with("num_encoder_latents: 16", "num_encoder_latents: 1000000"),
                 {"shape_model.num_encoder_latents", "limit"});
  expect_invalid(with("num_freqs: 8", "num_freqs: 100000"), {"shape_model.num_freqs", "limit"});
  expect_invalid(with("n_layer: 3", "n_layer: 100000"), {"gpt_model.n_layer", "limit"});
  expect_invalid(with("num_codes: 64", "num_codes: 100000000"), {"shape_model.num_codes", "limit"});
}

TEST(ModelConfigErrors, AbsurdParameterCount) {
  // Each size within its bound, their product not: 1024 blocks of width 65536.
  std::string yaml = with("n_layer: 3", "n_layer: 1024");
  yaml.replace(yaml.find("n_embd: 64"), 10, "n_embd: 65536");
  expect_invalid(yaml, {"gpt_model.n_layer", "n_embd", "parameters"});
}

TEST(ModelConfigErrors, PooledTextEmbedUnsupported) {
  expect_invalid(with("use_pooled_text_embed: false", "use_pooled_text_embed: true"),
                 {"gpt_model.use_pooled_text_embed", "not supported"});
}

TEST(ModelConfigErrors, OutDimUnsupported) {
  expect_invalid(with("out_dim: 1", "out_dim: 2"), {"shape_model.out_dim (2)", "not supported"});
}

TEST(ModelConfigErrors, NonPositiveEps) {
  expect_invalid(
      with("  eps: 1e-06\n  shape_model_vocab_size", "  eps: 0\n  shape_model_vocab_size"),
      {"gpt_model.eps", "positive"});
  expect_invalid(with("  eps: 1e-06\n  num_freqs", "  eps: -1e-6\n  num_freqs"),
                 {"shape_model.eps", "positive"});
  expect_invalid(with("  eps: 1e-06\n  num_freqs", "  eps: .nan\n  num_freqs"),
                 {"shape_model.eps", "finite"});
  expect_invalid(with("rope_theta: 10000.0", "rope_theta: .inf"),
                 {"gpt_model.rope_theta", "finite"});
}

TEST(ModelConfigErrors, CrossAttentionLevelOutOfRange) {
  expect_invalid(
      with("encoder_cross_attention_levels: [0]", "encoder_cross_attention_levels: [0, 2]"),
      {"shape_model.encoder_cross_attention_levels[1]"});
}

}  // namespace test_model_config
}  // namespace cube3d

// --- hostile input (issue 15) ---------------------------------------------------------------

namespace cube3d {
namespace test_model_config {

// yaml-cpp 0.7.0 turns a line starting with ',' into documents without end; YAML::LoadAll then
// allocated about 1 GB/s until memory ran out. The child runs under a 1 GiB address-space limit
// and a 20 s alarm, so that a regression fails this test instead of exhausting CI's memory.
[[noreturn]] void parse_in_bounded_child(const std::string& yaml) {
  const rlimit limit{1ull << 30, 1ull << 30};
  setrlimit(RLIMIT_AS, &limit);
  alarm(20);
  try {
    (void)parse_model_config(yaml, "comma.yaml");
  } catch (const Error& e) {
    std::fputs(e.what(), stderr);  // matched by the death test
    std::_Exit(0);
  }
  std::_Exit(4);
}

TEST(ModelConfigHostile, LineStartingWithACommaIsABoundedError) {
#if defined(__SANITIZE_ADDRESS__)
  // ASan reserves terabytes of shadow address space, which the 1 GiB RLIMIT_AS forbids; the
  // plain build runs this test.
  GTEST_SKIP() << "needs an address-space limit, which ASan's shadow memory cannot live with";
#endif
  for (const std::string& yaml : {std::string(", x\n"), std::string(",\n")}) {
    EXPECT_EXIT(parse_in_bounded_child(yaml), ::testing::ExitedWithCode(0),
                "comma.yaml: holds more than one YAML document")
        << yaml;
  }
  // After valid settings the same line is a syntax error (also bounded).
  EXPECT_EXIT(parse_in_bounded_child(valid_yaml() + ", stray\n"), ::testing::ExitedWithCode(0),
              "comma.yaml: YAML syntax error");
}

TEST(ModelConfigHostile, StringsMustBeUtf8) {
  // Found by fuzz_server_config: invalid UTF-8 was accepted and printed back as U+FFFD.
  try {
    (void)parse_model_config(with("gpt_model:\n",
                                  "gpt_model:\n  checkpoint_path: \"a\xff"
                                  "b\"\n"),
                             "utf8.yaml");
    ADD_FAILURE() << "parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint_path: not valid UTF-8 (byte offset 1)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelConfigHostile, SomeOtherFileIsNotEchoed) {
  const std::string passwd =
      "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n";
  try {
    (void)parse_model_config(passwd, "/etc/passwd");
    ADD_FAILURE() << "parsed";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find("root"), std::string::npos) << message;
    EXPECT_NE(message.find("/etc/passwd"), std::string::npos) << message;
    EXPECT_NE(message.find("not key: value settings"), std::string::npos) << message;
  }
}

TEST(ModelConfigHostile, QuotedValuesAreShortAndEscaped) {
  const std::string value = "\x1b[31mred" + std::string(100, 'x');
  try {
    (void)parse_model_config(with("n_head: 4", "n_head: \"" + value + "\""), "esc.yaml");
    ADD_FAILURE() << "parsed";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
    EXPECT_NE(message.find("\\x1b[31mred"), std::string::npos) << message;
    EXPECT_NE(message.find("(108 bytes)"), std::string::npos) << message;
    EXPECT_LT(message.size(), 200u) << message;
  }
}

}  // namespace test_model_config
}  // namespace cube3d
