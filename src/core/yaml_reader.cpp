// Strict YAML config reading (see the header). No std::filesystem here: the torch wheel's
// libtorch exports its own copies of some of its symbols, which has crashed a test binary;
// plain POSIX calls do what we need.
#include "cube3d/core/yaml_reader.h"

#include <sys/stat.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include "cube3d/core/error.h"
#include "cube3d/core/printable.h"
#include "cube3d/core/suggest.h"
#include "cube3d/core/utf8.h"

namespace cube3d::yaml {
namespace {

// Config files are a page of text at most; the cap keeps a wrong path (a checkpoint, say) from
// being read whole into memory and fed to the YAML parser.
constexpr off_t kMaxFileBytes = 1 << 20;

// Quoted scalars ("12") and `!!str` are strings in YAML; a number or a bool must be plain.
bool is_string_scalar(const YAML::Node& node) {
  return node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str";
}

// from_chars rejects a leading '+', which YAML allows on numbers.
std::string_view strip_plus(std::string_view text) {
  if (text.size() > 1 && text.front() == '+' && text[1] != '-' && text[1] != '+') {
    text.remove_prefix(1);
  }
  return text;
}

}  // namespace

[[noreturn]] void fail(std::string_view source, const std::string& message) {
  throw invalid_argument(std::string(source) + ": " + message);
}

std::string read_config_file(const std::string& path, std::string_view what,
                             std::string_view too_large_note) {
  const std::string kind(what);
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) throw not_found(path + ": no such " + kind + " file");
    // Permission problems and the like: the file may well exist, so not "not found".
    throw invalid_argument(path + ": cannot access: " + std::generic_category().message(error));
  }
  if (!S_ISREG(info.st_mode)) {
    throw invalid_argument(path + ": not a regular file (expected a " + kind + " .yaml)");
  }
  if (info.st_size > kMaxFileBytes) {
    throw invalid_argument(path + ": " + std::to_string(info.st_size) +
                           " bytes is too large for a " + kind + std::string(too_large_note));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw invalid_argument(path + ": cannot open for reading");
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) throw invalid_argument(path + ": read error");
  return text.str();
}

namespace {

// Discards the events: the parser is only asked how many documents there are.
class DiscardEvents final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

[[noreturn]] void fail_syntax(std::string_view source, const YAML::Exception& e) {
  // yaml-cpp's marks are 0-based; editors count from 1.
  fail(source, "YAML syntax error at line " + std::to_string(e.mark.line + 1) + ", column " +
                   std::to_string(e.mark.column + 1) + ": " + e.msg);
}

}  // namespace

YAML::Node parse_single_document(const std::string& text, std::string_view source,
                                 std::string_view what) {
  // Never YAML::LoadAll: with yaml-cpp 0.7.0 (Debian's; jbeder/yaml-cpp#1040) a line starting
  // with ',' makes the parser produce documents without end, and LoadAll allocates about 1 GB/s
  // until memory runs out. Count the documents instead, stopping at the second, then load the
  // first alone.
  int documents = 0;
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DiscardEvents discard;
    while (documents < 2 && parser.HandleNextDocument(discard)) ++documents;
  } catch (const YAML::Exception& e) {
    fail_syntax(source, e);
  }
  // Reading only the first document would drop the rest of the file without a word.
  if (documents > 1) {
    fail(source,
         "holds more than one YAML document (a '---' line, or a line starting with ',', "
         "begins another); a " +
             std::string(what) + " is one");
  }
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail_syntax(source, e);
  }
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar: {
      // Quoted back briefly, with control characters escaped: the "value" may be a whole
      // line of some other file named by mistake (/etc/passwd), or terminal escapes.
      const std::string shown = printable(node.Scalar());
      return is_string_scalar(node) ? "the string \"" + shown + "\"" : "'" + shown + "'";
    }
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

int64_t read_int(const YAML::Node& node, std::string_view source, const std::string& key) {
  if (node.IsScalar() && !is_string_scalar(node)) {
    const std::string_view text = strip_plus(node.Scalar());
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc::result_out_of_range) {
      fail(source, key + ": " + node.Scalar() + " is out of range");
    }
    if (ec == std::errc() && end == text.data() + text.size()) return value;
  }
  fail(source, key + ": expected an integer, got " + describe(node));
}

double read_float(const YAML::Node& node, std::string_view source, const std::string& key) {
  if (node.IsScalar() && !is_string_scalar(node)) {
    const std::string& raw = node.Scalar();
    // YAML spells the specials .inf / .nan; validation rejects them with a clearer message.
    static constexpr std::array<std::string_view, 6> kPlusInf = {".inf",  ".Inf",  ".INF",
                                                                 "+.inf", "+.Inf", "+.INF"};
    static constexpr std::array<std::string_view, 3> kMinusInf = {"-.inf", "-.Inf", "-.INF"};
    static constexpr std::array<std::string_view, 3> kNan = {".nan", ".NaN", ".NAN"};
    const auto is_one_of = [&raw](const auto& spellings) {
      return std::find(spellings.begin(), spellings.end(), raw) != spellings.end();
    };
    if (is_one_of(kPlusInf)) return std::numeric_limits<double>::infinity();
    if (is_one_of(kMinusInf)) return -std::numeric_limits<double>::infinity();
    if (is_one_of(kNan)) return std::numeric_limits<double>::quiet_NaN();
    // Both `1e-06` and `1.e-6` are floats here. (PyYAML reads `1e-06` as a string, which
    // OmegaConf then converts; the official model files write `1.e-6` because of that.)
    const std::string_view text = strip_plus(raw);
    double value = 0.0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc::result_out_of_range) fail(source, key + ": " + raw + " is out of range");
    if (ec == std::errc() && end == text.data() + text.size()) return value;
  }
  fail(source, key + ": expected a number, got " + describe(node));
}

bool read_bool(const YAML::Node& node, std::string_view source, const std::string& key) {
  if (node.IsScalar() && !is_string_scalar(node)) {
    // YAML 1.2 core schema spellings; the official model files use both `true` and `False`.
    const std::string& text = node.Scalar();
    if (text == "true" || text == "True" || text == "TRUE") return true;
    if (text == "false" || text == "False" || text == "FALSE") return false;
  }
  fail(source, key + ": expected true or false, got " + describe(node));
}

std::string read_string(const YAML::Node& node, std::string_view source, const std::string& key) {
  if (!node.IsScalar()) fail(source, key + ": expected a string, got " + describe(node));
  // Invalid UTF-8 would be printed back (--print-config) as U+FFFD: a different host or path
  // from the one in effect.
  if (const auto bad = find_invalid_utf8(node.Scalar())) {
    fail(source, key + ": not valid UTF-8 (byte offset " + std::to_string(*bad) + ")");
  }
  return node.Scalar();
}

std::string format_float(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  std::array<char, 32> buffer{};
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  std::string text(buffer.data(), ec == std::errc() ? end : buffer.data());
  // "3" reads back as a float too, but "3.0" says what the key holds.
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::vector<int64_t> read_int_list(const YAML::Node& node, std::string_view source,
                                   const std::string& key) {
  if (!node.IsSequence()) {
    fail(source, key + ": expected a list of integers, got " + describe(node));
  }
  std::vector<int64_t> values;
  values.reserve(node.size());
  for (std::size_t i = 0; i < node.size(); ++i) {
    values.push_back(read_int(node[i], source, key + "[" + std::to_string(i) + "]"));
  }
  return values;
}

// Walks the mapping itself (rather than looking keys up) so that unknown and duplicate keys are
// caught: yaml-cpp keeps duplicates and `node[key]` silently returns the first one, while PyYAML
// keeps the last, so a duplicate would mean different things to the two implementations.
std::vector<bool> read_mapping(const YAML::Node& node, std::string_view source,
                               std::string_view section, std::span<const std::string_view> names,
                               const EntryReader& read, const UnknownKeyHint& hint) {
  const std::string prefix = section.empty() ? "" : std::string(section) + ".";
  if (!node.IsMap()) {
    if (section.empty()) {
      // Not a config at all (a path to some other file, say): name what it is, not its text.
      const std::string what = node.IsScalar() ? "text (" + std::to_string(node.Scalar().size()) +
                                                     " bytes) that is not key: value settings"
                                               : describe(node);
      fail(source, "the top level: expected a mapping of settings (key: value lines), got " + what +
                       "; is this the right file?");
    }
    fail(source, std::string(section) + ": expected a mapping, got " + describe(node));
  }
  std::vector<bool> seen(names.size(), false);
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) {
      fail(source, (section.empty() ? std::string("top level") : std::string(section)) +
                       ": keys must be plain names, got " + describe(entry.first));
    }
    const std::string& name = entry.first.Scalar();
    const std::string key = prefix + name;
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      fail(source,
           "unknown key " + key + (hint ? hint(name) : did_you_mean_closest(name, names, prefix)));
    }
    const auto index = static_cast<std::size_t>(it - names.begin());
    if (seen[index]) fail(source, "duplicate key " + key);
    seen[index] = true;
    read(index, entry.second, key);
  }
  return seen;
}

}  // namespace cube3d::yaml
