// Server config loading, printing and command-line overrides. One table of keys drives all
// three, so a key added to it is readable from the file, settable from the command line and
// printed by --print-config at once. The YAML rules are those of the model config
// (core/yaml_reader.h, shared with it): unknown and duplicate keys are errors (with a "did you
// mean" hint), types are checked strictly, and every message names the file and the full dotted
// key. Validation is in server_config_validation.cpp.
#include "cube3d/server/config/server_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/paths.h"
#include "cube3d/core/suggest.h"
#include "cube3d/core/yaml_reader.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/server/redis/redis_url.h"

namespace cube3d {
namespace {

using yaml::fail;

// --- reading YAML scalars (core/yaml_reader.h, shared with the model config) -----------------

using yaml::read_bool;
using yaml::read_float;
using yaml::read_int;
using yaml::read_int_list;

// `key:` with nothing after it is null in YAML; for a string that reads as "" (an operator
// blanking a path), and validation then says whether empty is allowed for that key.
std::string read_config_string(const YAML::Node& node, std::string_view where,
                               const std::string& key) {
  if (node.IsNull()) return "";
  return yaml::read_string(node, where, key);
}

MeshFormat read_format(const YAML::Node& node, std::string_view where, const std::string& key) {
  const std::string text = read_config_string(node, where, key);
  if (const std::optional<MeshFormat> format = mesh_format_from_name(text)) return *format;
  fail(where, key + ": unknown format '" + text + "' (expected raw, obj, ply or glb)");
}

MeshProfile read_profile(const YAML::Node& node, std::string_view where, const std::string& key) {
  const std::string text = read_config_string(node, where, key);
  if (const std::optional<MeshProfile> profile = mesh_profile_from_name(text)) return *profile;
  fail(where, key + ": unknown mesh profile '" + text + "' (expected none or roblox)");
}

// --- the key table ------------------------------------------------------------------------------

enum class Kind { kString, kInt, kFloat, kOptionalFloat, kBool, kIntList, kStringList, kFormat };

struct Key {
  std::string_view name;  // dotted: "batching.max_queue_size"
  Kind kind = Kind::kString;
  bool required = false;
  std::function<void(ServerConfig&, const YAML::Node&, std::string_view where)> read;
  std::function<void(YAML::Emitter&, const ServerConfig&)> emit;
  // Paths only: the setting to resolve against the config file's folder.
  std::function<std::string&(ServerConfig&)> path;
};

Key blank_key(std::string_view name, Kind kind) {
  Key key;
  key.name = name;
  key.kind = kind;
  return key;
}

// `access` is a generic lambda returning a reference to the setting, so that one lambda
// serves both the reader (mutable config) and the printer (const config).
template <class Access>
Key string_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kString);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    access(c) = read_config_string(v, where, std::string(name));
  };
  // Always quoted: an unquoted path such as `123` or `true` would read back as a number or a
  // bool (harmless for us, but surprising to another YAML reader).
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << YAML::DoubleQuoted << access(c);
  };
  return key;
}

template <class Access>
Key path_key(std::string_view name, Access access, bool required = false) {
  Key key = string_key(name, access);
  key.required = required;
  key.path = [access](ServerConfig& c) -> std::string& { return access(c); };
  return key;
}

template <class Access>
Key int_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kInt);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    access(c) = read_int(v, where, std::string(name));
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << static_cast<long long>(access(c));
  };
  return key;
}

// An int held in another unit or type than the file's: the setting is the file's value times
// `scale`. A value outside [min, max] is refused where it is read (it could not be held, or
// would overflow); validation checks the ranges that matter.
template <class Access>
Key scaled_int_key(std::string_view name, Access access, int64_t min, int64_t max,
                   int64_t scale = 1) {
  Key key = blank_key(name, Kind::kInt);
  key.read = [access, name, min, max, scale](ServerConfig& c, const YAML::Node& v,
                                             std::string_view where) {
    const int64_t value = read_int(v, where, std::string(name));
    if (value < min || value > max) {
      fail(where, std::string(name) + " (" + std::to_string(value) + ") must be " +
                      (max == std::numeric_limits<int64_t>::max()
                           ? "at least " + std::to_string(min)
                           : "between " + std::to_string(min) + " and " + std::to_string(max)));
    }
    using Setting = std::remove_cvref_t<decltype(access(c))>;
    access(c) = static_cast<Setting>(value * scale);
  };
  key.emit = [access, scale](YAML::Emitter& out, const ServerConfig& c) {
    out << static_cast<long long>(static_cast<int64_t>(access(c)) / scale);
  };
  return key;
}

// An int where 0 means "the machine's cores": --print-config says how many that is here.
template <class Access>
Key mesh_threads_key(std::string_view name, Access access) {
  Key key = int_key(name, access);
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << static_cast<long long>(access(c));
    if (access(c) == 0) {
      out << YAML::Comment("auto: " + std::to_string(effective_mesh_threads(c.mesh)) +
                           ", the cores of this machine");
    }
  };
  return key;
}

// redis.url: printed with its password hidden ("***", said in a comment), so that
// --print-config's output can be shared; such a printout loads back with that password.
template <class Access>
Key redis_url_key(std::string_view name, Access access) {
  Key key = string_key(name, access);
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    const std::string shown = redact_redis_url(access(c));
    out << YAML::DoubleQuoted << shown;
    if (shown != access(c)) {
      out << YAML::Comment("password hidden: give it with --redis-url or CUBE3D_REDIS_URL");
    }
  };
  return key;
}

template <class Access>
Key float_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kFloat);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    access(c) = read_float(v, where, std::string(name));
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << yaml::format_float(access(c));
  };
  return key;
}

// Null unsets it, so a file can say `top_p: null` explicitly.
template <class Access>
Key optional_float_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kOptionalFloat);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    if (v.IsNull()) {
      access(c).reset();
    } else {
      access(c) = read_float(v, where, std::string(name));
    }
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    if (access(c)) {
      out << yaml::format_float(*access(c));
    } else {
      out << YAML::Null;
    }
  };
  return key;
}

template <class Access>
Key bool_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kBool);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    access(c) = read_bool(v, where, std::string(name));
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) { out << access(c); };
  return key;
}

// A word in the file for a value of another type: `parse` throws cube3d::Error (naming the key)
// for an unknown word, `word` gives a value's word; printed quoted when `quoted` (as a string
// setting was before the key became a word).
template <class Access, class Parse, class Word>
Key word_key(std::string_view name, Access access, Parse parse, Word word, bool quoted = false) {
  Key key = blank_key(name, Kind::kString);
  key.read = [access, name, parse](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    const std::string text = read_config_string(v, where, std::string(name));
    try {
      access(c) = parse(text);
    } catch (const Error& e) {
      fail(where, e.what());
    }
  };
  key.emit = [access, word, quoted](YAML::Emitter& out, const ServerConfig& c) {
    if (quoted) out << YAML::DoubleQuoted;
    out << std::string(word(access(c)));
  };
  return key;
}

// on | off | emulate; the booleans of earlier configs still read as on / off.
template <class Access>
Key graph_mode_key(std::string_view name, Access access) {
  Key key = string_key(name, access);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    const std::string text = read_config_string(v, where, std::string(name));
    if (text == "true" || text == "True" || text == "TRUE") {
      access(c) = "on";
    } else if (text == "false" || text == "False" || text == "FALSE") {
      access(c) = "off";
    } else {
      access(c) = text;
    }
  };
  return key;
}

template <class Access>
Key int_list_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kIntList);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    access(c) = read_int_list(v, where, std::string(name));
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const int64_t value : access(c)) out << static_cast<long long>(value);
    out << YAML::EndSeq;
  };
  return key;
}

// A list of strings; null or [] is an empty list.
template <class Access>
Key string_list_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kStringList);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    std::vector<std::string> values;
    if (!v.IsNull()) {
      if (!v.IsSequence()) fail(where, std::string(name) + ": expected a list of strings");
      for (std::size_t i = 0; i < v.size(); ++i) {
        values.push_back(
            yaml::read_string(v[i], where, std::string(name) + "[" + std::to_string(i) + "]"));
      }
    }
    access(c) = std::move(values);
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const std::string& value : access(c)) out << YAML::DoubleQuoted << value;
    out << YAML::EndSeq;
  };
  return key;
}

template <class Access>
Key format_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kFormat);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    access(c) = read_format(v, where, std::string(name));
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << std::string(to_string(access(c)));
  };
  return key;
}

template <class Access>
Key profile_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kFormat);  // a word, taken literally from an override
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    access(c) = read_profile(v, where, std::string(name));
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << std::string(to_string(access(c)));
  };
  return key;
}

// The most seconds a key read into milliseconds can hold.
constexpr int64_t kMaxSeconds = std::numeric_limits<int64_t>::max() / 1000;

// File order (that of models/demo-server.yaml); --print-config writes keys in this order.
const std::vector<Key>& keys() {
  static const std::vector<Key> table = {
      string_key(
          "listen", [](auto& c) -> auto& { return c.listen; }),
      path_key(
          "tls.cert_file", [](auto& c) -> auto& { return c.tls.cert_file; }),
      path_key(
          "tls.key_file", [](auto& c) -> auto& { return c.tls.key_file; }),
      path_key(
          "tls.client_ca_file", [](auto& c) -> auto& { return c.tls.client_ca_file; }),
      string_key(
          "tls.client_certificates", [](auto& c) -> auto& { return c.tls.client_certificates; }),
      path_key(
          "auth.api_keys_file", [](auto& c) -> auto& { return c.auth.api_keys_file; }),
      path_key(
          "policy.prompt_denylist_file",
          [](auto& c) -> auto& { return c.policy.prompt_denylist_file; }),
      bool_key(
          "policy.fold_separators", [](auto& c) -> auto& { return c.policy.fold_separators; }),
      bool_key(
          "policy.fold_digits", [](auto& c) -> auto& { return c.policy.fold_digits; }),
      bool_key(
          "reflection", [](auto& c) -> auto& { return c.reflection; }),
      path_key(
          "model.config", [](auto& c) -> auto& { return c.model.config; }, true),
      path_key(
          "model.gpt_weights", [](auto& c) -> auto& { return c.model.gpt_weights; }),
      path_key(
          "model.shape_weights", [](auto& c) -> auto& { return c.model.shape_weights; }),
      path_key(
          "model.clip_model", [](auto& c) -> auto& { return c.model.clip_model; }),
      path_key(
          "model.clip_vocab", [](auto& c) -> auto& { return c.model.clip_vocab; }),
      string_key(
          "device", [](auto& c) -> auto& { return c.device; }),
      string_key(
          "dtype", [](auto& c) -> auto& { return c.dtype; }),
      string_key(
          "single_stream_decode", [](auto& c) -> auto& { return c.single_stream_decode; }),
      graph_mode_key(
          "cuda_graphs", [](auto& c) -> auto& { return c.cuda_graphs; }),
      string_key(
          "decode_kernels", [](auto& c) -> auto& { return c.decode_kernels; }),
      word_key(
          "batching.mode", [](auto& c) -> auto& { return c.batching.mode; },
          [](const std::string& text) { return parse_batching_mode(text, "batching.mode"); },
          [](BatchingMode mode) { return to_string(mode); }),
      int_list_key(
          "batching.batch_buckets", [](auto& c) -> auto& { return c.batching.batch_buckets; }),
      int_key(
          "batching.max_queue_delay_ms",
          [](auto& c) -> auto& { return c.batching.max_queue_delay_ms; }),
      int_key(
          "batching.max_queue_size", [](auto& c) -> auto& { return c.batching.max_queue_size; }),
      int_key(
          "batching.max_joins_per_step",
          [](auto& c) -> auto& { return c.batching.max_joins_per_step; }),
      int_key(
          "batching.batch_max_wait_ms",
          [](auto& c) -> auto& { return c.batching.batch_max_wait_ms; }),
      int_key(
          "batching.max_queued_batch",
          [](auto& c) -> auto& { return c.batching.max_queued_batch; }),
      int_key(
          "limits.max_prompt_bytes", [](auto& c) -> auto& { return c.limits.max_prompt_bytes; }),
      int_key(
          "limits.max_resolution_base",
          [](auto& c) -> auto& { return c.limits.max_resolution_base; }),
      int_key(
          "limits.min_resolution_base",
          [](auto& c) -> auto& { return c.limits.min_resolution_base; }),
      int_key(
          "limits.max_message_bytes", [](auto& c) -> auto& { return c.limits.max_message_bytes; }),
      int_key(
          "limits.max_target_face_count",
          [](auto& c) -> auto& { return c.limits.max_target_face_count; }),
      int_key(
          "limits.max_lod_levels", [](auto& c) -> auto& { return c.limits.max_lod_levels; }),
      int_key(
          "limits.default_deadline_ms",
          [](auto& c) -> auto& { return c.limits.default_deadline_ms; }),
      int_key(
          "limits.request_read_timeout_ms",
          [](auto& c) -> auto& { return c.limits.request_read_timeout_ms; }),
      float_key(
          "defaults.guidance_scale", [](auto& c) -> auto& { return c.defaults.guidance_scale; }),
      optional_float_key(
          "defaults.top_p", [](auto& c) -> auto& { return c.defaults.top_p; }),
      int_key(
          "defaults.resolution_base", [](auto& c) -> auto& { return c.defaults.resolution_base; }),
      format_key(
          "defaults.format", [](auto& c) -> auto& { return c.defaults.format; }),
      profile_key(
          "defaults.mesh_profile", [](auto& c) -> auto& { return c.defaults.mesh_profile; }),
      // The mesh layer's flag (hierarchical: true, dense: false).
      word_key(
          "mesh.occupancy", [](auto& c) -> auto& { return c.mesh.occupancy.hierarchical; },
          [](const std::string& text) {
            if (text != "hierarchical" && text != "dense") {
              throw invalid_argument("mesh.occupancy: unknown value '" + text +
                                     "' (expected hierarchical or dense)");
            }
            return text == "hierarchical";
          },
          [](bool hierarchical) { return hierarchical ? "hierarchical" : "dense"; }, true),
      int_key(
          "mesh.occupancy_coarsest_resolution_base",
          [](auto& c) -> auto& { return c.mesh.occupancy.coarsest_resolution_base; }),
      int_key(
          "mesh.occupancy_dilation", [](auto& c) -> auto& { return c.mesh.occupancy.dilation; }),
      bool_key(
          "mesh.postprocess", [](auto& c) -> auto& { return c.mesh.pipeline.postprocess; }),
      bool_key(
          "mesh.remove_floaters",
          [](auto& c) -> auto& { return c.mesh.pipeline.cleanup.remove_floaters; }),
      float_key(
          "mesh.floater_ratio",
          [](auto& c) -> auto& { return c.mesh.pipeline.cleanup.floater_diagonal_ratio; }),
      bool_key(
          "mesh.simplify", [](auto& c) -> auto& { return c.mesh.pipeline.simplify; }),
      mesh_threads_key(
          "mesh.mesh_threads", [](auto& c) -> auto& { return c.mesh.mesh_threads; }),
      // A count (std::size_t, the mesh layer's): never negative.
      scaled_int_key(
          "mesh.max_marching_cubes_faces",
          [](auto& c) -> auto& { return c.mesh.pipeline.max_marching_cubes_faces; }, 0,
          std::numeric_limits<int64_t>::max()),
      string_key(
          "jobs.store", [](auto& c) -> auto& { return c.jobs.store; }),
      // Seconds in the file, milliseconds in the store's options (which lets its tests use a
      // few of them).
      scaled_int_key(
          "jobs.result_ttl_s", [](auto& c) -> auto& { return c.jobs.limits.result_ttl_ms; },
          -kMaxSeconds, kMaxSeconds, 1000),
      int_key(
          "jobs.max_result_bytes", [](auto& c) -> auto& { return c.jobs.limits.max_result_bytes; }),
      int_key(
          "jobs.max_jobs_per_key", [](auto& c) -> auto& { return c.jobs.limits.max_jobs_per_key; }),
      int_key(
          "jobs.max_jobs", [](auto& c) -> auto& { return c.jobs.limits.max_jobs; }),
      int_key(
          "jobs.max_wait_ms", [](auto& c) -> auto& { return c.jobs.limits.max_wait_ms; }),
      int_key(
          "jobs.poll_after_ms", [](auto& c) -> auto& { return c.jobs.limits.poll_after_ms; }),
      int_key(
          "jobs.deadline_ms", [](auto& c) -> auto& { return c.jobs.deadline_ms; }),
      int_key(
          "jobs.lease_ms", [](auto& c) -> auto& { return c.jobs.lease_ms; }),
      int_key(
          "jobs.max_takeovers", [](auto& c) -> auto& { return c.jobs.max_takeovers; }),
      int_key(
          "jobs.durable_replicas", [](auto& c) -> auto& { return c.jobs.durable_replicas; }),
      int_key(
          "jobs.durable_timeout_ms", [](auto& c) -> auto& { return c.jobs.durable_timeout_ms; }),
      bool_key(
          "cache.enabled", [](auto& c) -> auto& { return c.cache.enabled; }),
      int_key(
          "cache.max_bytes", [](auto& c) -> auto& { return c.cache.store.max_bytes; }),
      path_key(
          "cache.dir", [](auto& c) -> auto& { return c.cache.store.dir; }),
      int_key(
          "cache.max_dir_bytes", [](auto& c) -> auto& { return c.cache.store.max_dir_bytes; }),
      bool_key(
          "cache.shared_across_keys", [](auto& c) -> auto& { return c.cache.shared_across_keys; }),
      bool_key(
          "cache.redis", [](auto& c) -> auto& { return c.cache.redis; }),
      int_key(
          "cache.redis_ttl_s", [](auto& c) -> auto& { return c.cache.redis_ttl_s; }),
      redis_url_key(
          "redis.url", [](auto& c) -> auto& { return c.redis.url; }),
      path_key(
          "redis.tls_ca_file", [](auto& c) -> auto& { return c.redis.tls_ca_file; }),
      int_key(
          "redis.timeout_ms", [](auto& c) -> auto& { return c.redis.timeout_ms; }),
      int_key(
          "redis.connect_timeout_ms", [](auto& c) -> auto& { return c.redis.connect_timeout_ms; }),
      int_key(
          "redis.connections", [](auto& c) -> auto& { return c.redis.connections; }),
      string_key(
          "redis.key_prefix", [](auto& c) -> auto& { return c.redis.key_prefix; }),
      string_list_key(
          "redis.sentinels", [](auto& c) -> auto& { return c.redis.sentinels; }),
      string_key(
          "redis.master_name", [](auto& c) -> auto& { return c.redis.master_name; }),
      string_key(
          "metrics_listen", [](auto& c) -> auto& { return c.metrics_listen; }),
      string_key(
          "http_listen", [](auto& c) -> auto& { return c.http_listen; }),
      int_key(
          "http.io_threads", [](auto& c) -> auto& { return c.http.io_threads; }),
      int_key(
          "http.header_timeout_ms", [](auto& c) -> auto& { return c.http.header_timeout_ms; }),
      int_key(
          "http.body_timeout_ms", [](auto& c) -> auto& { return c.http.body_timeout_ms; }),
      int_key(
          "http.idle_timeout_ms", [](auto& c) -> auto& { return c.http.idle_timeout_ms; }),
      int_key(
          "http.write_timeout_ms", [](auto& c) -> auto& { return c.http.write_timeout_ms; }),
      int_key(
          "http.max_connections", [](auto& c) -> auto& { return c.http.max_connections; }),
      int_key(
          "http.max_connections_per_client",
          [](auto& c) -> auto& { return c.http.max_connections_per_client; }),
      int_key(
          "http.max_request_line_bytes",
          [](auto& c) -> auto& { return c.http.max_request_line_bytes; }),
      int_key(
          "http.max_header_bytes", [](auto& c) -> auto& { return c.http.max_header_bytes; }),
      int_key(
          "http.max_header_count", [](auto& c) -> auto& { return c.http.max_header_count; }),
      string_list_key(
          "http.cors_allowed_origins",
          [](auto& c) -> auto& { return c.http.cors_allowed_origins; }),
      bool_key(
          "http.playground", [](auto& c) -> auto& { return c.http.playground; }),
      path_key(
          "http.playground_dir", [](auto& c) -> auto& { return c.http.playground_dir; }),
      path_key(
          "http.three_js_dir", [](auto& c) -> auto& { return c.http.three_js_dir; }),
      bool_key(
          "http.tls", [](auto& c) -> auto& { return c.http.tls; }),
      bool_key(
          "http.gzip", [](auto& c) -> auto& { return c.http.gzip; }),
      int_key(
          "http.gzip_min_bytes", [](auto& c) -> auto& { return c.http.gzip_min_bytes; }),
      int_key(
          "grpc.max_threads", [](auto& c) -> auto& { return c.grpc.max_threads; }),
      int_key(
          "grpc.max_calls_awaiting_message",
          [](auto& c) -> auto& { return c.grpc.max_calls_awaiting_message; }),
      int_key(
          "grpc.max_concurrent_streams",
          [](auto& c) -> auto& { return c.grpc.max_concurrent_streams; }),
      int_key(
          "grpc.keepalive_time_ms", [](auto& c) -> auto& { return c.grpc.keepalive_time_ms; }),
      int_key(
          "grpc.keepalive_timeout_ms",
          [](auto& c) -> auto& { return c.grpc.keepalive_timeout_ms; }),
      int_key(
          "grpc.min_client_ping_interval_ms",
          [](auto& c) -> auto& { return c.grpc.min_client_ping_interval_ms; }),
      int_key(
          "grpc.max_ping_strikes", [](auto& c) -> auto& { return c.grpc.max_ping_strikes; }),
      int_key(
          "grpc.max_connection_age_ms",
          [](auto& c) -> auto& { return c.grpc.max_connection_age_ms; }),
      int_key(
          "grpc.max_connection_age_grace_ms",
          [](auto& c) -> auto& { return c.grpc.max_connection_age_grace_ms; }),
      int_key(
          "grpc.max_connection_idle_ms",
          [](auto& c) -> auto& { return c.grpc.max_connection_idle_ms; }),
      int_key(
          "grpc.write_timeout_ms", [](auto& c) -> auto& { return c.grpc.write_timeout_ms; }),
      int_key(
          "grpc.handshake_timeout_ms",
          [](auto& c) -> auto& { return c.grpc.handshake_timeout_ms; }),
      string_key(
          "logging.level", [](auto& c) -> auto& { return c.logging.level; }),
      string_key(
          "logging.format", [](auto& c) -> auto& { return c.logging.format; }),
      bool_key(
          "logging.prompts", [](auto& c) -> auto& { return c.logging.prompts; }),
      int_key(
          "drain_grace_seconds", [](auto& c) -> auto& { return c.drain_grace_seconds; }),
      int_key(
          "progress_interval_tokens", [](auto& c) -> auto& { return c.progress_interval_tokens; }),
  };
  return table;
}

// "batching" for "batching.max_queue_size"; "" for a top-level key.
std::string_view section_of(std::string_view name) {
  const std::size_t dot = name.find('.');
  return dot == std::string_view::npos ? std::string_view() : name.substr(0, dot);
}

const Key* find_key(std::string_view name) {
  for (const Key& key : keys()) {
    if (key.name == name) return &key;
  }
  return nullptr;
}

// " (did you mean X?)" or "": the closest of `candidates` (full names, `prefix` + candidate)
// within two edits, else a key elsewhere with exactly this last name (a key put in the wrong
// section, like a top-level `max_queue_size`).
std::string did_you_mean_key(std::string_view name, const std::string& prefix,
                             const std::vector<std::string_view>& candidates) {
  // Keys that moved into a section.
  if (prefix.empty() && name == "log_level") return did_you_mean("logging.level");
  if (prefix.empty() && name == "log_prompts") return did_you_mean("logging.prompts");
  std::string hint = did_you_mean_closest(name, candidates, prefix);
  if (!hint.empty()) return hint;
  for (const Key& key : keys()) {
    const std::size_t dot = key.name.rfind('.');
    const std::string_view last =
        dot == std::string_view::npos ? key.name : key.name.substr(dot + 1);
    if (last == name && key.name != name) return did_you_mean(key.name);
  }
  return "";
}

// The names a mapping at `section` ("" for the top level) may hold: its keys' last parts and,
// at the top level, the section names. In table order, without repeats.
std::vector<std::string_view> names_in(std::string_view section) {
  std::vector<std::string_view> names;
  for (const Key& key : keys()) {
    const std::string_view key_section = section_of(key.name);
    std::string_view name;
    if (section.empty()) {
      name = key_section.empty() ? key.name : key_section;
    } else if (key_section == section) {
      name = key.name.substr(section.size() + 1);
    } else {
      continue;
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

// Reads the mapping at `section` ("" for the top level) into `config`, descending into the
// sections it holds; `seen` collects the dotted names of the keys read, for the required check.
void read_config_mapping(const YAML::Node& node, std::string_view where, std::string_view section,
                         ServerConfig& config, std::vector<std::string_view>& seen) {
  const std::string prefix = section.empty() ? "" : std::string(section) + ".";
  const std::vector<std::string_view> names = names_in(section);
  yaml::read_mapping(
      node, where, section, names,
      [&](std::size_t index, const YAML::Node& value, const std::string& full) {
        if (const Key* key = find_key(full)) {
          key->read(config, value, where);
          seen.push_back(key->name);
        } else if (!value.IsNull()) {
          // A section; `tls:` with every line under it commented out is null, and means "none".
          read_config_mapping(value, where, names[index], config, seen);
        }
      },
      [&](std::string_view name) { return did_you_mean_key(name, prefix, names); });
}

ServerConfig read_document(const std::string& yaml_text, const std::string& source) {
  const YAML::Node document = yaml::parse_single_document(yaml_text, source, "server config");
  if (document.IsNull()) {
    fail(source, "empty document: a server config needs at least model.config");
  }
  ServerConfig config;
  std::vector<std::string_view> seen;
  read_config_mapping(document, source, "", config, seen);
  for (const Key& key : keys()) {
    if (key.required && std::find(seen.begin(), seen.end(), key.name) == seen.end()) {
      fail(source, "missing required key " + std::string(key.name));
    }
  }
  config.source = source;
  return config;
}

// Relative to `base_dir`: the config file's folder, so that a config and the model files beside
// it can move together.
void resolve_paths(ServerConfig& config, const std::string& base_dir) {
  for (const Key& key : keys()) {
    if (key.path) key.path(config) = resolve_path(key.path(config), base_dir);
  }
}

// Validates with `origin` naming the config in messages instead of its source: the value at
// fault may come from an override rather than the file.
void validate_as(const ServerConfig& config, const std::string& origin) {
  ServerConfig named = config;
  named.source = origin;
  validate_server_config(named);
}

// --- overrides ----------------------------------------------------------------------------------

constexpr std::string_view kOverrideOrigin = "command-line override";

std::string trim_blanks(std::string_view text) {
  const std::size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  const std::size_t end = text.find_last_not_of(" \t");
  return std::string(text.substr(begin, end - begin + 1));
}

// The override's text as the YAML node a file would have held, so that it goes through the
// same reader (and type checks) as the file.
YAML::Node override_node(const Key& key, const std::string& value) {
  switch (key.kind) {
    case Kind::kString:
    case Kind::kFormat:
      // Taken literally: "[::1]:50051" or a path must not be read as YAML.
      return YAML::Node(value);
    case Kind::kIntList:
    case Kind::kStringList: {
      const std::string text = trim_blanks(value);
      if (!text.empty() && text.front() == '[') break;  // a YAML flow list
      YAML::Node list(YAML::NodeType::Sequence);
      if (text.empty()) return list;
      std::size_t at = 0;
      while (at <= text.size()) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        list.push_back(YAML::Node(trim_blanks(std::string_view(text).substr(at, comma - at))));
        at = comma + 1;
      }
      return list;
    }
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kOptionalFloat:
    case Kind::kBool:
      break;  // a YAML scalar: "null" unsets top_p, ".nan" is NaN as in the file
  }
  try {
    return YAML::Load(value);
  } catch (const YAML::Exception& e) {
    fail(kOverrideOrigin, std::string(key.name) + ": cannot read '" + value + "': " + e.msg);
  }
}

// Sets the key without validating (the caller validates once, after all overrides).
void set_key(ServerConfig& config, const std::string& name, const std::string& value) {
  const Key* key = find_key(name);
  if (key == nullptr) {
    const std::vector<std::string_view> sections = names_in("");
    if (std::find(sections.begin(), sections.end(), name) != sections.end()) {
      std::string inside;
      for (const std::string_view member : names_in(name)) {
        inside += (inside.empty() ? "" : ", ") + name + "." + std::string(member);
      }
      fail(kOverrideOrigin, name + " is a section; override one of its keys: " + inside);
    }
    std::vector<std::string_view> all;
    for (const Key& each : keys()) all.push_back(each.name);
    fail(kOverrideOrigin, "unknown key " + name + did_you_mean_key(name, "", all));
  }
  // Named as validation names it (a word such as mesh.occupancy's is checked as it is read).
  key->read(config, override_node(*key, value),
            std::string(kOverrideOrigin) + " " + name + "=" + value);
  // Relative to the current directory, as command-line paths are; stored absolute so that
  // --print-config shows where the file is whatever folder its output is later loaded from.
  if (key->path) key->path(config) = absolute_path(key->path(config));
}

}  // namespace

bool ServerConfig::operator==(const ServerConfig& other) const {
  const auto settings = [](const ServerConfig& c) {
    return std::tie(c.listen, c.tls, c.auth, c.policy, c.reflection, c.model, c.device, c.dtype,
                    c.single_stream_decode, c.cuda_graphs, c.decode_kernels, c.batching, c.limits,
                    c.defaults, c.mesh, c.jobs, c.cache, c.redis, c.metrics_listen, c.http_listen,
                    c.http, c.grpc, c.logging, c.drain_grace_seconds, c.progress_interval_tokens);
  };
  return settings(*this) == settings(other);
}

ServerConfig parse_server_config(const std::string& yaml_text, const std::string& source,
                                 const std::string& base_dir) {
  ServerConfig config = read_document(yaml_text, source);
  if (!base_dir.empty()) resolve_paths(config, base_dir);
  validate_server_config(config);
  return config;
}

ServerConfig load_server_config(const std::string& path,
                                const std::vector<ConfigOverride>& overrides) {
  ServerConfig config = read_document(yaml::read_config_file(path, "server config"), path);
  resolve_paths(config, folder_of(path));
  for (const ConfigOverride& entry : overrides) set_key(config, entry.key, entry.value);
  // Name the overrides in messages: the value at fault may not be the one in the file.
  validate_as(config, overrides.empty() ? path : path + " with command-line overrides");
  return config;
}

int64_t effective_mesh_threads(const MeshConfig& mesh) {
  if (mesh.mesh_threads > 0) return mesh.mesh_threads;
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

std::string server_config_to_yaml(const ServerConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string_view open_section;
  for (const Key& key : keys()) {
    const std::string_view section = section_of(key.name);
    if (section != open_section) {
      if (!open_section.empty()) out << YAML::EndMap;
      if (!section.empty())
        out << YAML::Key << std::string(section) << YAML::Value << YAML::BeginMap;
      open_section = section;
    }
    const std::string_view name = section.empty() ? key.name : key.name.substr(section.size() + 1);
    out << YAML::Key << std::string(name) << YAML::Value;
    key.emit(out, config);
  }
  if (!open_section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;

  std::string origin = config.source;
  std::replace(origin.begin(), origin.end(), '\n', ' ');
  std::string text = "# Effective cube3d-server configuration";
  text += origin.empty() ? "" : " (from " + origin + ")";
  text += '\n';
  text += out.c_str();
  text += '\n';
  return text;
}

void apply_override(ServerConfig& config, const std::string& key, const std::string& value) {
  ServerConfig updated = config;
  set_key(updated, key, value);
  validate_as(updated, std::string(kOverrideOrigin) + " " + key + "=" + value);
  config = std::move(updated);
}

ConfigOverride parse_config_override(const std::string& text) {
  const std::size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw invalid_argument(std::string(kOverrideOrigin) + " '" + text +
                           "': expected key=value, as in batching.max_queue_delay_ms=10");
  }
  return ConfigOverride{text.substr(0, equals), text.substr(equals + 1)};
}

std::vector<std::string> server_config_keys() {
  std::vector<std::string> names;
  for (const Key& key : keys()) names.emplace_back(key.name);
  return names;
}

}  // namespace cube3d
