#include "engine/names.h"

#include <algorithm>
#include <vector>

namespace anneal::engine {

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

Error unknown_name_error(std::string_view what, std::string_view name,
                         std::initializer_list<const char*> known) {
  std::string best, list;
  std::size_t best_distance = ~std::size_t{0};
  for (const char* k : known) {
    const std::size_t d = edit_distance(name, k);
    if (d < best_distance) best_distance = d, best = k;
    if (!list.empty()) list += ", ";
    list += k;
  }
  return usage_error("unknown " + std::string(what) + " '" + std::string(name) + "'; did you mean '" +
                     best + "'? (known: " + list + ")");
}

}  // namespace anneal::engine
