#include "cube3d/clients/sse_parser.h"

namespace cube3d {
namespace {

constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
// A line buffer that held a large line (a mesh in base64) is given back rather than kept.
constexpr size_t kKeptLineCapacity = 64 * 1024;

}  // namespace

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  if (after_cr_ && !bytes.empty()) {
    after_cr_ = false;
    if (bytes.front() == '\n') pos = 1;  // the LF of a CRLF split between two pieces
  }
  while (pos < bytes.size()) {
    const size_t end = bytes.find_first_of("\r\n", pos);
    if (end == std::string_view::npos) {
      line_.append(bytes.substr(pos));
      break;
    }
    line_.append(bytes.substr(pos, end - pos));
    end_line(out);
    pos = end + 1;
    if (bytes[end] == '\r') {
      if (pos == bytes.size()) {
        after_cr_ = true;
      } else if (bytes[pos] == '\n') {
        ++pos;
      }
    }
  }
  return out;
}

bool SseParser::idle() const { return line_.empty() && !in_event_; }

void SseParser::end_line(std::vector<SseEvent>& out) {
  std::string_view line = line_;
  if (first_line_) {
    first_line_ = false;
    if (line.starts_with(kByteOrderMark)) line.remove_prefix(kByteOrderMark.size());
  }
  if (line.empty()) {
    // A blank line dispatches the event, if it has data.
    if (has_data_) out.push_back({event_.empty() ? "message" : event_, std::move(data_)});
    event_.clear();
    data_.clear();
    has_data_ = false;
    in_event_ = false;
  } else if (line.front() != ':') {  // ':' starts a comment
    const size_t colon = line.find(':');
    const std::string_view name = line.substr(0, colon);
    std::string_view value =
        colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (value.starts_with(' ')) value.remove_prefix(1);
    in_event_ = true;
    if (name == "event") {
      event_ = value;
    } else if (name == "data") {
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
  }
  line_.clear();
  if (line_.capacity() > kKeptLineCapacity) std::string().swap(line_);
}

}  // namespace cube3d
