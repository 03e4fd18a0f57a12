#include "cube3d/server/admission/prompt_folding.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/uspoof.h>
#include <unicode/utf16.h>

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

const icu::Normalizer2& normalizer(const char* name, UNormalization2Mode mode) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* instance = icu::Normalizer2::getInstance(nullptr, name, mode, status);
  if (U_FAILURE(status) || instance == nullptr) {
    throw internal_error(std::string("ICU has no ") + name + " normalizer: " + u_errorName(status));
  }
  return *instance;  // owned by ICU, shared and thread-safe
}

struct SpoofCheckerCloser {
  void operator()(USpoofChecker* checker) const { uspoof_close(checker); }
};

// Non-ASCII letters whose TS #39 skeleton is one ASCII letter (lower case): Cyrillic "а" -> 'a',
// Greek "ν" -> 'v', and so on. ASCII itself is left alone: the table would also read "rn" as "m"
// and "0" as "O", which the digit folding (an operator's choice) covers where it should. Built once
// from ICU's data, a few tens of milliseconds.
const std::unordered_map<char32_t, char>& look_alike_letters() {
  static const std::unordered_map<char32_t, char> table = [] {
    std::unordered_map<char32_t, char> letters;
    UErrorCode status = U_ZERO_ERROR;
    const std::unique_ptr<USpoofChecker, SpoofCheckerCloser> checker(uspoof_open(&status));
    if (U_FAILURE(status)) {
      throw internal_error(std::string("ICU cannot open a spoof checker: ") + u_errorName(status));
    }
    for (UChar32 c = 0x80; c <= 0xFFFF; ++c) {
      if (!u_isalpha(c)) continue;
      UChar source[2];
      int32_t length = 0;
      U16_APPEND_UNSAFE(source, length, c);
      UChar skeleton[8];
      status = U_ZERO_ERROR;
      const int32_t n = uspoof_getSkeleton(checker.get(), 0, source, length, skeleton, 8, &status);
      if (U_FAILURE(status) || n != 1) continue;
      const UChar32 lower = u_tolower(skeleton[0]);
      if (lower >= 'a' && lower <= 'z')
        letters.emplace(static_cast<char32_t>(c), static_cast<char>(lower));
    }
    return letters;
  }();
  return table;
}

std::u32string to_u32(const icu::UnicodeString& text) {
  std::u32string out;
  out.reserve(static_cast<std::size_t>(text.length()));
  for (int32_t i = 0; i < text.length();) {
    const UChar32 c = text.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

icu::UnicodeString to_unicode(const std::u32string& text) {
  icu::UnicodeString out;
  for (const char32_t c : text) out.append(static_cast<UChar32>(c));
  return out;
}

std::string to_utf8(const std::u32string& text) {
  std::string out;
  to_unicode(text).toUTF8String(out);
  return out;
}

bool is_word_char(char32_t c) { return u_isalnum(static_cast<UChar32>(c)) != 0; }

// Runs of 3+ single word characters, each pair split by one or two non-word characters, joined;
// `from_second`: the run's first character stays apart ("a b o m b" -> "a bomb").
std::u32string join_spelt_out(const std::u32string& text, bool from_second) {
  // The single characters: a word character with no word character beside it.
  const auto single = [&](std::size_t i) {
    return is_word_char(text[i]) && (i == 0 || !is_word_char(text[i - 1])) &&
           (i + 1 == text.size() || !is_word_char(text[i + 1]));
  };
  std::u32string out;
  for (std::size_t i = 0; i < text.size();) {
    if (!single(i)) {
      out.push_back(text[i++]);
      continue;
    }
    // The run from i: single, gap (1-2 non-word), single, ...
    std::vector<std::size_t> members{i};
    std::size_t at = i + 1;
    for (;;) {
      std::size_t gap = 0;
      while (at + gap < text.size() && !is_word_char(text[at + gap]) && gap < 3) ++gap;
      if (gap == 0 || gap > 2 || at + gap >= text.size() || !single(at + gap)) break;
      members.push_back(at + gap);
      at += gap + 1;
    }
    if (members.size() < 3) {
      out.push_back(text[i++]);
      continue;
    }
    const std::size_t first_joined = from_second ? 1 : 0;
    if (from_second) {
      // The first stays as it was, with the gap after it.
      out.append(text, members[0], members[1] - members[0]);
    }
    for (std::size_t m = first_joined; m < members.size(); ++m) out.push_back(text[members[m]]);
    i = members.back() + 1;
  }
  return out;
}

// Digits and signs read as letters inside words that have a letter; `one`: what '1' becomes.
std::u32string read_digits_as_letters(const std::u32string& text, char32_t one) {
  // What each digit or sign reads as ('1' is `one`, filled in below).
  static constexpr std::pair<char32_t, char32_t> kReadAs[] = {
      {U'0', U'o'}, {U'1', 0},    {U'3', U'e'}, {U'4', U'a'}, {U'5', U's'},
      {U'7', U't'}, {U'8', U'b'}, {U'@', U'a'}, {U'$', U's'}};
  const auto letter_for = [one](char32_t c) -> char32_t {
    for (const auto& [sign, letter] : kReadAs) {
      if (sign == c) return c == U'1' ? one : letter;
    }
    return 0;
  };
  const auto in_word = [&](char32_t c) { return is_word_char(c) || c == U'@' || c == U'$'; };
  std::u32string out = text;
  for (std::size_t begin = 0; begin < out.size();) {
    if (!in_word(out[begin])) {
      ++begin;
      continue;
    }
    std::size_t end = begin;
    bool has_letter = false;
    while (end < out.size() && in_word(out[end])) has_letter |= u_isalpha(out[end++]) != 0;
    if (has_letter) {
      for (std::size_t i = begin; i < end; ++i) {
        if (const char32_t letter = letter_for(out[i])) out[i] = letter;
      }
    }
    begin = end;
  }
  return out;
}

}  // namespace

std::string unicode_fold(std::string_view text) {
  static const icu::Normalizer2& nfkc_cf = normalizer("nfkc_cf", UNORM2_COMPOSE);
  static const icu::Normalizer2& nfd = normalizer("nfc", UNORM2_DECOMPOSE);
  static const icu::Normalizer2& nfc = normalizer("nfc", UNORM2_COMPOSE);
  const auto& letters = look_alike_letters();
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString source = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  const icu::UnicodeString decomposed = nfd.normalize(nfkc_cf.normalize(source, status), status);
  if (U_FAILURE(status)) throw internal_error(std::string("ICU: ") + u_errorName(status));
  std::u32string kept;
  for (const char32_t c : to_u32(decomposed)) {
    const int8_t type = u_charType(static_cast<UChar32>(c));
    if (type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK || type == U_CONTROL_CHAR ||
        type == U_FORMAT_CHAR) {
      continue;  // accents, NUL and other controls, what NFKC_CF left of the invisible ones
    }
    const auto look_alike = letters.find(c);
    kept.push_back(look_alike != letters.end() ? static_cast<char32_t>(look_alike->second) : c);
  }
  const icu::UnicodeString composed = nfc.normalize(to_unicode(kept), status);
  if (U_FAILURE(status)) throw internal_error(std::string("ICU: ") + u_errorName(status));
  std::string out;
  composed.toUTF8String(out);
  return out;
}

std::vector<std::string> prompt_forms(std::string_view text, const PromptFolding& folding) {
  std::vector<std::string> forms{std::string(text)};
  const auto add = [&](std::string form) {
    if (std::find(forms.begin(), forms.end(), form) == forms.end())
      forms.push_back(std::move(form));
  };
  const std::string folded = unicode_fold(text);
  add(folded);
  const icu::UnicodeString unicode = icu::UnicodeString::fromUTF8(folded);
  std::vector<std::u32string> bases{to_u32(unicode)};
  if (folding.separators) {
    bases.push_back(join_spelt_out(bases.front(), false));
    bases.push_back(join_spelt_out(bases.front(), true));
  }
  for (const std::u32string& base : bases) {
    add(to_utf8(base));
    if (folding.digits) {
      add(to_utf8(read_digits_as_letters(base, U'l')));
      add(to_utf8(read_digits_as_letters(base, U'i')));
    }
  }
  return forms;
}

}  // namespace cube3d
