// The prompt policy (policy.prompt_denylist_file): prompts this server refuses to generate.
//
// The file holds one RE2 pattern per line, matched anywhere in the prompt as the model reads it
// (pipeline/model_text.h: HTML entities decoded, white space folded, lower case) and in its folded
// forms (prompt_folding.h), so that letter case, `&amp;`, extra spaces or look-alike text cannot
// slip past a rule:
//
//   # weapons                     <- a comment: the first non-blank character is '#'
//   \bbomb(s)?\b                  <- matched anywhere; ^ and $ anchor to the whole prompt
//   ^gun$
//
// Rules for the file: UTF-8 (a BOM at its start is skipped), at most 1 MiB and 10,000 patterns;
// lines that are empty or only blanks are skipped; "\r\n" line ends are read as "\n". Trailing
// blanks (spaces, tabs) are not part of a pattern, leading ones are: " gun" needs a space before
// "gun" (write `\bgun` to match a word start, and `[ ]`, `\x20` or `\s` for a trailing space; a
// pattern that begins with '#' is written `\#`). Patterns are case-insensitive, capture nothing,
// and may not match the empty prompt (a stray `|` or `*` would refuse every prompt).
//
// A match is PERMISSION_DENIED with kRefusal as its message: the client learns which policy
// refused it, never the pattern, so the list cannot be probed rule by rule. The operator's log
// may name the line (matching_line). On SIGHUP the server re-reads the file and replace()s the
// rules; a file that fails to load keeps the current rules.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "cube3d/server/admission/prompt_folding.h"

namespace cube3d {

// Compiled, immutable rules. Copies share the compiled form (cheap); matching is thread-safe. A
// moved-from list matches nothing.
class PromptDenylist {
 public:
  static constexpr size_t kMaxPatterns = 10'000;
  static constexpr size_t kMaxFileBytes = size_t{1} << 20;

  // No patterns: matches nothing.
  PromptDenylist();

  // Compiles the patterns of a denylist file's `text`; `source` (the file) starts every message.
  // invalid_argument "<source>:<line>: ..." for a line that is not UTF-8, a pattern RE2 rejects
  // (with RE2's error) or one that matches the empty prompt; "<source>: ..." beyond the limits.
  static PromptDenylist parse(std::string_view text, const std::string& source);
  // parse() of the file at `path`; not_found naming it when it is missing.
  static PromptDenylist load(const std::string& path);

  // Whether any pattern matches somewhere in `normalised_prompt` (one pass over the text).
  bool matches(std::string_view normalised_prompt) const;
  // The file's line (from 1) of the first pattern that matches, for the operator's log.
  std::optional<int> matching_line(std::string_view normalised_prompt) const;

  size_t size() const;                // patterns
  const std::string& source() const;  // the file, or "" for the empty list

 private:
  struct Rules;
  explicit PromptDenylist(std::shared_ptr<const Rules> rules);
  const Rules& rules() const;
  std::shared_ptr<const Rules> rules_;  // null only in a moved-from list
};

// The rules in force, swapped whole on reload; every call is thread-safe. A prompt is refused when
// any of its forms (prompt_folding.h: the text itself, its Unicode fold, and the optional
// foldings of separators and digits) matches: fullwidth or mathematical letters, invisible
// characters, accents, look-alike letters of other scripts, "b o m b" or "b0mb" do not slip past
// a rule that the plain spelling meets.
class PromptPolicy {
 public:
  // The message of a refusal, for the client: names the policy, never a pattern or a line.
  static constexpr std::string_view kRefusal =
      "the prompt is refused by this server's prompt policy (policy.prompt_denylist_file)";

  explicit PromptPolicy(PromptDenylist rules, PromptFolding folding = {});

  // Whether the current rules refuse `normalised_prompt` (pipeline's text_the_model_reads) in
  // any of its forms.
  bool refuses(std::string_view normalised_prompt) const;
  // Swaps in new rules; calls under way finish with the rules they started with.
  void replace(PromptDenylist rules);
  // The rules in force (to log the matching line of a refusal, or the file and size on reload).
  std::shared_ptr<const PromptDenylist> current() const;
  size_t size() const;

 private:
  const PromptFolding folding_;
  mutable std::mutex mutex_;
  std::shared_ptr<const PromptDenylist> rules_;
};

}  // namespace cube3d
