#include "cube3d/core/suggest.h"

#include <algorithm>
#include <vector>

namespace cube3d {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // One row of the table at a time: names are short, but there is no need for the square.
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string_view closest_match(std::string_view word, std::span<const std::string_view> candidates,
                               std::size_t max_edits) {
  std::string_view best;
  std::size_t best_distance = max_edits + 1;
  for (const std::string_view candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    // Strictly nearer: among equals the first wins, so the hint follows the candidates' order.
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view suggestion) {
  if (suggestion.empty()) return "";
  return " (did you mean " + std::string(suggestion) + "?)";
}

std::string did_you_mean_closest(std::string_view word,
                                 std::span<const std::string_view> candidates,
                                 std::string_view prefix) {
  const std::string_view match = closest_match(word, candidates);
  return did_you_mean(match.empty() ? "" : std::string(prefix) + std::string(match));
}

}  // namespace cube3d
