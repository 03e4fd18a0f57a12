#include "cube3d/cli/cli_args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "cube3d/cli/version.h"
#include "cube3d/core/error.h"
#include "cube3d/core/suggest.h"

namespace cube3d {
namespace {

// The built-in options; they take part in "did you mean" like the tool's own.
constexpr const char* kHelp = "--help";
constexpr const char* kVersion = "--version";
constexpr size_t kHelpColumn = 34;
constexpr size_t kHelpWidth = 100;
// Holds "[env: VAR]" together when the help text is wrapped; printed as a space.
constexpr char kUnbreakableSpace = '\x1f';

// A switch given as --flag=VALUE (or through its environment variable): on or off.
bool switch_value(const std::string& where, const std::string& text) {
  if (text.empty() || text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  throw invalid_argument(where + " is a switch: expected no value (or true/false), got '" + text +
                         "'");
}

// "--name=" would make CLI11 take the next word as the value; an explicit empty value (e.g.
// --metrics-listen= to turn metrics off) must stay empty, so it becomes "--name" "".
std::vector<std::string> split_empty_values(int argc, const char* const* argv) {
  std::vector<std::string> words;
  bool options_ended = false;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") options_ended = true;
    if (!options_ended && word.size() > 3 && word.rfind("--", 0) == 0 && word.back() == '=' &&
        word.find('=') == word.size() - 1) {
      words.push_back(word.substr(0, word.size() - 1));
      words.emplace_back();
    } else {
      words.push_back(word);
    }
  }
  return words;
}

// `text` read whole by `parse` (strtod, strtoll or strtoull, base 10): nullopt when it is empty,
// has anything after the number or is out of the type's range.
template <typename Parse>
auto whole_number(const std::string& text, Parse parse)
    -> std::optional<decltype(parse(text.c_str(), nullptr, 10))> {
  char* end = nullptr;
  errno = 0;
  const auto value = parse(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) return std::nullopt;
  return value;
}

}  // namespace

int run_tool(const char* tool, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const CliAnswer& answer) {
    std::fputs(answer.text().c_str(), stdout);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s: %s\n", tool, std::string(to_string(e.code())).c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return 1;
  }
}

CliArgs::CliArgs(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

CliArgs& CliArgs::option(const std::string& name, int values, const std::string& help,
                         const std::string& metavar, bool repeatable) {
  if (name.rfind("--", 0) != 0 || name == kHelp || name == kVersion || specs_.count(name)) {
    throw internal_error("CliArgs: bad or duplicate option name '" + name + "'");
  }
  order_.push_back(name);
  specs_[name] = {values, help, metavar, repeatable, ""};
  return *this;
}

CliArgs& CliArgs::env(const std::string& variable) {
  if (order_.empty()) throw internal_error("CliArgs::env before any option");
  Spec& spec = specs_.at(order_.back());
  // One variable holds one value: no environment for --bbox X Y Z.
  if (spec.values > 1)
    throw internal_error("CliArgs::env on " + order_.back() + " (several values)");
  spec.env = variable;
  return *this;
}

void CliArgs::parse(int argc, const char* const* argv) {
  CLI::App app(summary_, program_);
  // Our own --help and --version: the tools decide what to print and when to exit, and the help
  // text keeps the project's layout.
  app.set_help_flag();
  // Unknown words are collected and reported below with a "did you mean" rather than CLI11's
  // generic "the following arguments were not expected".
  app.allow_extras(true);
  CLI::Option* const help_flag = app.add_flag("-h,--help");
  CLI::Option* const version_flag = app.add_flag(kVersion);
  std::map<std::string, CLI::Option*> parsed;
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    if (s.values == 0) {
      parsed[name] = app.add_flag(name);
      continue;
    }
    // type_size: the values of one occurrence, all required (--bbox 1 2 fails); every
    // occurrence is kept in results() and reduced below (last wins unless repeatable).
    parsed[name] = app.add_option(name)->type_size(s.values)->expected(1)->multi_option_policy(
        CLI::MultiOptionPolicy::TakeAll);
  }

  std::vector<std::string> words = split_empty_values(argc, argv);
  std::reverse(words.begin(), words.end());  // CLI11 takes its arguments last-first
  try {
    app.parse(words);
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 says "--box: 3 required TEXT missing"; name the option our way.
    const std::string what = e.what();
    const std::string name = what.substr(0, what.find(':'));
    const auto it = specs_.find(name);
    if (it == specs_.end()) throw invalid_argument(what);
    throw invalid_argument(name + " expects " + std::to_string(it->second.values) + " value(s)");
  } catch (const CLI::ParseError& e) {
    throw invalid_argument(e.what());
  }

  // Answered before anything else is checked; --help wins over --version.
  help_ = help_flag->count() > 0;
  if (help_) return;
  if (version_flag->count() > 0) throw CliAnswer(version() + "\n");

  const std::vector<std::string> extras = app.remaining();
  if (!extras.empty()) {
    const std::string& word = extras.front();
    if (word.size() > 1 && word[0] == '-' && word != "--") {
      const std::string name = word.substr(0, word.find('='));
      // Compared without the leading dashes, and one edit only for short words: "--nope" is not
      // a typo of "--name".
      std::vector<std::string_view> known;
      for (const auto& option : order_) known.push_back(std::string_view(option).substr(2));
      known.push_back(std::string_view(kHelp).substr(2));
      known.push_back(std::string_view(kVersion).substr(2));
      const std::string_view bare = std::string_view(name).substr(name.rfind("--", 0) == 0 ? 2 : 1);
      const std::string_view match = closest_match(bare, known, bare.size() <= 5 ? 1 : 2);
      const std::string hint = did_you_mean(match.empty() ? "" : "--" + std::string(match));
      throw invalid_argument("unknown option '" + name + "'" +
                             (hint.empty() ? " (see " + program_ + " --help)" : hint));
    }
    throw invalid_argument("unexpected argument '" + word + "': " + program_ +
                           " takes only options (see " + program_ + " --help)");
  }

  values_.clear();
  from_env_.clear();
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    std::vector<std::string> got = parsed.at(name)->results();
    if (got.empty() && !s.env.empty()) {
      // The environment stands in for an absent flag only; an empty variable is unset.
      const char* value = std::getenv(s.env.c_str());
      if (value != nullptr && *value != '\0') {
        got = {value};
        from_env_[name] = s.env;
      }
    }
    if (got.empty()) continue;
    if (s.values == 0) {
      // A switch: on unless its last occurrence says false.
      if (switch_value(source(name), got.back())) values_[name] = {};
      continue;
    }
    if (!s.repeatable && got.size() > static_cast<size_t>(s.values)) {
      got.erase(got.begin(), got.end() - s.values);  // given twice: the last one wins
    }
    values_[name] = std::move(got);
  }
}

void CliArgs::parse_answering_help(int argc, const char* const* argv) {
  parse(argc, argv);
  if (help_) throw CliAnswer(help());
}

std::string CliArgs::help() const {
  std::string out = "usage: " + program_ + " [options]\n" + summary_ + "\n\noptions:\n";
  // One option per entry, its text wrapped at kHelpWidth under the text column.
  const auto line = [&out](std::string left, const std::string& text) {
    if (left.size() < kHelpColumn) left.resize(kHelpColumn, ' ');
    std::string row = left;
    size_t begin = 0;
    while (begin < text.size()) {
      const size_t room = kHelpWidth > row.size() + 1 ? kHelpWidth - row.size() - 1 : 0;
      size_t end = text.size();
      if (end - begin > room) {
        const size_t space = text.rfind(' ', begin + room);
        end = space != std::string::npos && space > begin ? space : text.find(' ', begin);
        if (end == std::string::npos) end = text.size();
      }
      std::string piece = text.substr(begin, end - begin);
      std::replace(piece.begin(), piece.end(), kUnbreakableSpace, ' ');
      out += row + " " + piece + "\n";
      row = std::string(kHelpColumn, ' ');
      begin = end < text.size() ? end + 1 : end;
    }
  };
  bool any_env = false;
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    std::string left = "  " + name;
    for (int k = 0; k < s.values; ++k) left += " " + s.metavar;
    if (s.repeatable) left += " ...";
    const std::string env_tag =
        s.env.empty() ? "" : std::string(" [env:") + kUnbreakableSpace + s.env + "]";
    line(left, s.help + env_tag);
    any_env = any_env || !s.env.empty();
  }
  line("  -h, --help", "print this help and exit");
  line("  --version", "print the version and exit");
  out +=
      "\n--name VALUE and --name=VALUE are the same; an option given twice keeps its last value.\n";
  const bool any_repeatable = std::any_of(
      specs_.begin(), specs_.end(), [](const auto& entry) { return entry.second.repeatable; });
  if (any_repeatable) {
    out += "Options marked ... are repeatable: they keep every value, in order.\n";
  }
  if (any_env) out += "[env: VAR]: read when the option is absent; the flag beats the variable.\n";
  return out;
}

std::string CliArgs::version() const { return version_text(program_); }

std::string CliArgs::source(const std::string& name) const {
  const auto it = from_env_.find(name);
  return it == from_env_.end() ? name : it->second + " (for " + name + ")";
}

std::string CliArgs::get(const std::string& name, const std::string& fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() || it->second.empty() ? fallback : it->second.front();
}

std::vector<std::string> CliArgs::get_all(const std::string& name) const {
  const auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

double CliArgs::get_double(const std::string& name, double fallback) const {
  return has(name) ? parse_finite_double(get(name), source(name)) : fallback;
}

int64_t CliArgs::get_int(const std::string& name, int64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name);
  const auto value = whole_number(
      text, [](const char* begin, char** end, int base) { return std::strtoll(begin, end, base); });
  if (!value) throw invalid_argument(source(name) + ": expected an integer, got '" + text + "'");
  return *value;
}

uint64_t CliArgs::get_uint(const std::string& name, uint64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name);
  // strtoull takes "-1" as the largest value: a sign is refused before it reads.
  const auto value = text.rfind('-', 0) == 0
                         ? std::nullopt
                         : whole_number(text, [](const char* begin, char** end, int base) {
                             return std::strtoull(begin, end, base);
                           });
  if (!value) {
    throw invalid_argument(source(name) + ": expected a non-negative integer, got '" + text + "'");
  }
  return *value;
}

double parse_finite_double(const std::string& text, const std::string& where) {
  const auto value = whole_number(
      text, [](const char* begin, char** end, int) { return std::strtod(begin, end); });
  if (!value || !std::isfinite(*value)) {
    throw invalid_argument(where + ": expected a finite number, got '" + text + "'");
  }
  return *value;
}

}  // namespace cube3d
