#include "cube3d/server/httpd/http_message.h"

#include <algorithm>

namespace cube3d::http {
namespace {

char lower_ascii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return lower_ascii(x) == lower_ascii(y);
         });
}

std::string_view take_item(std::string_view& rest, char separator) {
  const size_t at = rest.find(separator);
  const std::string_view item = rest.substr(0, at);
  rest = at == std::string_view::npos ? std::string_view() : rest.substr(at + 1);
  return item;
}

std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::string out(s);
  for (char& c : out) c = lower_ascii(c);
  return out;
}

void Headers::add(std::string name, std::string value) {
  fields_.emplace_back(std::move(name), std::move(value));
}

void Headers::set(std::string name, std::string value) {
  remove(name);
  add(std::move(name), std::move(value));
}

void Headers::remove(std::string_view name) {
  std::erase_if(fields_, [name](const Field& f) { return iequals(f.first, name); });
}

std::optional<std::string_view> Headers::get(std::string_view name) const {
  for (const auto& [key, value] : fields_) {
    if (iequals(key, name)) return std::string_view(value);
  }
  return std::nullopt;
}

std::string Headers::value_or(std::string_view name, std::string_view fallback) const {
  return std::string(get(name).value_or(fallback));
}

std::vector<std::string_view> Headers::get_all(std::string_view name) const {
  std::vector<std::string_view> values;
  for (const auto& [key, value] : fields_) {
    if (iequals(key, name)) values.emplace_back(value);
  }
  return values;
}

size_t Headers::count(std::string_view name) const {
  return static_cast<size_t>(std::count_if(
      fields_.begin(), fields_.end(), [name](const Field& f) { return iequals(f.first, name); }));
}

std::optional<std::string> Request::query_param(std::string_view name) const {
  std::string_view rest = query;
  while (!rest.empty()) {
    const std::string_view item = take_item(rest, '&');
    const size_t eq = item.find('=');
    const std::optional<std::string> key = percent_decode(item.substr(0, eq), true);
    if (!key || *key != name) continue;
    if (eq == std::string_view::npos) return std::string();
    // A value that does not decode reads as absent rather than as something else.
    return percent_decode(item.substr(eq + 1), true);
  }
  return std::nullopt;
}

Response make_response(int status, std::string body, std::string content_type) {
  Response response;
  response.status = status;
  response.body = std::move(body);
  response.headers.set("Content-Type", std::move(content_type));
  return response;
}

std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;  // needs two more characters
      const int hi = hex_value(text[i + 1]);
      const int lo = hex_value(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      const char decoded = static_cast<char>(hi * 16 + lo);
      if (decoded == '\0') return std::nullopt;
      out.push_back(decoded);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::optional<Target> split_target(std::string_view target) {
  if (target == "*") return Target{"*", ""};
  std::string_view rest = target;
  // absolute-form: drop the scheme and authority.
  for (const std::string_view scheme :
       {std::string_view("http://"), std::string_view("https://")}) {
    if (rest.size() >= scheme.size() && iequals(rest.substr(0, scheme.size()), scheme)) {
      rest.remove_prefix(scheme.size());
      const size_t slash = rest.find_first_of("/?");
      rest = slash == std::string_view::npos ? std::string_view("/") : rest.substr(slash);
      if (!rest.empty() && rest.front() == '?') return std::nullopt;
      break;
    }
  }
  if (rest.empty() || rest.front() != '/') return std::nullopt;
  const size_t question = rest.find('?');
  const std::string_view raw_path = rest.substr(0, question);
  std::optional<std::string> path = percent_decode(raw_path);
  if (!path) return std::nullopt;
  Target out;
  out.path = std::move(*path);
  if (question != std::string_view::npos) out.query = std::string(rest.substr(question + 1));
  // A fragment is never sent, but a client that does send one means nothing by it.
  if (const size_t hash = out.query.find('#'); hash != std::string::npos) out.query.resize(hash);
  return out;
}

}  // namespace cube3d::http
