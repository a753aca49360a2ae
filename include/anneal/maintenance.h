// Store maintenance: verification (fsck) and garbage collection (gc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "anneal/report.h"
#include "anneal/store.h"

namespace anneal {

struct FsckReport {
  std::uint64_t objects_checked = 0;
  std::uint64_t blobs_checked = 0;
  // Each entry one line naming the object or row, what owns it, and what is
  // wrong. Any entry here makes the store damaged.
  std::vector<std::string> problems;
  // Harmless findings: objects nothing references (gc removes them), stale
  // temporary files of interrupted writes.
  std::uint64_t unreferenced_objects = 0;
  std::uint64_t stale_temp_files = 0;
  bool ok() const { return problems.empty(); }
};

// Re-hashes every object, checks the catalog's integrity and that every
// referenced object exists and is intact and every chunk list adds up.
// Read-only. Checking runs in parallel (oneTBB).
FsckReport fsck(Store& store, Reporter& reporter);

struct GcReport {
  std::uint64_t blobs_removed = 0;
  std::uint64_t objects_removed = 0;
  std::uint64_t bytes_freed = 0;      // on disk
  std::uint64_t temp_files_removed = 0;
  bool dry_run = false;
};

// Removes blobs no dataset, model or checkpoint references, then the objects
// and temporary files nothing references. Takes the store's gc lock
// exclusively, so it waits for in-flight imports and never removes an object
// they have written. With dry_run, reports what it would remove.
GcReport gc(Store& store, bool dry_run, Reporter& reporter);

// What the store holds, for `anneal metrics`. Read-only.
struct StoreUsage {
  std::uint64_t logical_bytes = 0;  // every blob, at its full size (a version's streams, models, checkpoints)
  std::uint64_t unique_bytes = 0;   // the distinct chunks those blobs share, uncompressed
  std::uint64_t disk_bytes = 0;     // the object files, compressed, on disk
  std::uint64_t objects = 0;
  // How many logical bytes each unique byte stands for (>= 1); 1 when empty.
  double dedup_ratio() const { return unique_bytes ? double(logical_bytes) / double(unique_bytes) : 1.0; }
};
StoreUsage store_usage(Store& store);

}  // namespace anneal
