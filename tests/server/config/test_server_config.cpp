// Server config: the shipped demo file, the defaults, one test per kind of error (each checking
// the code and that the message names the key), the --print-config round trip, command-line
// overrides and path resolution. Temporary files come from mkdtemp (POSIX, no std::filesystem:
// see server_config.cpp).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/model_config.h"
#include "cube3d/server/config/server_config.h"
#include "expect_error.h"

namespace cube3d {
namespace test_server_config {

const std::string kRepo = CUBE3D_SOURCE_DIR;
const std::string kModels = kRepo + "/models";
const std::string kDemoServer = kModels + "/demo-server.yaml";
const std::string kDemoModel = kModels + "/demo.yaml";

// The least a file must say; every other key takes its default.
constexpr const char* kMinimal = "model:\n  config: demo.yaml\n";

std::string current_directory() {
  char buffer[4096];
  return getcwd(buffer, sizeof buffer) != nullptr ? std::string(buffer) : std::string();
}

// A fresh folder under /tmp, removed with the files written through it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/cube3d_server_config_XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
      if (unlink(it->c_str()) != 0) rmdir(it->c_str());  // a folder made by folder()
    }
    rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  std::string file(const std::string& name, const std::string& text) {
    const std::string full = path_ + "/" + name;
    write_file(full, text);
    created_.push_back(full);
    return full;
  }
  std::string folder(const std::string& name) {
    const std::string full = path_ + "/" + name;
    EXPECT_EQ(mkdir(full.c_str(), 0700), 0) << full;
    created_.push_back(full);
    return full;
  }

 private:
  std::string path_;
  std::vector<std::string> created_;
};

// Inline YAML, with relative paths resolved against models/ as if the file lived there.
ServerConfig parse(const std::string& yaml) {
  return parse_server_config(yaml, "inline.yaml", kModels);
}

// The minimal file plus `extra`; the error must be kInvalidArgument and name inline.yaml.
void expect_invalid(const std::string& extra, std::initializer_list<std::string> needles) {
  SCOPED_TRACE(extra);
  std::vector<std::string> all(needles);
  all.push_back("inline.yaml");
  testing::expect_error([&] { (void)parse(std::string(kMinimal) + extra); },
                        ErrorCode::kInvalidArgument, all);
}

// --- the shipped file and the defaults -------------------------------------------------------

TEST(ServerConfig, DemoServerYamlLoadsWithTheDocumentedValues) {
  const ServerConfig config = load_server_config(kDemoServer);
  EXPECT_EQ(config.source, kDemoServer);
  EXPECT_EQ(config.listen, "127.0.0.1:50051");
  EXPECT_FALSE(config.tls.enabled());
  // Relative to the file's folder, not to the current directory.
  EXPECT_EQ(config.model.config, kDemoModel);
  EXPECT_EQ(config.model.gpt_weights, "");
  EXPECT_EQ(config.model.shape_weights, "");
  EXPECT_EQ(config.model.clip_model, "");
  EXPECT_EQ(config.device, "cpu");
  EXPECT_EQ(config.dtype, "float32");
  EXPECT_EQ(config.single_stream_decode, "causal");
  EXPECT_EQ(config.batching.batch_buckets, (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(config.batching.max_queue_delay_ms, 10);
  EXPECT_EQ(config.batching.max_queue_size, 64);
  EXPECT_EQ(config.batching.mode, BatchingMode::kContinuous);
  EXPECT_EQ(config.batching.max_joins_per_step, 2);
  EXPECT_EQ(config.batching.batch_max_wait_ms, 60000);
  EXPECT_EQ(config.batching.max_queued_batch, 0);
  EXPECT_EQ(config.policy.prompt_denylist_file, "");
  EXPECT_EQ(config.defaults.resolution_base, 6);
  EXPECT_EQ(config.defaults.format, MeshFormat::kGlb);
  EXPECT_FALSE(config.defaults.top_p.has_value());
  EXPECT_EQ(config.mesh.occupancy.hierarchical, true);
  EXPECT_EQ(config.mesh.occupancy.coarsest_resolution_base, 5);
  EXPECT_EQ(config.mesh.occupancy.dilation, 1);
  EXPECT_EQ(config.metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(config.logging.level, "info");
  EXPECT_EQ(config.logging.format, "text");
  EXPECT_FALSE(config.logging.prompts);
}

TEST(ServerConfig, DemoModelIsARandomWeightModel) {
  // The demo names no weights, so its model must generate them.
  const ServerConfig config = load_server_config(kDemoServer);
  const ModelConfig model = load_model_config(config.model.config);
  EXPECT_TRUE(model.random_weights_seed.has_value());
}

TEST(ServerConfig, DemoServerYamlDocumentsEveryKey) {
  // Operators read this file first: every key should appear in it.
  const std::string text = read_file(kDemoServer);
  for (const std::string& key : server_config_keys()) {
    const std::string last = key.substr(key.rfind('.') + 1);
    EXPECT_NE(text.find(last + ":"), std::string::npos) << key;
  }
}

TEST(ServerConfig, MinimalFileTakesTheDefaults) {
  const ServerConfig config = parse(kMinimal);
  EXPECT_EQ(config.model.config, kDemoModel);
  ServerConfig expected;
  expected.model.config = kDemoModel;
  EXPECT_EQ(config, expected);

  // The documented defaults, spelled out.
  EXPECT_EQ(config.listen, "0.0.0.0:50051");
  EXPECT_TRUE(config.tls.cert_file.empty());
  EXPECT_TRUE(config.tls.key_file.empty());
  EXPECT_EQ(config.device, "cpu");
  EXPECT_EQ(config.dtype, "float32");
  EXPECT_EQ(config.single_stream_decode, "causal");
  EXPECT_EQ(config.cuda_graphs, "on");
  EXPECT_EQ(config.decode_kernels, "torch");
  EXPECT_EQ(config.batching.batch_buckets, (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(config.batching.max_queue_delay_ms, 5);
  EXPECT_EQ(config.batching.max_queue_size, 64);
  EXPECT_EQ(config.limits.max_prompt_bytes, 1024);
  EXPECT_EQ(config.limits.max_resolution_base, 9);
  EXPECT_EQ(config.limits.min_resolution_base, 4);
  EXPECT_EQ(config.limits.max_message_bytes, 67108864);
  EXPECT_EQ(config.limits.max_target_face_count, 2000000);
  EXPECT_EQ(config.limits.default_deadline_ms, 300000);
  EXPECT_EQ(config.limits.request_read_timeout_ms, 30000);
  EXPECT_EQ(config.defaults.guidance_scale, 3.0);
  EXPECT_FALSE(config.defaults.top_p.has_value());
  EXPECT_EQ(config.defaults.resolution_base, 8);
  EXPECT_EQ(config.defaults.format, MeshFormat::kGlb);
  EXPECT_EQ(config.mesh.occupancy.hierarchical, true);
  EXPECT_EQ(config.mesh.occupancy.coarsest_resolution_base,
            kDefaultOccupancyCoarsestResolutionBase);
  EXPECT_EQ(config.mesh.occupancy.coarsest_resolution_base, 5);
  EXPECT_EQ(config.mesh.occupancy.dilation, kDefaultOccupancyDilation);
  EXPECT_EQ(config.mesh.occupancy.dilation, 1);
  EXPECT_TRUE(config.mesh.pipeline.postprocess);
  EXPECT_TRUE(config.mesh.pipeline.cleanup.remove_floaters);
  EXPECT_EQ(config.mesh.pipeline.cleanup.floater_diagonal_ratio, 0.15);
  EXPECT_TRUE(config.mesh.pipeline.simplify);
  EXPECT_EQ(config.mesh.mesh_threads, 0);  // auto: the machine's cores
  EXPECT_GE(effective_mesh_threads(config.mesh), 1);
  EXPECT_EQ(config.mesh.pipeline.max_marching_cubes_faces,
            static_cast<std::size_t>(kDefaultMaxMarchingCubesFaces));
  EXPECT_EQ(config.metrics_listen, "0.0.0.0:9464");
  EXPECT_EQ(config.logging.level, "info");
  EXPECT_EQ(config.logging.format, "text");
  EXPECT_FALSE(config.logging.prompts);
  EXPECT_EQ(config.drain_grace_seconds, 30);
  EXPECT_EQ(config.progress_interval_tokens, 32);
}

TEST(ServerConfig, ReadsEveryKindOfValue) {
  const ServerConfig config = parse(std::string(kMinimal) + R"(
listen: "[::1]:6000"
device: cuda:1
dtype: bfloat16
single_stream_decode: reference
cuda_graphs: False
batching:
  batch_buckets: [2, 16, 256]
  max_queue_delay_ms: 0
limits:
  max_resolution_base: 10
  min_resolution_base: 1
  default_deadline_ms: 0
defaults:
  guidance_scale: 0
  top_p: 1
  resolution_base: 10
  format: ply
mesh:
  occupancy: dense
  occupancy_coarsest_resolution_base: 10
  occupancy_dilation: 0
  floater_ratio: 5e-2
metrics_listen: ""
logging:
  level: "off"
  format: json
  prompts: true
drain_grace_seconds: 0
)");
  EXPECT_EQ(config.listen, "[::1]:6000");
  EXPECT_EQ(config.device, "cuda:1");
  EXPECT_EQ(config.dtype, "bfloat16");
  EXPECT_EQ(config.single_stream_decode, "reference");
  EXPECT_EQ(config.cuda_graphs, "off");
  EXPECT_EQ(config.batching.batch_buckets, (std::vector<int64_t>{2, 16, 256}));
  EXPECT_EQ(config.batching.max_queue_delay_ms, 0);
  EXPECT_EQ(config.limits.default_deadline_ms, 0);
  EXPECT_EQ(config.defaults.guidance_scale, 0.0);
  EXPECT_EQ(config.defaults.top_p, 1.0);
  EXPECT_EQ(config.defaults.format, MeshFormat::kPly);
  EXPECT_FALSE(config.mesh.occupancy.hierarchical);
  EXPECT_EQ(config.mesh.occupancy.coarsest_resolution_base, 10);
  EXPECT_EQ(config.mesh.occupancy.dilation, 0);
  EXPECT_EQ(config.mesh.pipeline.cleanup.floater_diagonal_ratio, 0.05);
  EXPECT_EQ(config.metrics_listen, "");
  EXPECT_EQ(config.logging.level, "off");
  EXPECT_EQ(config.logging.format, "json");
  EXPECT_TRUE(config.logging.prompts);
  EXPECT_EQ(config.drain_grace_seconds, 0);
}

TEST(ServerConfig, EmptySectionMeansDefaults) {
  // `tls:` with its lines commented out is null in YAML.
  const ServerConfig config = parse(std::string(kMinimal) + "tls:\nmesh:\n");
  EXPECT_FALSE(config.tls.enabled());
  EXPECT_TRUE(config.mesh.pipeline.postprocess);
}

TEST(ServerConfig, RelativePathsResolveAgainstTheFileFolder) {
  TempDir dir;
  dir.file("model.yaml", read_file(kDemoModel));
  dir.folder("clip");
  const std::string server = dir.file("server.yaml", R"(model:
  config: ./model.yaml
  clip_model: clip
  clip_vocab: clip/
)");
  const ServerConfig config = load_server_config(server);
  EXPECT_EQ(config.model.config, dir.path() + "/model.yaml");
  EXPECT_EQ(config.model.clip_model, dir.path() + "/clip");
  EXPECT_EQ(config.model.clip_vocab, dir.path() + "/clip");

  // Absolute paths stay as they are.
  const std::string absolute = dir.file("absolute.yaml", "model:\n  config: " + kDemoModel + "\n");
  EXPECT_EQ(load_server_config(absolute).model.config, kDemoModel);
}

TEST(ServerConfig, WithoutBaseDirPathsStayRelativeToTheCurrentDirectory) {
  TempDir dir;
  const std::string model = dir.file("model.yaml", read_file(kDemoModel));
  const ServerConfig config =
      parse_server_config("model:\n  config: " + model + "\n", "inline.yaml");
  EXPECT_EQ(config.model.config, model);
  testing::expect_error([] { (void)parse_server_config(kMinimal, "inline.yaml"); },
                        ErrorCode::kNotFound, {"inline.yaml", "model.config", "demo.yaml"});
}

TEST(ServerConfig, TlsWithBothFilesIsEnabled) {
  TempDir dir;
  dir.file("server.pem", "cert");
  dir.file("server.key", "key");
  const ServerConfig config = parse(std::string(kMinimal) + "tls:\n  cert_file: " + dir.path() +
                                    "/server.pem\n  key_file: " + dir.path() + "/server.key\n");
  EXPECT_TRUE(config.tls.enabled());
  EXPECT_EQ(config.tls.key_file, dir.path() + "/server.key");
}

TEST(ServerConfig, KeysAreListedInFileOrder) {
  const std::vector<std::string> keys = server_config_keys();
  ASSERT_FALSE(keys.empty());
  EXPECT_EQ(keys.front(), "listen");
  EXPECT_EQ(keys.back(), "progress_interval_tokens");
  EXPECT_NE(std::find(keys.begin(), keys.end(), "batching.batch_buckets"), keys.end());
  // The occupancy keys open the mesh section, before the post-processing ones.
  const auto at = [&](const std::string& name) {
    return std::find(keys.begin(), keys.end(), name);
  };
  EXPECT_LT(at("defaults.format"), at("mesh.occupancy"));
  EXPECT_LT(at("mesh.occupancy"), at("mesh.occupancy_coarsest_resolution_base"));
  EXPECT_LT(at("mesh.occupancy_coarsest_resolution_base"), at("mesh.occupancy_dilation"));
  EXPECT_LT(at("mesh.occupancy_dilation"), at("mesh.postprocess"));
  // The batching section: mode first, the continuous-mode budget after the queue keys.
  EXPECT_LT(at("batching.mode"), at("batching.batch_buckets"));
  EXPECT_LT(at("batching.max_queue_size"), at("batching.max_joins_per_step"));
  EXPECT_LT(at("http_listen"), at("logging.level"));
  EXPECT_LT(at("logging.level"), at("logging.format"));
  EXPECT_LT(at("http_listen"), at("http.io_threads"));
  EXPECT_LT(at("http.cors_allowed_origins"), at("grpc.max_threads"));
  EXPECT_LT(at("defaults.format"), at("defaults.mesh_profile"));
  EXPECT_LT(at("mesh.mesh_threads"), at("jobs.result_ttl_s"));
  EXPECT_LT(at("jobs.deadline_ms"), at("cache.enabled"));
  EXPECT_LT(at("cache.shared_across_keys"), at("metrics_listen"));
  EXPECT_LT(at("auth.api_keys_file"), at("policy.prompt_denylist_file"));
  EXPECT_LT(at("batching.max_joins_per_step"), at("batching.batch_max_wait_ms"));
  EXPECT_LT(at("batching.batch_max_wait_ms"), at("batching.max_queued_batch"));
  EXPECT_LT(at("mesh.mesh_threads"), at("mesh.max_marching_cubes_faces"));
  EXPECT_LT(at("jobs.store"), at("jobs.result_ttl_s"));
  EXPECT_LT(at("jobs.deadline_ms"), at("jobs.lease_ms"));
  EXPECT_LT(at("cache.shared_across_keys"), at("cache.redis"));
  EXPECT_LT(at("cache.redis_ttl_s"), at("redis.url"));
  EXPECT_LT(at("redis.key_prefix"), at("redis.sentinels"));
  EXPECT_LT(at("redis.master_name"), at("metrics_listen"));
  EXPECT_LT(at("jobs.max_takeovers"), at("jobs.durable_replicas"));
  EXPECT_LT(at("limits.max_target_face_count"), at("limits.max_lod_levels"));
  EXPECT_LT(at("http.three_js_dir"), at("http.tls"));
  EXPECT_LT(at("http.gzip"), at("http.gzip_min_bytes"));
  EXPECT_LT(at("grpc.write_timeout_ms"), at("grpc.handshake_timeout_ms"));
  EXPECT_EQ(keys.size(), 112u);
}

// --- errors: each names the key -------------------------------------------------------------

TEST(ServerConfigErrors, UnknownKeyNamesItAndSuggests) {
  expect_invalid("batching:\n  max_queue_sise: 3\n",
                 {"unknown key batching.max_queue_sise", "did you mean batching.max_queue_size"});
  // A key in the wrong section: the hint names where it belongs.
  expect_invalid("max_queue_size: 3\n",
                 {"unknown key max_queue_size", "did you mean batching.max_queue_size"});
  expect_invalid("colour: blue\n", {"unknown key colour"});
  expect_invalid("modle:\n  config: x\n", {"unknown key modle", "did you mean model"});
}

TEST(ServerConfigErrors, DuplicateKey) {
  expect_invalid("listen: \"127.0.0.1:1\"\nlisten: \"127.0.0.1:2\"\n", {"duplicate key listen"});
}

TEST(ServerConfigErrors, MissingModelConfig) {
  testing::expect_error([] { (void)parse("listen: \"0.0.0.0:1\"\n"); }, ErrorCode::kInvalidArgument,
                        {"inline.yaml", "missing required key model.config"});
  testing::expect_error([] { (void)parse(""); }, ErrorCode::kInvalidArgument,
                        {"inline.yaml", "empty document", "model.config"});
  testing::expect_error([] { (void)parse("model:\n  config: \"\"\n"); },
                        ErrorCode::kInvalidArgument, {"inline.yaml", "model.config"});
  testing::expect_error([] { (void)parse("model:\n  config: nothing-here.yaml\n"); },
                        ErrorCode::kNotFound, {"inline.yaml", "model.config", "nothing-here.yaml"});
}

TEST(ServerConfigErrors, WrongTypeNamesKeyAndValue) {
  expect_invalid("batching:\n  max_queue_size: \"64\"\n",
                 {"batching.max_queue_size: expected an integer", "\"64\""});
  expect_invalid("batching:\n  max_queue_delay_ms: 1.5\n",
                 {"batching.max_queue_delay_ms: expected an integer", "1.5"});
  expect_invalid("cuda_graphs: yes\n", {"cuda_graphs: unknown value 'yes'", "emulate"});
  expect_invalid("decode_kernels: cuda\n",
                 {"decode_kernels: unknown value 'cuda'", "torch or triton"});
  expect_invalid("batching:\n  batch_buckets: 4\n",
                 {"batching.batch_buckets: expected a list of integers"});
  expect_invalid("batching:\n  batch_buckets: [1, two]\n",
                 {"batching.batch_buckets[1]: expected an integer", "two"});
  expect_invalid("defaults:\n  guidance_scale: high\n",
                 {"defaults.guidance_scale: expected a number", "high"});
  expect_invalid("listen: [a, b]\n", {"listen: expected a string, got a list"});
  expect_invalid("limits: 5\n", {"limits: expected a mapping"});
  expect_invalid("limits:\n  max_prompt_bytes: 99999999999999999999\n",
                 {"limits.max_prompt_bytes", "out of range"});
  testing::expect_error([] { (void)parse("- a\n- b\n"); }, ErrorCode::kInvalidArgument,
                        {"inline.yaml", "top level: expected a mapping"});
}

TEST(ServerConfigErrors, BadListenAddress) {
  expect_invalid("listen: \"localhost\"\n", {"listen", "host:port"});
  expect_invalid("listen: \":50051\"\n", {"listen", "host is empty"});
  expect_invalid("listen: \"0.0.0.0:0\"\n", {"listen", "port 0", "1..65535"});
  expect_invalid("listen: \"0.0.0.0:70000\"\n", {"listen", "port 70000"});
  expect_invalid("listen: \"0.0.0.0:http\"\n", {"listen", "'http' is not a number"});
  expect_invalid("listen: \"0.0.0.0:\"\n", {"listen", "not a number"});
  expect_invalid("listen: \"::1:50051\"\n", {"listen", "brackets"});
  expect_invalid("listen: \"[::1\"\n", {"listen", "]"});
  expect_invalid("listen: \"[::1]50051\"\n", {"listen", "[ipv6-address]:port"});
  expect_invalid("listen: \"\"\n", {"listen", "must not be empty"});
  expect_invalid("metrics_listen: \"0.0.0.0:99999\"\n", {"metrics_listen", "port 99999"});
  // One port for both listeners would fail at bind time with a vaguer message.
  expect_invalid("listen: \"127.0.0.1:7000\"\nmetrics_listen: \"0.0.0.0:7000\"\n",
                 {"metrics_listen", "port of listen"});
  expect_invalid("http_listen: \"localhost\"\n", {"http_listen"});
  expect_invalid("listen: \"127.0.0.1:7000\"\nhttp_listen: \"0.0.0.0:7000\"\n",
                 {"http_listen", "port of listen"});
  expect_invalid("metrics_listen: \"127.0.0.1:7001\"\nhttp_listen: \"0.0.0.0:7001\"\n",
                 {"http_listen", "port of metrics_listen"});
  EXPECT_EQ(parse(std::string(kMinimal) + "listen: \"[::1]:50051\"\n").listen, "[::1]:50051");
  EXPECT_EQ(parse(std::string(kMinimal) + "listen: \"localhost:1\"\n").listen, "localhost:1");
}

TEST(ServerConfigErrors, BadBatchBuckets) {
  expect_invalid("batching:\n  batch_buckets: [1, 4, 2]\n",
                 {"batching.batch_buckets", "increasing order", "4 comes before 2"});
  expect_invalid("batching:\n  batch_buckets: [1, 2, 2, 4]\n",
                 {"batching.batch_buckets", "2 is listed twice"});
  expect_invalid("batching:\n  batch_buckets: []\n", {"batching.batch_buckets", "at least one"});
  expect_invalid("batching:\n  batch_buckets: [0, 1]\n", {"batching.batch_buckets[0] (0)"});
  expect_invalid("batching:\n  batch_buckets: [1, 512]\n",
                 {"batching.batch_buckets[1] (512)", "between 1 and 256"});
}

TEST(ServerConfigErrors, BadBatchingNumbers) {
  expect_invalid("batching:\n  max_queue_delay_ms: -1\n", {"batching.max_queue_delay_ms (-1)"});
  expect_invalid("batching:\n  max_queue_delay_ms: 60001\n",
                 {"batching.max_queue_delay_ms (60001)"});
  expect_invalid("batching:\n  max_queue_size: 0\n", {"batching.max_queue_size (0)"});
  expect_invalid("batching:\n  max_joins_per_step: 0\n", {"batching.max_joins_per_step (0)"});
  expect_invalid("batching:\n  batch_max_wait_ms: -1\n", {"batching.batch_max_wait_ms (-1)"});
  expect_invalid("batching:\n  batch_max_wait_ms: 86400001\n",
                 {"batching.batch_max_wait_ms (86400001)"});
  expect_invalid("batching:\n  max_queue_size: 10\n  max_queued_batch: 11\n",
                 {"batching.max_queued_batch (11)"});
  expect_invalid("batching:\n  max_queued_batch: -1\n", {"batching.max_queued_batch (-1)"});
  expect_invalid("batching:\n  mode: dynamic\n",
                 {"batching.mode", "'dynamic'", "continuous", "static"});
}

TEST(ServerConfigErrors, BadSamplingDefaults) {
  expect_invalid("defaults:\n  top_p: 0\n", {"defaults.top_p (0.0)", "(0, 1]"});
  expect_invalid("defaults:\n  top_p: 1.5\n", {"defaults.top_p (1.5)"});
  expect_invalid("defaults:\n  top_p: .nan\n", {"defaults.top_p"});
  expect_invalid("defaults:\n  guidance_scale: .nan\n", {"defaults.guidance_scale (.nan)"});
  expect_invalid("defaults:\n  guidance_scale: .inf\n", {"defaults.guidance_scale (.inf)"});
  expect_invalid("defaults:\n  guidance_scale: -0.5\n", {"defaults.guidance_scale (-0.5)"});
  expect_invalid("defaults:\n  guidance_scale: 100.5\n", {"defaults.guidance_scale (100.5)"});
  expect_invalid("defaults:\n  format: stl\n",
                 {"defaults.format", "unknown format 'stl'", "raw, obj, ply or glb"});
  EXPECT_EQ(parse(std::string(kMinimal) + "defaults:\n  top_p: 0.9\n").defaults.top_p, 0.9);
  EXPECT_FALSE(parse(std::string(kMinimal) + "defaults:\n  top_p: null\n").defaults.top_p);
}

TEST(ServerConfigErrors, ResolutionOutsideLimits) {
  expect_invalid("defaults:\n  resolution_base: 10\n",
                 {"defaults.resolution_base (10)", "limits.max_resolution_base (9)"});
  expect_invalid("defaults:\n  resolution_base: 3\n",
                 {"defaults.resolution_base (3)", "limits.min_resolution_base (4)"});
  expect_invalid("limits:\n  min_resolution_base: 7\n  max_resolution_base: 6\n",
                 {"limits.min_resolution_base (7)", "limits.max_resolution_base (6)"});
  expect_invalid("limits:\n  min_resolution_base: 0\n", {"limits.min_resolution_base (0)"});
  expect_invalid("limits:\n  max_resolution_base: 11\n", {"limits.max_resolution_base (11)"});
}

TEST(ServerConfigErrors, BadLimits) {
  expect_invalid("limits:\n  max_prompt_bytes: 0\n", {"limits.max_prompt_bytes (0)"});
  expect_invalid("limits:\n  max_prompt_bytes: 65537\n", {"limits.max_prompt_bytes (65537)"});
  expect_invalid("limits:\n  max_message_bytes: 1000\n",
                 {"limits.max_message_bytes (1000)", "1048576"});
  expect_invalid("limits:\n  max_message_bytes: 4294967296\n",
                 {"limits.max_message_bytes (4294967296)"});
  expect_invalid("limits:\n  max_target_face_count: 0\n", {"limits.max_target_face_count (0)"});
  expect_invalid("limits:\n  default_deadline_ms: -1\n", {"limits.default_deadline_ms (-1)"});
  expect_invalid("limits:\n  max_lod_levels: 0\n", {"limits.max_lod_levels (0)"});
  expect_invalid("limits:\n  max_lod_levels: 9\n", {"limits.max_lod_levels (9)", "8"});
}

TEST(ServerConfigErrors, BadWords) {
  expect_invalid("device: gpu\n", {"device", "'gpu'", "cpu, cuda or cuda:N"});
  expect_invalid("device: \"cuda:x\"\n", {"device", "'cuda:x'"});
  expect_invalid("device: \"cuda:-1\"\n", {"device", "'cuda:-1'"});
  expect_invalid("dtype: float16\n", {"dtype", "'float16'", "float32 or bfloat16"});
  expect_invalid("single_stream_decode: fast\n", {"single_stream_decode", "'fast'"});
  expect_invalid("logging:\n  level: verbose\n", {"logging.level", "'verbose'", "critical"});
  expect_invalid("logging:\n  format: xml\n", {"logging.format", "'xml'", "text or json"});
  // The keys that moved into logging: name their new place.
  expect_invalid("log_level: info\n", {"log_level", "logging.level"});
  expect_invalid("log_prompts: true\n", {"log_prompts", "logging.prompts"});
}

TEST(ServerConfigErrors, BadJobsCacheAndProfile) {
  expect_invalid("defaults:\n  mesh_profile: unity\n",
                 {"defaults.mesh_profile", "'unity'", "none or roblox"});
  expect_invalid("jobs:\n  result_ttl_s: 0\n", {"jobs.result_ttl_s"});
  expect_invalid("jobs:\n  max_wait_ms: 600001\n", {"jobs.max_wait_ms"});
  expect_invalid("jobs:\n  max_jobs_per_key: 10\n  max_jobs: 5\n",
                 {"jobs.max_jobs_per_key (10)", "jobs.max_jobs (5)"});
  expect_invalid("cache:\n  max_bytes: -1\n", {"cache.max_bytes"});
  expect_invalid("cache:\n  enabled: maybe\n", {"cache.enabled"});
  expect_invalid("cache:\n  max_bytes_total: 1\n", {"unknown key cache.max_bytes_total"});
}

TEST(ServerConfigErrors, BadMeshAndServerNumbers) {
  expect_invalid("mesh:\n  floater_ratio: 1.0\n", {"mesh.floater_ratio (1.0)", "between 0 and 1"});
  expect_invalid("mesh:\n  floater_ratio: 0\n", {"mesh.floater_ratio (0.0)"});
  expect_invalid("mesh:\n  mesh_threads: -1\n", {"mesh.mesh_threads (-1)"});
  expect_invalid("mesh:\n  max_marching_cubes_faces: -5\n", {"mesh.max_marching_cubes_faces (-5)"});
  expect_invalid("drain_grace_seconds: -1\n", {"drain_grace_seconds (-1)"});
  expect_invalid("progress_interval_tokens: 0\n", {"progress_interval_tokens (0)"});
}

TEST(ServerConfigErrors, BadOccupancy) {
  expect_invalid("mesh:\n  occupancy: sparse\n",
                 {"mesh.occupancy: unknown value 'sparse'", "hierarchical or dense"});
  // Words are exact, as every other word key's.
  expect_invalid("mesh:\n  occupancy: Dense\n", {"mesh.occupancy: unknown value 'Dense'"});
  expect_invalid("mesh:\n  occupancy:\n", {"mesh.occupancy: unknown value ''"});
  expect_invalid("mesh:\n  occupancy: [dense]\n", {"mesh.occupancy: expected a string"});
  expect_invalid("mesh:\n  occupancy_coarsest_resolution_base: 0\n",
                 {"mesh.occupancy_coarsest_resolution_base (0)", "between 1 and 10"});
  expect_invalid("mesh:\n  occupancy_coarsest_resolution_base: 11\n",
                 {"mesh.occupancy_coarsest_resolution_base (11)", "between 1 and 10"});
  expect_invalid("mesh:\n  occupancy_coarsest_resolution_base: 4.5\n",
                 {"mesh.occupancy_coarsest_resolution_base: expected an integer", "4.5"});
  expect_invalid("mesh:\n  occupancy_dilation: -1\n",
                 {"mesh.occupancy_dilation (-1)", "between 0 and 8"});
  expect_invalid("mesh:\n  occupancy_dilation: 9\n",
                 {"mesh.occupancy_dilation (9)", "between 0 and 8"});
  expect_invalid("mesh:\n  occupancy_dilation: one\n",
                 {"mesh.occupancy_dilation: expected an integer", "one"});
  // A key in the wrong section is pointed to the mesh one.
  expect_invalid("occupancy: dense\n", {"unknown key occupancy", "did you mean mesh.occupancy"});
  expect_invalid("mesh:\n  ocupancy: dense\n",
                 {"unknown key mesh.ocupancy", "did you mean mesh.occupancy"});

  // The ends of each range are fine, and a coarsest level above the default resolution is not
  // an error (that request's grid is then evaluated densely).
  const ServerConfig low = parse(std::string(kMinimal) +
                                 "mesh:\n  occupancy_coarsest_resolution_base: 1\n"
                                 "  occupancy_dilation: 8\n");
  EXPECT_EQ(low.mesh.occupancy.coarsest_resolution_base, 1);
  EXPECT_EQ(low.mesh.occupancy.dilation, 8);
  EXPECT_TRUE(parse(std::string(kMinimal) + "mesh:\n  occupancy: hierarchical\n")
                  .mesh.occupancy.hierarchical);
}

TEST(ServerConfigErrors, TlsNeedsBothFiles) {
  TempDir dir;
  const std::string cert = dir.file("server.pem", "cert");
  expect_invalid("tls:\n  cert_file: " + cert + "\n",
                 {"tls.cert_file and tls.key_file", "both or neither", "tls.key_file is empty"});
  expect_invalid("tls:\n  key_file: " + cert + "\n",
                 {"tls.cert_file and tls.key_file", "tls.cert_file is empty"});
}

TEST(ServerConfigErrors, HttpTlsNeedsTheTlsSectionAndAnHttpListener) {
  expect_invalid("http_listen: 127.0.0.1:8080\nhttp:\n  tls: true\n",
                 {"http.tls", "tls.cert_file, tls.key_file"});
  TempDir dir;
  const std::string cert = dir.file("server.pem", "cert");
  const std::string tls = "tls:\n  cert_file: " + cert + "\n  key_file: " + cert + "\n";
  expect_invalid(tls + "http:\n  tls: true\n", {"http.tls", "no http_listen"});
  const ServerConfig ok =
      parse(std::string(kMinimal) + tls + "http_listen: 127.0.0.1:8080\nhttp:\n  tls: true\n");
  EXPECT_TRUE(ok.http.tls);
  EXPECT_TRUE(ok.http.gzip);  // on by default
  EXPECT_EQ(ok.http.gzip_min_bytes, 1024);
}

TEST(ServerConfigErrors, TlsFileMissingIsNotFound) {
  TempDir dir;
  const std::string cert = dir.file("server.pem", "cert");
  testing::expect_error(
      [&] {
        (void)parse(std::string(kMinimal) + "tls:\n  cert_file: " + cert +
                    "\n  key_file: /nonexistent/server.key\n");
      },
      ErrorCode::kNotFound, {"inline.yaml", "tls.key_file", "/nonexistent/server.key"});
  // A folder where a file belongs.
  expect_invalid("tls:\n  cert_file: " + cert + "\n  key_file: " + dir.path() + "\n",
                 {"tls.key_file", "not a regular file"});
  testing::expect_error(
      [&] {
        (void)parse(std::string(kMinimal) +
                    "policy:\n  prompt_denylist_file: /nonexistent/denylist.txt\n");
      },
      ErrorCode::kNotFound, {"inline.yaml", "policy.prompt_denylist_file"});
}

TEST(ServerConfigErrors, WeightsInPairsAndPresent) {
  TempDir dir;
  const std::string gpt = dir.file("shape_gpt.safetensors", "x");
  expect_invalid("  gpt_weights: " + gpt + "\n",
                 {"model.gpt_weights and model.shape_weights", "model.shape_weights is empty"});
  testing::expect_error(
      [&] {
        (void)parse(std::string(kMinimal) + "  gpt_weights: " + gpt +
                    "\n  shape_weights: missing.safetensors\n");
      },
      ErrorCode::kNotFound, {"model.shape_weights", kModels + "/missing.safetensors"});
  expect_invalid("  clip_model: " + gpt + "\n", {"model.clip_model", "not a directory"});
  testing::expect_error([&] { (void)parse(std::string(kMinimal) + "  clip_vocab: nope.txt.gz\n"); },
                        ErrorCode::kNotFound, {"model.clip_vocab", "nope.txt.gz"});
}

TEST(ServerConfigErrors, YamlSyntaxErrorNamesFileAndLine) {
  TempDir dir;
  const std::string path = dir.file("broken.yaml", "model:\n  config: demo.yaml\nlisten: a: b\n");
  testing::expect_error([&] { (void)load_server_config(path); }, ErrorCode::kInvalidArgument,
                        {path, "YAML syntax error at line 3, column 10"});
  const std::string tabs = dir.file("tabs.yaml", "model:\n  config: demo.yaml\n\tlisten: x\n");
  testing::expect_error([&] { (void)load_server_config(tabs); }, ErrorCode::kInvalidArgument,
                        {tabs, "YAML syntax error at line 3"});
}

TEST(ServerConfigErrors, MissingFileIsNotFound) {
  testing::expect_error([] { (void)load_server_config("/nonexistent/server.yaml"); },
                        ErrorCode::kNotFound, {"/nonexistent/server.yaml"});
  testing::expect_error([] { (void)load_server_config(kModels); }, ErrorCode::kInvalidArgument,
                        {kModels, "not a regular file"});
}

// --- --print-config -----------------------------------------------------------------------------

TEST(ServerConfigRoundTrip, DemoPrintsAndParsesBackEqual) {
  const ServerConfig config = load_server_config(kDemoServer);
  const std::string yaml = server_config_to_yaml(config);
  EXPECT_NE(yaml.find("batch_buckets: [1, 2, 4, 8]"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("top_p: ~"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find(kDemoModel), std::string::npos) << yaml;
  // mesh_threads 0 says what it means on this machine.
  EXPECT_NE(
      yaml.find("mesh_threads: 0  # auto: " + std::to_string(effective_mesh_threads(config.mesh)) +
                ", the cores of this machine"),
      std::string::npos)
      << yaml;
  const ServerConfig again = parse_server_config(yaml, "printed.yaml");
  EXPECT_EQ(again, config) << yaml;
  EXPECT_EQ(again.source, "printed.yaml");
}

TEST(ServerConfigRoundTrip, EveryKeyChangedAndAwkwardPaths) {
  TempDir dir;
  // Names that YAML would misread unquoted.
  const std::string cert = dir.file("cert #1: a.pem", "c");
  const std::string key = dir.file("- key, [2].pem", "k");
  const std::string gpt = dir.file("true", "g");
  const std::string shape = dir.file("123", "s");
  const std::string clip = dir.folder("'clip' \"model\"");
  const std::string vocab = dir.file("vocab ~.txt.gz", "v");

  ServerConfig config;
  config.listen = "[::1]:123";
  config.tls = {cert, key, cert, "optional"};
  config.auth.api_keys_file = key;
  config.policy.prompt_denylist_file = vocab;
  config.reflection = false;
  config.model = {kDemoModel, gpt, shape, clip, vocab};
  config.device = "cuda:3";
  config.dtype = "bfloat16";
  config.single_stream_decode = "reference";
  config.cuda_graphs = "emulate";
  config.decode_kernels = "triton";
  config.batching = {BatchingMode::kStatic, {3, 5, 200}, 0, 7, 9, 1234, 5};
  config.limits = {1, 10, 2, 1 << 20, 5, 0, 250, 7};
  config.defaults = {0.1 + 0.2, 0.95, 2, MeshFormat::kObj};
  config.mesh.occupancy.hierarchical = false;
  config.mesh.occupancy.coarsest_resolution_base = 9;
  config.mesh.occupancy.dilation = 7;
  config.mesh.pipeline.postprocess = false;
  config.mesh.pipeline.cleanup.remove_floaters = false;
  config.mesh.pipeline.cleanup.floater_diagonal_ratio = 1.0 / 3.0;
  config.mesh.pipeline.simplify = false;
  config.mesh.mesh_threads = 9;
  config.metrics_listen = "";
  config.http_listen = "127.0.0.1:8080";
  config.http = {3,
                 101,
                 102,
                 103,
                 104,
                 105,
                 106,
                 1000,
                 2000,
                 30,
                 {"https://a.example.com", "http://[::1]:8080", "*"},
                 true,
                 "/srv/playground",
                 "/opt/three",
                 true,
                 false,
                 4096};
  config.grpc = {5, 6, 7, 1001, 1002, 8, 9, 2001, 10, 2002, 103};
  config.logging = {"critical", "json", true};
  config.drain_grace_seconds = 0;
  config.progress_interval_tokens = 1;
  config.source = "hand-made";
  ASSERT_NO_THROW(validate_server_config(config));

  const std::string yaml = server_config_to_yaml(config);
  const ServerConfig again = parse_server_config(yaml, "printed.yaml");
  EXPECT_EQ(again, config) << yaml;
  // Bit-exact floats, not merely close ones.
  EXPECT_EQ(again.defaults.guidance_scale, 0.1 + 0.2);
  EXPECT_EQ(again.mesh.pipeline.cleanup.floater_diagonal_ratio, 1.0 / 3.0);

  // And through a file elsewhere: the printed paths are absolute, so the folder does not matter.
  TempDir elsewhere;
  const std::string saved = elsewhere.file("effective.yaml", yaml);
  EXPECT_EQ(load_server_config(saved), config);
}

TEST(ServerConfigErrors, RedisFailoverKeys) {
  const ServerConfig ha = parse(std::string(kMinimal) +
                                "jobs:\n  store: redis\n  durable_replicas: 1\n"
                                "  durable_timeout_ms: 250\n"
                                "redis:\n  url: redis://:pw@unused\n"
                                "  sentinels: [\"10.0.0.1:26379\", \"[::1]:26380\"]\n"
                                "  master_name: mymaster\n");
  EXPECT_EQ(ha.redis.sentinels, (std::vector<std::string>{"10.0.0.1:26379", "[::1]:26380"}));
  EXPECT_EQ(ha.redis.master_name, "mymaster");
  EXPECT_EQ(ha.jobs.durable_replicas, 1);
  EXPECT_EQ(ha.jobs.durable_timeout_ms, 250);
  const ServerConfig printed = parse_server_config(server_config_to_yaml(ha), "printed.yaml");
  EXPECT_EQ(printed.redis.sentinels, ha.redis.sentinels);  // (the URL's password is hidden)
  EXPECT_EQ(printed.redis.master_name, ha.redis.master_name);
  EXPECT_EQ(printed.jobs, ha.jobs);
  EXPECT_EQ(ServerConfig().jobs.durable_replicas, 0);
  expect_invalid("redis:\n  sentinels: [\"10.0.0.1:26379\"]\n", {"redis.master_name"});
  expect_invalid("redis:\n  sentinels: [\"10.0.0.1\"]\n  master_name: m\n",
                 {"redis.sentinels", "10.0.0.1"});
  expect_invalid("jobs:\n  durable_replicas: -1\n", {"jobs.durable_replicas"});
  expect_invalid("jobs:\n  durable_timeout_ms: 0\n", {"jobs.durable_timeout_ms"});
}

TEST(ServerConfigErrors, BadHttpAndGrpcSections) {
  expect_invalid("http:\n  header_timeout_ms: 0\n", {"http.header_timeout_ms", "0"});
  expect_invalid("http:\n  max_connections: -1\n", {"http.max_connections"});
  expect_invalid("http:\n  max_request_line_bytes: 20000\n  max_header_bytes: 16384\n",
                 {"http.max_request_line_bytes", "http.max_header_bytes"});
  expect_invalid("http:\n  cors_allowed_origins: [\"https://a.example.com/\"]\n",
                 {"http.cors_allowed_origins", "https://a.example.com/"});
  expect_invalid("http:\n  cors_allowed_origins: \"*\"\n",
                 {"http.cors_allowed_origins", "list of strings"});
  expect_invalid("http:\n  header_timeot_ms: 5\n", {"header_timeot_ms", "header_timeout_ms"});
  expect_invalid("http:\n  gzip_min_bytes: -1\n", {"http.gzip_min_bytes"});
  expect_invalid("grpc:\n  max_threads: 1\n", {"grpc.max_threads", "1"});
  expect_invalid("grpc:\n  max_connection_age_ms: 10\n", {"grpc.max_connection_age_ms"});
  expect_invalid("grpc:\n  max_calls_awaiting_message: 0\n", {"grpc.max_calls_awaiting_message"});
  expect_invalid("grpc:\n  handshake_timeout_ms: 50\n", {"grpc.handshake_timeout_ms", "50"});
  const ServerConfig ok = parse(std::string(kMinimal) +
                                "http:\n  cors_allowed_origins: [\"*\"]\n  io_threads: 4\n"
                                "grpc:\n  max_connection_age_ms: 60000\n"
                                "  handshake_timeout_ms: 2000\n");
  EXPECT_EQ(ok.grpc.handshake_timeout_ms, 2000);
  EXPECT_EQ(ServerConfig().grpc.handshake_timeout_ms, 10'000);  // as http.header_timeout_ms
  EXPECT_EQ(ok.http.cors_allowed_origins, std::vector<std::string>{"*"});
  EXPECT_EQ(ok.http.io_threads, 4);
  EXPECT_EQ(ok.grpc.max_connection_age_ms, 60000);
  EXPECT_EQ(parse(std::string(kMinimal) + "http:\n  cors_allowed_origins:\n")
                .http.cors_allowed_origins.size(),
            0u);
}

TEST(ServerConfigRoundTrip, DefaultsPrintAndParseBack) {
  ServerConfig config;
  config.model.config = kDemoModel;
  const ServerConfig again = parse_server_config(server_config_to_yaml(config), "printed.yaml");
  EXPECT_EQ(again, config);
}

TEST(ServerConfigRoundTrip, EqualityLooksAtSettingsOnly) {
  ServerConfig a;
  ServerConfig b;
  b.source = "elsewhere.yaml";
  EXPECT_EQ(a, b);
  b.mesh.mesh_threads = 3;
  EXPECT_NE(a, b);
  b = a;
  b.defaults.top_p = 0.5;
  EXPECT_NE(a, b);
  for (const auto& change : std::vector<void (*)(ServerConfig&)>{
           [](ServerConfig& c) { c.mesh.occupancy.hierarchical = false; },
           [](ServerConfig& c) { c.mesh.occupancy.coarsest_resolution_base = 6; },
           [](ServerConfig& c) { c.mesh.occupancy.dilation = 2; }}) {
    b = a;
    change(b);
    EXPECT_NE(a, b);
  }
}

TEST(ServerConfigRoundTrip, OccupancyKeysPrintAndParseBack) {
  ServerConfig config;
  config.model.config = kDemoModel;
  config.mesh.occupancy.hierarchical = false;
  config.mesh.occupancy.coarsest_resolution_base = 7;
  config.mesh.occupancy.dilation = 0;
  const std::string yaml = server_config_to_yaml(config);
  EXPECT_NE(yaml.find("mesh:\n  occupancy: \"dense\"\n  occupancy_coarsest_resolution_base: 7\n"
                      "  occupancy_dilation: 0\n  postprocess: true\n"),
            std::string::npos)
      << yaml;
  const ServerConfig again = parse_server_config(yaml, "printed.yaml");
  EXPECT_EQ(again, config) << yaml;
  EXPECT_FALSE(again.mesh.occupancy.hierarchical);
  EXPECT_EQ(again.mesh.occupancy.coarsest_resolution_base, 7);
  EXPECT_EQ(again.mesh.occupancy.dilation, 0);
}

// --- command-line overrides -------------------------------------------------------------------

TEST(ServerConfigOverride, CudaGraphsTakesOnOffEmulateAndTheOldBooleans) {
  ServerConfig config = load_server_config(kDemoServer);
  EXPECT_EQ(config.cuda_graphs, "on");
  for (const auto& [text, mode] :
       std::vector<std::pair<std::string, std::string>>{{"emulate", "emulate"},
                                                        {"off", "off"},
                                                        {"on", "on"},
                                                        {"false", "off"},
                                                        {"True", "on"}}) {
    apply_override(config, "cuda_graphs", text);
    EXPECT_EQ(config.cuda_graphs, mode) << text;
  }
}

TEST(ServerConfigOverride, SetsKeysWithTheirTypes) {
  ServerConfig config = load_server_config(kDemoServer);
  apply_override(config, "listen", "0.0.0.0:6000");
  apply_override(config, "metrics_listen", "");
  apply_override(config, "batching.max_queue_delay_ms", "20");
  apply_override(config, "batching.batch_buckets", "1,2,4");
  apply_override(config, "batching.mode", "static");
  apply_override(config, "device", "cuda:0");
  apply_override(config, "logging.level", "debug");
  apply_override(config, "logging.format", "json");
  apply_override(config, "cuda_graphs", "false");
  apply_override(config, "defaults.top_p", "0.9");
  apply_override(config, "defaults.format", "obj");
  apply_override(config, "mesh.floater_ratio", "0.2");
  apply_override(config, "mesh.occupancy", "dense");
  apply_override(config, "mesh.occupancy_coarsest_resolution_base", "6");
  apply_override(config, "mesh.occupancy_dilation", "0");
  EXPECT_EQ(config.listen, "0.0.0.0:6000");
  EXPECT_EQ(config.metrics_listen, "");
  EXPECT_EQ(config.batching.max_queue_delay_ms, 20);
  EXPECT_EQ(config.batching.batch_buckets, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(config.batching.mode, BatchingMode::kStatic);
  EXPECT_EQ(config.device, "cuda:0");
  EXPECT_EQ(config.logging.level, "debug");
  EXPECT_EQ(config.logging.format, "json");
  EXPECT_EQ(config.cuda_graphs, "off");
  EXPECT_EQ(config.defaults.top_p, 0.9);
  EXPECT_EQ(config.defaults.format, MeshFormat::kObj);
  EXPECT_EQ(config.mesh.pipeline.cleanup.floater_diagonal_ratio, 0.2);
  EXPECT_FALSE(config.mesh.occupancy.hierarchical);
  EXPECT_EQ(config.mesh.occupancy.coarsest_resolution_base, 6);
  EXPECT_EQ(config.mesh.occupancy.dilation, 0);
  EXPECT_EQ(config.source, kDemoServer);

  apply_override(config, "defaults.top_p", "null");
  EXPECT_FALSE(config.defaults.top_p.has_value());
  apply_override(config, "batching.batch_buckets", "[2, 16]");
  EXPECT_EQ(config.batching.batch_buckets, (std::vector<int64_t>{2, 16}));
  apply_override(config, "batching.batch_buckets", " 8 ");
  EXPECT_EQ(config.batching.batch_buckets, (std::vector<int64_t>{8}));
  apply_override(config, "mesh.occupancy", "hierarchical");
  EXPECT_EQ(config.mesh.occupancy.hierarchical, true);
}

TEST(ServerConfigOverride, PathsAreRelativeToTheCurrentDirectory) {
  ServerConfig config = load_server_config(kDemoServer);
  apply_override(config, "model.clip_vocab", ".");
  EXPECT_EQ(config.model.clip_vocab, current_directory());
  apply_override(config, "model.config", kDemoModel);
  EXPECT_EQ(config.model.config, kDemoModel);
}

TEST(ServerConfigOverride, AListOfOriginsByCommasOrYaml) {
  ServerConfig config = load_server_config(kDemoServer);
  apply_override(config, "http.cors_allowed_origins", "https://a.example.com, http://b:81");
  EXPECT_EQ(config.http.cors_allowed_origins,
            (std::vector<std::string>{"https://a.example.com", "http://b:81"}));
  apply_override(config, "http.cors_allowed_origins", "[\"*\"]");
  EXPECT_EQ(config.http.cors_allowed_origins, std::vector<std::string>{"*"});
  apply_override(config, "http.cors_allowed_origins", "");
  EXPECT_TRUE(config.http.cors_allowed_origins.empty());
  apply_override(config, "grpc.max_threads", "64");
  EXPECT_EQ(config.grpc.max_threads, 64);
}

TEST(ServerConfigOverride, UnknownKeyIsNamed) {
  ServerConfig config = load_server_config(kDemoServer);
  const ServerConfig before = config;
  testing::expect_error(
      [&] { apply_override(config, "batching.max_queue_sise", "3"); }, ErrorCode::kInvalidArgument,
      {"unknown key batching.max_queue_sise", "did you mean batching.max_queue_size"});
  testing::expect_error(
      [&] { apply_override(config, "max_queue_delay_ms", "3"); }, ErrorCode::kInvalidArgument,
      {"unknown key max_queue_delay_ms", "did you mean batching.max_queue_delay_ms"});
  testing::expect_error([&] { apply_override(config, "nonsense", "3"); },
                        ErrorCode::kInvalidArgument, {"unknown key nonsense"});
  testing::expect_error([&] { apply_override(config, "tls", "x"); }, ErrorCode::kInvalidArgument,
                        {"tls is a section", "tls.cert_file, tls.key_file"});
  EXPECT_EQ(config, before);
}

TEST(ServerConfigOverride, BadValuesAreNamedAndLeaveTheConfigAlone) {
  ServerConfig config = load_server_config(kDemoServer);
  const ServerConfig before = config;
  testing::expect_error([&] { apply_override(config, "batching.max_queue_delay_ms", "soon"); },
                        ErrorCode::kInvalidArgument,
                        {"command-line override", "batching.max_queue_delay_ms", "'soon'"});
  testing::expect_error([&] { apply_override(config, "listen", "0.0.0.0:0"); },
                        ErrorCode::kInvalidArgument,
                        {"command-line override listen=0.0.0.0:0", "listen", "port 0"});
  testing::expect_error([&] { apply_override(config, "batching.batch_buckets", "4,2"); },
                        ErrorCode::kInvalidArgument,
                        {"batching.batch_buckets", "increasing order"});
  testing::expect_error([&] { apply_override(config, "batching.batch_buckets", "1,x"); },
                        ErrorCode::kInvalidArgument, {"batching.batch_buckets[1]", "'x'"});
  testing::expect_error([&] { apply_override(config, "batching.batch_buckets", ""); },
                        ErrorCode::kInvalidArgument, {"batching.batch_buckets", "at least one"});
  testing::expect_error([&] { apply_override(config, "cuda_graphs", "maybe"); },
                        ErrorCode::kInvalidArgument, {"cuda_graphs", "'maybe'", "on, off"});
  testing::expect_error([&] { apply_override(config, "defaults.top_p", "1.5"); },
                        ErrorCode::kInvalidArgument, {"defaults.top_p (1.5)"});
  testing::expect_error([&] { apply_override(config, "mesh.occupancy", "sparse"); },
                        ErrorCode::kInvalidArgument,
                        {"command-line override mesh.occupancy=sparse", "mesh.occupancy",
                         "'sparse'", "hierarchical or dense"});
  testing::expect_error(
      [&] { apply_override(config, "mesh.occupancy_coarsest_resolution_base", "0"); },
      ErrorCode::kInvalidArgument, {"mesh.occupancy_coarsest_resolution_base (0)"});
  testing::expect_error([&] { apply_override(config, "mesh.occupancy_dilation", "9"); },
                        ErrorCode::kInvalidArgument, {"mesh.occupancy_dilation (9)"});
  testing::expect_error([&] { apply_override(config, "mesh.occupancy_dilation", "wide"); },
                        ErrorCode::kInvalidArgument, {"mesh.occupancy_dilation", "'wide'"});
  // Cross-field: the demo's default resolution (6) no longer fits.
  testing::expect_error([&] { apply_override(config, "limits.max_resolution_base", "5"); },
                        ErrorCode::kInvalidArgument, {"defaults.resolution_base (6)"});
  testing::expect_error([&] { apply_override(config, "model.config", "/nonexistent/model.yaml"); },
                        ErrorCode::kNotFound, {"model.config", "/nonexistent/model.yaml"});
  EXPECT_EQ(config, before);
}

TEST(ServerConfigOverride, LoadAppliesOverridesBeforeValidating) {
  // One at a time the first would fail (6 > 5); together, validated once, they are fine.
  const ServerConfig config = load_server_config(
      kDemoServer, {{"limits.max_resolution_base", "5"}, {"defaults.resolution_base", "5"}});
  EXPECT_EQ(config.limits.max_resolution_base, 5);
  EXPECT_EQ(config.defaults.resolution_base, 5);

  // An override can repair a path the file gets wrong on this machine.
  TempDir dir;
  const std::string path = dir.file("server.yaml", "model:\n  config: " + kDemoModel +
                                                       "\n  gpt_weights: gone.safetensors\n"
                                                       "  shape_weights: gone2.safetensors\n");
  testing::expect_error([&] { (void)load_server_config(path); }, ErrorCode::kNotFound,
                        {path, "model.gpt_weights", dir.path() + "/gone.safetensors"});
  const ServerConfig repaired =
      load_server_config(path, {{"model.gpt_weights", ""}, {"model.shape_weights", ""}});
  EXPECT_TRUE(repaired.model.gpt_weights.empty());

  testing::expect_error(
      [] {
        (void)load_server_config(kDemoServer, {{"listen", "x"}});
      },
      ErrorCode::kInvalidArgument, {kDemoServer + " with command-line overrides", "listen"});
  testing::expect_error(
      [] {
        (void)load_server_config(kDemoServer, {{"lisen", "x"}});
      },
      ErrorCode::kInvalidArgument, {"unknown key lisen", "did you mean listen"});
}

TEST(ServerConfigOverride, ParsesKeyEqualsValue) {
  const ConfigOverride plain = parse_config_override("listen=127.0.0.1:1");
  EXPECT_EQ(plain.key, "listen");
  EXPECT_EQ(plain.value, "127.0.0.1:1");
  const ConfigOverride nested = parse_config_override("model.clip_vocab=a=b");
  EXPECT_EQ(nested.key, "model.clip_vocab");
  EXPECT_EQ(nested.value, "a=b");
  EXPECT_EQ(parse_config_override("metrics_listen=").value, "");
  testing::expect_error([] { (void)parse_config_override("listen"); }, ErrorCode::kInvalidArgument,
                        {"'listen'", "key=value"});
  testing::expect_error([] { (void)parse_config_override("=1"); }, ErrorCode::kInvalidArgument,
                        {"key=value"});
}

}  // namespace test_server_config
}  // namespace cube3d
