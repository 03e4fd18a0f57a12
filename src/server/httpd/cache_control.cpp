#include "cube3d/server/httpd/cache_control.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace cube3d::http {
namespace {

// RFC 9110's tchar: what a directive's name may hold.
bool is_token_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_space(char c) { return c == ' ' || c == '\t'; }

// Appends the names of one field line's list to `names`.
void read_list(std::string_view line, std::vector<std::string>& names) {
  size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && (is_space(line[at]) || line[at] == ',')) ++at;
    const size_t name_start = at;
    while (at < line.size() && is_token_char(line[at])) ++at;
    std::string name(line.substr(name_start, at - name_start));
    while (at < line.size() && is_space(line[at])) ++at;
    bool well_formed = !name.empty();
    if (at < line.size() && line[at] == '=') {
      ++at;
      while (at < line.size() && is_space(line[at])) ++at;
      if (at < line.size() && line[at] == '"') {  // a quoted string, escapes and all
        ++at;
        while (at < line.size() && line[at] != '"') at += line[at] == '\\' ? 2 : 1;
        if (at >= line.size()) well_formed = false;  // unterminated
        ++at;
      } else {
        while (at < line.size() && is_token_char(line[at])) ++at;
      }
      while (at < line.size() && is_space(line[at])) ++at;
    }
    if (at < line.size() && line[at] != ',') {
      // Not a member this reader understands: skip to the next comma.
      well_formed = false;
      while (at < line.size() && line[at] != ',') ++at;
    }
    if (well_formed) {
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      names.push_back(std::move(name));
    }
  }
}

}  // namespace

std::vector<std::string> cache_control_directives(const Headers& headers) {
  std::vector<std::string> names;
  for (const std::string_view line : headers.get_all("Cache-Control")) read_list(line, names);
  return names;
}

bool wants_fresh_answer(const Headers& headers) {
  const std::vector<std::string> names = cache_control_directives(headers);
  return std::any_of(names.begin(), names.end(), [](const std::string& name) {
    return name == "no-cache" || name == "no-store";
  });
}

}  // namespace cube3d::http
