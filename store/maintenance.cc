#include "anneal/maintenance.h"

#include <sys/stat.h>

#include <tbb/parallel_for.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "sqlite.h"
#include "streams.h"

namespace anneal {
namespace fs = std::filesystem;

namespace {

// "dataset iris@v2 (source)", "model bc@v1", "checkpoint of run 3 at step
// 120": everything that holds the object.
std::string owners_of_object(sql::Database& db, const std::string& object) {
  auto stmt = db.prepare(
      "SELECT DISTINCT 'dataset ' || d.name || '@v' || v.version || ' (' || s.role || ')' "
      "FROM blob_chunks c JOIN dataset_streams s ON s.blob = c.blob "
      "JOIN dataset_versions v ON v.id = s.version_id "
      "JOIN datasets d ON d.id = v.dataset_id WHERE c.object = ?1 "
      "UNION SELECT DISTINCT 'model ' || m.name || '@v' || m.version "
      "FROM blob_chunks c JOIN models m ON m.blob = c.blob WHERE c.object = ?1 "
      "UNION SELECT DISTINCT 'checkpoint of run ' || k.run_id || ' at step ' || k.step "
      "FROM blob_chunks c JOIN checkpoints k ON k.blob = c.blob WHERE c.object = ?1 "
      "ORDER BY 1");
  stmt.bind(1, object);
  std::string owners;
  while (stmt.step()) owners += (owners.empty() ? "" : ", ") + stmt.text(0);
  return owners.empty() ? "unreferenced" : owners;
}

std::uint64_t count_temp_files(const fs::path& tmp) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp, ec)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

}  // namespace

FsckReport fsck(Store& store, Reporter& reporter) {
  FsckReport report;
  sql::Database& db = store.db();
  const ObjectStore& objects = store.objects();

  auto integrity = db.prepare("PRAGMA integrity_check");
  while (integrity.step())
    if (integrity.text(0) != "ok") report.problems.push_back("catalog: " + integrity.text(0));
  auto fk = db.prepare("PRAGMA foreign_key_check");
  while (fk.step())
    report.problems.push_back("catalog: row " + std::to_string(fk.int64(1)) + " of table " +
                              fk.text(0) + " refers to a missing row of " + fk.text(2));

  // Every object on disk, re-hashed in parallel.
  std::vector<std::string> on_disk = objects.list();
  std::vector<std::optional<std::string>> damage(on_disk.size());
  reporter.note("checking " + std::to_string(on_disk.size()) + " objects");
  tbb::parallel_for(std::size_t(0), on_disk.size(), [&](std::size_t i) {
    damage[i] = objects.check(on_disk[i]);
  });
  report.objects_checked = on_disk.size();
  std::unordered_set<std::string> intact;
  for (std::size_t i = 0; i < on_disk.size(); ++i) {
    if (!damage[i]) {
      intact.insert(on_disk[i]);
      continue;
    }
    report.problems.push_back("object " + on_disk[i] + " (" + owners_of_object(db, on_disk[i]) +
                              "): " + *damage[i]);
  }

  // Every blob: its chunks exist, are intact and add up to its size.
  std::unordered_set<std::string> referenced;
  auto blobs = db.prepare("SELECT hash, size FROM blobs ORDER BY hash");
  while (blobs.step()) {
    std::string blob = blobs.text(0);
    auto size = static_cast<std::uint64_t>(blobs.int64(1));
    std::uint64_t total = 0;
    std::vector<std::pair<std::string, std::uint64_t>> list;
    for (const auto& chunk : blob_chunks(db, blob)) {
      total += chunk.length;
      list.emplace_back(chunk.object, chunk.length);
      referenced.insert(chunk.object);
      if (!intact.count(chunk.object) && !objects.contains(chunk.object))
        report.problems.push_back("object " + chunk.object + " (" + owners_of_object(db, chunk.object) +
                                  "): missing");
    }
    if (stream_hash(list) != blob)
      report.problems.push_back("blob " + blob + ": its chunk list does not match its hash");
    if (total != size)
      report.problems.push_back("blob " + blob + ": chunks add up to " + std::to_string(total) +
                                " bytes, the catalog says " + std::to_string(size));
    ++report.blobs_checked;
  }
  auto dangling = db.prepare(
      "SELECT s.role, s.blob FROM dataset_streams s LEFT JOIN blobs b ON b.hash = s.blob "
      "WHERE b.hash IS NULL");
  while (dangling.step())
    report.problems.push_back("stream " + dangling.text(0) + " refers to unknown blob " + dangling.text(1));

  for (const auto& id : on_disk) report.unreferenced_objects += referenced.count(id) ? 0 : 1;
  report.stale_temp_files = count_temp_files(store.root() / "tmp");
  return report;
}

GcReport gc(Store& store, bool dry_run, Reporter& reporter) {
  GcReport report;
  report.dry_run = dry_run;
  FileLock attempt =
      FileLock::try_lock(store.root() / "locks" / "gc.lock", FileLock::Mode::kExclusive);
  if (!attempt.held()) reporter.note("waiting for running imports to finish");
  FileLock exclusive = attempt.held() ? std::move(attempt) : store.gc_lock();

  sql::Database& db = store.db();
  const ObjectStore& objects = store.objects();
  {
    sql::Transaction txn(db);
    auto unreferenced = db.prepare(
        "SELECT count(*) FROM blobs WHERE hash NOT IN (SELECT blob FROM referenced_blobs)");
    unreferenced.step();
    report.blobs_removed = static_cast<std::uint64_t>(unreferenced.int64(0));
    if (!dry_run) {
      db.exec("DELETE FROM blobs WHERE hash NOT IN (SELECT blob FROM referenced_blobs)");
      txn.commit();
    }
  }
  if (!dry_run) fault_point("gc.catalog-pruned");
  std::unordered_set<std::string> keep;
  auto live = db.prepare(
      "SELECT DISTINCT object FROM blob_chunks WHERE blob IN (SELECT blob FROM referenced_blobs)");
  while (live.step()) keep.insert(live.text(0));

  for (const auto& id : objects.list()) {
    if (keep.count(id)) continue;
    report.bytes_freed += objects.stored_size(id);
    ++report.objects_removed;
    if (!dry_run) {
      objects.remove(id);
      fault_point("gc.object-removed");
    }
  }
  // With the exclusive lock held no writer is running, so every temporary
  // file is left over from an interrupted one.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(store.root() / "tmp", ec)) {
    if (!e.is_regular_file()) continue;
    ++report.temp_files_removed;
    report.bytes_freed += e.file_size(ec);
    if (!dry_run) fs::remove(e.path(), ec);
  }
  return report;
}

StoreUsage store_usage(Store& store) {
  StoreUsage usage;
  sql::Database& db = store.db();
  {
    // A blob owned twice (two versions sharing a stream) counts twice:
    // that is the sharing dedup saves.
    auto stmt = db.prepare(
        "SELECT COALESCE(SUM(b.size), 0) FROM blobs b JOIN "
        "(SELECT blob FROM dataset_streams UNION ALL SELECT blob FROM checkpoints UNION ALL SELECT blob FROM models) o "
        "ON o.blob = b.hash");
    stmt.step();
    usage.logical_bytes = static_cast<std::uint64_t>(stmt.int64(0));
  }
  auto chunks = db.prepare("SELECT object, MAX(length) FROM blob_chunks GROUP BY object");
  while (chunks.step()) {
    usage.unique_bytes += static_cast<std::uint64_t>(chunks.int64(1));
    ++usage.objects;
    std::error_code ec;
    const auto size = fs::file_size(store.objects().path_of(chunks.text(0)), ec);
    if (!ec) usage.disk_bytes += size;
  }
  return usage;
}

}  // namespace anneal
