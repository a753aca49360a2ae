#include "anneal/catalog_watch.h"

#include "anneal/store.h"
#include "sqlite.h"

namespace anneal {

std::int64_t catalog_data_version(Store& store) {
  auto stmt = store.db().prepare("PRAGMA data_version");
  stmt.step();
  return stmt.int64(0);
}

}  // namespace anneal
