// "Did you mean" hints for names a user got slightly wrong (config keys, option words). One
// rule for every loader, so that the model config, the server config and its command-line
// overrides suggest the same way. Torch-free.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace cube3d {

// Levenshtein distance: insertions, deletions and substitutions, one edit each.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The first of `candidates` nearest to `word` and at most `max_edits` edits away; empty when none
// is that close. Two edits catch the usual typo (`n_layerz`, `max_queue_sise`) without pointing
// at a key the user plainly did not mean.
std::string_view closest_match(std::string_view word, std::span<const std::string_view> candidates,
                               std::size_t max_edits = 2);

// " (did you mean <suggestion>?)", the tail of an "unknown ..." message; "" for an empty one, so
// that a failed search needs no special case at the call site.
std::string did_you_mean(std::string_view suggestion);

// did_you_mean of the closest_match of `word`, written as `prefix` + match: keys are looked up
// by their last part but named in full ("batching." + "max_queue_size").
std::string did_you_mean_closest(std::string_view word,
                                 std::span<const std::string_view> candidates,
                                 std::string_view prefix = "");

}  // namespace cube3d
