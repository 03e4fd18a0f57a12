// CLIP's BPE tokenizer: text clean-up as OpenAI's simple_tokenizer does it, RE2 for the
// pre-tokenizer pattern, byte-level BPE over integer symbol ids, and a sharded, bounded cache.
// Python reference points: basic_clean / whitespace_clean / SimpleTokenizer.bpe in
// clip/simple_tokenizer.py, html.unescape in the standard library, str.lower in CPython.
#include "cube3d/model/clip_tokenizer.h"

#include <re2/re2.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "cube3d/core/error.h"
#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

// ---------------------------------------------------------------------------------------------
// Unicode helpers. The text is validated UTF-8 before any of these run.

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string to_utf8(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t cp : text) append_utf8(out, cp);
  return out;
}

// Only for text that find_invalid_utf8 accepted.
std::u32string decode_valid_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = s[i];
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out += cp;
    i += len;
  }
  return out;
}

std::string_view validated(std::string_view text) {
  if (const auto offset = find_invalid_utf8(text)) {
    throw invalid_argument("prompt is not valid UTF-8 (byte offset " + std::to_string(*offset) +
                           ")");
  }
  return text;
}

// Python's str.isspace() (what str.strip() removes): bidi class WS, B or S, or category Zs.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The `regex` module's \s (Unicode White_Space), which whitespace_clean folds. It differs from
// isspace() by U+001C..U+001F: those are stripped at the ends but never folded inside.
bool is_regex_space(char32_t c) { return is_python_space(c) && !(c >= 0x1C && c <= 0x1F); }

std::u32string strip(const std::u32string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && is_python_space(text[begin])) ++begin;
  while (end > begin && is_python_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

// whitespace_clean: re.sub(r'\s+', ' ', text).strip()
std::u32string fold_whitespace(const std::u32string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (is_regex_space(text[i])) {
      out += U' ';
      while (i < text.size() && is_regex_space(text[i])) ++i;
    } else {
      out += text[i++];
    }
  }
  return strip(out);
}

// ---------------------------------------------------------------------------------------------
// html.unescape (Python 3.11), with the entity table limited as the header says.

struct Entity {
  const char* name;
  char32_t value;
  bool legacy;  // HTML 5 also accepts the name without its ';' (and as a prefix, "&ampx")
};

// The HTML 4 entities, &apos; and the upper-case legacy aliases, sorted by name (byte order).
// Values are html.entities.html5's (they differ from HTML 4 for &lang; and &rang;).
constexpr Entity kEntities[] = {
    {"AElig", 0x00C6, true},    {"AMP", 0x0026, true},      {"Aacute", 0x00C1, true},
    {"Acirc", 0x00C2, true},    {"Agrave", 0x00C0, true},   {"Alpha", 0x0391, false},
    {"Aring", 0x00C5, true},    {"Atilde", 0x00C3, true},   {"Auml", 0x00C4, true},
    {"Beta", 0x0392, false},    {"COPY", 0x00A9, true},     {"Ccedil", 0x00C7, true},
    {"Chi", 0x03A7, false},     {"Dagger", 0x2021, false},  {"Delta", 0x0394, false},
    {"ETH", 0x00D0, true},      {"Eacute", 0x00C9, true},   {"Ecirc", 0x00CA, true},
    {"Egrave", 0x00C8, true},   {"Epsilon", 0x0395, false}, {"Eta", 0x0397, false},
    {"Euml", 0x00CB, true},     {"GT", 0x003E, true},       {"Gamma", 0x0393, false},
    {"Iacute", 0x00CD, true},   {"Icirc", 0x00CE, true},    {"Igrave", 0x00CC, true},
    {"Iota", 0x0399, false},    {"Iuml", 0x00CF, true},     {"Kappa", 0x039A, false},
    {"LT", 0x003C, true},       {"Lambda", 0x039B, false},  {"Mu", 0x039C, false},
    {"Ntilde", 0x00D1, true},   {"Nu", 0x039D, false},      {"OElig", 0x0152, false},
    {"Oacute", 0x00D3, true},   {"Ocirc", 0x00D4, true},    {"Ograve", 0x00D2, true},
    {"Omega", 0x03A9, false},   {"Omicron", 0x039F, false}, {"Oslash", 0x00D8, true},
    {"Otilde", 0x00D5, true},   {"Ouml", 0x00D6, true},     {"Phi", 0x03A6, false},
    {"Pi", 0x03A0, false},      {"Prime", 0x2033, false},   {"Psi", 0x03A8, false},
    {"QUOT", 0x0022, true},     {"REG", 0x00AE, true},      {"Rho", 0x03A1, false},
    {"Scaron", 0x0160, false},  {"Sigma", 0x03A3, false},   {"THORN", 0x00DE, true},
    {"Tau", 0x03A4, false},     {"Theta", 0x0398, false},   {"Uacute", 0x00DA, true},
    {"Ucirc", 0x00DB, true},    {"Ugrave", 0x00D9, true},   {"Upsilon", 0x03A5, false},
    {"Uuml", 0x00DC, true},     {"Xi", 0x039E, false},      {"Yacute", 0x00DD, true},
    {"Yuml", 0x0178, false},    {"Zeta", 0x0396, false},    {"aacute", 0x00E1, true},
    {"acirc", 0x00E2, true},    {"acute", 0x00B4, true},    {"aelig", 0x00E6, true},
    {"agrave", 0x00E0, true},   {"alefsym", 0x2135, false}, {"alpha", 0x03B1, false},
    {"amp", 0x0026, true},      {"and", 0x2227, false},     {"ang", 0x2220, false},
    {"apos", 0x0027, false},    {"aring", 0x00E5, true},    {"asymp", 0x2248, false},
    {"atilde", 0x00E3, true},   {"auml", 0x00E4, true},     {"bdquo", 0x201E, false},
    {"beta", 0x03B2, false},    {"brvbar", 0x00A6, true},   {"bull", 0x2022, false},
    {"cap", 0x2229, false},     {"ccedil", 0x00E7, true},   {"cedil", 0x00B8, true},
    {"cent", 0x00A2, true},     {"chi", 0x03C7, false},     {"circ", 0x02C6, false},
    {"clubs", 0x2663, false},   {"cong", 0x2245, false},    {"copy", 0x00A9, true},
    {"crarr", 0x21B5, false},   {"cup", 0x222A, false},     {"curren", 0x00A4, true},
    {"dArr", 0x21D3, false},    {"dagger", 0x2020, false},  {"darr", 0x2193, false},
    {"deg", 0x00B0, true},      {"delta", 0x03B4, false},   {"diams", 0x2666, false},
    {"divide", 0x00F7, true},   {"eacute", 0x00E9, true},   {"ecirc", 0x00EA, true},
    {"egrave", 0x00E8, true},   {"empty", 0x2205, false},   {"emsp", 0x2003, false},
    {"ensp", 0x2002, false},    {"epsilon", 0x03B5, false}, {"equiv", 0x2261, false},
    {"eta", 0x03B7, false},     {"eth", 0x00F0, true},      {"euml", 0x00EB, true},
    {"euro", 0x20AC, false},    {"exist", 0x2203, false},   {"fnof", 0x0192, false},
    {"forall", 0x2200, false},  {"frac12", 0x00BD, true},   {"frac14", 0x00BC, true},
    {"frac34", 0x00BE, true},   {"frasl", 0x2044, false},   {"gamma", 0x03B3, false},
    {"ge", 0x2265, false},      {"gt", 0x003E, true},       {"hArr", 0x21D4, false},
    {"harr", 0x2194, false},    {"hearts", 0x2665, false},  {"hellip", 0x2026, false},
    {"iacute", 0x00ED, true},   {"icirc", 0x00EE, true},    {"iexcl", 0x00A1, true},
    {"igrave", 0x00EC, true},   {"image", 0x2111, false},   {"infin", 0x221E, false},
    {"int", 0x222B, false},     {"iota", 0x03B9, false},    {"iquest", 0x00BF, true},
    {"isin", 0x2208, false},    {"iuml", 0x00EF, true},     {"kappa", 0x03BA, false},
    {"lArr", 0x21D0, false},    {"lambda", 0x03BB, false},  {"lang", 0x27E8, false},
    {"laquo", 0x00AB, true},    {"larr", 0x2190, false},    {"lceil", 0x2308, false},
    {"ldquo", 0x201C, false},   {"le", 0x2264, false},      {"lfloor", 0x230A, false},
    {"lowast", 0x2217, false},  {"loz", 0x25CA, false},     {"lrm", 0x200E, false},
    {"lsaquo", 0x2039, false},  {"lsquo", 0x2018, false},   {"lt", 0x003C, true},
    {"macr", 0x00AF, true},     {"mdash", 0x2014, false},   {"micro", 0x00B5, true},
    {"middot", 0x00B7, true},   {"minus", 0x2212, false},   {"mu", 0x03BC, false},
    {"nabla", 0x2207, false},   {"nbsp", 0x00A0, true},     {"ndash", 0x2013, false},
    {"ne", 0x2260, false},      {"ni", 0x220B, false},      {"not", 0x00AC, true},
    {"notin", 0x2209, false},   {"nsub", 0x2284, false},    {"ntilde", 0x00F1, true},
    {"nu", 0x03BD, false},      {"oacute", 0x00F3, true},   {"ocirc", 0x00F4, true},
    {"oelig", 0x0153, false},   {"ograve", 0x00F2, true},   {"oline", 0x203E, false},
    {"omega", 0x03C9, false},   {"omicron", 0x03BF, false}, {"oplus", 0x2295, false},
    {"or", 0x2228, false},      {"ordf", 0x00AA, true},     {"ordm", 0x00BA, true},
    {"oslash", 0x00F8, true},   {"otilde", 0x00F5, true},   {"otimes", 0x2297, false},
    {"ouml", 0x00F6, true},     {"para", 0x00B6, true},     {"part", 0x2202, false},
    {"permil", 0x2030, false},  {"perp", 0x22A5, false},    {"phi", 0x03C6, false},
    {"pi", 0x03C0, false},      {"piv", 0x03D6, false},     {"plusmn", 0x00B1, true},
    {"pound", 0x00A3, true},    {"prime", 0x2032, false},   {"prod", 0x220F, false},
    {"prop", 0x221D, false},    {"psi", 0x03C8, false},     {"quot", 0x0022, true},
    {"rArr", 0x21D2, false},    {"radic", 0x221A, false},   {"rang", 0x27E9, false},
    {"raquo", 0x00BB, true},    {"rarr", 0x2192, false},    {"rceil", 0x2309, false},
    {"rdquo", 0x201D, false},   {"real", 0x211C, false},    {"reg", 0x00AE, true},
    {"rfloor", 0x230B, false},  {"rho", 0x03C1, false},     {"rlm", 0x200F, false},
    {"rsaquo", 0x203A, false},  {"rsquo", 0x2019, false},   {"sbquo", 0x201A, false},
    {"scaron", 0x0161, false},  {"sdot", 0x22C5, false},    {"sect", 0x00A7, true},
    {"shy", 0x00AD, true},      {"sigma", 0x03C3, false},   {"sigmaf", 0x03C2, false},
    {"sim", 0x223C, false},     {"spades", 0x2660, false},  {"sub", 0x2282, false},
    {"sube", 0x2286, false},    {"sum", 0x2211, false},     {"sup", 0x2283, false},
    {"sup1", 0x00B9, true},     {"sup2", 0x00B2, true},     {"sup3", 0x00B3, true},
    {"supe", 0x2287, false},    {"szlig", 0x00DF, true},    {"tau", 0x03C4, false},
    {"there4", 0x2234, false},  {"theta", 0x03B8, false},   {"thetasym", 0x03D1, false},
    {"thinsp", 0x2009, false},  {"thorn", 0x00FE, true},    {"tilde", 0x02DC, false},
    {"times", 0x00D7, true},    {"trade", 0x2122, false},   {"uArr", 0x21D1, false},
    {"uacute", 0x00FA, true},   {"uarr", 0x2191, false},    {"ucirc", 0x00FB, true},
    {"ugrave", 0x00F9, true},   {"uml", 0x00A8, true},      {"upsih", 0x03D2, false},
    {"upsilon", 0x03C5, false}, {"uuml", 0x00FC, true},     {"weierp", 0x2118, false},
    {"xi", 0x03BE, false},      {"yacute", 0x00FD, true},   {"yen", 0x00A5, true},
    {"yuml", 0x00FF, true},     {"zeta", 0x03B6, false},    {"zwj", 0x200D, false},
    {"zwnj", 0x200C, false},
};

const Entity* find_entity(std::string_view name) {
  const auto it = std::lower_bound(std::begin(kEntities), std::end(kEntities), name,
                                   [](const Entity& e, std::string_view n) { return e.name < n; });
  return it != std::end(kEntities) && it->name == name ? it : nullptr;
}

// The name as ASCII, or empty when it holds anything else (no entity name does).
std::string ascii_name(const std::u32string& text, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    if (text[i] >= 0x80) return {};
    out += static_cast<char>(text[i]);
  }
  return out;
}

// Python's _replace_charref for numeric references: Windows-1252 for the C1 range, U+FFFD for
// NUL, surrogates and out-of-range values, nothing (0 here) for other invalid code points.
char32_t numeric_reference(uint32_t num) {
  static constexpr char32_t kWindows1252[32] = {
      0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0x008D, 0x017D, 0x008F, 0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178};
  if (num == 0x00) return 0xFFFD;
  if (num == 0x0D) return U'\r';
  if (num >= 0x80 && num <= 0x9F) return kWindows1252[num - 0x80];
  if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) return 0xFFFD;
  const bool invalid = (num >= 0x01 && num <= 0x08) || num == 0x0B ||
                       (num >= 0x0E && num <= 0x1F) || (num >= 0x7F && num <= 0x9F) ||
                       (num >= 0xFDD0 && num <= 0xFDEF) || (num & 0xFFFE) == 0xFFFE;
  return invalid ? 0 : num;
}

int digit_value(char32_t c, int base) {
  if (c >= U'0' && c <= U'9') return static_cast<int>(c - U'0');
  if (base == 16 && c >= U'a' && c <= U'f') return static_cast<int>(c - U'a' + 10);
  if (base == 16 && c >= U'A' && c <= U'F') return static_cast<int>(c - U'A' + 10);
  return -1;
}

// Python's charref pattern: &(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)
std::u32string html_unescape(const std::u32string& text) {
  if (text.find(U'&') == std::u32string::npos) return text;
  std::u32string out;
  out.reserve(text.size());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (text[i] != U'&') {
      out += text[i++];
      continue;
    }
    const size_t start = i + 1;
    if (start < n && text[start] == U'#') {
      const bool hex = start + 1 < n && (text[start + 1] == U'x' || text[start + 1] == U'X');
      const int base = hex ? 16 : 10;
      size_t end = start + (hex ? 2 : 1);
      uint32_t num = 0;
      const size_t digits_begin = end;
      for (; end < n && digit_value(text[end], base) >= 0; ++end) {
        // Saturate: every value above U+10FFFF gives the same U+FFFD.
        num = std::min<uint32_t>(num * base + digit_value(text[end], base), 0x110000);
      }
      if (end == digits_begin) {  // "&#" or "&#x" without digits: not a reference
        out += text[i++];
        continue;
      }
      if (end < n && text[end] == U';') ++end;
      if (const char32_t c = numeric_reference(num); c != 0) out += c;
      i = end;
      continue;
    }
    size_t end = start;
    while (end < n && end - start < 32) {
      const char32_t c = text[end];
      if (c == U'\t' || c == U'\n' || c == U'\f' || c == U' ' || c == U'<' || c == U'&' ||
          c == U'#' || c == U';') {
        break;
      }
      ++end;
    }
    if (end == start) {
      out += text[i++];
      continue;
    }
    const bool semicolon = end < n && text[end] == U';';
    const size_t stop = end + (semicolon ? 1 : 0);
    // Exact name first ("amp;" or a legacy "amp"), then the longest legacy prefix of at least
    // two characters, the rest kept as text ("&ampx" -> "&x").
    const Entity* exact = find_entity(ascii_name(text, start, end));
    if (exact != nullptr && (semicolon || exact->legacy)) {
      out += exact->value;
      i = stop;
      continue;
    }
    // Prefixes never reach the ';', so only names without one (legacy ones) can match.
    const size_t length = stop - start;
    bool replaced = false;
    for (size_t x = length - 1; x >= 2 && !replaced; --x) {
      const size_t prefix_end = start + x;
      const Entity* entity = find_entity(ascii_name(text, start, prefix_end));
      if (entity != nullptr && entity->legacy) {
        out += entity->value;
        out.append(text, prefix_end, stop - prefix_end);
        replaced = true;
      }
    }
    if (!replaced) out.append(text, i, stop - i);
    i = stop;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// str.lower() of CPython 3.11 (Unicode 14): every one-to-one lower-case mapping as runs
// {first, last, delta, stride}: code points first, first + stride, ..., last map to cp + delta.
// The only one-to-many mapping (U+0130) and final sigma are handled in lower().

struct LowerRun {
  char32_t first, last;
  int32_t delta;
  uint32_t stride;
};

constexpr LowerRun kLowerRuns[] = {
    {0x0041, 0x005A, 32, 1},     {0x00C0, 0x00D6, 32, 1},     {0x00D8, 0x00DE, 32, 1},
    {0x0100, 0x012E, 1, 2},      {0x0132, 0x0136, 1, 2},      {0x0139, 0x0147, 1, 2},
    {0x014A, 0x0176, 1, 2},      {0x0178, 0x0178, -121, 1},   {0x0179, 0x017D, 1, 2},
    {0x0181, 0x0181, 210, 1},    {0x0182, 0x0184, 1, 2},      {0x0186, 0x0186, 206, 1},
    {0x0187, 0x0187, 1, 1},      {0x0189, 0x018A, 205, 1},    {0x018B, 0x018B, 1, 1},
    {0x018E, 0x018E, 79, 1},     {0x018F, 0x018F, 202, 1},    {0x0190, 0x0190, 203, 1},
    {0x0191, 0x0191, 1, 1},      {0x0193, 0x0193, 205, 1},    {0x0194, 0x0194, 207, 1},
    {0x0196, 0x0196, 211, 1},    {0x0197, 0x0197, 209, 1},    {0x0198, 0x0198, 1, 1},
    {0x019C, 0x019C, 211, 1},    {0x019D, 0x019D, 213, 1},    {0x019F, 0x019F, 214, 1},
    {0x01A0, 0x01A4, 1, 2},      {0x01A6, 0x01A6, 218, 1},    {0x01A7, 0x01A7, 1, 1},
    {0x01A9, 0x01A9, 218, 1},    {0x01AC, 0x01AC, 1, 1},      {0x01AE, 0x01AE, 218, 1},
    {0x01AF, 0x01AF, 1, 1},      {0x01B1, 0x01B2, 217, 1},    {0x01B3, 0x01B5, 1, 2},
    {0x01B7, 0x01B7, 219, 1},    {0x01B8, 0x01B8, 1, 1},      {0x01BC, 0x01BC, 1, 1},
    {0x01C4, 0x01C4, 2, 1},      {0x01C5, 0x01C5, 1, 1},      {0x01C7, 0x01C7, 2, 1},
    {0x01C8, 0x01C8, 1, 1},      {0x01CA, 0x01CA, 2, 1},      {0x01CB, 0x01DB, 1, 2},
    {0x01DE, 0x01EE, 1, 2},      {0x01F1, 0x01F1, 2, 1},      {0x01F2, 0x01F4, 1, 2},
    {0x01F6, 0x01F6, -97, 1},    {0x01F7, 0x01F7, -56, 1},    {0x01F8, 0x021E, 1, 2},
    {0x0220, 0x0220, -130, 1},   {0x0222, 0x0232, 1, 2},      {0x023A, 0x023A, 10795, 1},
    {0x023B, 0x023B, 1, 1},      {0x023D, 0x023D, -163, 1},   {0x023E, 0x023E, 10792, 1},
    {0x0241, 0x0241, 1, 1},      {0x0243, 0x0243, -195, 1},   {0x0244, 0x0244, 69, 1},
    {0x0245, 0x0245, 71, 1},     {0x0246, 0x024E, 1, 2},      {0x0370, 0x0372, 1, 2},
    {0x0376, 0x0376, 1, 1},      {0x037F, 0x037F, 116, 1},    {0x0386, 0x0386, 38, 1},
    {0x0388, 0x038A, 37, 1},     {0x038C, 0x038C, 64, 1},     {0x038E, 0x038F, 63, 1},
    {0x0391, 0x03A1, 32, 1},     {0x03A3, 0x03AB, 32, 1},     {0x03CF, 0x03CF, 8, 1},
    {0x03D8, 0x03EE, 1, 2},      {0x03F4, 0x03F4, -60, 1},    {0x03F7, 0x03F7, 1, 1},
    {0x03F9, 0x03F9, -7, 1},     {0x03FA, 0x03FA, 1, 1},      {0x03FD, 0x03FF, -130, 1},
    {0x0400, 0x040F, 80, 1},     {0x0410, 0x042F, 32, 1},     {0x0460, 0x0480, 1, 2},
    {0x048A, 0x04BE, 1, 2},      {0x04C0, 0x04C0, 15, 1},     {0x04C1, 0x04CD, 1, 2},
    {0x04D0, 0x052E, 1, 2},      {0x0531, 0x0556, 48, 1},     {0x10A0, 0x10C5, 7264, 1},
    {0x10C7, 0x10C7, 7264, 1},   {0x10CD, 0x10CD, 7264, 1},   {0x13A0, 0x13EF, 38864, 1},
    {0x13F0, 0x13F5, 8, 1},      {0x1C90, 0x1CBA, -3008, 1},  {0x1CBD, 0x1CBF, -3008, 1},
    {0x1E00, 0x1E94, 1, 2},      {0x1E9E, 0x1E9E, -7615, 1},  {0x1EA0, 0x1EFE, 1, 2},
    {0x1F08, 0x1F0F, -8, 1},     {0x1F18, 0x1F1D, -8, 1},     {0x1F28, 0x1F2F, -8, 1},
    {0x1F38, 0x1F3F, -8, 1},     {0x1F48, 0x1F4D, -8, 1},     {0x1F59, 0x1F5F, -8, 2},
    {0x1F68, 0x1F6F, -8, 1},     {0x1F88, 0x1F8F, -8, 1},     {0x1F98, 0x1F9F, -8, 1},
    {0x1FA8, 0x1FAF, -8, 1},     {0x1FB8, 0x1FB9, -8, 1},     {0x1FBA, 0x1FBB, -74, 1},
    {0x1FBC, 0x1FBC, -9, 1},     {0x1FC8, 0x1FCB, -86, 1},    {0x1FCC, 0x1FCC, -9, 1},
    {0x1FD8, 0x1FD9, -8, 1},     {0x1FDA, 0x1FDB, -100, 1},   {0x1FE8, 0x1FE9, -8, 1},
    {0x1FEA, 0x1FEB, -112, 1},   {0x1FEC, 0x1FEC, -7, 1},     {0x1FF8, 0x1FF9, -128, 1},
    {0x1FFA, 0x1FFB, -126, 1},   {0x1FFC, 0x1FFC, -9, 1},     {0x2126, 0x2126, -7517, 1},
    {0x212A, 0x212A, -8383, 1},  {0x212B, 0x212B, -8262, 1},  {0x2132, 0x2132, 28, 1},
    {0x2160, 0x216F, 16, 1},     {0x2183, 0x2183, 1, 1},      {0x24B6, 0x24CF, 26, 1},
    {0x2C00, 0x2C2F, 48, 1},     {0x2C60, 0x2C60, 1, 1},      {0x2C62, 0x2C62, -10743, 1},
    {0x2C63, 0x2C63, -3814, 1},  {0x2C64, 0x2C64, -10727, 1}, {0x2C67, 0x2C6B, 1, 2},
    {0x2C6D, 0x2C6D, -10780, 1}, {0x2C6E, 0x2C6E, -10749, 1}, {0x2C6F, 0x2C6F, -10783, 1},
    {0x2C70, 0x2C70, -10782, 1}, {0x2C72, 0x2C72, 1, 1},      {0x2C75, 0x2C75, 1, 1},
    {0x2C7E, 0x2C7F, -10815, 1}, {0x2C80, 0x2CE2, 1, 2},      {0x2CEB, 0x2CED, 1, 2},
    {0x2CF2, 0x2CF2, 1, 1},      {0xA640, 0xA66C, 1, 2},      {0xA680, 0xA69A, 1, 2},
    {0xA722, 0xA72E, 1, 2},      {0xA732, 0xA76E, 1, 2},      {0xA779, 0xA77B, 1, 2},
    {0xA77D, 0xA77D, -35332, 1}, {0xA77E, 0xA786, 1, 2},      {0xA78B, 0xA78B, 1, 1},
    {0xA78D, 0xA78D, -42280, 1}, {0xA790, 0xA792, 1, 2},      {0xA796, 0xA7A8, 1, 2},
    {0xA7AA, 0xA7AA, -42308, 1}, {0xA7AB, 0xA7AB, -42319, 1}, {0xA7AC, 0xA7AC, -42315, 1},
    {0xA7AD, 0xA7AD, -42305, 1}, {0xA7AE, 0xA7AE, -42308, 1}, {0xA7B0, 0xA7B0, -42258, 1},
    {0xA7B1, 0xA7B1, -42282, 1}, {0xA7B2, 0xA7B2, -42261, 1}, {0xA7B3, 0xA7B3, 928, 1},
    {0xA7B4, 0xA7C2, 1, 2},      {0xA7C4, 0xA7C4, -48, 1},    {0xA7C5, 0xA7C5, -42307, 1},
    {0xA7C6, 0xA7C6, -35384, 1}, {0xA7C7, 0xA7C9, 1, 2},      {0xA7D0, 0xA7D0, 1, 1},
    {0xA7D6, 0xA7D8, 1, 2},      {0xA7F5, 0xA7F5, 1, 1},      {0xFF21, 0xFF3A, 32, 1},
    {0x10400, 0x10427, 40, 1},   {0x104B0, 0x104D3, 40, 1},   {0x10570, 0x1057A, 39, 1},
    {0x1057C, 0x1058A, 39, 1},   {0x1058C, 0x10592, 39, 1},   {0x10594, 0x10595, 39, 1},
    {0x10C80, 0x10CB2, 64, 1},   {0x118A0, 0x118BF, 32, 1},   {0x16E40, 0x16E5F, 32, 1},
    {0x1E900, 0x1E921, 34, 1},
};

char32_t lower_simple(char32_t c) {
  if (c < 0x80) return (c >= U'A' && c <= U'Z') ? c + 32 : c;
  const auto it = std::upper_bound(std::begin(kLowerRuns), std::end(kLowerRuns), c,
                                   [](char32_t v, const LowerRun& r) { return v < r.first; });
  if (it == std::begin(kLowerRuns)) return c;
  const LowerRun& run = *(it - 1);
  if (c > run.last || (c - run.first) % run.stride != 0) return c;
  return static_cast<char32_t>(static_cast<int64_t>(c) + run.delta);
}

bool matches_class(char32_t c, const RE2& re) {
  std::string s;
  append_utf8(s, c);
  return RE2::FullMatch(s, re);
}

// Unicode's Case_Ignorable and Cased from the general categories RE2 knows, plus the Word_Break
// MidLetter / MidNumLet / Single_Quote characters and the Other_Lowercase / Other_Uppercase
// symbols (ª º, Roman numerals, circled and squared letters). Checked against CPython 3.11:
// every assigned code point below U+20000 (CJK and Hangul blocks aside) next to a capital sigma.
bool case_ignorable(char32_t c) {
  static const RE2 re(
      "[\\p{Mn}\\p{Me}\\p{Cf}\\p{Lm}\\p{Sk}'.:\\x{B7}\\x{387}\\x{55F}\\x{5F4}\\x{2018}\\x{2019}"
      "\\x{2024}\\x{2027}\\x{FE13}\\x{FE52}\\x{FE55}\\x{FF07}\\x{FF0E}\\x{FF1A}]");
  return matches_class(c, re);
}

bool cased(char32_t c) {
  static const RE2 re(
      "[\\p{Lu}\\p{Ll}\\p{Lt}\\x{AA}\\x{BA}\\x{2160}-\\x{217F}\\x{24B6}-\\x{24E9}"
      "\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}]");
  return matches_class(c, re);
}

// CPython's handle_capital_sigma: Σ lower-cases to ς after a cased letter (skipping
// case-ignorable ones) unless a cased letter follows (skipping the same).
bool final_sigma(const std::u32string& text, size_t i) {
  size_t j = i;
  while (j > 0 && case_ignorable(text[j - 1])) --j;
  if (j == 0 || !cased(text[j - 1])) return false;
  size_t k = i + 1;
  while (k < text.size() && case_ignorable(text[k])) ++k;
  return k == text.size() || !cased(text[k]);
}

std::u32string lower(const std::u32string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == 0x130) {  // İ -> i + combining dot above (SpecialCasing.txt)
      out += U'i';
      out += char32_t{0x307};
    } else if (c == 0x3A3) {
      out += final_sigma(text, i) ? char32_t{0x3C2} : char32_t{0x3C3};
    } else {
      out += lower_simple(c);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Vocabulary files.

constexpr std::string_view kStartOfText = "<|startoftext|>";
constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr std::string_view kEndOfWord = "</w>";
// Far above any BPE vocabulary; keeps a corrupt id from allocating gigabytes (ids are int32).
constexpr int64_t kMaxVocabularyIds = int64_t{1} << 24;

// bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order. The returned order (printable ones first) is the vocabulary's.
std::vector<std::pair<uint8_t, std::string>> byte_alphabet() {
  std::vector<std::pair<uint8_t, std::string>> out;
  const auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  for (int b = 0; b < 256; ++b) {
    if (!printable(b)) continue;
    std::string s;
    append_utf8(s, static_cast<char32_t>(b));
    out.emplace_back(static_cast<uint8_t>(b), s);
  }
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    if (printable(b)) continue;
    std::string s;
    append_utf8(s, static_cast<char32_t>(256 + next++));
    out.emplace_back(static_cast<uint8_t>(b), s);
  }
  return out;
}

bool path_exists(const std::string& path, bool* is_directory) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  *is_directory = S_ISDIR(st.st_mode);
  return true;
}

void require_file(const std::string& path) {
  bool is_directory = false;
  if (!path_exists(path, &is_directory)) {
    throw not_found("CLIP vocabulary " + path + ": no such file (run scripts/setup.sh)");
  }
  if (is_directory) throw invalid_argument("CLIP vocabulary " + path + ": is a directory");
}

std::string read_gzip(const std::string& path) {
  require_file(path);
  const std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) {
    throw invalid_argument(path + ": cannot open (" + std::string(std::strerror(errno)) + ")");
  }
  std::string out;
  std::array<char, 1 << 16> buffer{};
  while (true) {
    const int n = gzread(file.get(), buffer.data(), static_cast<unsigned>(buffer.size()));
    int code = Z_OK;
    const char* message = gzerror(file.get(), &code);
    if (n < 0 || (code != Z_OK && code != Z_BUF_ERROR)) {
      throw invalid_argument(path + ": not a valid gzip file (" + message + ")");
    }
    // gzread passes a file that is not gzip through unchanged; a vocabulary must be gzip.
    if (gzdirect(file.get())) throw invalid_argument(path + ": not a gzip file");
    if (n == 0) {
      // At the end, Z_BUF_ERROR means the stream stopped in the middle (a cut-off download).
      if (code == Z_BUF_ERROR) throw invalid_argument(path + ": truncated gzip file");
      break;
    }
    out.append(buffer.data(), static_cast<size_t>(n));
  }
  return out;
}

std::string read_text_file(const std::string& path) {
  require_file(path);
  const std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!file) {
    throw invalid_argument(path + ": cannot open (" + std::string(std::strerror(errno)) + ")");
  }
  std::string out;
  std::array<char, 1 << 16> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
    out.append(buffer.data(), n);
  }
  if (std::ferror(file.get())) throw invalid_argument(path + ": read error");
  return out;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) {
      lines.push_back(text.substr(begin));
      return lines;
    }
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
}

// Python's str.split() for merges lines. The byte-level alphabet holds no whitespace, so
// splitting on ASCII whitespace is the same.
std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  const auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
  };
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && space(line[i])) ++i;
    const size_t begin = i;
    while (i < line.size() && !space(line[i])) ++i;
    if (i > begin) fields.push_back(line.substr(begin, i - begin));
  }
  return fields;
}

// The merges of a merges file: `first` is the index of the first merge line; at most
// kMaxMerges lines are read, like the official [1 : 49152 - 256 - 2 + 1] slice. A last empty
// line (the file's final newline) is not a merge.
std::vector<std::pair<std::string, std::string>> parse_merges(const std::string& path,
                                                              std::string_view text, size_t first) {
  if (const auto offset = find_invalid_utf8(text)) {
    throw invalid_argument(path + ": not UTF-8 text (byte offset " + std::to_string(*offset) + ")");
  }
  const std::vector<std::string_view> lines = split_lines(text);
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t i = first; i < lines.size() && merges.size() < ClipTokenizer::kMaxMerges; ++i) {
    if (i + 1 == lines.size() && lines[i].empty()) break;
    const std::vector<std::string_view> fields = split_fields(lines[i]);
    if (fields.size() != 2) {
      throw invalid_argument(path + ": line " + std::to_string(i + 1) +
                             ": malformed merge (expected two symbols): '" + std::string(lines[i]) +
                             "'");
    }
    merges.emplace_back(std::string(fields[0]), std::string(fields[1]));
  }
  return merges;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct ClipTokenizer::Impl {
  std::string source;                                   // the vocabulary path, for messages
  std::vector<std::string> tokens;                      // id -> token
  std::unordered_map<std::string, int32_t> ids;         // token -> id (the last id of a repeated
                                                        // token wins, as in a Python dict)
  std::vector<std::pair<int32_t, int32_t>> merge_list;  // rank order
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  std::unordered_map<uint64_t, Merge> ranks;  // (left id, right id) -> merge
  std::array<int32_t, 256> byte_ids{};        // byte -> id of its symbol inside a word
  std::array<int32_t, 256> byte_end_ids{};    // byte -> id of its symbol + '</w>' (word end)
  int32_t start_of_text = 0;
  int32_t end_of_text = 0;

  // Sharded so that many request threads rarely wait on one lock; each shard is cleared when
  // full, which bounds the memory whatever the prompts.
  static constexpr size_t kShards = 16;
  static constexpr size_t kCacheEntries = 100000;
  static constexpr size_t kMaxCachedWordBytes = 256;  // longer words are rare: not worth keeping
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };
  mutable std::array<Shard, kShards> cache;

  static std::unique_ptr<Impl> from_gzip(const std::string& path);
  static std::unique_ptr<Impl> from_folder(const std::string& folder);

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  // context starts the message: the file (and line) at fault.
  int32_t id_of(const std::string& token, const std::string& context) const {
    const auto it = ids.find(token);
    if (it == ids.end()) {
      throw invalid_argument(context + "'" + token + "' is not in the vocabulary");
    }
    return it->second;
  }

  // Everything but `tokens`/`ids` (already filled) from the merges in rank order.
  // merges_file names the file the merges came from; first_line is the index of their first line.
  void finish(const std::vector<std::pair<std::string, std::string>>& merges,
              const std::string& merges_file, size_t first_line) {
    for (const auto& [byte, symbol] : byte_alphabet()) {
      byte_ids[byte] = id_of(symbol, source + ": byte symbol ");
      byte_end_ids[byte] = id_of(symbol + std::string(kEndOfWord), source + ": byte symbol ");
    }
    start_of_text = id_of(std::string(kStartOfText), source + ": special token ");
    end_of_text = id_of(std::string(kEndOfText), source + ": special token ");
    merge_list.reserve(merges.size());
    ranks.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [left, right] = merges[rank];
      const std::string where =
          merges_file + ": line " + std::to_string(first_line + rank + 1) + ": ";
      const int32_t l = id_of(left, where);
      const int32_t r = id_of(right, where);
      const int32_t merged = id_of(left + right, where);
      merge_list.emplace_back(l, r);
      // A repeated pair keeps its last rank, like dict(zip(merges, range(...))).
      ranks.insert_or_assign(pair_key(l, r), Merge{static_cast<int32_t>(rank), merged});
    }
  }

  // SimpleTokenizer.bpe on symbol ids: merge the lowest-ranked adjacent pair everywhere, left to
  // right, until no adjacent pair has a rank.
  std::vector<int32_t> bpe(std::string_view word) const {
    std::vector<int32_t> symbols;
    symbols.reserve(word.size());
    for (size_t i = 0; i < word.size(); ++i) {
      const auto byte = static_cast<uint8_t>(word[i]);
      symbols.push_back(i + 1 == word.size() ? byte_end_ids[byte] : byte_ids[byte]);
    }
    while (symbols.size() > 1) {
      const Merge* best = nullptr;
      int32_t best_left = 0, best_right = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        const auto it = ranks.find(pair_key(symbols[i], symbols[i + 1]));
        if (it != ranks.end() && (best == nullptr || it->second.rank < best->rank)) {
          best = &it->second;
          best_left = symbols[i];
          best_right = symbols[i + 1];
        }
      }
      if (best == nullptr) break;
      size_t out = 0;
      for (size_t i = 0; i < symbols.size(); ++out) {
        if (i + 1 < symbols.size() && symbols[i] == best_left && symbols[i + 1] == best_right) {
          symbols[out] = best->merged;
          i += 2;
        } else {
          symbols[out] = symbols[i++];
        }
      }
      symbols.resize(out);
    }
    return symbols;
  }

  void append_word(std::string_view word, std::vector<int64_t>& out) const {
    if (word.size() > kMaxCachedWordBytes) {
      for (const int32_t id : bpe(word)) out.push_back(id);
      return;
    }
    Shard& shard = cache[std::hash<std::string_view>{}(word) % kShards];
    std::string key(word);
    {
      const std::lock_guard<std::mutex> lock(shard.mutex);
      const auto it = shard.words.find(key);
      if (it != shard.words.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    // Computed outside the lock: two threads may both compute a new word, with equal results.
    std::vector<int32_t> ids_of_word = bpe(word);
    out.insert(out.end(), ids_of_word.begin(), ids_of_word.end());
    const std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.words.size() >= kCacheEntries / kShards) shard.words.clear();
    shard.words.try_emplace(std::move(key), std::move(ids_of_word));
  }
};

// The official vocabulary: the 256 byte symbols, the same with '</w>', one token per merge,
// then the two special tokens. Line 0 of the file is a header.
std::unique_ptr<ClipTokenizer::Impl> ClipTokenizer::Impl::from_gzip(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->source = path;
  const std::string text = read_gzip(path);
  const auto merges = parse_merges(path, text, 1);
  const auto alphabet = byte_alphabet();
  for (const auto& [byte, symbol] : alphabet) impl->tokens.push_back(symbol);
  for (const auto& [byte, symbol] : alphabet) impl->tokens.push_back(symbol + "</w>");
  for (const auto& [left, right] : merges) impl->tokens.push_back(left + right);
  impl->tokens.emplace_back(kStartOfText);
  impl->tokens.emplace_back(kEndOfText);
  for (size_t id = 0; id < impl->tokens.size(); ++id) {
    impl->ids.insert_or_assign(impl->tokens[id], static_cast<int32_t>(id));
  }
  impl->finish(merges, path, 1);
  return impl;
}

// A Hugging Face CLIPTokenizer folder: vocab.json (token -> id, ids 0..N-1 each used once)
// and merges.txt (an optional '#version' header, then one merge per line).
std::unique_ptr<ClipTokenizer::Impl> ClipTokenizer::Impl::from_folder(const std::string& folder) {
  auto impl = std::make_unique<Impl>();
  const std::string vocab_path = folder + "/vocab.json";
  const std::string merges_path = folder + "/merges.txt";
  impl->source = vocab_path;

  const std::string vocab_text = read_text_file(vocab_path);
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_argument(vocab_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!vocab.is_object()) throw invalid_argument(vocab_path + ": expected a JSON object");
  // Ids must number the tokens 0..N-1, each once: the model's embedding rows are those ids.
  std::vector<std::string> by_id;
  std::vector<bool> used;
  for (const auto& [token, value] : vocab.items()) {
    if (!value.is_number_integer()) {
      throw invalid_argument(vocab_path + ": token '" + token + "': id is not an integer");
    }
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id >= kMaxVocabularyIds) {
      throw invalid_argument(vocab_path + ": token '" + token + "': id " + std::to_string(id) +
                             " is out of range");
    }
    if (id >= static_cast<int64_t>(by_id.size())) {
      by_id.resize(id + 1);
      used.resize(id + 1, false);
    }
    if (used[id]) {
      throw invalid_argument(vocab_path + ": id " + std::to_string(id) + " is used by '" +
                             by_id[id] + "' and '" + token + "'");
    }
    used[id] = true;
    by_id[id] = token;
  }
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (!used[id]) throw invalid_argument(vocab_path + ": no token has id " + std::to_string(id));
    impl->ids.emplace(by_id[id], static_cast<int32_t>(id));
    impl->tokens.push_back(std::move(by_id[id]));
  }

  const std::string merges_text = read_text_file(merges_path);
  const size_t first = merges_text.starts_with("#version") ? 1 : 0;
  const auto merges = parse_merges(merges_path, merges_text, first);
  impl->finish(merges, merges_path, first);
  return impl;
}

ClipTokenizer::ClipTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

ClipTokenizer ClipTokenizer::load(const std::string& path) {
  bool is_directory = false;
  if (!path_exists(path, &is_directory)) {
    throw not_found("CLIP vocabulary " + path + ": no such file (run scripts/setup.sh)");
  }
  return ClipTokenizer(is_directory ? Impl::from_folder(path) : Impl::from_gzip(path));
}

std::string ClipTokenizer::normalize(std::string_view text) {
  const std::u32string decoded = decode_valid_utf8(validated(text));
  // basic_clean (ftfy.fix_text taken as the identity), whitespace_clean, then .lower().
  const std::u32string cleaned = strip(html_unescape(html_unescape(decoded)));
  return to_utf8(lower(fold_whitespace(cleaned)));
}

std::vector<int64_t> ClipTokenizer::encode(std::string_view text) const {
  // CLIP's pattern. The official one is case-insensitive, but it runs on lower-cased text, where
  // Python regex's IGNORECASE changes exactly two things (checked over every code point): 's'
  // also matches U+017F (long s), and U+0345 (a mark whose case variants are letters) falls out
  // of the negated set, so it belongs to no piece and is dropped. RE2's own case folding differs
  // (it would make U+0345 a letter and never match long s), so the pattern here is
  // case-sensitive with both effects written out. RE2 is leftmost-first like Python's regex: a
  // special token wins over a punctuation run that starts where it does. After whitespace_clean
  // the only white space left is ' ', so RE2's ASCII \s equals regex's Unicode \s here.
  static const RE2 pattern(
      "(<\\|[s\\x{17F}]tartoftext\\|>|<\\|endoftext\\|>|'[s\\x{17F}]|'t|'re|'ve|'m|'ll|'d|"
      "[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}\\x{345}]+)");
  const std::string clean = normalize(text);
  std::vector<int64_t> out;
  re2::StringPiece input(clean);
  re2::StringPiece match;
  while (RE2::FindAndConsume(&input, pattern, &match)) {
    const std::string_view piece(match.data(), match.size());
    // The official cache is seeded with the two special tokens, so they map to their own ids
    // even inside a prompt (clip_tokens.json checks this).
    if (piece == kStartOfText) {
      out.push_back(impl_->start_of_text);
    } else if (piece == kEndOfText) {
      out.push_back(impl_->end_of_text);
    } else {
      impl_->append_word(piece, out);
    }
  }
  return out;
}

ClipTokens ClipTokenizer::tokenize(std::string_view text) const {
  const std::vector<int64_t> ids = encode(text);
  ClipTokens result;
  result.token_count = static_cast<int64_t>(ids.size());
  result.truncated = result.token_count > kMaxTextTokens;
  const int64_t kept = std::min(result.token_count, kMaxTextTokens);
  // Hugging Face's truncation keeps the first 75 ids and still ends with EOS; its padding
  // repeats EOS, masked out.
  result.input_ids.reserve(kContextLength);
  result.input_ids.push_back(impl_->start_of_text);
  result.input_ids.insert(result.input_ids.end(), ids.begin(), ids.begin() + kept);
  result.input_ids.resize(kContextLength, impl_->end_of_text);
  result.attention_mask.assign(kContextLength, 0);
  std::fill_n(result.attention_mask.begin(), kept + 2, 1);
  return result;
}

int64_t ClipTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

const std::string& ClipTokenizer::token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw invalid_argument("CLIP token id " + std::to_string(id) + " is outside 0.." +
                           std::to_string(vocab_size() - 1));
  }
  return impl_->tokens[id];
}

std::vector<std::pair<std::string, std::string>> ClipTokenizer::merges() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(impl_->merge_list.size());
  for (const auto& [left, right] : impl_->merge_list) {
    out.emplace_back(impl_->tokens[left], impl_->tokens[right]);
  }
  return out;
}

}  // namespace cube3d
