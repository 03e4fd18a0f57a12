// The prompts file of cube3d-generate's batch mode (--prompts-file): one prompt a line, UTF-8.
//   - A line ends at '\n' (a '\r' before it is dropped); the lines are numbered from 1, every
//     line counted (see batch_shard.h).
//   - Blank lines (only white space) and comments (first non-blank character '#') are skipped.
//   - A line whose first non-blank character is '{' is a JSON object: "prompt" (a string,
//     required) and optional per-prompt overrides, in the HTTP API's JSON names or in snake case:
//       seed (uint64, a number or a decimal string), topP | top_p (in (0, 1]),
//       guidanceScale | guidance_scale (finite, >= 0), resolutionBase | resolution_base
//       (1..9), targetFaceCount | target_face_count (>= 1), boundingBox | bounding_box
//       ({"x", "y", "z"} positive, for models with a bounding-box input).
//     Any other key is an error (a misspelt override must not be ignored).
//   - Any other line is the prompt itself, white space around it trimmed.
// A line is refused, with the reason, when it is not valid UTF-8, its prompt is empty or over
// the byte limit (the server's limits.max_prompt_bytes default), the model would read nothing
// of it (CLIP's clean-up leaves it empty), or its JSON is malformed or has a bad override.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/tools/batch_shard.h"

namespace cube3d {

struct PromptOverrides {
  std::optional<uint64_t> seed;
  std::optional<double> top_p;
  std::optional<double> guidance_scale;
  std::optional<int64_t> resolution_base;
  std::optional<int64_t> target_face_count;
  std::optional<std::array<float, 3>> bounding_box;  // as given (not yet normalised)
};

struct PromptLine {
  enum class Kind { kPrompt, kBlank, kComment, kError };
  int64_t number = 0;  // 1-based, every line of the file counted
  Kind kind = Kind::kBlank;
  std::string text;        // the line as read (no line end), for reports
  std::string prompt;      // kPrompt: the prompt as given to the model (and its provenance)
  std::string normalised;  // kPrompt: what the model reads (CLIP's clean-up, lower case)
  PromptOverrides overrides;
  std::string error;  // kError: why the line is refused
};

// One line (without its '\n'; a trailing '\r' is dropped).
PromptLine parse_prompt_line(int64_t number, std::string_view line,
                             int64_t max_prompt_bytes = kDefaultMaxPromptBytes);

// The lines of `content` that `shard` owns, parsed, in file order (blank lines and comments
// included, as such).
std::vector<PromptLine> read_prompt_lines(std::string_view content, const BatchShard& shard,
                                          int64_t max_prompt_bytes = kDefaultMaxPromptBytes);

}  // namespace cube3d
