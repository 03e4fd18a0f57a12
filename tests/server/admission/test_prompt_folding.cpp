// The prompt policy on look-alike text (issue 44's table): each evasion of a rule against "bomb"
// is refused, ordinary prompts are not, and the optional foldings can be switched off.
#include "cube3d/server/admission/prompt_folding.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cube3d/server/admission/prompt_policy.h"

namespace cube3d {
namespace test_prompt_folding {

PromptPolicy bomb_policy(PromptFolding folding = {}) {
  return PromptPolicy(PromptDenylist::parse("\\bbomb(s)?\\b\n", "denylist.txt"), folding);
}

struct Evasion {
  const char* what;
  std::string text;
};

const std::vector<Evasion>& evasions() {
  static const std::vector<Evasion> all = {
      {"plain", "make a bomb"},
      {"fullwidth letters", "make a \uFF42\uFF4F\uFF4D\uFF42"},
      {"fullwidth capitals", "\uFF22\uFF2F\uFF2D\uFF22"},
      {"zero-width joiner", "bo\u200Dmb"},
      {"zero-width space", "b\u200Bomb"},
      {"soft hyphen", "bo\u00ADmb"},
      {"word joiner", "bom\u2060b"},
      {"variation selector", "bo\uFE0Fmb"},
      {"tag characters", "b\U000E0062\U000E006Fomb"},
      {"Cyrillic o", "b\u043Emb"},
      {"Greek omicron", "b\u03BFmb"},
      {"mathematical bold", "\U0001D41B\U0001D428\U0001D426\U0001D41B"},
      {"mathematical italic", "\U0001D44F\U0001D45C\U0001D45A\U0001D44F"},
      {"circled letters", "\u24D1\u24DE\u24DC\u24D1"},
      {"combining acute", "bo\u0301mb"},
      {"combining marks everywhere", "b\u0300o\u0308m\u0327b\u0323"},
      {"NUL inside the word", std::string("bo\0mb", 5)},
      {"digit for letter", "b0mb"},
      {"digits and signs", "b0m8s"},
      {"spaced out", "b o m b"},
      {"dotted", "b.o.m.b"},
      {"dashed", "make a b-o-m-b now"},
      {"spaced after an article", "make a b o m b"},
      {"spaced and fullwidth", "\uFF42 \uFF4F \uFF4D \uFF42"},
  };
  return all;
}

TEST(PromptFolding, EveryEvasionIsRefused) {
  const PromptPolicy policy = bomb_policy();
  for (const Evasion& e : evasions()) {
    EXPECT_TRUE(policy.refuses(e.text)) << e.what;
  }
}

TEST(PromptFolding, AFormThatIsNoLookAlikeIsNotRefused) {
  const PromptPolicy policy = bomb_policy();
  // Cyrillic в reads as "v", not "b": "vomb" is not the rule's word.
  EXPECT_FALSE(policy.refuses("\u0432\u03BFmb"));
  for (const char* ordinary :
       {"a bombastic speech", "a tomb of kings", "bob the builder", "b o b", "boom box",
        "a small wooden chair with 4 legs", "caf\u00E9 table",
        "\u041C\u043E\u0441\u043A\u0432\u0430", "1000 bricks", "b0b", "a b c d e f"}) {
    EXPECT_FALSE(policy.refuses(ordinary)) << ordinary;
  }
}

TEST(PromptFolding, TheOptionalFoldingsCanBeSwitchedOff) {
  const PromptPolicy neither = bomb_policy({.separators = false, .digits = false});
  EXPECT_FALSE(neither.refuses("b o m b"));
  EXPECT_FALSE(neither.refuses("b0mb"));
  EXPECT_TRUE(neither.refuses("\uFF42\uFF4F\uFF4D\uFF42"));  // the Unicode fold is always on
  EXPECT_TRUE(neither.refuses("b\u043Emb"));
  EXPECT_TRUE(bomb_policy({.separators = true, .digits = false}).refuses("b.o.m.b"));
  EXPECT_TRUE(bomb_policy({.separators = false, .digits = true}).refuses("b0mb"));
}

TEST(PromptFolding, TheFormsStartWithThePromptAndDoNotRepeat) {
  const std::vector<std::string> plain = prompt_forms("a wooden chair");
  ASSERT_EQ(plain.size(), 1u);  // every folding is the text itself
  EXPECT_EQ(plain[0], "a wooden chair");
  const std::vector<std::string> forms = prompt_forms("k1ll b o m b");
  EXPECT_EQ(forms.front(), "k1ll b o m b");
  EXPECT_NE(std::find(forms.begin(), forms.end(), "kill bomb"), forms.end());
  EXPECT_NE(std::find(forms.begin(), forms.end(), "kill b o m b"), forms.end());
  EXPECT_NE(std::find(forms.begin(), forms.end(), "klll b o m b"), forms.end());  // 1 as l
  for (size_t i = 0; i < forms.size(); ++i) {
    for (size_t j = 0; j < i; ++j) EXPECT_NE(forms[i], forms[j]);
  }
}

TEST(PromptFolding, TheUnicodeFoldIsStable) {
  for (const Evasion& e : evasions()) {
    const std::string once = unicode_fold(e.text);
    EXPECT_EQ(unicode_fold(once), once) << e.what;
  }
  EXPECT_EQ(unicode_fold("\uFF22\u043E\u200Bm\u0301B"), "bomb");
}

}  // namespace test_prompt_folding
}  // namespace cube3d
