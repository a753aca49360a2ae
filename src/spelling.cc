// Suggestions for misspelled names: see anneal/spelling.h. Here, not in
// one layer's directory, because every layer (cli/, src/runs, the engine)
// suggests names the same way.
#include "anneal/spelling.h"

#include <algorithm>
#include <vector>

namespace anneal {

std::size_t edit_distance(std::string_view a, std::string_view b) {
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

std::optional<std::string> closest_name(std::string_view typed, std::span<const Spelling> known) {
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

std::optional<std::string> closest_name(std::string_view typed, std::span<const std::string_view> known) {
  std::vector<Spelling> spellings;
  spellings.reserve(known.size());
  for (std::string_view k : known) spellings.push_back({k, k});
  return closest_name(typed, spellings);
}

std::string did_you_mean(std::string_view typed, std::span<const Spelling> known) {
  const std::optional<std::string> name = closest_name(typed, known);
  return name ? "; did you mean '" + *name + "'?" : "";
}

std::string did_you_mean(std::string_view typed, std::span<const std::string_view> known) {
  const std::optional<std::string> name = closest_name(typed, known);
  return name ? "; did you mean '" + *name + "'?" : "";
}

Error unknown_name_error(std::string_view what, std::string_view name,
                         std::initializer_list<const char*> known) {
  const std::vector<std::string_view> names(known.begin(), known.end());
  std::string list;
  for (std::string_view k : names) list += (list.empty() ? "" : ", ") + std::string(k);
  return usage_error("unknown " + std::string(what) + " '" + std::string(name) + "'" + did_you_mean(name, names) +
                     " (known: " + list + ")");
}

}  // namespace anneal
