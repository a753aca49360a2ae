#include "anneal/maintenance.h"

#include <sys/stat.h>

#include <tbb/parallel_for.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "anneal/catalog_jobs.h"
#include "anneal/catalog_runs.h"
#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/audit.h"
#include "audit_trail.h"
#include "permissions.h"
#include "sqlite.h"
#include "streams.h"

namespace anneal {
namespace fs = std::filesystem;

namespace {

using nlohmann::json;

// "dataset iris@v2 (source)", "model bc@v1", "run-3 checkpoint at step
// 120": everything that holds the blobs matching `where` (SQL over c.blob /
// c.object, parameter ?1).
std::string owners_where(sql::Database& db, const std::string& from, const std::string& key) {
  try {
    auto stmt = db.prepare(
        "SELECT DISTINCT 'dataset ' || d.name || '@v' || v.version || ' (' || s.role || ')' "
        "FROM " + from + " JOIN dataset_streams s ON s.blob = c.blob "
        "JOIN dataset_versions v ON v.id = s.version_id "
        "JOIN datasets d ON d.id = v.dataset_id WHERE c.hit = ?1 "
        "UNION SELECT DISTINCT 'model ' || m.name || '@v' || m.version "
        "FROM " + from + " JOIN models m ON m.blob = c.blob WHERE c.hit = ?1 "
        "UNION SELECT DISTINCT 'run-' || k.run_id || ' checkpoint at step ' || k.step "
        "FROM " + from + " JOIN checkpoints k ON k.blob = c.blob WHERE c.hit = ?1 "
        "ORDER BY 1");
    stmt.bind(1, key);
    std::string owners;
    while (stmt.step()) owners += (owners.empty() ? "" : ", ") + stmt.text(0);
    return owners.empty() ? "unreferenced" : owners;
  } catch (const std::exception& e) {
    return std::string("owner unknown: ") + e.what();
  }
}

std::string owners_of_object(sql::Database& db, const std::string& object) {
  return owners_where(db, "(SELECT blob, object AS hit FROM blob_chunks) c", object);
}

std::string owners_of_blob(sql::Database& db, const std::string& blob) {
  return owners_where(db, "(SELECT hash AS blob, hash AS hit FROM blobs) c", blob);
}

std::uint64_t count_temp_files(const fs::path& tmp) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp, ec)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

// Runs one part of the check. An exception (an unreadable catalog, an I/O
// error) becomes a problem naming `what`: one broken item must never stop
// the check of all the others.
template <class Fn>
void checking(FsckReport& report, const std::string& what, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    report.problems.push_back(what + ": cannot be checked: " + e.what());
  }
}

// Parses a JSON column; on failure records "OWNER: COLUMN: why" and returns
// nullopt.
std::optional<json> parse_column(FsckReport& report, const std::string& owner, const char* column,
                                 const std::string& text) {
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    report.problems.push_back(owner + ": " + column + " is not valid JSON: " + e.what());
    return std::nullopt;
  }
}

// Bytes per element of a stream dtype (docs/STORE.md); 0 when unknown.
std::uint64_t dtype_size(const std::string& dtype) {
  if (dtype == "f32") return 4;
  if (dtype == "u8") return 1;
  return 0;
}

void check_catalog_integrity(sql::Database& db, FsckReport& report) {
  checking(report, "catalog", [&] {
    auto integrity = db.prepare("PRAGMA integrity_check");
    while (integrity.step())
      if (integrity.text(0) != "ok") report.problems.push_back("catalog: " + integrity.text(0));
  });
  checking(report, "catalog foreign keys", [&] {
    auto fk = db.prepare("PRAGMA foreign_key_check");
    while (fk.step())
      report.problems.push_back("catalog: row " + std::to_string(fk.int64(1)) + " of table " + fk.text(0) +
                                " refers to a missing row of " + fk.text(2));
  });
}

// Every blob: its chunks exist, are intact and add up to its size and id.
void check_blobs(sql::Database& db, const ObjectStore& objects, const std::unordered_set<std::string>& intact,
                 std::unordered_set<std::string>& referenced, FsckReport& report) {
  std::vector<std::pair<std::string, std::uint64_t>> all;
  checking(report, "catalog table blobs", [&] {
    auto blobs = db.prepare("SELECT hash, size FROM blobs ORDER BY hash");
    while (blobs.step()) all.emplace_back(blobs.text(0), static_cast<std::uint64_t>(blobs.int64(1)));
  });
  std::unordered_set<std::string> reported;  // a missing object shared by blobs: one line
  for (const auto& entry : all) {
    // Named copies, not a structured binding: clang 14 cannot capture those.
    const std::string& blob = entry.first;
    const std::uint64_t size = entry.second;
    checking(report, "blob " + blob, [&] {
      std::uint64_t total = 0;
      std::vector<std::pair<std::string, std::uint64_t>> list;
      bool readable = true;
      for (const auto& chunk : blob_chunks(db, blob)) {
        total += chunk.length;
        list.emplace_back(chunk.object, chunk.length);
        referenced.insert(chunk.object);
        if (intact.count(chunk.object)) continue;
        readable = false;  // damaged (reported with the objects) or missing
        if (!objects.contains(chunk.object) && reported.insert(chunk.object).second)
          report.problems.push_back("object " + chunk.object + " (" + owners_of_object(db, chunk.object) +
                                    "): missing");
      }
      if (stream_hash(list) != blob) {
        readable = false;
        report.problems.push_back("blob " + blob + " (" + owners_of_blob(db, blob) +
                                  "): its chunk list does not match its hash");
      }
      if (total != size) {
        readable = false;
        report.problems.push_back("blob " + blob + " (" + owners_of_blob(db, blob) + "): chunks add up to " +
                                  std::to_string(total) + " bytes, the catalog says " + std::to_string(size));
      }
      if (!readable) report.unreadable_blobs.insert(blob);
    });
    ++report.blobs_checked;
  }
  checking(report, "catalog blob references", [&] {
    auto dangling = db.prepare(
        "SELECT 'dataset ' || d.name || '@v' || v.version || ' (' || s.role || ')', s.blob "
        "FROM dataset_streams s JOIN dataset_versions v ON v.id = s.version_id "
        "JOIN datasets d ON d.id = v.dataset_id WHERE s.blob NOT IN (SELECT hash FROM blobs) "
        "UNION ALL SELECT 'run-' || k.run_id || ' checkpoint at step ' || k.step, k.blob FROM checkpoints k "
        "WHERE k.blob NOT IN (SELECT hash FROM blobs) "
        "UNION ALL SELECT 'model ' || m.name || '@v' || m.version, m.blob FROM models m "
        "WHERE m.blob NOT IN (SELECT hash FROM blobs)");
    while (dangling.step()) {
      report.problems.push_back(dangling.text(0) + ": refers to unknown blob " + dangling.text(1));
      report.unreadable_blobs.insert(dangling.text(1));
    }
  });
}

// The JSON columns parse with the shape their readers expect, and each
// parsed dataset stream holds exactly shape x dtype bytes.
void check_catalog_json(sql::Database& db, FsckReport& report) {
  checking(report, "catalog table dataset_versions", [&] {
    auto rows = db.prepare(
        "SELECT 'dataset ' || d.name || '@v' || v.version, v.schema_json, v.options_json "
        "FROM dataset_versions v JOIN datasets d ON d.id = v.dataset_id ORDER BY d.name, v.version");
    while (rows.step()) {
      const std::string owner = rows.text(0);
      if (auto schema = parse_column(report, owner, "schema_json", rows.text(1))) {
        try {
          columns_from_json(schema->at("columns"));
          schema->at("sample_shape").get<std::vector<std::int64_t>>();
        } catch (const std::exception& e) {
          report.problems.push_back(owner + ": schema_json is not a dataset schema: " + e.what());
        }
      }
      if (auto options = parse_column(report, owner, "options_json", rows.text(2)); options && !options->is_object())
        report.problems.push_back(owner + ": options_json is not a JSON object");
    }
  });
  checking(report, "catalog table dataset_streams", [&] {
    auto rows = db.prepare(
        "SELECT 'dataset ' || d.name || '@v' || v.version || ' (' || s.role || ')', "
        "COALESCE(s.dtype, ''), s.shape, b.size "
        "FROM dataset_streams s JOIN dataset_versions v ON v.id = s.version_id "
        "JOIN datasets d ON d.id = v.dataset_id LEFT JOIN blobs b ON b.hash = s.blob "
        "ORDER BY d.name, v.version, s.role");
    while (rows.step()) {
      const std::string owner = rows.text(0), dtype = rows.text(1);
      if (dtype.empty()) continue;  // a source file: bytes, no shape
      const std::uint64_t element = dtype_size(dtype);
      if (!element) {
        report.problems.push_back(owner + ": unknown dtype '" + dtype + "'");
        continue;
      }
      auto shape_json = parse_column(report, owner, "shape", rows.is_null(2) ? "" : rows.text(2));
      if (!shape_json) continue;
      std::vector<std::int64_t> shape;
      try {
        shape = shape_json->get<std::vector<std::int64_t>>();
      } catch (const std::exception&) {
        report.problems.push_back(owner + ": shape " + rows.text(2) + " is not a list of dimensions");
        continue;
      }
      // In 128 bits: a damaged shape must not wrap around to the right size.
      unsigned __int128 bytes = element;
      bool sane = true;
      for (std::int64_t d : shape) {
        sane = sane && d >= 0 && bytes <= (unsigned __int128)(std::uint64_t{1} << 63);
        if (sane) bytes *= static_cast<std::uint64_t>(d);
      }
      if (rows.is_null(3)) continue;  // an unknown blob: reported with the blob references
      const auto size = static_cast<std::uint64_t>(rows.int64(3));
      if (!sane || bytes != size)
        report.problems.push_back(owner + ": shape " + rows.text(2) + " of " + dtype + " needs " +
                                  (sane ? std::to_string(static_cast<std::uint64_t>(bytes)) + " bytes"
                                        : std::string("an impossible size")) +
                                  ", its blob holds " + std::to_string(size));
    }
  });
  checking(report, "catalog table runs", [&] {
    auto rows = db.prepare("SELECT id, summary_json FROM runs ORDER BY id");
    while (rows.step())
      parse_column(report, "run-" + std::to_string(rows.int64(0)), "summary_json", rows.text(1));
  });
  checking(report, "catalog table models", [&] {
    auto rows = db.prepare(
        "SELECT 'model ' || name || '@v' || version, lineage_json, metrics_json FROM models ORDER BY name, version");
    while (rows.step()) {
      const std::string owner = rows.text(0);
      if (auto lineage = parse_column(report, owner, "lineage_json", rows.text(1)); lineage && !lineage->is_object())
        report.problems.push_back(owner + ": lineage_json is not a JSON object");
      if (auto metrics = parse_column(report, owner, "metrics_json", rows.text(2)); metrics && !metrics->is_object())
        report.problems.push_back(owner + ": metrics_json is not a JSON object");
    }
  });
}

// Runs and jobs left "running" by a process that died: not damage, but
// worth a line saying what continues them.
void check_orphans(Store& store, FsckReport& report) {
  sql::Database& db = store.db();
  checking(report, "catalog table runs", [&] {
    std::vector<std::int64_t> running;
    auto rows = db.prepare("SELECT id FROM runs WHERE status = 'running' ORDER BY id");
    while (rows.step()) running.push_back(rows.int64(0));
    for (std::int64_t id : running) {
      // A training process holds its run lock for as long as it trains. We
      // hold it only for this test; a resume starting in that instant is
      // told the run is busy and can be retried.
      if (!try_lock_run(store, id).held()) continue;
      const std::string run = "run-" + std::to_string(id);
      report.findings.push_back({run + " is marked running but no process holds it", Remedy::kResumeRun, run});
    }
  });
  checking(report, "catalog table jobs", [&] {
    auto rows = db.prepare(
        "SELECT id, name, COALESCE(worker, '?') FROM jobs "
        "WHERE state = 'running' AND lease_expires < ? ORDER BY id");
    rows.bind(1, unix_now());
    while (rows.step())
      report.findings.push_back({"job " + std::to_string(rows.int64(0)) + " (" + rows.text(1) +
                                     ") is marked running on " + rows.text(2) + " but its lease expired (the worker died)",
                                 Remedy::kStartWorker, ""});
  });
}

}  // namespace

FileLock lock_out_gc(Store& store, Reporter& reporter) {
  FileLock attempt = FileLock::try_lock(store.root() / "locks" / "gc.lock", FileLock::Mode::kShared);
  if (attempt.held()) return attempt;
  reporter.note("waiting for gc to finish");
  fault_point("fsck.waiting-for-gc");
  return store.writer_lock();
}

FsckReport fsck(Store& store, Reporter& reporter) {
  FsckReport report;
  // Shared, for the whole check: gc deletes catalog rows first and object
  // files after, so a check running beside it would find objects vanishing
  // under it and report damage that is not there.
  FileLock no_gc = lock_out_gc(store, reporter);
  sql::Database& db = store.db();
  const ObjectStore& objects = store.objects();

  check_catalog_integrity(db, report);

  // Every object on disk, re-hashed in parallel.
  std::vector<std::string> on_disk;
  checking(report, "objects/", [&] { on_disk = objects.list(); });
  fault_point("fsck.objects-listed");
  std::vector<std::optional<std::string>> damage(on_disk.size());
  // In an encrypted store: objects still plaintext, left by an interrupted
  // `anneal encrypt` (they read, but are not yet encrypted).
  std::atomic<std::uint64_t> plaintext{0};
  reporter.note("checking " + std::to_string(on_disk.size()) + " objects");
  tbb::parallel_for(std::size_t(0), on_disk.size(), [&](std::size_t i) {
    try {
      damage[i] = objects.check(on_disk[i]);
      if (!damage[i] && objects.encrypted() && !objects.stored_encrypted(on_disk[i])) ++plaintext;
    } catch (const std::exception& e) {
      damage[i] = std::string("cannot be read: ") + e.what();
    }
  });
  if (plaintext > 0)
    report.findings.push_back({std::to_string(plaintext.load()) + " objects are not encrypted yet (an encryption "
                               "was interrupted)",
                               Remedy::kEncryptStore, ""});
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

  // Owners and modes. Store::open has refused a store whose own entries
  // break the rule; this finds the rest, each file and directory: an object
  // another user made (root importing into the store, before open refused
  // that), which its owner then cannot read, or one others may write.
  checking(report, "permissions", [&] {
    const fs::path object_dir = store.root() / "objects";
    for (const auto& [path, problem] : store_permission_problems(store.root())) {
      const bool object_file = path.parent_path().parent_path() == object_dir;
      const std::string id = path.filename().string();
      report.problems.push_back(object_file ? "object " + id + " (" + owners_of_object(db, id) + "): " + problem
                                            : problem);
    }
  });

  std::unordered_set<std::string> referenced;
  check_blobs(db, objects, intact, referenced, report);
  check_catalog_json(db, report);
  check_orphans(store, report);
  checking(report, "audit trail", [&] {
    const AuditVerdict audit = verify_audit(store);
    if (!audit.ok()) report.problems.push_back(audit.problem);
    // Not damage: what an encrypt or rekey killed before its record leaves,
    // like the plaintext objects above; its rerun records it.
    if (!audit.unrecorded.empty()) report.findings.push_back({audit.unrecorded, Remedy::kNone, ""});
  });

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
      // The record names the blobs; the objects and temporary files removed
      // after this commit are whatever those blobs (and interrupted writers)
      // left, which gc does not list one by one.
      nlohmann::json removed = nlohmann::json::array();
      auto doomed = db.prepare("SELECT hash FROM blobs WHERE hash NOT IN (SELECT blob FROM referenced_blobs) ORDER BY hash");
      while (doomed.step()) removed.push_back(doomed.text(0));
      db.exec("DELETE FROM blobs WHERE hash NOT IN (SELECT blob FROM referenced_blobs)");
      append_audit(store, "gc", {{"blobs_removed", removed}});
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

ReclaimReport reclaim_blobs(Store& store, const std::vector<std::string>& blobs) {
  ReclaimReport report;
  if (blobs.empty()) return report;
  FileLock exclusive = FileLock::try_lock(store.root() / "locks" / "gc.lock", FileLock::Mode::kExclusive);
  if (!exclusive.held()) {
    report.deferred = true;
    return report;
  }
  sql::Database& db = store.db();
  std::vector<std::string> doomed;
  {
    sql::Transaction txn(db);
    std::set<std::string> candidates;
    auto unowned = db.prepare("SELECT 1 FROM blobs WHERE hash = ? AND hash NOT IN (SELECT blob FROM referenced_blobs)");
    auto chunks = db.prepare("SELECT object FROM blob_chunks WHERE blob = ?");
    auto remove_blob = db.prepare("DELETE FROM blobs WHERE hash = ?");  // its chunk rows cascade
    for (const std::string& blob : blobs) {
      unowned.reset();
      unowned.bind(1, blob);
      const bool released = unowned.step();
      unowned.reset();
      if (!released) continue;  // still owned (or already gone)
      chunks.reset();
      chunks.bind(1, blob);
      while (chunks.step()) candidates.insert(chunks.text(0));
      remove_blob.reset();
      remove_blob.bind(1, blob).run();
      ++report.blobs_removed;
    }
    auto listed = db.prepare("SELECT 1 FROM blob_chunks WHERE object = ? LIMIT 1");
    for (const std::string& object : candidates) {
      listed.reset();
      listed.bind(1, object);
      if (!listed.step()) doomed.push_back(object);
    }
    txn.commit();
  }
  fault_point("reclaim.catalog-pruned");
  const ObjectStore& objects = store.objects();
  for (const std::string& object : doomed) {
    report.bytes_freed += objects.stored_size(object);
    objects.remove(object);
    ++report.objects_removed;
    fault_point("reclaim.object-removed");
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
