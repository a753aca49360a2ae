// Whether a store's catalog may have changed since it was last looked at,
// for a long-running reader (`anneal serve`) that must notice an alias
// move at once without reading the aliases on every request.
#pragma once

#include <cstdint>

namespace anneal {

class Store;

// A number that differs from the one this `store` gave before whenever
// another connection (another process, another Store) has committed to
// the catalog since: SQLite's PRAGMA data_version, a few microseconds, no
// table read. Changes made through `store` itself do not change it. The
// Store's thread rule applies (one thread at a time). Throws anneal::Error
// (kFailure) when the catalog cannot be read.
std::int64_t catalog_data_version(Store& store);

}  // namespace anneal
