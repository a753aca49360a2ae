// Suggestions for misspelled names, for "did you mean ...?" in error
// messages: one definition of "close enough to suggest", shared by the
// command line (commands), config keys and the engine's names (optimizers,
// losses, schedules, ...).
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/error.h"

namespace anneal {

// Levenshtein distance (insertions, deletions, substitutions, each 1).
// Pure; O(|a| * |b|) time, O(|b|) memory.
inline std::size_t edit_distance(std::string_view a, std::string_view b);

// The most edits a suggestion may be from what was typed. Further than
// this, the "closest" known name is usually an unrelated word, and naming
// it misleads more than it helps.
inline constexpr std::size_t kMaxSuggestionDistance = 3;

// A known name as it may be typed (`spelling`) and the name to suggest for
// it (`suggests`). Usually the same; an alias, a name other tools use for
// the same thing ("learning_rate"), is matched by its own spelling and
// suggests anneal's name ("lr").
struct Spelling {
  std::string_view spelling;
  std::string_view suggests;
};

// The known name to suggest for `typed`: the one whose spelling is fewest
// edits away (the first of equally close ones), when that is at most
// kMaxSuggestionDistance edits and fewer edits than the spelling has
// characters (so a short name is never "corrected" into an unrelated one);
// nullopt otherwise. Pure.
inline std::optional<std::string> closest_name(std::string_view typed, std::span<const Spelling> known);
inline std::optional<std::string> closest_name(std::string_view typed, std::span<const std::string_view> known);

// "; did you mean 'X'?" naming closest_name(typed, known), or "" when no
// known name is close enough: the tail of every "unknown ..." message.
inline std::string did_you_mean(std::string_view typed, std::span<const Spelling> known);
inline std::string did_you_mean(std::string_view typed, std::span<const std::string_view> known);

// kUsage "unknown WHAT 'NAME'; did you mean 'X'? (known: a, b, c)" for a
// name that is none of `known` (the suggestion as did_you_mean gives it).
inline Error unknown_name_error(std::string_view what, std::string_view name,
                                std::initializer_list<const char*> known);

// ---------------------------------------------------------- definitions
// Here rather than in a .cc: every layer (cli/, src/runs, the engine)
// suggests names the same way, and a header belongs to no one library.

inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

inline std::optional<std::string> closest_name(std::string_view typed, std::span<const Spelling> known) {
  const Spelling* best = nullptr;
  std::size_t best_distance = ~std::size_t{0};
  for (const Spelling& k : known) {
    const std::size_t d = edit_distance(typed, k.spelling);
    if (d < best_distance) best_distance = d, best = &k;
  }
  if (!best || best_distance > kMaxSuggestionDistance || best_distance >= best->spelling.size())
    return std::nullopt;
  return std::string(best->suggests);
}

inline std::optional<std::string> closest_name(std::string_view typed, std::span<const std::string_view> known) {
  std::vector<Spelling> spellings;
  spellings.reserve(known.size());
  for (std::string_view k : known) spellings.push_back({k, k});
  return closest_name(typed, spellings);
}

inline std::string did_you_mean(std::string_view typed, std::span<const Spelling> known) {
  const std::optional<std::string> name = closest_name(typed, known);
  return name ? "; did you mean '" + *name + "'?" : "";
}

inline std::string did_you_mean(std::string_view typed, std::span<const std::string_view> known) {
  const std::optional<std::string> name = closest_name(typed, known);
  return name ? "; did you mean '" + *name + "'?" : "";
}

inline Error unknown_name_error(std::string_view what, std::string_view name,
                                std::initializer_list<const char*> known) {
  const std::vector<std::string_view> names(known.begin(), known.end());
  std::string list;
  for (std::string_view k : names) list += (list.empty() ? "" : ", ") + std::string(k);
  return usage_error("unknown " + std::string(what) + " '" + std::string(name) + "'" + did_you_mean(name, names) +
                     " (known: " + list + ")");
}

}  // namespace anneal
