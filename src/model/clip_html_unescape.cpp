// Python's html.unescape (3.11) on code points: the first step of CLIP's text clean-up
// (basic_clean in OpenAI's clip/simple_tokenizer.py unescapes every prompt twice). Its own file
// because it is a self-contained standard-library behaviour with a large entity table.
#include "cube3d/model/clip_html_unescape.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace cube3d {
namespace {

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

}  // namespace

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

}  // namespace cube3d
