// Strict reading of YAML config files, shared by the model config and server config loaders so
// that both hold to one set of rules: a number or a bool must be a plain scalar, unknown and
// duplicate keys are errors (with a "did you mean" hint), and every message names the file and
// the full dotted key.
//
// yaml-cpp's Node is only forward-declared here, so that cube3d_core can keep yaml-cpp a private
// dependency; the loaders that call these functions include <yaml-cpp/yaml.h> themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace YAML {
class Node;
}  // namespace YAML

namespace cube3d::yaml {

// Throws invalid_argument("<source>: <message>"); `source` is the file (or another origin).
[[noreturn]] void fail(std::string_view source, const std::string& message);

// The whole text of the config file at `path`. A missing file is kNotFound; anything else that
// stops us (not a regular file, larger than a config can be, unreadable) is kInvalidArgument.
// `what` names the kind of file in messages ("model config"); `too_large_note` ends the
// message for an oversized file.
std::string read_config_file(const std::string& path, std::string_view what,
                             std::string_view too_large_note = "");

// The one YAML document in `text`, or a null node when there is none. Syntax errors and a
// second document fail naming `source`; `what` names the kind of file ("a model config is one").
YAML::Node parse_single_document(const std::string& text, std::string_view source,
                                 std::string_view what);

// "null", "'12'", "the string \"12\"", "a list", "a mapping": the value as a message shows it.
std::string describe(const YAML::Node& node);

// Typed scalar readers; `key` is the full dotted key, for messages. Quoted scalars are strings,
// so `"12"` is not an integer and `"true"` not a bool.
int64_t read_int(const YAML::Node& node, std::string_view source, const std::string& key);
double read_float(const YAML::Node& node, std::string_view source, const std::string& key);
bool read_bool(const YAML::Node& node, std::string_view source, const std::string& key);
// Any scalar, as written; null is an error (a caller that allows it checks first).
std::string read_string(const YAML::Node& node, std::string_view source, const std::string& key);
std::vector<int64_t> read_int_list(const YAML::Node& node, std::string_view source,
                                   const std::string& key);

// The shortest scalar that reads back (with read_float) as exactly `value`, so that a printed
// config loads back bit for bit: ".nan", ".inf", and "3.0" rather than "3" for a float key.
std::string format_float(double value);

// Reads one entry of a mapping: `index` into the names given to read_mapping, the value, and
// the full dotted key.
using EntryReader =
    std::function<void(std::size_t index, const YAML::Node& value, const std::string& key)>;
// The hint that follows "unknown key <key>" for a name that is not in the mapping's names.
using UnknownKeyHint = std::function<std::string(std::string_view name)>;

// Walks the mapping `node` at `section` ("" for the top level; its keys' full names are
// "<section>.<name>") and hands each entry to `read`, in file order. It fails on a value that is
// not a mapping, a key that is not a plain name, a name not in `names` (with `hint`, by default
// the closest of `names`: core/suggest.h) and a repeated name. Returns which of `names` appeared,
// for the caller's required-key checks.
std::vector<bool> read_mapping(const YAML::Node& node, std::string_view source,
                               std::string_view section, std::span<const std::string_view> names,
                               const EntryReader& read, const UnknownKeyHint& hint = {});

}  // namespace cube3d::yaml
