// Store maintenance: verification (fsck) and garbage collection (gc).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "anneal/error.h"
#include "anneal/fs.h"

#include "anneal/report.h"
#include "anneal/store.h"

namespace anneal {

struct FsckReport {
  std::uint64_t objects_checked = 0;
  std::uint64_t blobs_checked = 0;
  // Each entry one line naming the object or row, what owns it ("dataset
  // iris@v2 (features)", "run-3 checkpoint at step 120", "model bc@v1") and
  // what is wrong. Any entry here makes the store damaged.
  std::vector<std::string> problems;
  // Each entry one line about something that is not damage but needs a
  // person or a command: a run left running by a process that died, a job
  // whose worker's lease expired. Printed; they do not make the check fail.
  struct Finding {
    std::string text;            // what was found
    Remedy remedy;               // what resolves it, said by cli/ as the command that does
    std::string remedy_argument; // the run or job the remedy names
  };
  std::vector<Finding> findings;
  // Harmless findings: objects nothing references (gc removes them), stale
  // temporary files of interrupted writes.
  std::uint64_t unreferenced_objects = 0;
  std::uint64_t stale_temp_files = 0;
  // Blobs fsck found unreadable (a chunk missing or damaged, a chunk list
  // that does not add up). Already reported in `problems`; a later check of
  // what the blob holds (fsck_runs) skips them instead of reporting twice.
  std::unordered_set<std::string> unreadable_blobs;
  bool ok() const { return problems.empty(); }
};

// Holds the store's gc lock shared for as long as it lives, so gc (which
// takes it exclusively) cannot delete a blob or object the holder is about
// to read. When gc holds it, notes "waiting for gc to finish" and blocks
// until gc is done. For checks that read the whole store; writers take
// Store::writer_lock() directly.
FileLock lock_out_gc(Store& store, Reporter& reporter);

// Checks everything store/ can check, without knowing what a model or a
// checkpoint holds (src/runs/ adds that: fsck_runs):
//   - the catalog's integrity and foreign keys;
//   - every object file: decodes and re-hashes to its id (in parallel, oneTBB);
//   - every blob: its chunks exist and are intact, add up to its size and
//     reproduce its id; every blob a row refers to exists;
//   - every JSON column parses with the shape readers expect (dataset
//     schema, options and stream shapes, run summaries, model lineage and
//     metrics);
//   - every parsed dataset stream holds shape x dtype bytes;
// and lists as findings runs marked running that no process trains (their
// run lock is free) and running jobs whose lease expired.
// Holds the gc lock shared throughout (lock_out_gc), so a concurrent gc
// cannot make it report false damage. Read-only apart from creating missing
// lock files. An error while checking one item becomes a problem naming the
// item; the check goes on with the others.
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

struct ReclaimReport {
  bool deferred = false;  // the gc lock was taken: nothing was done
  std::uint64_t blobs_removed = 0;
  std::uint64_t objects_removed = 0;
  std::uint64_t bytes_freed = 0;  // on disk
};

// A targeted gc, for blobs the caller has just released (the checkpoints a
// rotation dropped): removes each of `blobs` that nothing references any
// more, then the objects of those blobs that no remaining blob lists. Does
// not scan the store. Objects may only go under the exclusive gc lock (a
// writer holding it shared may have just found an object present and be
// about to reference it), and the caller must not wait for that: when the
// lock is not free at once it does nothing and returns deferred (the next
// call or `anneal gc` reclaims them). The caller must not hold the lock
// itself. Catalog rows go in one transaction before any file, so a crash
// leaves only unreferenced objects. Throws anneal::Error on I/O or catalog
// errors.
ReclaimReport reclaim_blobs(Store& store, const std::vector<std::string>& blobs);

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
