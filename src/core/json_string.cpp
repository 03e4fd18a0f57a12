#include "cube3d/core/json_string.h"

#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

void append_hex4(std::string& out, unsigned value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kDigits[(value >> shift) & 0xF];
}

// One character of valid UTF-8 text: `bytes` as they are, or escaped.
void append_character(std::string& out, char32_t cp, std::string_view bytes, bool ascii_only) {
  switch (cp) {
    case U'"':
      out += "\\\"";
      return;
    case U'\\':
      out += "\\\\";
      return;
    case U'\b':
      out += "\\b";
      return;
    case U'\f':
      out += "\\f";
      return;
    case U'\n':
      out += "\\n";
      return;
    case U'\r':
      out += "\\r";
      return;
    case U'\t':
      out += "\\t";
      return;
    default:
      break;
  }
  if (cp < 0x20 || cp == 0x7F) {
    append_hex4(out, static_cast<unsigned>(cp));
  } else if (cp < 0x80 || !ascii_only) {
    out += bytes;
  } else if (cp < 0x10000) {
    append_hex4(out, static_cast<unsigned>(cp));
  } else {
    // JSON's \u escapes are UTF-16 code units: a surrogate pair above the BMP.
    const unsigned v = static_cast<unsigned>(cp) - 0x10000;
    append_hex4(out, 0xD800 + (v >> 10));
    append_hex4(out, 0xDC00 + (v & 0x3FF));
  }
}

// The length of the UTF-8 sequence that `lead` starts (valid text only).
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text, bool ascii_only) {
  out += '"';
  size_t i = 0;
  while (i < text.size()) {
    const auto bad = find_invalid_utf8(text.substr(i));
    const size_t valid_end = bad ? i + *bad : text.size();
    const std::u32string points = decode_utf8(text.substr(i, valid_end - i));
    for (const char32_t cp : points) {
      const size_t length = sequence_length(static_cast<unsigned char>(text[i]));
      append_character(out, cp, text.substr(i, length), ascii_only);
      i += length;
    }
    if (bad) {
      // U+FFFD for the byte that starts no valid sequence.
      if (ascii_only) {
        append_hex4(out, 0xFFFD);
      } else {
        out += "\xEF\xBF\xBD";
      }
      ++i;
    }
  }
  out += '"';
}

}  // namespace cube3d
