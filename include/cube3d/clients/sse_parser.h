// An incremental parser of a text/event-stream body (server-sent events, the WHATWG HTML
// "event stream interpretation"), for cube3d-loadgen's HTTP client: feed it the body's bytes as
// they arrive, in pieces of any size, and it hands back each event as soon as the blank line
// that ends it has arrived.
//
//   event: progress            a field line: name, ':', one optional space, value
//   data: {"stage": ...}       data lines: several are joined with '\n'
//   : keep-alive               a comment (the line starts with ':'): ignored
//                              a blank line ends the event
//
// Lines end with CRLF, LF or CR (a CRLF split between two pieces is one line end). A line
// without ':' is a field with an empty value; fields other than event and data (id, retry, ...)
// are ignored; a leading UTF-8 byte order mark is skipped. As the standard says, an event
// without data is not dispatched (so a comment followed by a blank line is no event), an event
// without an event field is "message", and a last event not ended by a blank line is dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cube3d {

struct SseEvent {
  std::string event;  // the event field; "message" when there was none
  std::string data;   // the data lines, joined with '\n'
  bool operator==(const SseEvent&) const = default;
};

class SseParser {
 public:
  // Parses `bytes`, the next piece of the body; returns the events it completed, in order.
  // Linear in the bytes fed, however the body is split.
  std::vector<SseEvent> feed(std::string_view bytes);

  // True when nothing is buffered: no partial line and no event begun (between events).
  bool idle() const;

 private:
  void end_line(std::vector<SseEvent>& out);

  std::string line_;        // the line being read, without its end
  bool after_cr_ = false;   // the last byte was CR: an LF right after it ends no second line
  bool first_line_ = true;  // where a byte order mark may be
  std::string event_;       // the event field of the event being read
  std::string data_;        // its data lines so far, joined with '\n'
  bool has_data_ = false;   // whether a data line came (the data may still be empty)
  bool in_event_ = false;   // whether a field line came since the last blank line
};

}  // namespace cube3d
