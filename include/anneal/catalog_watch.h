// Whether a store's catalog may have changed since it was last looked at,
// for a long-running reader (`anneal serve`) that must notice an alias
// move at once without reading the aliases on every request.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "anneal/store.h"

namespace anneal {

// A connection of its own to a store's catalog that only ever asks SQLite's
// PRAGMA data_version, through one statement prepared once: a number that
// differs from the one it gave before whenever anything was committed to
// the catalog in between (by any process or connection), a few
// microseconds and no table read, so it can be asked on every request.
// It holds no transaction between calls. Not thread-safe: one thread at a
// time (the caller locks).
class CatalogWatch {
 public:
  // Opens the store at `root` (Store::open's errors).
  CatalogWatch(const std::filesystem::path& root, const StoreAccess& access);
  ~CatalogWatch();
  CatalogWatch(const CatalogWatch&) = delete;
  CatalogWatch& operator=(const CatalogWatch&) = delete;

  // The catalog's change counter. Throws anneal::Error (kFailure) when the
  // catalog cannot be read.
  std::int64_t data_version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anneal
