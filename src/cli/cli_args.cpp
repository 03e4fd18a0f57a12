#include "cube3d/cli/cli_args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cube3d/core/error.h"

namespace cube3d {

int run_tool(const char* tool, int (*body)(int, char**), int argc, char** argv) {
  try {
    return body(argc, argv);
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
  order_.push_back(name);
  specs_[name] = {values, help, metavar, repeatable};
  return *this;
}

void CliArgs::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    const auto it = specs_.find(arg);
    if (it == specs_.end()) {
      throw invalid_argument("unknown option '" + arg + "' (see " + program_ + " --help)");
    }
    if (values_.count(arg) && !it->second.repeatable) {
      throw invalid_argument(arg + " given more than once");
    }
    std::vector<std::string>& vals = values_[arg];
    for (int k = 0; k < it->second.values; ++k) {
      if (i + 1 >= argc) {
        throw invalid_argument(arg + " expects " + std::to_string(it->second.values) + " value(s)");
      }
      vals.emplace_back(argv[++i]);
    }
  }
}

std::string CliArgs::help() const {
  std::string out = "usage: " + program_ + " [options]\n" + summary_ + "\n\noptions:\n";
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    std::string left = "  " + name;
    for (int k = 0; k < s.values; ++k) left += " " + s.metavar;
    if (s.repeatable) left += " ...";
    if (left.size() < 34) left.resize(34, ' ');
    out += left + " " + s.help + "\n";
  }
  return out;
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
  if (!has(name)) return fallback;
  const std::string text = get(name);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value)) {
    throw invalid_argument(name + ": expected a finite number, got '" + text + "'");
  }
  return value;
}

int64_t CliArgs::get_int(const std::string& name, int64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name);
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw invalid_argument(name + ": expected an integer, got '" + text + "'");
  }
  return value;
}

uint64_t CliArgs::get_uint(const std::string& name, uint64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string text = get(name);
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || *end != '\0' || errno == ERANGE) {
    throw invalid_argument(name + ": expected a non-negative integer, got '" + text + "'");
  }
  return value;
}

}  // namespace cube3d
