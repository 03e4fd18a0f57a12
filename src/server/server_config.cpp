// Server config loading, validation, printing and command-line overrides. One table of keys
// drives all four, so a key added to it is readable from the file, settable from the command
// line and printed by --print-config at once. The YAML rules are those of the model config
// (core/yaml_reader.h, shared with it): unknown and duplicate keys are errors (with a "did you
// mean" hint), types are checked strictly, and every message names the file and the full dotted
// key.
//
// No std::filesystem here: the torch wheel's libtorch exports its own copies of some of its
// symbols, which has crashed a test binary; plain POSIX calls do what we need.
#include "cube3d/server/server_config.h"

#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <functional>
#include <limits>
#include <string_view>
#include <system_error>
#include <tuple>

#include "cube3d/core/error.h"
#include "cube3d/core/yaml_reader.h"

namespace cube3d {
namespace {

constexpr int64_t kMaxBucket = 256;
constexpr int64_t kMaxQueueDelayMs = 60'000;
constexpr int64_t kMaxPromptBytes = 65'536;
constexpr int64_t kMaxResolutionBase = 10;  // 2^10 + 1 cells per side: ~1G decoder queries
constexpr int64_t kMinMessageBytes = 1 << 20;
constexpr int64_t kMaxMessageBytes = INT_MAX;  // gRPC takes the limits as int
// Deadlines and the drain grace period become std::chrono nanoseconds; the caps keep a typo
// (extra digits) from overflowing them and are far beyond any sensible value.
constexpr int64_t kMaxDeadlineMs = 7LL * 24 * 3600 * 1000;  // a week
constexpr int64_t kMaxDrainGraceSeconds = 24 * 3600;
constexpr int64_t kMaxMeshThreads = 1024;
constexpr double kMaxGuidanceScale = 100.0;

constexpr std::array<std::string_view, 2> kDtypes = {"float32", "bfloat16"};
constexpr std::array<std::string_view, 2> kDecodeModes = {"causal", "reference"};
constexpr std::array<std::string_view, 3> kGraphModes = {"on", "off", "emulate"};
constexpr std::array<std::string_view, 7> kLogLevels = {"trace", "debug",    "info", "warn",
                                                        "error", "critical", "off"};

// --- messages ---------------------------------------------------------------------------------

using yaml::fail;

// Shortest text that reads back to the same double, so printed configs round-trip exactly.
std::string format_double(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  std::array<char, 32> buffer{};
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  std::string text(buffer.data(), ec == std::errc() ? end : buffer.data());
  // "3" reads back as a float too, but "3.0" says what the key holds.
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

template <std::size_t N>
std::string join_words(const std::array<std::string_view, N>& words) {
  std::string text;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) text += i + 1 == N ? " or " : ", ";
    text += words[i];
  }
  return text;
}

// --- reading YAML scalars (core/yaml_reader.h, shared with the model config) -----------------

using yaml::read_bool;
using yaml::read_float;
using yaml::read_int;
using yaml::read_int_list;

// `key:` with nothing after it is null in YAML; for a string that reads as "" (an operator
// blanking a path), and validation then says whether empty is allowed for that key.
std::string read_string(const YAML::Node& node, std::string_view where, const std::string& key) {
  if (node.IsNull()) return "";
  return yaml::read_string(node, where, key);
}

constexpr std::array<std::pair<std::string_view, MeshFormat>, 4> kFormats = {{
    {"raw", MeshFormat::kRaw},
    {"obj", MeshFormat::kObj},
    {"ply", MeshFormat::kPly},
    {"glb", MeshFormat::kGlb},
}};

std::string_view format_name(MeshFormat format) {
  for (const auto& [name, value] : kFormats) {
    if (value == format) return name;
  }
  return "unknown";
}

MeshFormat read_format(const YAML::Node& node, std::string_view where, const std::string& key) {
  const std::string text = read_string(node, where, key);
  for (const auto& [name, value] : kFormats) {
    if (name == text) return value;
  }
  fail(where, key + ": unknown format '" + text + "' (expected raw, obj, ply or glb)");
}

// --- the key table ------------------------------------------------------------------------------

enum class Kind { kString, kInt, kFloat, kOptionalFloat, kBool, kIntList, kFormat };

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
    access(c) = read_string(v, where, std::string(name));
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

template <class Access>
Key float_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kFloat);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    access(c) = read_float(v, where, std::string(name));
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << format_double(access(c));
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
      out << format_double(*access(c));
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

// on | off | emulate; the booleans of earlier configs still read as on / off.
template <class Access>
Key graph_mode_key(std::string_view name, Access access) {
  Key key = string_key(name, access);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    const std::string text = read_string(v, where, std::string(name));
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

template <class Access>
Key format_key(std::string_view name, Access access) {
  Key key = blank_key(name, Kind::kFormat);
  key.read = [access, name](ServerConfig& c, const YAML::Node& v, std::string_view where) {
    access(c) = read_format(v, where, std::string(name));
  };
  key.emit = [access](YAML::Emitter& out, const ServerConfig& c) {
    out << std::string(format_name(access(c)));
  };
  return key;
}

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
      int_list_key(
          "batching.batch_buckets", [](auto& c) -> auto& { return c.batching.batch_buckets; }),
      int_key(
          "batching.max_queue_delay_ms",
          [](auto& c) -> auto& { return c.batching.max_queue_delay_ms; }),
      int_key(
          "batching.max_queue_size", [](auto& c) -> auto& { return c.batching.max_queue_size; }),
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
          "limits.default_deadline_ms",
          [](auto& c) -> auto& { return c.limits.default_deadline_ms; }),
      float_key(
          "defaults.guidance_scale", [](auto& c) -> auto& { return c.defaults.guidance_scale; }),
      optional_float_key(
          "defaults.top_p", [](auto& c) -> auto& { return c.defaults.top_p; }),
      int_key(
          "defaults.resolution_base", [](auto& c) -> auto& { return c.defaults.resolution_base; }),
      format_key(
          "defaults.format", [](auto& c) -> auto& { return c.defaults.format; }),
      bool_key(
          "mesh.postprocess", [](auto& c) -> auto& { return c.mesh.postprocess; }),
      bool_key(
          "mesh.remove_floaters", [](auto& c) -> auto& { return c.mesh.remove_floaters; }),
      float_key(
          "mesh.floater_ratio", [](auto& c) -> auto& { return c.mesh.floater_ratio; }),
      bool_key(
          "mesh.simplify", [](auto& c) -> auto& { return c.mesh.simplify; }),
      int_key(
          "mesh.mesh_threads", [](auto& c) -> auto& { return c.mesh.mesh_threads; }),
      string_key(
          "metrics_listen", [](auto& c) -> auto& { return c.metrics_listen; }),
      string_key(
          "log_level", [](auto& c) -> auto& { return c.log_level; }),
      bool_key(
          "log_prompts", [](auto& c) -> auto& { return c.log_prompts; }),
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
std::string did_you_mean(std::string_view name, const std::string& prefix,
                         const std::vector<std::string_view>& candidates) {
  std::string hint = yaml::did_you_mean(name, prefix, candidates);
  if (!hint.empty()) return hint;
  for (const Key& key : keys()) {
    const std::size_t dot = key.name.rfind('.');
    const std::string_view last =
        dot == std::string_view::npos ? key.name : key.name.substr(dot + 1);
    if (last == name && key.name != name) return " (did you mean " + std::string(key.name) + "?)";
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
void read_mapping(const YAML::Node& node, std::string_view where, std::string_view section,
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
          read_mapping(value, where, names[index], config, seen);
        }
      },
      [&](std::string_view name) { return did_you_mean(name, prefix, names); });
}

ServerConfig read_document(const std::string& yaml_text, const std::string& source) {
  const YAML::Node document = yaml::parse_single_document(yaml_text, source, "server config");
  if (document.IsNull()) {
    fail(source, "empty document: a server config needs at least model.config");
  }
  ServerConfig config;
  std::vector<std::string_view> seen;
  read_mapping(document, source, "", config, seen);
  for (const Key& key : keys()) {
    if (key.required && std::find(seen.begin(), seen.end(), key.name) == seen.end()) {
      fail(source, "missing required key " + std::string(key.name));
    }
  }
  config.source = source;
  return config;
}

// --- paths (POSIX) ------------------------------------------------------------------------------

// Drops "." segments and repeated slashes ("/a/./b//c" -> "/a/b/c"). ".." stays: with symlinks
// it is not a lexical operation.
std::string tidy_path(const std::string& path) {
  std::string out;
  std::size_t at = 0;
  const bool absolute = !path.empty() && path.front() == '/';
  while (at <= path.size()) {
    const std::size_t slash = std::min(path.find('/', at), path.size());
    const std::string_view segment(path.data() + at, slash - at);
    if (!segment.empty() && segment != ".") {
      if (!out.empty() || absolute) out += '/';
      out += segment;
    }
    at = slash + 1;
  }
  if (out.empty()) return absolute ? "/" : ".";
  return out;
}

std::string current_directory() {
  std::vector<char> buffer(4096);
  while (getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE) {
      throw invalid_argument("cannot determine the current directory: " +
                             std::generic_category().message(errno));
    }
    buffer.resize(buffer.size() * 2);
  }
  return buffer.data();
}

// The absolute folder holding `file`.
std::string folder_of(const std::string& file) {
  const std::string absolute =
      tidy_path(!file.empty() && file.front() == '/' ? file : current_directory() + "/" + file);
  const std::size_t slash = absolute.rfind('/');
  return slash == 0 ? "/" : absolute.substr(0, slash);
}

void resolve_paths(ServerConfig& config, const std::string& base_dir) {
  for (const Key& key : keys()) {
    if (!key.path) continue;
    std::string& path = key.path(config);
    if (!path.empty() && path.front() != '/') path = tidy_path(base_dir + "/" + path);
  }
}

enum class FileKind { kRegular, kDirectory, kEither };

// A file the server will open later: missing -> kNotFound, the wrong kind or unreadable ->
// kInvalidArgument, each naming the key, so that a bad path fails at start-up, not at the first
// request or half-way through loading a model.
void check_file(std::string_view where, std::string_view key, const std::string& path,
                FileKind kind) {
  const std::string what = std::string(key) + ": " + path;
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      throw not_found(std::string(where) + ": " + what + ": no such file or directory");
    }
    fail(where, what + ": cannot access: " + std::generic_category().message(error));
  }
  const bool is_dir = S_ISDIR(info.st_mode);
  const bool is_file = S_ISREG(info.st_mode);
  if (kind == FileKind::kRegular && !is_file) fail(where, what + ": not a regular file");
  if (kind == FileKind::kDirectory && !is_dir) fail(where, what + ": not a directory");
  if (kind == FileKind::kEither && !is_dir && !is_file) {
    fail(where, what + ": neither a regular file nor a directory");
  }
  if (access(path.c_str(), is_dir ? (R_OK | X_OK) : R_OK) != 0) {
    fail(where, what + ": not readable: " + std::generic_category().message(errno));
  }
}

// --- validation -------------------------------------------------------------------------------

void check_range(std::string_view where, std::string_view key, int64_t value, int64_t min,
                 int64_t max) {
  if (value < min || value > max) {
    const std::string range =
        max == std::numeric_limits<int64_t>::max()
            ? " must be at least " + std::to_string(min)
            : " must be between " + std::to_string(min) + " and " + std::to_string(max);
    fail(where, std::string(key) + " (" + std::to_string(value) + ")" + range);
  }
}

template <std::size_t N>
void check_word(std::string_view where, std::string_view key, const std::string& value,
                const std::array<std::string_view, N>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    fail(where, std::string(key) + ": unknown value '" + value + "' (expected " +
                    join_words(allowed) + ")");
  }
}

struct HostPort {
  std::string host;  // without brackets
  int port = 0;
};

// "host:port" or "[ipv6]:port", as gRPC and the metrics exposer take them.
HostPort check_address(std::string_view where, std::string_view key, const std::string& text) {
  const std::string what = std::string(key) + ": '" + text + "'";
  if (text.empty()) fail(where, std::string(key) + ": must not be empty (expected host:port)");
  HostPort address;
  std::string port;
  if (text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string::npos) fail(where, what + ": '[' without a closing ']'");
    address.host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      fail(where, what + ": expected [ipv6-address]:port");
    }
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string::npos) fail(where, what + ": expected host:port");
    address.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (address.host.find(':') != std::string::npos) {
      fail(where, what + ": an IPv6 address goes in brackets, as in [::1]:50051");
    }
  }
  if (address.host.empty()) fail(where, what + ": the host is empty");
  if (address.host.find_first_of(" \t\r\n/[]") != std::string::npos) {
    fail(where, what + ": the host holds characters no host name or address has");
  }
  const bool digits =
      !port.empty() && port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) fail(where, what + ": the port '" + port + "' is not a number");
  address.port = std::stoi(port);
  if (address.port < 1 || address.port > 65535) {
    fail(where, what + ": port " + std::to_string(address.port) + " is out of range (1..65535)");
  }
  return address;
}

bool is_wildcard(const std::string& host) { return host == "0.0.0.0" || host == "::"; }

void check_device(std::string_view where, const std::string& device) {
  if (device == "cpu" || device == "cuda") return;
  if (device.starts_with("cuda:")) {
    const std::string_view index = std::string_view(device).substr(5);
    int value = 0;
    const auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), value);
    if (ec == std::errc() && end == index.data() + index.size() && value >= 0) return;
  }
  fail(where, "device: unknown device '" + device + "' (expected cpu, cuda or cuda:N)");
}

void validate(const ServerConfig& c, std::string_view where) {
  const HostPort listen = check_address(where, "listen", c.listen);

  if (c.tls.cert_file.empty() != c.tls.key_file.empty()) {
    fail(where, std::string("tls.cert_file and tls.key_file: set both or neither (") +
                    (c.tls.cert_file.empty() ? "tls.cert_file" : "tls.key_file") + " is empty)");
  }
  if (c.tls.enabled()) {
    check_file(where, "tls.cert_file", c.tls.cert_file, FileKind::kRegular);
    check_file(where, "tls.key_file", c.tls.key_file, FileKind::kRegular);
  }

  if (c.model.config.empty()) fail(where, "model.config: must name the model YAML file");
  check_file(where, "model.config", c.model.config, FileKind::kRegular);
  // A trained GPT with a random decoder (or the reverse) only makes noise.
  if (c.model.gpt_weights.empty() != c.model.shape_weights.empty()) {
    fail(where, std::string("model.gpt_weights and model.shape_weights: set both or neither (") +
                    (c.model.gpt_weights.empty() ? "model.gpt_weights" : "model.shape_weights") +
                    " is empty)");
  }
  if (!c.model.gpt_weights.empty()) {
    check_file(where, "model.gpt_weights", c.model.gpt_weights, FileKind::kRegular);
    check_file(where, "model.shape_weights", c.model.shape_weights, FileKind::kRegular);
  }
  if (!c.model.clip_model.empty()) {
    check_file(where, "model.clip_model", c.model.clip_model, FileKind::kDirectory);
  }
  if (!c.model.clip_vocab.empty()) {
    check_file(where, "model.clip_vocab", c.model.clip_vocab, FileKind::kEither);
  }

  check_device(where, c.device);
  check_word(where, "dtype", c.dtype, kDtypes);
  check_word(where, "single_stream_decode", c.single_stream_decode, kDecodeModes);
  check_word(where, "cuda_graphs", c.cuda_graphs, kGraphModes);

  const std::vector<int64_t>& buckets = c.batching.batch_buckets;
  if (buckets.empty()) fail(where, "batching.batch_buckets: must list at least one batch size");
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const std::string key = "batching.batch_buckets[" + std::to_string(i) + "]";
    check_range(where, key, buckets[i], 1, kMaxBucket);
    if (i > 0 && buckets[i] == buckets[i - 1]) {
      fail(where, "batching.batch_buckets: " + std::to_string(buckets[i]) + " is listed twice");
    }
    if (i > 0 && buckets[i] < buckets[i - 1]) {
      fail(where, "batching.batch_buckets: must be in increasing order (" +
                      std::to_string(buckets[i - 1]) + " comes before " +
                      std::to_string(buckets[i]) + ")");
    }
  }
  check_range(where, "batching.max_queue_delay_ms", c.batching.max_queue_delay_ms, 0,
              kMaxQueueDelayMs);
  check_range(where, "batching.max_queue_size", c.batching.max_queue_size, 1,
              std::numeric_limits<int64_t>::max());

  const LimitsConfig& limits = c.limits;
  check_range(where, "limits.max_prompt_bytes", limits.max_prompt_bytes, 1, kMaxPromptBytes);
  check_range(where, "limits.max_resolution_base", limits.max_resolution_base, 1,
              kMaxResolutionBase);
  if (limits.min_resolution_base < 1 || limits.min_resolution_base > limits.max_resolution_base) {
    fail(where, "limits.min_resolution_base (" + std::to_string(limits.min_resolution_base) +
                    ") must be between 1 and limits.max_resolution_base (" +
                    std::to_string(limits.max_resolution_base) + ")");
  }
  check_range(where, "limits.max_message_bytes", limits.max_message_bytes, kMinMessageBytes,
              kMaxMessageBytes);
  check_range(where, "limits.max_target_face_count", limits.max_target_face_count, 1,
              std::numeric_limits<int64_t>::max());
  check_range(where, "limits.default_deadline_ms", limits.default_deadline_ms, 0, kMaxDeadlineMs);

  const RequestDefaults& defaults = c.defaults;
  // The negated comparison also catches NaN.
  if (!(defaults.guidance_scale >= 0.0 && defaults.guidance_scale <= kMaxGuidanceScale)) {
    fail(where, "defaults.guidance_scale (" + format_double(defaults.guidance_scale) +
                    ") must be a number between 0 and " + format_double(kMaxGuidanceScale));
  }
  if (defaults.top_p && !(*defaults.top_p > 0.0 && *defaults.top_p <= 1.0)) {
    fail(where, "defaults.top_p (" + format_double(*defaults.top_p) +
                    ") must be in (0, 1], or null for greedy decoding");
  }
  if (defaults.resolution_base < limits.min_resolution_base ||
      defaults.resolution_base > limits.max_resolution_base) {
    fail(where, "defaults.resolution_base (" + std::to_string(defaults.resolution_base) +
                    ") must be between limits.min_resolution_base (" +
                    std::to_string(limits.min_resolution_base) +
                    ") and limits.max_resolution_base (" +
                    std::to_string(limits.max_resolution_base) + ")");
  }
  if (format_name(defaults.format) == "unknown") {
    fail(where, "defaults.format: not one of raw, obj, ply or glb");
  }

  if (!(c.mesh.floater_ratio > 0.0 && c.mesh.floater_ratio < 1.0)) {
    fail(where, "mesh.floater_ratio (" + format_double(c.mesh.floater_ratio) +
                    ") must be strictly between 0 and 1");
  }
  check_range(where, "mesh.mesh_threads", c.mesh.mesh_threads, 1, kMaxMeshThreads);

  if (!c.metrics_listen.empty()) {
    const HostPort metrics = check_address(where, "metrics_listen", c.metrics_listen);
    // Two listeners on one port: the second bind would fail at start-up with a vaguer message.
    if (metrics.port == listen.port &&
        (metrics.host == listen.host || is_wildcard(metrics.host) || is_wildcard(listen.host))) {
      fail(where, "metrics_listen ('" + c.metrics_listen + "') uses the port of listen ('" +
                      c.listen + "')");
    }
  }
  check_word(where, "log_level", c.log_level, kLogLevels);
  check_range(where, "drain_grace_seconds", c.drain_grace_seconds, 0, kMaxDrainGraceSeconds);
  check_range(where, "progress_interval_tokens", c.progress_interval_tokens, 1,
              std::numeric_limits<int64_t>::max());
}

// --- overrides ----------------------------------------------------------------------------------

constexpr std::string_view kOverrideOrigin = "command-line override";

std::string trim(std::string_view text) {
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
    case Kind::kIntList: {
      const std::string text = trim(value);
      if (!text.empty() && text.front() == '[') break;  // a YAML flow list
      YAML::Node list(YAML::NodeType::Sequence);
      if (text.empty()) return list;
      std::size_t at = 0;
      while (at <= text.size()) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        list.push_back(YAML::Node(trim(std::string_view(text).substr(at, comma - at))));
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
    fail(kOverrideOrigin, "unknown key " + name + did_you_mean(name, "", all));
  }
  key->read(config, override_node(*key, value), kOverrideOrigin);
  // Relative to the current directory, as command-line paths are; stored absolute so that
  // --print-config shows where the file is whatever folder its output is later loaded from.
  if (key->path) {
    std::string& path = key->path(config);
    if (!path.empty() && path.front() != '/') path = tidy_path(current_directory() + "/" + path);
  }
}

}  // namespace

bool ServerConfig::operator==(const ServerConfig& other) const {
  const auto settings = [](const ServerConfig& c) {
    return std::tie(c.listen, c.tls, c.model, c.device, c.dtype, c.single_stream_decode,
                    c.cuda_graphs, c.batching, c.limits, c.defaults, c.mesh, c.metrics_listen,
                    c.log_level, c.log_prompts, c.drain_grace_seconds, c.progress_interval_tokens);
  };
  return settings(*this) == settings(other);
}

void validate_server_config(const ServerConfig& config) {
  validate(config, config.source.empty() ? std::string_view("server config") : config.source);
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
  validate(config, overrides.empty() ? path : path + " with command-line overrides");
  return config;
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
  validate(updated, std::string(kOverrideOrigin) + " " + key + "=" + value);
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
