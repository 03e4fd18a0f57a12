// The server's configuration: one YAML file (models/demo-server.yaml documents every key),
// optionally amended by command-line overrides of single dotted keys. Loading checks every key
// and names the one at fault; `server_config_to_yaml` prints the effective configuration
// (--print-config) in a form that loads back to the same settings.
//
// Paths: a relative path in the file (model.*, tls.*) is relative to the folder holding the
// file, so a config and the model files beside it can move together. A path given as an
// override is relative to the current directory, like any other command-line path. Both are
// stored as absolute paths, so --print-config says exactly which files the server opens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/mesh/hierarchical_occupancy.h"
#include "cube3d/mesh/mesh_pipeline.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/cache/result_cache_options.h"
#include "cube3d/server/grpc/grpc_options.h"
#include "cube3d/server/httpd/http_config.h"
#include "cube3d/server/jobs/job_store_options.h"
#include "cube3d/server/service/request_policy.h"

namespace cube3d {

// Both files or neither (neither: plaintext gRPC).
struct TlsConfig {
  std::string cert_file;  // PEM certificate chain
  std::string key_file;   // PEM private key
  // mTLS: PEM roots that client certificates must chain to; empty: none asked for.
  std::string client_ca_file;
  // With client_ca_file: "required" (a call without a valid client certificate is refused at
  // the handshake) or "optional" (asked for, checked when sent).
  std::string client_certificates = "required";
  bool enabled() const { return !cert_file.empty(); }
  bool operator==(const TlsConfig&) const = default;
};

// Who may call: API keys with per-key quotas (api_keys.h). Empty: no keys asked for.
struct AuthConfig {
  std::string api_keys_file;
  bool operator==(const AuthConfig&) const = default;
};

// What this server refuses to generate, whoever asks (admission/prompt_policy.h).
struct PolicyConfig {
  // One RE2 pattern per line, matched on the text the model reads (lower case, HTML entities
  // and white space cleaned up); a match is PERMISSION_DENIED. Re-read on SIGHUP. Empty: none.
  std::string prompt_denylist_file;
  // The optional foldings of the prompt's forms (admission/prompt_folding.h): letters spelt out
  // one at a time joined, digits and signs inside words read as letters.
  bool fold_separators = true;
  bool fold_digits = true;
  bool operator==(const PolicyConfig&) const = default;
};

struct ModelFiles {
  std::string config = "models/demo.yaml";  // required in the file: model YAML
  std::string gpt_weights;    // shape_gpt.safetensors; empty: random weights (with shape_weights)
  std::string shape_weights;  // shape_tokenizer.safetensors
  std::string clip_model;     // Hugging Face CLIP folder; empty: random CLIP (random weights)
  std::string clip_vocab;     // bpe_simple_vocab_16e6.txt.gz or a vocab.json+merges.txt folder
  bool operator==(const ModelFiles&) const = default;
};

// The `batching:` section is the scheduler's own config (its defaults, its validation).
using BatchingConfig = SchedulerConfig;

struct MeshConfig {
  // How the occupancy field is evaluated, the mesh layer's own options
  // (mesh/hierarchical_occupancy.h): mesh.occupancy "hierarchical" (coarse-to-fine near the
  // surface) or "dense" (every grid point, as the official code) is `hierarchical`;
  // mesh.occupancy_coarsest_resolution_base and mesh.occupancy_dilation are the coarsest level
  // and the margin.
  OccupancySamplingOptions occupancy;
  // The mesh stage, the mesh layer's own options (mesh/mesh_pipeline.h): mesh.postprocess,
  // mesh.simplify, mesh.remove_floaters and mesh.floater_ratio (cleanup.remove_floaters and
  // cleanup.floater_diagonal_ratio: components below this share of the largest are dropped), and
  // mesh.max_marching_cubes_faces (the budget: a surface of more marching-cubes faces is
  // extracted from the grid one level coarser, or more, with a warning; 0: no budget).
  MeshPipelineOptions pipeline;
  // Objects meshed at once (each of them on every core: the mesh layer's one thread pool);
  // 0: as many as the machine has cores (effective_mesh_threads).
  int64_t mesh_threads = 0;
  bool operator==(const MeshConfig&) const = default;
};

// mesh.mesh_threads, with 0 (auto) resolved to the machine's cores.
int64_t effective_mesh_threads(const MeshConfig& mesh);

// Jobs (SubmitMeshJob, POST /v1/jobs): where the server keeps them, what and for how long.
struct JobsConfig {
  // memory: in this process (each replica its own; a restart loses them). redis: in the Redis of
  // redis.url, shared by every replica (any replica answers any job; leases and takeovers).
  std::string store = "memory";
  // Either store's bounds, the store's own options (jobs/job_store_options.h): result_ttl_s (a
  // finished job's result is kept this long; held here in milliseconds), max_result_bytes
  // (finished jobs' results, in all; LRU beyond), max_jobs_per_key (open jobs per API key),
  // max_jobs (job records of all kinds), max_wait_ms (the longest long-poll) and poll_after_ms
  // (the poll interval the answers suggest).
  JobStoreOptions limits;
  // The time a job may take from its submission to its end, queue included (the synchronous
  // calls' limits.default_deadline_ms is for a caller that waits on the line).
  int64_t deadline_ms = 1'800'000;
  // jobs.store redis: how long a job's lease lasts without renewal (renewed every third of it);
  // a job whose replica stops renewing is taken over by another one after about this long (and
  // the result cache's claims last as long).
  int64_t lease_ms = 10'000;
  // How many times a job is run again after its replica died before it ends FAILED
  // (UNAVAILABLE: retryable); 0: never run again.
  int64_t max_takeovers = 2;
  // A submit is answered (and an outcome counts as written) once this many Redis replicas have
  // it (WAIT), so that a failover to one loses no job a client was given; 0: once the primary
  // has it. A submit short of it within durable_timeout_ms is refused 503 and not made.
  int64_t durable_replicas = 0;
  int64_t durable_timeout_ms = 500;
  bool operator==(const JobsConfig&) const = default;
};

// The result cache: identical requests (same model, same effective parameters) get the same
// bytes, so they are answered from memory, from `dir`, or from the identical request in flight.
struct CacheConfig {
  bool enabled = true;
  // The store's own options (cache/result_cache_options.h): max_bytes (the memory tier), dir (the
  // disk tier, which survives restarts; empty: none) and max_dir_bytes (the disk tier's bound).
  ResultCacheOptions store;
  // false: each API key has a cache of its own, so that one studio cannot learn from a hit
  // (its speed, or X-Cache) what another studio asked for. true: one cache for all keys.
  bool shared_across_keys = false;
  // A tier in the Redis of redis.url shared by every replica (after memory and disk), with
  // claims so that replicas do not compute one request twice; entries live redis_ttl_s.
  bool redis = false;
  int64_t redis_ttl_s = 86'400;
  bool operator==(const CacheConfig&) const = default;
};

// The Redis behind jobs.store redis and cache.redis (redis/redis_url.h).
struct RedisConfig {
  // redis://[[user]:password@]host[:port][/db], or rediss:// for TLS; empty: none. Also
  // --redis-url / CUBE3D_REDIS_URL (a Secret, so that the password stays out of the ConfigMap);
  // --print-config hides the password.
  std::string url;
  std::string tls_ca_file;             // rediss://: the roots the server's certificate chains to
  int64_t timeout_ms = 1'000;          // each command's deadline
  int64_t connect_timeout_ms = 2'000;  // each connection's
  int64_t connections = 2;             // command connections (each with its thread)
  // Every key and channel the server uses starts with it: deployments sharing a Redis differ.
  std::string key_prefix = "cube3d:";
  // Redis Sentinel (host:port each): every new connection goes to the primary they name for
  // master_name, so that a failover needs no restart; url then gives only the password, the
  // database and TLS (its host and port are not used). Empty: url's host.
  std::vector<std::string> sentinels;
  std::string master_name;
  bool operator==(const RedisConfig&) const = default;
};

struct LoggingConfig {
  std::string level = "info";   // trace | debug | info | warn | error | critical | off
  std::string format = "text";  // text | json (one JSON object per line, for log pipelines)
  bool prompts = false;         // log request prompts (users' text: off by default)
  bool operator==(const LoggingConfig&) const = default;
};

struct ServerConfig {
  std::string listen = "0.0.0.0:50051";
  TlsConfig tls;
  AuthConfig auth;
  PolicyConfig policy;
  // gRPC server reflection (what grpcurl lists and describes with); off hides the API's shape
  // from anonymous callers.
  bool reflection = true;
  ModelFiles model;
  std::string device = "cpu";                   // cpu | cuda | cuda:N
  std::string dtype = "float32";                // float32 | bfloat16
  std::string single_stream_decode = "causal";  // causal | reference
  std::string cuda_graphs = "on";        // on | off | emulate (true / false read as on / off)
  std::string decode_kernels = "torch";  // torch | triton (bf16 on CUDA, the CUDA build)
  BatchingConfig batching;
  LimitsConfig limits;
  RequestDefaults defaults;
  MeshConfig mesh;
  JobsConfig jobs;
  CacheConfig cache;
  RedisConfig redis;
  std::string metrics_listen = "0.0.0.0:9464";  // empty: no metrics endpoint
  // The HTTP/JSON front door (POST /v1/meshes:generate, health, metrics), host:port; empty: off.
  std::string http_listen;
  // The HTTP server's threads, deadlines, limits and CORS (http_listen and metrics_listen).
  HttpConfig http;
  // The gRPC server's resource bounds, keepalive policy and connection lifetime.
  GrpcOptions grpc;
  LoggingConfig logging;
  int64_t drain_grace_seconds = 30;
  int64_t progress_interval_tokens = 32;

  std::string source;  // where it came from, for messages; not a setting

  // Compares the settings; `source` is left out, so that a printed config read back from
  // elsewhere still compares equal.
  bool operator==(const ServerConfig& other) const;
};

// One command-line override: a dotted key ("batching.max_queue_delay_ms") and its value as
// text, read with the key's type ("1,2,4" or "[1, 2, 4]" for batching.batch_buckets; "null"
// unsets defaults.top_p).
struct ConfigOverride {
  std::string key;
  std::string value;
};

// Reads, resolves relative paths against the file's folder, applies `overrides` in order and
// validates once at the end, so that an override can repair a value the file gets wrong (a
// weights path that does not exist on this machine, say). Throws cube3d::Error: kNotFound
// when the file (or a file it names) does not exist, kInvalidArgument naming the file and the
// key otherwise.
ServerConfig load_server_config(const std::string& path,
                                const std::vector<ConfigOverride>& overrides = {});

// Parses YAML text; `source` names it in messages. Relative paths are resolved against
// `base_dir` when it is not empty and left as they are (relative to the current directory)
// when it is. Validates, like load_server_config.
ServerConfig parse_server_config(const std::string& yaml_text, const std::string& source,
                                 const std::string& base_dir = "");

// Checks every value and the relations between them (min <= default <= max resolution, TLS
// files in pairs, files that exist, ...). Throws cube3d::Error naming `config.source` and the
// key.
void validate_server_config(const ServerConfig& config);

// The effective configuration as YAML, every key written out; parses back to an equal config.
std::string server_config_to_yaml(const ServerConfig& config);

// Sets one dotted key from text and validates the result; on any error `config` is left
// unchanged and the message names the key (an unknown one with a "did you mean" hint).
void apply_override(ServerConfig& config, const std::string& key, const std::string& value);

// Splits "key=value" (the value may itself contain '='); throws invalid_argument without one.
ConfigOverride parse_config_override(const std::string& text);

// Every dotted key a file or an override may set, in file order (for --help and messages).
std::vector<std::string> server_config_keys();

}  // namespace cube3d
