#include "engine/names.h"

#include "anneal/spelling.h"

#include <algorithm>
#include <vector>

namespace anneal::engine {

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
