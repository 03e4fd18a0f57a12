// The command-line conventions every tool of the project shares, on top of CLI11:
//   --name VALUE and --name=VALUE; options of several values (--bbox X Y Z); --flag switches;
//   an option given twice keeps its last value, except repeatable ones (--set), which keep all;
//   options that also read a CUBE3D_* environment variable when the flag is absent (flag > env);
//   --help, and --version ("<tool> <version> (<git revision>)");
//   errors that name the option, with a "did you mean" for a near miss.
// CLI11 stays inside the library: the tools see only this class.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace cube3d {

// A tool's main(): runs `body` and turns an escaping error into one line on stderr,
// "<tool>: CODE: message", and an exit code: 2 for our errors (bad input, missing files),
// 1 for anything else. A CliAnswer (--version) goes to stdout with exit code 0.
int run_tool(const char* tool, int (*body)(int, char**), int argc, char** argv);

// Thrown by CliArgs::parse() for --version, and by parse_answering_help() for --help too: an
// answer, not an error. The library answers them (through run_tool), so no main needs code for
// them; a tool that adds to its help uses parse() and help_requested() instead.
class CliAnswer {
 public:
  explicit CliAnswer(std::string text) : text_(std::move(text)) {}
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// `text` as a finite number; throws invalid_argument "<where>: expected a finite number, got 'x'".
double parse_finite_double(const std::string& text, const std::string& where);

class CliArgs {
 public:
  explicit CliArgs(std::string program, std::string summary);

  // values: how many values follow the option (0 = a switch). Given twice, an option keeps the
  // last occurrence; a repeatable one keeps every occurrence, in order (get_all).
  CliArgs& option(const std::string& name, int values, const std::string& help,
                  const std::string& metavar = "V", bool repeatable = false);
  // The option declared last (a switch or one value) also reads environment variable `variable`
  // when its flag is absent (a flag beats the environment; an empty variable counts as unset).
  // --help names it.
  CliArgs& env(const std::string& variable);

  // Throws invalid_argument naming the option on unknown options, missing values or bad switch
  // values, and CliAnswer for --version. With --help nothing else is checked.
  void parse(int argc, const char* const* argv);
  // parse(), with --help answered like --version: a CliAnswer holding help().
  void parse_answering_help(int argc, const char* const* argv);

  bool help_requested() const { return help_; }
  std::string help() const;
  // "<program> <version> (<git revision>)", see version.h.
  std::string version() const;

  // Whether the option was given, on the command line or through its environment variable.
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> get_all(const std::string& name) const;
  // Typed getters: throw invalid_argument "--name: expected a number, got 'x'".
  double get_double(const std::string& name, double fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  uint64_t get_uint(const std::string& name, uint64_t fallback) const;
  // How to name the option's value in a message: "--listen", or "CUBE3D_LISTEN (for --listen)"
  // when the value came from the environment, so that the user knows where to look.
  std::string source(const std::string& name) const;

 private:
  struct Spec {
    int values;
    std::string help;
    std::string metavar;
    bool repeatable;
    std::string env;
  };
  std::string program_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, std::string> from_env_;  // option -> the variable its value came from
  bool help_ = false;
};

}  // namespace cube3d
