#include "cube3d/core/suggest.h"

#include <gtest/gtest.h>

#include <array>
#include <string_view>

namespace cube3d {
namespace test_suggest {

TEST(Suggest, EditDistanceCountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("n_layer", "n_layer"), 0u);
  EXPECT_EQ(edit_distance("n_layerz", "n_layer"), 1u);
  EXPECT_EQ(edit_distance("max_queue_sise", "max_queue_size"), 1u);
  EXPECT_EQ(edit_distance("modle", "model"), 2u);  // a swap is two edits
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(Suggest, ClosestMatchWithinTwoEditsAndFirstAmongEquals) {
  constexpr std::array<std::string_view, 4> names = {"listen", "device", "dtype", "log_level"};
  EXPECT_EQ(closest_match("lisen", names), "listen");
  EXPECT_EQ(closest_match("dtyp", names), "dtype");
  EXPECT_EQ(closest_match("colour", names), "");
  // "dev" is three edits from "device": too far for a typo, but in reach of a wider search.
  EXPECT_EQ(closest_match("dev", names), "");
  EXPECT_EQ(closest_match("dev", names, 3), "device");
  constexpr std::array<std::string_view, 2> tied = {"ab", "ba"};
  EXPECT_EQ(closest_match("aa", tied), "ab");
  EXPECT_EQ(closest_match("x", std::span<const std::string_view>()), "");
}

TEST(Suggest, DidYouMeanIsEmptyWithoutASuggestion) {
  EXPECT_EQ(did_you_mean("batching.max_queue_size"), " (did you mean batching.max_queue_size?)");
  EXPECT_EQ(did_you_mean(""), "");
  constexpr std::array<std::string_view, 2> names = {"max_queue_size", "max_queue_delay_ms"};
  EXPECT_EQ(did_you_mean_closest("max_queue_sise", names, "batching."),
            " (did you mean batching.max_queue_size?)");
  EXPECT_EQ(did_you_mean_closest("max_queue_sise", names), " (did you mean max_queue_size?)");
  EXPECT_EQ(did_you_mean_closest("colour", names, "batching."), "");
}

}  // namespace test_suggest
}  // namespace cube3d
