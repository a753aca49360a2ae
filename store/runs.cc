// Runs, run metrics, checkpoints and models in the catalog (migration 2).
#include "anneal/catalog_runs.h"


#include <cctype>

#include "anneal/catalog_jobs.h"
#include "anneal/chunker.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/maintenance.h"
#include "audit_trail.h"
#include "fence.h"
#include "sqlite.h"
#include "streams.h"

namespace anneal {
namespace {

using nlohmann::json;


RunStatus status_from_text(const std::string& text, std::int64_t run) {
  for (RunStatus s : {RunStatus::kRunning, RunStatus::kSucceeded, RunStatus::kFailed, RunStatus::kCancelled})
    if (text == run_status_name(s)) return s;
  throw corrupt("catalog: run " + std::to_string(run) + " has unknown status '" + text + "'");
}

constexpr const char* kRunColumns =
    "r.id, r.name, d.name || '@v' || v.version, r.config_text, r.status, r.started_at, "
    "COALESCE(r.ended_at, ''), r.host, COALESCE(r.error, ''), r.summary_json, "
    "COALESCE((SELECT m.name || '@v' || m.version FROM models m WHERE m.run_id = r.id), '') "
    "FROM runs r JOIN dataset_versions v ON v.id = r.dataset_version_id "
    "JOIN datasets d ON d.id = v.dataset_id";

RunRecord read_run(sql::Statement& row) {
  RunRecord r;
  r.id = row.int64(0);
  r.name = row.text(1);
  r.dataset = row.text(2);
  r.config_text = row.text(3);
  r.status = status_from_text(row.text(4), r.id);
  r.started_at = row.text(5);
  r.ended_at = row.text(6);
  r.host = row.text(7);
  r.error = row.text(8);
  r.summary = json::parse(row.text(9));
  r.model = row.text(10);
  return r;
}

constexpr const char* kCheckpointColumns =
    "c.id, c.run_id, c.step, c.created_at, c.blob, b.size, c.score "
    "FROM checkpoints c JOIN blobs b ON b.hash = c.blob";

CheckpointRecord read_checkpoint_row(sql::Statement& row) {
  CheckpointRecord c;
  c.id = row.int64(0);
  c.run = row.int64(1);
  c.step = row.int64(2);
  c.created_at = row.text(3);
  c.blob = row.text(4);
  c.size = static_cast<std::uint64_t>(row.int64(5));
  if (!row.is_null(6)) c.score = row.real(6);
  return c;
}

constexpr const char* kModelColumns =
    "m.id, m.name, m.version, m.created_at, m.run_id, m.blob, b.size, m.lineage_json, m.metrics_json "
    "FROM models m JOIN blobs b ON b.hash = m.blob";

ModelRecord read_model_row(sql::Statement& row) {
  ModelRecord m;
  m.id = row.int64(0);
  m.name = row.text(1);
  m.version = static_cast<int>(row.int64(2));
  m.created_at = row.text(3);
  m.run = row.int64(4);
  m.blob = row.text(5);
  m.size = static_cast<std::uint64_t>(row.int64(6));
  m.lineage = json::parse(row.text(7));
  m.metrics = json::parse(row.text(8));
  return m;
}

void require_run(sql::Database& db, std::int64_t run) {
  auto stmt = db.prepare("SELECT 1 FROM runs WHERE id = ?");
  stmt.bind(1, run);
  if (!stmt.step()) throw not_found("no run run-" + std::to_string(run)).with(Remedy::kListRuns);
}

}  // namespace

const char* run_status_name(RunStatus status) {
  switch (status) {
    case RunStatus::kRunning: return "running";
    case RunStatus::kSucceeded: return "succeeded";
    case RunStatus::kFailed: return "failed";
    case RunStatus::kCancelled: return "cancelled";
  }
  return "?";
}

std::int64_t parse_run_id(std::string_view text, std::string_view what) {
  std::string_view digits = text.starts_with("run-") ? text.substr(4) : text;
  std::int64_t id = 0;
  bool ok = !digits.empty() && digits.size() <= 15;
  for (char c : digits) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) id = id * 10 + (c - '0');
  }
  if (!ok || id < 1)
    throw usage_error(std::string(what) + " '" + std::string(text) + "': expected a run id such as run-3 or 3");
  return id;
}

RunRecord create_run(Store& store, const std::string& name, const DatasetRef& dataset,
                     const std::string& config_text, const std::string& host) {
  if (!dataset.version) throw std::logic_error("create_run: the dataset version must be resolved");
  sql::Database& db = store.db();
  std::int64_t id = 0;
  {
    sql::Transaction txn(db);
    auto v = db.prepare(
        "SELECT v.id FROM dataset_versions v JOIN datasets d ON d.id = v.dataset_id "
        "WHERE d.name = ? AND v.version = ?");
    v.bind(1, dataset.name).bind(2, static_cast<std::int64_t>(*dataset.version));
    if (!v.step()) throw not_found("no dataset version " + dataset.to_string());
    db.prepare(
          "INSERT INTO runs(name, dataset_version_id, config_text, status, started_at, host) "
          "VALUES (?, ?, ?, 'running', ?, ?)")
        .bind(1, name).bind(2, v.int64(0)).bind(3, config_text).bind(4, sql::timestamp_now()).bind(5, host).run();
    id = db.last_insert_id();
    txn.commit();
  }
  return find_run(store, id);
}

void reopen_run(Store& store, std::int64_t run) {
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  require_run(db, run);
  db.prepare("UPDATE runs SET status = 'running', ended_at = NULL, error = NULL WHERE id = ?")
      .bind(1, run).run();
  txn.commit();
}

void end_run(Store& store, std::int64_t run, RunStatus status, const std::string& error,
             const json& summary, const JobFence* fence) {
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  require_run(db, run);
  if (fence) require_job_fence(db, *fence);
  auto stmt = db.prepare("UPDATE runs SET status = ?, ended_at = ?, error = ?, summary_json = ? WHERE id = ?");
  stmt.bind(1, run_status_name(status)).bind(2, sql::timestamp_now());
  if (error.empty()) stmt.bind_null(3);
  else stmt.bind(3, error);
  stmt.bind(4, summary.dump()).bind(5, run).run();
  json detail = {{"run", run}, {"status", run_status_name(status)}};
  if (fence) detail["job"] = fence->job;
  append_audit(store, "run.end", detail);
  txn.commit();
}

RunRecord find_run(Store& store, std::int64_t run) {
  auto stmt = store.db().prepare(std::string("SELECT ") + kRunColumns + " WHERE r.id = ?");
  stmt.bind(1, run);
  if (!stmt.step()) throw not_found("no run run-" + std::to_string(run)).with(Remedy::kListRuns);
  return read_run(stmt);
}

std::vector<RunRecord> list_runs(Store& store) {
  auto stmt = store.db().prepare(std::string("SELECT ") + kRunColumns + " ORDER BY r.id");
  std::vector<RunRecord> out;
  while (stmt.step()) out.push_back(read_run(stmt));
  return out;
}

void record_epoch(Store& store, std::int64_t run, const EpochRecord& record) {
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  require_run(db, run);
  db.prepare("DELETE FROM run_metrics WHERE run_id = ? AND epoch = ?").bind(1, run).bind(2, record.epoch).run();
  auto insert = db.prepare("INSERT INTO run_metrics(run_id, epoch, name, value) VALUES (?, ?, ?, ?)");
  for (const auto& [name, value] : record.values) {
    insert.reset();
    insert.bind(1, run).bind(2, record.epoch).bind(3, name).bind(4, value).run();
  }
  txn.commit();
}

std::vector<EpochRecord> run_epochs(Store& store, std::int64_t run) {
  require_run(store.db(), run);
  auto stmt = store.db().prepare(
      "SELECT epoch, name, value FROM run_metrics WHERE run_id = ? ORDER BY epoch, name");
  stmt.bind(1, run);
  std::vector<EpochRecord> out;
  while (stmt.step()) {
    std::int64_t epoch = stmt.int64(0);
    if (out.empty() || out.back().epoch != epoch) out.push_back({epoch, {}});
    out.back().values.emplace_back(stmt.text(1), stmt.is_null(2) ? 0.0 : stmt.real(2));
  }
  return out;
}

SavedCheckpoint save_checkpoint(Store& store, std::int64_t run, std::int64_t step, std::string_view bytes,
                                std::optional<double> score, std::int64_t keep, const JobFence* fence) {
  if (keep < 1) throw std::logic_error("save_checkpoint: keep must be >= 1");
  const ObjectStore& objects = store.objects();
  PreparedStream prepared = prepare_stream(objects, bytes, kTensorChunking);
  fault_point("checkpoint.prepared");
  sql::Database& db = store.db();
  std::int64_t id = 0;
  std::vector<std::string> released;  // blobs of the checkpoints this save drops
  {
    // Objects first, under the writer lock, then the row that owns them in
    // the same transaction as the blob record: gc can never see them unowned.
    FileLock writer = store.writer_lock();
    commit_stream(objects, prepared);
    fault_point("checkpoint.objects-written");
    sql::Transaction txn(db);
    require_run(db, run);
    if (fence) require_job_fence(db, *fence);
    record_blob(db, prepared);
    auto replaced = db.prepare("SELECT blob FROM checkpoints WHERE run_id = ? AND step = ?");
    replaced.bind(1, run).bind(2, step);
    while (replaced.step()) released.push_back(replaced.text(0));  // a resume saving this step again
    db.prepare("DELETE FROM checkpoints WHERE run_id = ? AND step = ?").bind(1, run).bind(2, step).run();
    auto insert = db.prepare(
        "INSERT INTO checkpoints(run_id, step, created_at, blob, score) VALUES (?, ?, ?, ?, ?)");
    insert.bind(1, run).bind(2, step).bind(3, sql::timestamp_now()).bind(4, prepared.hash);
    if (score) insert.bind(5, *score);
    else insert.bind_null(5);
    insert.run();
    id = db.last_insert_id();
    // The best-scored checkpoint (lowest score, earliest on ties) stays.
    std::int64_t best = 0;
    auto b = db.prepare(
        "SELECT id FROM checkpoints WHERE run_id = ? AND score IS NOT NULL ORDER BY score, step LIMIT 1");
    b.bind(1, run);
    if (b.step()) best = b.int64(0);
    const char* beyond_keep =
        "FROM checkpoints WHERE run_id = ?1 AND id != ?2 AND id NOT IN "
        "(SELECT id FROM checkpoints WHERE run_id = ?1 ORDER BY step DESC LIMIT ?3)";
    auto dropped = db.prepare(std::string("SELECT DISTINCT blob ") + beyond_keep);
    dropped.bind(1, run).bind(2, best).bind(3, keep);
    while (dropped.step()) released.push_back(dropped.text(0));
    db.prepare(std::string("DELETE ") + beyond_keep).bind(1, run).bind(2, best).bind(3, keep).run();
    fault_point("checkpoint.before-commit");
    txn.commit();
    fault_point("checkpoint.committed");
  }
  SavedCheckpoint saved;
  for (const auto& c : run_checkpoints(store, run))
    if (c.id == id) saved.checkpoint = c;
  if (saved.checkpoint.id != id)
    throw failure("checkpoint of run-" + std::to_string(run) + " vanished after it was recorded");
  // The writer lock is released: the released checkpoints' objects can go
  // now if no one holds the gc lock, so keep_checkpoints bounds the disk a
  // run uses, not only its rows. The checkpoint is saved whatever happens
  // here; gc reclaims what this leaves.
  try {
    saved.reclaimed = reclaim_blobs(store, released);
  } catch (const Error& e) {
    saved.reclaim_error = e.what();
  }
  return saved;
}

std::vector<CheckpointRecord> run_checkpoints(Store& store, std::int64_t run) {
  require_run(store.db(), run);
  auto stmt = store.db().prepare(std::string("SELECT ") + kCheckpointColumns +
                                 " WHERE c.run_id = ? ORDER BY c.step");
  stmt.bind(1, run);
  std::vector<CheckpointRecord> out;
  while (stmt.step()) out.push_back(read_checkpoint_row(stmt));
  return out;
}

std::string read_checkpoint(Store& store, const CheckpointRecord& checkpoint) {
  return read_blob(store.db(), store.objects(), checkpoint.blob,
                   "run-" + std::to_string(checkpoint.run) + " checkpoint at step " +
                       std::to_string(checkpoint.step));
}

std::string ModelRef::to_string() const {
  if (alias) return name + "@" + *alias;
  return version ? name + "@v" + std::to_string(*version) : name + "@latest";
}

ModelRef parse_model_ref(std::string_view text, std::string_view what) {
  const std::size_t at = text.find('@');
  if (at != std::string_view::npos) {
    std::string_view tag = text.substr(at + 1);
    const bool version_like = tag == "latest" || (tag.size() >= 2 && tag[0] == 'v' &&
                                                  std::isdigit(static_cast<unsigned char>(tag[1])));
    if (!version_like) {
      ModelRef ref{parse_dataset_ref(text.substr(0, at), what).name, std::nullopt, std::string(tag)};
      try {
        validate_alias_name(tag);
      } catch (const Error& e) {
        throw usage_error(std::string(what) + " '" + std::string(text) + "': " + e.what());
      }
      return ref;
    }
  }
  DatasetRef same_syntax = parse_dataset_ref(text, what);
  return {same_syntax.name, same_syntax.version, std::nullopt};
}

void validate_model_name(std::string_view name) {
  try {
    validate_dataset_name(name);  // one naming rule for both
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUsage) throw;
    throw usage_error("invalid model name '" + std::string(name) +
                      "': expected 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit");
  }
}

ModelRecord register_model(Store& store, std::int64_t run, const std::string& name,
                           std::string_view bytes, const json& lineage, const json& metrics,
                           const json& summary, const JobFence* fence) {
  validate_model_name(name);
  const ObjectStore& objects = store.objects();
  PreparedStream prepared = prepare_stream(objects, bytes, kTensorChunking);
  fault_point("model.prepared");
  FileLock writer = store.writer_lock();
  commit_stream(objects, prepared);
  fault_point("model.objects-written");
  sql::Database& db = store.db();
  int version = 0;
  {
    sql::Transaction txn(db);
    require_run(db, run);
    if (fence) require_job_fence(db, *fence);
    record_blob(db, prepared);
    auto next = db.prepare("SELECT COALESCE(MAX(version), 0) + 1 FROM models WHERE name = ?");
    next.bind(1, name);
    next.step();
    version = static_cast<int>(next.int64(0));
    std::string now = sql::timestamp_now();
    db.prepare(
          "INSERT INTO models(name, version, created_at, run_id, blob, lineage_json, metrics_json) "
          "VALUES (?, ?, ?, ?, ?, ?, ?)")
        .bind(1, name).bind(2, static_cast<std::int64_t>(version)).bind(3, now).bind(4, run)
        .bind(5, prepared.hash).bind(6, lineage.dump()).bind(7, metrics.dump()).run();
    const std::int64_t model_id = db.last_insert_id();
    db.prepare(
          "UPDATE runs SET status = 'succeeded', ended_at = ?, error = NULL, summary_json = ? WHERE id = ?")
        .bind(1, now).bind(2, summary.dump()).bind(3, run).run();
    json detail = {{"run", run}, {"model", name + "@v" + std::to_string(version)},
                   {"model_id", model_id}, {"blob", prepared.hash}};
    if (fence) detail["job"] = fence->job;
    append_audit(store, "model.register", detail);
    fault_point("model.before-commit");
    txn.commit();
  }
  fault_point("model.committed");
  return find_model(store, ModelRef{name, version, std::nullopt});
}

ModelRecord find_model(Store& store, const ModelRef& ref) {
  if (ref.alias) {
    if (auto held = find_alias(store, ref.name, *ref.alias)) return *held;
    throw not_found("alias '" + ref.to_string() + "' is not set").with(Remedy::kListAliases);
  }
  sql::Database& db = store.db();
  std::string sql = std::string("SELECT ") + kModelColumns + " WHERE m.name = ? " +
                    (ref.version ? "AND m.version = ?" : "ORDER BY m.version DESC LIMIT 1");
  auto stmt = db.prepare(sql);
  stmt.bind(1, ref.name);
  if (ref.version) stmt.bind(2, static_cast<std::int64_t>(*ref.version));
  if (!stmt.step()) {
    auto any = db.prepare("SELECT 1 FROM models WHERE name = ?");
    any.bind(1, ref.name);
    if (!any.step()) throw not_found("no model named '" + ref.name + "'").with(Remedy::kListModels);
    throw not_found("model '" + ref.name + "' has no version v" + std::to_string(*ref.version));
  }
  return read_model_row(stmt);
}

std::vector<ModelRecord> list_models(Store& store) {
  auto stmt = store.db().prepare(std::string("SELECT ") + kModelColumns + " ORDER BY m.name, m.version");
  std::vector<ModelRecord> out;
  while (stmt.step()) out.push_back(read_model_row(stmt));
  return out;
}

std::string read_model(Store& store, const ModelRecord& model) {
  return read_blob(store.db(), store.objects(), model.blob, "model " + model.ref());
}

std::vector<RunArtifact> list_run_artifacts(Store& store) {
  std::vector<RunArtifact> out;
  auto models = store.db().prepare("SELECT name || '@v' || version, run_id, blob FROM models ORDER BY name, version");
  while (models.step())
    out.push_back({RunArtifact::Kind::kModel, "model " + models.text(0), models.int64(1), 0, models.text(2)});
  auto checkpoints = store.db().prepare("SELECT run_id, step, blob FROM checkpoints ORDER BY run_id, step");
  while (checkpoints.step())
    out.push_back({RunArtifact::Kind::kCheckpoint,
                   "run-" + std::to_string(checkpoints.int64(0)) + " checkpoint at step " +
                       std::to_string(checkpoints.int64(1)),
                   checkpoints.int64(0), checkpoints.int64(1), checkpoints.text(2)});
  return out;
}

std::string read_run_artifact(Store& store, const RunArtifact& artifact) {
  return read_blob(store.db(), store.objects(), artifact.blob, artifact.owner);
}

std::vector<StoredConfig> list_stored_configs(Store& store) {
  std::vector<StoredConfig> out;
  auto stmt = store.db().prepare(
      "SELECT 'run-' || id, config_text, 0 AS kind, id FROM runs "
      "UNION ALL SELECT 'job ' || id, config_text, 1 AS kind, id FROM jobs ORDER BY kind, id");
  while (stmt.step()) out.push_back({stmt.text(0), stmt.text(1)});
  return out;
}

FileLock try_lock_run(const Store& store, std::int64_t run) {
  return FileLock::try_lock(store.root() / "locks" / ("run-" + std::to_string(run) + ".lock"),
                            FileLock::Mode::kExclusive);
}

FileLock lock_run(const Store& store, std::int64_t run) {
  return FileLock(store.root() / "locks" / ("run-" + std::to_string(run) + ".lock"), FileLock::Mode::kExclusive);
}

}  // namespace anneal
