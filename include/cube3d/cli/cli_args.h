// A small command-line parser for the project's tools: --name VALUE options (some taking
// several values), --flag switches, --help text, and errors that name the option.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cube3d {

// A tool's main(): runs `body` and turns an escaping error into one line on stderr,
// "<tool>: CODE: message", and an exit code: 2 for our errors (bad input, missing files),
// 1 for anything else.
int run_tool(const char* tool, int (*body)(int, char**), int argc, char** argv);

class CliArgs {
 public:
  explicit CliArgs(std::string program, std::string summary);

  // values: how many values follow the option (0 = a switch). A repeatable option may be
  // given several times; get_all() then returns the values of every occurrence in order.
  CliArgs& option(const std::string& name, int values, const std::string& help,
                  const std::string& metavar = "V", bool repeatable = false);

  // Throws invalid_argument naming the option on unknown options, missing values or repeats.
  void parse(int argc, const char* const* argv);

  bool help_requested() const { return help_; }
  std::string help() const;

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> get_all(const std::string& name) const;
  // Typed getters: throw invalid_argument "--name: expected a number, got 'x'".
  double get_double(const std::string& name, double fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  uint64_t get_uint(const std::string& name, uint64_t fallback) const;

 private:
  struct Spec {
    int values;
    std::string help;
    std::string metavar;
    bool repeatable;
  };
  std::string program_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  bool help_ = false;
};

}  // namespace cube3d
