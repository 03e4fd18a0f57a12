// Python's html.unescape as CLIP's clean-up uses it (one pass here; the tokenizer runs two).
// Expected strings from Python 3.11's html.unescape.
#include "cube3d/model/clip_html_unescape.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cube3d/core/utf8.h"

namespace cube3d {
namespace test_clip_html_unescape {

std::string unescape(std::string_view text) {
  return encode_utf8(html_unescape(decode_utf8(text)));
}

TEST(ClipHtmlUnescape, MatchesPython) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""},
      {"no entities", "no entities"},
      {"&amp;lt;", "&lt;"},  // one pass only
      {"&lt;&gt;&quot;&apos;", "<>\"'"},
      {"&amp", "&"},             // legacy name without ';'
      {"&ampx", "&x"},           // legacy name as a prefix
      {"&notit;", "\u00acit;"},  // the longest legacy prefix
      {"&Alpha", "&Alpha"},      // not a legacy name: needs its ';'
      {"&Alpha;&alpha;", "\u0391\u03b1"},
      {"&lang;&rang;", "\u27e8\u27e9"},  // HTML 5's values
      {"&unknown;", "&unknown;"},
      {"&;", "&;"},
      {"& x", "& x"},
      {"&#65;&#x42;&#X43", "ABC"},
      {"&#x;", "&#x;"},
      {"&#;", "&#;"},
      {"&#128;&#x9f;", "\u20ac\u0178"},  // Windows-1252 for the C1 range
      {"&#0;", "\ufffd"},
      {"&#xD800;", "\ufffd"},
      {"&#x110000;", "\ufffd"},
      {"&#99999999999;", "\ufffd"},
      {"&#1;x&#xFFFF;", "x"},  // invalid code points are removed
      {"&#13;", "\r"},
      {"&#x1F409;", "\U0001F409"},
      {"&copy2024", "\u00a92024"},
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_EQ(unescape(text), expected) << "text: " << text;
  }
}

TEST(ClipHtmlUnescape, NamesLongerThan32CharactersAreNotReferences) {
  const std::string name(33, 'a');
  EXPECT_EQ(unescape("&" + name + ";"), "&" + name + ";");
}

TEST(ClipHtmlUnescape, NonAsciiNamesStayText) {
  EXPECT_EQ(unescape("&amp\u00e9;"), "&\u00e9;");  // "amp" as a legacy prefix
  EXPECT_EQ(unescape("&\u00e9;"), "&\u00e9;");
}

}  // namespace test_clip_html_unescape
}  // namespace cube3d
