#include "cube3d/server/admission/prompt_policy.h"

#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

// One pattern's compiled program may take this much (RE2's default); the set of all of them
// more, so that a full file of 10,000 phrases still compiles (RE2 caps a program at max_mem / 64
// instructions, and a case-folded letter takes one or two).
constexpr int64_t kPatternMaxMem = int64_t{8} << 20;
constexpr int64_t kSetMaxMem = int64_t{64} << 20;

RE2::Options options(int64_t max_mem) {
  RE2::Options o;
  o.set_encoding(RE2::Options::EncodingUTF8);
  o.set_case_sensitive(false);
  o.set_never_capture(true);
  o.set_log_errors(false);  // errors reach the caller, which logs them once
  o.set_max_mem(max_mem);
  return o;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string at_line(const std::string& source, int line) {
  return source + ":" + std::to_string(line) + ": ";
}

}  // namespace

struct PromptDenylist::Rules {
  std::string source;
  std::vector<std::string> patterns;
  std::vector<int> lines;         // the file's line of each pattern, from 1
  std::unique_ptr<RE2::Set> set;  // all patterns, unanchored: one pass per prompt; null if none

  // One RE2 per pattern, built on first need: only when the set's DFA gives up (out of memory),
  // where RE2 itself falls back to its NFA, so a prompt is never let through unmatched.
  mutable std::once_flag singles_once;
  mutable std::vector<std::unique_ptr<RE2>> singles;

  std::optional<size_t> first_match_one_by_one(std::string_view text) const {
    std::call_once(singles_once, [&] {
      singles.reserve(patterns.size());
      for (const std::string& p : patterns) {
        singles.push_back(std::make_unique<RE2>(p, options(kPatternMaxMem)));
      }
    });
    for (size_t i = 0; i < singles.size(); ++i) {
      if (RE2::PartialMatch(text, *singles[i])) return i;
    }
    return std::nullopt;
  }
};

PromptDenylist::PromptDenylist() : rules_(std::make_shared<const Rules>()) {}

const PromptDenylist::Rules& PromptDenylist::rules() const {
  static const Rules kNone;  // what a moved-from list holds: no patterns
  return rules_ ? *rules_ : kNone;
}

PromptDenylist::PromptDenylist(std::shared_ptr<const Rules> rules) : rules_(std::move(rules)) {}

PromptDenylist PromptDenylist::parse(std::string_view text, const std::string& source) {
  if (text.size() > kMaxFileBytes) {
    throw invalid_argument(source + ": " + std::to_string(text.size()) +
                           " bytes is too large for a prompt denylist file (at most " +
                           std::to_string(kMaxFileBytes) + ")");
  }
  auto rules = std::make_shared<Rules>();
  rules->source = source;
  auto set = std::make_unique<RE2::Set>(options(kSetMaxMem), RE2::UNANCHORED);
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark

  int line_number = 0;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    // Trailing blanks (and the '\r' of a CRLF file) are not part of the pattern.
    while (!line.empty() && is_blank(line.back())) line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;

    const std::string where = at_line(source, line_number);
    if (const std::optional<size_t> bad = find_invalid_utf8(line)) {
      throw invalid_argument(where + "not valid UTF-8 (byte " + std::to_string(*bad + 1) +
                             " of the line)");
    }
    if (rules->patterns.size() == kMaxPatterns) {
      throw invalid_argument(source + ": more than " + std::to_string(kMaxPatterns) +
                             " patterns (the most a prompt denylist file may hold)");
    }
    const std::string pattern(line);
    // Compiled alone first: RE2's error then names this line (a set fails only as a whole, and
    // only at Compile for a program that is too large), and an empty match can be asked about.
    const RE2 alone(pattern, options(kPatternMaxMem));
    if (!alone.ok()) throw invalid_argument(where + "not a valid RE2 pattern: " + alone.error());
    if (RE2::PartialMatch("", alone)) {
      throw invalid_argument(where +
                             "the pattern matches the empty string, so it would match (nearly) "
                             "every prompt; a stray '|', '*' or '?' does this");
    }
    std::string error;
    if (set->Add(pattern, &error) < 0) {
      throw invalid_argument(where + "not a valid RE2 pattern: " + error);
    }
    rules->patterns.push_back(pattern);
    rules->lines.push_back(line_number);
  }

  if (!rules->patterns.empty()) {
    if (!set->Compile()) {
      throw invalid_argument(source + ": the " + std::to_string(rules->patterns.size()) +
                             " patterns together are too large to compile (more than " +
                             std::to_string(kSetMaxMem >> 20) +
                             " MiB for RE2); remove or simplify some");
    }
    rules->set = std::move(set);
  }
  return PromptDenylist(std::move(rules));
}

PromptDenylist PromptDenylist::load(const std::string& path) {
  return parse(read_file(path, "prompt denylist file", static_cast<int64_t>(kMaxFileBytes)), path);
}

bool PromptDenylist::matches(std::string_view normalised_prompt) const {
  const Rules& r = rules();
  if (!r.set) return false;
  RE2::Set::ErrorInfo info{RE2::Set::kNoError};
  if (r.set->Match(normalised_prompt, nullptr, &info)) return true;
  if (info.kind == RE2::Set::kNoError) return false;
  return r.first_match_one_by_one(normalised_prompt).has_value();
}

std::optional<int> PromptDenylist::matching_line(std::string_view normalised_prompt) const {
  const Rules& r = rules();
  if (!r.set) return std::nullopt;
  std::vector<int> hits;
  RE2::Set::ErrorInfo info{RE2::Set::kNoError};
  if (r.set->Match(normalised_prompt, &hits, &info) && !hits.empty()) {
    return r.lines[static_cast<size_t>(*std::min_element(hits.begin(), hits.end()))];
  }
  if (info.kind == RE2::Set::kNoError) return std::nullopt;
  const std::optional<size_t> index = r.first_match_one_by_one(normalised_prompt);
  if (!index) return std::nullopt;
  return r.lines[*index];
}

size_t PromptDenylist::size() const { return rules().patterns.size(); }

const std::string& PromptDenylist::source() const { return rules().source; }

PromptPolicy::PromptPolicy(PromptDenylist rules, PromptFolding folding)
    : folding_(folding), rules_(std::make_shared<const PromptDenylist>(std::move(rules))) {
  (void)unicode_fold("");  // builds the look-alike table now, not in the first request
}

bool PromptPolicy::refuses(std::string_view normalised_prompt) const {
  const std::shared_ptr<const PromptDenylist> rules = current();  // matched outside the lock
  if (rules->size() == 0) return false;
  for (const std::string& form : prompt_forms(normalised_prompt, folding_)) {
    if (rules->matches(form)) return true;
  }
  return false;
}

void PromptPolicy::replace(PromptDenylist rules) {
  auto next = std::make_shared<const PromptDenylist>(std::move(rules));
  const std::lock_guard lock(mutex_);
  rules_.swap(next);
  // `next` (the old rules) is released after the lock, by whoever holds it last.
}

std::shared_ptr<const PromptDenylist> PromptPolicy::current() const {
  const std::lock_guard lock(mutex_);
  return rules_;
}

size_t PromptPolicy::size() const { return current()->size(); }

}  // namespace cube3d
