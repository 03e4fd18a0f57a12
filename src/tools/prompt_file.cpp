#include "cube3d/tools/prompt_file.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>

#include "cube3d/core/error.h"
#include "cube3d/core/utf8.h"
#include "cube3d/mesh/grid.h"
#include "cube3d/pipeline/model_text.h"

namespace cube3d {
namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view trim_line(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// A JSON line's key in either spelling, or "" when unknown.
std::string canonical_key(const std::string& key) {
  static const std::pair<const char*, const char*> names[] = {
      {"prompt", "prompt"},
      {"seed", "seed"},
      {"topP", "top_p"},
      {"top_p", "top_p"},
      {"guidanceScale", "guidance_scale"},
      {"guidance_scale", "guidance_scale"},
      {"resolutionBase", "resolution_base"},
      {"resolution_base", "resolution_base"},
      {"targetFaceCount", "target_face_count"},
      {"target_face_count", "target_face_count"},
      {"boundingBox", "bounding_box"},
      {"bounding_box", "bounding_box"}};
  for (const auto& [given, name] : names) {
    if (key == given) return name;
  }
  return "";
}

double number_of(const nlohmann::json& value, const std::string& key) {
  if (!value.is_number()) throw invalid_argument(key + " must be a number");
  const double x = value.get<double>();
  if (!std::isfinite(x)) throw invalid_argument(key + " must be finite");
  return x;
}

int64_t integer_of(const nlohmann::json& value, const std::string& key) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > INT64_MAX) {
      throw invalid_argument(key + " is too large");
    }
    return value.get<int64_t>();
  }
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9.0e15) {
      return static_cast<int64_t>(x);
    }
  }
  throw invalid_argument(key + " must be a whole number");
}

uint64_t seed_of(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_string()) {  // protobuf's JSON writes uint64 as a string
    const std::string s = value.get<std::string>();
    if (!s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos) {
      errno = 0;
      char* end = nullptr;
      const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
      if (errno == 0 && *end == '\0') return v;
    }
    throw invalid_argument("seed must be a whole number in [0, 2^64), got \"" + s + "\"");
  }
  const int64_t v = integer_of(value, "seed");
  if (v < 0) throw invalid_argument("seed must be >= 0");
  return static_cast<uint64_t>(v);
}

// Reads a JSON line's object into `out`; throws invalid_argument saying what is wrong.
void read_json_line(std::string_view text, PromptLine& out) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: ..." -> from "at".
    std::string what = e.what();
    const size_t at = what.find("at line");
    throw invalid_argument("malformed JSON: " + (at == std::string::npos ? what : what.substr(at)));
  }
  if (!j.is_object()) throw invalid_argument("a line starting with '{' must be a JSON object");
  bool has_prompt = false;
  PromptOverrides& o = out.overrides;
  for (const auto& [key, value] : j.items()) {
    const std::string name = canonical_key(key);
    if (name.empty()) {
      throw invalid_argument("unknown key \"" + key +
                             "\" (known: prompt, seed, topP, guidanceScale, resolutionBase, "
                             "targetFaceCount, boundingBox)");
    }
    if (name == "prompt") {
      if (!value.is_string()) throw invalid_argument("prompt must be a string");
      out.prompt = std::string(trim_line(value.get<std::string>()));
      has_prompt = true;
    } else if (name == "seed") {
      o.seed = seed_of(value);
    } else if (name == "top_p") {
      const double p = number_of(value, key);
      if (!(p > 0 && p <= 1)) throw invalid_argument(key + " must be in (0, 1]");
      o.top_p = p;
    } else if (name == "guidance_scale") {
      const double g = number_of(value, key);
      if (g < 0) throw invalid_argument(key + " must be >= 0");
      o.guidance_scale = g;
    } else if (name == "resolution_base") {
      const int64_t r = integer_of(value, key);
      validate_resolution_base(r);
      o.resolution_base = r;
    } else if (name == "target_face_count") {
      const int64_t n = integer_of(value, key);
      if (n < 1) throw invalid_argument(key + " must be >= 1");
      o.target_face_count = n;
    } else if (name == "bounding_box") {
      if (!value.is_object()) throw invalid_argument(key + " must be an object {x, y, z}");
      std::array<float, 3> box{};
      const char* axes[] = {"x", "y", "z"};
      for (const auto& [axis, side] : value.items()) {
        if (axis != "x" && axis != "y" && axis != "z") {
          throw invalid_argument(key + ": unknown key \"" + axis + "\" (x, y, z)");
        }
      }
      for (int i = 0; i < 3; ++i) {
        const std::string what = key + "." + axes[i];
        if (!value.contains(axes[i])) throw invalid_argument(what + " is missing");
        const double side = number_of(value[axes[i]], what);
        if (side <= 0) throw invalid_argument(what + " must be positive");
        box[i] = static_cast<float>(side);
      }
      o.bounding_box = box;
    }
  }
  if (!has_prompt) throw invalid_argument("the JSON object has no \"prompt\"");
}

}  // namespace

PromptLine parse_prompt_line(int64_t number, std::string_view line, int64_t max_prompt_bytes) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  PromptLine out;
  out.number = number;
  out.text = std::string(line);
  const std::string_view content = trim_line(line);
  if (content.empty()) return out;  // kBlank
  if (content.front() == '#') {
    out.kind = PromptLine::Kind::kComment;
    return out;
  }
  try {
    if (const auto bad = find_invalid_utf8(line)) {
      throw invalid_argument("the line is not valid UTF-8 (byte offset " + std::to_string(*bad) +
                             ")");
    }
    if (content.front() == '{') {
      read_json_line(content, out);
    } else {
      out.prompt = std::string(content);
    }
    if (out.prompt.empty()) throw invalid_argument("prompt is empty");
    if (static_cast<int64_t>(out.prompt.size()) > max_prompt_bytes) {
      throw invalid_argument("prompt is " + std::to_string(out.prompt.size()) +
                             " bytes; the limit is " + std::to_string(max_prompt_bytes));
    }
    out.normalised = text_the_model_reads(out.prompt);
    if (out.normalised.empty()) {
      throw invalid_argument("prompt is empty once normalised (the model would read no text)");
    }
    out.kind = PromptLine::Kind::kPrompt;
  } catch (const std::exception& e) {
    out.kind = PromptLine::Kind::kError;
    out.error = e.what();
    out.prompt.clear();
    out.normalised.clear();
    out.overrides = {};
  }
  return out;
}

std::vector<PromptLine> read_prompt_lines(std::string_view content, const BatchShard& shard,
                                          int64_t max_prompt_bytes) {
  std::vector<PromptLine> lines;
  int64_t number = 0;
  size_t begin = 0;
  while (begin < content.size()) {
    size_t end = content.find('\n', begin);
    if (end == std::string_view::npos) end = content.size();
    ++number;
    if (shard.owns(number)) {
      lines.push_back(
          parse_prompt_line(number, content.substr(begin, end - begin), max_prompt_bytes));
    }
    begin = end + 1;
  }
  return lines;
}

}  // namespace cube3d
