// The forms of a prompt that the prompt policy matches its denylist against: look-alike text must
// not slip past a rule that its plain spelling would meet. The model still reads the prompt as it
// was sent; these forms are for the policy alone.
//
// The Unicode fold (always): NFKC with case folding, which also removes the default-ignorable
// code points (ZWJ, ZWSP, soft hyphen, word joiner, variation selectors, tag characters) and turns
// fullwidth, mathematical and circled letters into plain ones; then combining marks removed
// (accents), control and format characters removed (a NUL inside a word), and the letters of
// other scripts that look like a Latin letter (Cyrillic "о", Greek "ο", ...) mapped to it: the
// confusables of Unicode TS #39, as ICU's skeletons give them, kept where one letter stands for
// one ASCII letter. Optional, as operator settings (policy.fold_separators, policy.fold_digits):
// letters spelt out one at a time joined ("b o m b", "b.o.m.b" -> "bomb"), and digits and signs
// inside words read as letters ("b0mb", "k1ll", "$e@t" -> "bomb", "kill", "seat").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cube3d {

struct PromptFolding {
  // Runs of three or more single characters (letters or digits) with one or two non-word
  // characters between them are joined: once whole, and once from their second character on
  // (so that "make a b o m b" also reads "make a bomb").
  bool separators = true;
  // Inside a word that has a letter: 0 o, 1 l (and, in another form, i), 3 e, 4 a, 5 s, 7 t,
  // 8 b, @ a, $ s.
  bool digits = true;
  bool operator==(const PromptFolding&) const = default;
};

// The forms to match, without repeats: `text` itself first (what the model reads: pipeline's
// model text), then its Unicode fold, then the optional foldings of the fold. `text` is valid
// UTF-8 (the server validated it).
std::vector<std::string> prompt_forms(std::string_view text, const PromptFolding& folding = {});

// The Unicode fold alone (the second form).
std::string unicode_fold(std::string_view text);

}  // namespace cube3d
