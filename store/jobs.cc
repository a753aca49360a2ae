// Jobs, model aliases and retrains in the catalog (migration 3).
#include "anneal/catalog_jobs.h"

#include <cctype>
#include <chrono>
#include <cmath>

#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/hash.h"
#include "audit_trail.h"
#include "fence.h"
#include "sqlite.h"

namespace anneal {
namespace {

JobState job_state_from_text(const std::string& text, std::int64_t job) {
  for (JobState s : kAllJobStates)
    if (text == job_state_name(s)) return s;
  throw corrupt("catalog: job " + std::to_string(job) + " has unknown state '" + text + "'");
}

constexpr const char* kJobColumns =
    "j.id, j.name, j.config_text, j.config_source, j.priority, j.cores, j.timeout_s, j.state, j.attempts, "
    "j.max_attempts, j.cancel_requested, j.submitted, COALESCE(j.started, 0), COALESCE(j.ended, 0), "
    "j.not_before, COALESCE(j.worker, ''), COALESCE(j.lease_expires, 0), j.run_id, "
    "COALESCE((SELECT m.name || '@v' || m.version FROM models m WHERE m.id = j.model_id), ''), "
    "COALESCE(j.error, ''), j.claim, j.ranks, j.hostfile FROM jobs j";

JobRecord read_job(sql::Statement& row) {
  JobRecord j;
  j.id = row.int64(0);
  j.spec.name = row.text(1);
  j.spec.config_text = row.text(2);
  j.spec.config_source = row.text(3);
  j.spec.priority = row.int64(4);
  j.spec.cores = row.int64(5);
  if (!row.is_null(6)) j.spec.timeout_s = row.real(6);
  j.state = job_state_from_text(row.text(7), j.id);
  j.attempts = row.int64(8);
  j.max_attempts = row.int64(9);
  j.spec.retries = j.max_attempts - 1;
  j.cancel_requested = row.int64(10) != 0;
  j.submitted = row.real(11);
  j.started = row.real(12);
  j.ended = row.real(13);
  j.not_before = row.real(14);
  j.worker = row.text(15);
  j.lease_expires = row.real(16);
  if (!row.is_null(17)) j.run = row.int64(17);
  j.model = row.text(18);
  j.error = row.text(19);
  j.claim = row.int64(20);
  j.spec.ranks = row.int64(21);
  j.spec.hostfile = row.text(22);
  return j;
}

JobRecord job_in(sql::Database& db, std::int64_t job) {
  auto stmt = db.prepare(std::string("SELECT ") + kJobColumns + " WHERE j.id = ?");
  stmt.bind(1, job);
  if (!stmt.step()) throw not_found("no job job-" + std::to_string(job)).with(Remedy::kListJobs);
  return read_job(stmt);
}

std::optional<std::int64_t> model_id_of(sql::Database& db, const std::string& ref) {
  if (ref.empty()) return std::nullopt;
  const std::size_t at = ref.rfind("@v");
  auto stmt = db.prepare("SELECT id FROM models WHERE name = ? AND version = ?");
  stmt.bind(1, ref.substr(0, at)).bind(2, static_cast<std::int64_t>(std::stoll(ref.substr(at + 2))));
  if (!stmt.step()) throw not_found("no model " + ref);
  return stmt.int64(0);
}

std::optional<int> version_of_model_id(sql::Database& db, sql::Statement& row, int column) {
  if (row.is_null(column)) return std::nullopt;
  auto stmt = db.prepare("SELECT version FROM models WHERE id = ?");
  stmt.bind(1, row.int64(column));
  if (!stmt.step()) return std::nullopt;
  return static_cast<int>(stmt.int64(0));
}

ModelRecord model_by_id(Store& store, std::int64_t id) {
  auto stmt = store.db().prepare("SELECT name, version FROM models WHERE id = ?");
  stmt.bind(1, id);
  if (!stmt.step()) throw corrupt("catalog: alias points at missing model id " + std::to_string(id));
  return find_model(store, ModelRef{stmt.text(0), static_cast<int>(stmt.int64(1)), std::nullopt});
}

RetrainOutcome retrain_outcome_from_text(const std::string& text) {
  for (RetrainOutcome o : {RetrainOutcome::kTrained, RetrainOutcome::kPromoted, RetrainOutcome::kRefused,
                           RetrainOutcome::kSkipped, RetrainOutcome::kFailed})
    if (text == retrain_outcome_name(o)) return o;
  throw corrupt("catalog: unknown retrain outcome '" + text + "'");
}

constexpr const char* kRetrainColumns =
    "r.id, r.config, r.config_hash, r.dataset, r.outcome, r.started, r.ended, r.run_id, "
    "COALESCE((SELECT m.name || '@v' || m.version FROM models m WHERE m.id = r.model_id), ''), r.detail, r.gate, "
    "r.data_checks "
    "FROM retrains r";

// A JSON column's value (`column`: "gate", "data checks"); kCorrupt naming
// `what` when it does not parse.
nlohmann::json json_from_text(const std::string& text, const std::string& column, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw corrupt("catalog: the " + column + " of " + what + " is not JSON: " + e.what());
  }
}

RetrainRecord read_retrain(sql::Statement& row) {
  RetrainRecord r;
  r.id = row.int64(0);
  r.config = row.text(1);
  r.config_hash = row.text(2);
  r.dataset = row.text(3);
  r.outcome = retrain_outcome_from_text(row.text(4));
  r.started = row.real(5);
  r.ended = row.real(6);
  if (!row.is_null(7)) r.run = row.int64(7);
  r.model = row.text(8);
  r.detail = row.text(9);
  if (!row.is_null(10)) r.gate = json_from_text(row.text(10), "gate", "retrain " + std::to_string(r.id));
  if (!row.is_null(11)) r.data_checks = json_from_text(row.text(11), "data checks", "retrain " + std::to_string(r.id));
  return r;
}

// The retrains row and its audit record, inside the caller's transaction.
void insert_retrain(Store& store, const RetrainRecord& r) {
  sql::Database& db = store.db();
  auto stmt = db.prepare(
      "INSERT INTO retrains(config, config_hash, dataset, outcome, started, ended, run_id, model_id, detail, gate, "
      "data_checks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  stmt.bind(1, r.config).bind(2, r.config_hash).bind(3, r.dataset).bind(4, retrain_outcome_name(r.outcome))
      .bind(5, r.started).bind(6, r.ended);
  if (r.run) stmt.bind(7, *r.run);
  else stmt.bind_null(7);
  if (auto id = model_id_of(db, r.model)) stmt.bind(8, *id);
  else stmt.bind_null(8);
  stmt.bind(9, r.detail);
  if (r.gate.is_null()) stmt.bind_null(10);
  else stmt.bind(10, r.gate.dump());
  if (r.data_checks.is_null()) stmt.bind_null(11);
  else stmt.bind(11, r.data_checks.dump());
  stmt.run();
  nlohmann::json detail = {{"retrain", db.last_insert_id()}, {"config", r.config}, {"config_hash", r.config_hash},
                           {"outcome", retrain_outcome_name(r.outcome)}};
  detail["run"] = r.run ? nlohmann::json(*r.run) : nlohmann::json(nullptr);
  detail["model"] = r.model.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.model);
  append_audit(store, "retrain.record", detail);
}

}  // namespace

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* job_state_name(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "?";
}

std::int64_t parse_job_id(std::string_view text, std::string_view what) {
  std::string_view digits = text.starts_with("job-") ? text.substr(4) : text;
  std::int64_t id = 0;
  bool ok = !digits.empty() && digits.size() <= 18;
  for (char c : digits) {
    ok = ok && std::isdigit(static_cast<unsigned char>(c));
    if (ok) id = id * 10 + (c - '0');
  }
  if (!ok || id < 1)
    throw usage_error(std::string(what) + " '" + std::string(text) + "': expected a job id such as job-3");
  return id;
}

JobRecord submit_job(Store& store, const JobSpec& spec, double now) {
  if (spec.cores < 1) throw usage_error(Subject::kJobCores, "must be at least 1");
  if (spec.retries < 0) throw usage_error(Subject::kJobRetries, "must be at least 0");
  if (spec.timeout_s && !(*spec.timeout_s > 0)) throw usage_error(Subject::kJobTimeout, "must be positive");
  if (spec.ranks < 1 || spec.ranks > kMaxJobRanks)
    throw usage_error(Subject::kJobRanks, std::to_string(spec.ranks) + ": expected 1 to " +
                                              std::to_string(kMaxJobRanks) + " processes");
  if (!spec.hostfile.empty() && spec.ranks < 2)
    throw usage_error(Subject::kJobHostfile,
                      ": only for a job of 2 or more ranks (a job on one rank runs on the worker's host)");
  sql::Database& db = store.db();
  std::int64_t id = 0;
  {
    sql::Transaction txn(db);
    auto stmt = db.prepare(
        "INSERT INTO jobs(name, config_text, config_source, priority, cores, timeout_s, state, max_attempts, "
        "submitted, ranks, hostfile) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)");
    stmt.bind(1, spec.name).bind(2, spec.config_text).bind(3, spec.config_source).bind(4, spec.priority)
        .bind(5, spec.cores);
    if (spec.timeout_s) stmt.bind(6, *spec.timeout_s);
    else stmt.bind_null(6);
    stmt.bind(7, spec.retries + 1).bind(8, now).bind(9, spec.ranks).bind(10, spec.hostfile).run();
    id = db.last_insert_id();
    append_audit(store, "job.submit",
                 {{"job", id}, {"name", spec.name}, {"config_hash", to_hex(hash_bytes(spec.config_text))}});
    txn.commit();
  }
  return job_in(db, id);
}

JobRecord find_job(Store& store, std::int64_t job) { return job_in(store.db(), job); }

std::vector<JobRecord> list_jobs(Store& store) {
  auto stmt = store.db().prepare(std::string("SELECT ") + kJobColumns + " ORDER BY j.id");
  std::vector<JobRecord> out;
  while (stmt.step()) out.push_back(read_job(stmt));
  return out;
}

std::optional<JobRecord> claim_job(Store& store, const std::string& worker, std::int64_t max_cores, double now,
                                   double lease_s) {
  sql::Database& db = store.db();
  sql::Transaction txn(db);  // IMMEDIATE: two workers cannot both read the same candidate
  // A job cancelled while its worker died has nobody left to stop it.
  db.prepare("UPDATE jobs SET state = 'cancelled', ended = ?, worker = NULL WHERE state = 'running' AND "
             "cancel_requested = 1 AND lease_expires < ?")
      .bind(1, now).bind(2, now).run();
  auto pick = db.prepare(
      "SELECT id, state FROM jobs WHERE cores <= ? AND cancel_requested = 0 AND "
      "((state = 'queued' AND not_before <= ?) OR (state = 'running' AND lease_expires < ?)) "
      "ORDER BY priority DESC, id LIMIT 1");
  pick.bind(1, max_cores).bind(2, now).bind(3, now);
  if (!pick.step()) {
    txn.commit();  // keep the orphans closed above
    return std::nullopt;
  }
  const std::int64_t id = pick.int64(0);
  const bool taken_over = pick.text(1) == "running";
  if (taken_over) {
    // The attempt whose worker died counts: a job that kills its worker
    // every time (out of memory, say) must end, not be retried forever.
    const JobRecord dead = job_in(db, id);
    if (dead.attempts >= dead.max_attempts) {
      db.prepare("UPDATE jobs SET state = 'failed', worker = NULL, lease_expires = NULL, ended = ?, error = ? "
                 "WHERE id = ?")
          .bind(1, now)
          .bind(2, "its worker " + dead.worker + " stopped (killed, crashed or the machine restarted) during attempt " +
                       std::to_string(dead.attempts) + " of " + std::to_string(dead.max_attempts) +
                       remedy_text(Remedy::kRetryJob, dead.label()))
          .bind(3, id)
          .run();
      txn.commit();
      return claim_job(store, worker, max_cores, now, lease_s);  // the next candidate
    }
  }
  db.prepare("UPDATE jobs SET state = 'running', worker = ?, lease_expires = ?, error = NULL, "
             "attempts = attempts + 1, claim = claim + 1, started = ? WHERE id = ?")
      .bind(1, worker).bind(2, now + lease_s).bind(3, now).bind(4, id).run();
  JobRecord record = job_in(db, id);
  fault_point("job.claim.before-commit");
  txn.commit();
  fault_point("job.claimed");
  return record;
}

void require_job_fence(sql::Database& db, const JobFence& fence) {
  auto stmt = db.prepare("SELECT state = 'running' AND claim = ? FROM jobs WHERE id = ?");
  stmt.bind(1, fence.claim).bind(2, fence.job);
  if (!stmt.step() || stmt.int64(0) == 0)
    throw busy("job-" + std::to_string(fence.job) + ": this attempt lost its lease (its worker stopped renewing it "
               "and another worker took the job over); it records nothing more");
}

bool job_fence_holds(Store& store, const JobFence& fence) {
  auto stmt = store.db().prepare("SELECT state = 'running' AND claim = ? FROM jobs WHERE id = ?");
  stmt.bind(1, fence.claim).bind(2, fence.job);
  return stmt.step() && stmt.int64(0) != 0;
}

LeaseRenewal renew_leases(Store& store, const std::string& worker, const std::vector<JobFence>& held, double now,
                          double lease_s) {
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  LeaseRenewal renewal;
  auto renew = db.prepare("UPDATE jobs SET lease_expires = ? WHERE id = ? AND claim = ? AND state = 'running' AND worker = ?");
  auto cancel = db.prepare("SELECT cancel_requested FROM jobs WHERE id = ?");
  for (const JobFence& f : held) {
    renew.reset();
    renew.bind(1, now + lease_s).bind(2, f.job).bind(3, f.claim).bind(4, worker).run();
    if (sqlite3_changes(db.handle()) == 0) {
      renewal.lost.push_back(f.job);
      continue;
    }
    cancel.reset();
    cancel.bind(1, f.job);
    if (cancel.step() && cancel.int64(0) != 0) renewal.cancelled.push_back(f.job);
  }
  txn.commit();
  return renewal;
}

void set_job_run(Store& store, const JobFence& fence, std::int64_t run) {
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  require_job_fence(db, fence);
  db.prepare("UPDATE jobs SET run_id = ? WHERE id = ?").bind(1, run).bind(2, fence.job).run();
  txn.commit();
}

std::optional<JobState> finish_job(Store& store, const JobFence& fence, const std::string& worker, JobState outcome,
                                   const std::string& model, const std::string& error, double now,
                                   double backoff_s) {
  const std::int64_t job = fence.job;
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  JobRecord j = job_in(db, job);
  if (j.state != JobState::kRunning || j.worker != worker || j.claim != fence.claim) return std::nullopt;
  JobState next = outcome;
  if (outcome == JobState::kFailed && j.attempts < j.max_attempts && !j.cancel_requested) next = JobState::kQueued;
  auto stmt = db.prepare(
      "UPDATE jobs SET state = ?, worker = NULL, lease_expires = NULL, ended = ?, not_before = ?, model_id = ?, "
      "error = ? WHERE id = ?");
  stmt.bind(1, job_state_name(next)).bind(2, now).bind(3, next == JobState::kQueued ? now + backoff_s : 0.0);
  if (auto id = model_id_of(db, model)) stmt.bind(4, *id);
  else stmt.bind_null(4);
  if (error.empty()) stmt.bind_null(5);
  else stmt.bind(5, error);
  stmt.bind(6, job).run();
  txn.commit();
  return next;
}

void release_job(Store& store, const JobFence& fence, const std::string& worker) {
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  db.prepare(
        "UPDATE jobs SET state = 'queued', attempts = MAX(attempts - 1, 0), worker = NULL, lease_expires = NULL, "
        "not_before = 0 WHERE id = ? AND claim = ? AND state = 'running' AND worker = ?")
      .bind(1, fence.job).bind(2, fence.claim).bind(3, worker).run();
  txn.commit();
}

JobState cancel_job(Store& store, std::int64_t job, double now) {
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  JobRecord j = job_in(db, job);
  if (j.state == JobState::kQueued) {
    db.prepare("UPDATE jobs SET state = 'cancelled', ended = ?, cancel_requested = 1 WHERE id = ?")
        .bind(1, now).bind(2, job).run();
    append_audit(store, "job.cancel", {{"job", job}, {"was", "queued"}, {"state", "cancelled"}});
    txn.commit();
    return JobState::kCancelled;
  }
  if (j.state != JobState::kRunning)
    throw usage_error(j.label() + " already " + job_state_name(j.state) + "; nothing to cancel");
  db.prepare("UPDATE jobs SET cancel_requested = 1 WHERE id = ?").bind(1, job).run();
  append_audit(store, "job.cancel", {{"job", job}, {"was", "running"}, {"state", "cancel requested"}});
  txn.commit();
  return JobState::kRunning;
}

void retry_job(Store& store, std::int64_t job, double now) {
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  JobRecord j = job_in(db, job);
  if (j.state != JobState::kFailed && j.state != JobState::kCancelled)
    throw usage_error(j.label() + " is " + job_state_name(j.state) + "; only a failed or cancelled job can be retried");
  db.prepare(
        "UPDATE jobs SET state = 'queued', cancel_requested = 0, not_before = ?, ended = NULL, "
        "max_attempts = attempts + 1 WHERE id = ?")
      .bind(1, now).bind(2, job).run();
  append_audit(store, "job.retry", {{"job", job}, {"was", job_state_name(j.state)}, {"state", "queued"}});
  txn.commit();
}

// ---------------------------------------------------------------- aliases

void validate_alias_name(std::string_view alias) {
  bool ok = !alias.empty() && alias.size() <= 64 && std::isalpha(static_cast<unsigned char>(alias[0]));
  for (char c : alias)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  const bool version_like =
      alias == "latest" || (alias.size() >= 2 && alias[0] == 'v' && std::isdigit(static_cast<unsigned char>(alias[1])));
  if (!ok || version_like)
    throw usage_error("invalid alias '" + std::string(alias) +
                      "': expected 1-64 letters, digits, '.', '_' or '-', starting with a letter, and neither "
                      "'latest' nor vN");
}

void set_alias(Store& store, const ModelRecord& model, const std::string& alias, const std::string& action,
               const std::string& by, const std::string& reason, const nlohmann::json& gate,
               const RetrainRecord* retrain) {
  validate_alias_name(alias);
  sql::Database& db = store.db();
  sql::Transaction txn(db);
  auto previous = db.prepare("SELECT model_id FROM model_aliases WHERE name = ? AND alias = ?");
  previous.bind(1, model.name).bind(2, alias);
  const bool had = previous.step();
  const std::int64_t previous_id = had ? previous.int64(0) : 0;
  db.prepare(
        "INSERT INTO model_aliases(name, alias, model_id) VALUES (?, ?, ?) "
        "ON CONFLICT(name, alias) DO UPDATE SET model_id = excluded.model_id")
      .bind(1, model.name).bind(2, alias).bind(3, model.id).run();
  auto history = db.prepare(
      "INSERT INTO alias_history(name, alias, action, model_id, previous_model_id, at, by, reason, gate) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  history.bind(1, model.name).bind(2, alias).bind(3, action).bind(4, model.id);
  if (had) history.bind(5, previous_id);
  else history.bind_null(5);
  history.bind(6, sql::timestamp_now()).bind(7, by).bind(8, reason);
  if (gate.is_null()) history.bind_null(9);
  else history.bind(9, gate.dump());
  history.run();
  nlohmann::json detail = {{"name", model.name},          {"alias", alias},     {"action", action},
                           {"model", model.ref()},        {"model_id", model.id}, {"blob", model.blob},
                           {"history_id", db.last_insert_id()}};
  detail["previous_model_id"] = had ? nlohmann::json(previous_id) : nlohmann::json(nullptr);
  append_audit(store, "alias." + action, detail);
  // The retrain that moved the alias is recorded in the same transaction:
  // committed apart, a crash between the two left production moved with no
  // record, and the next `retrain --if-changed` trained again.
  if (retrain) insert_retrain(store, *retrain);
  fault_point("alias.before-commit");
  txn.commit();
  fault_point("alias.committed");
}

std::optional<ModelRecord> find_alias(Store& store, const std::string& name, const std::string& alias) {
  auto stmt = store.db().prepare("SELECT model_id FROM model_aliases WHERE name = ? AND alias = ?");
  stmt.bind(1, name).bind(2, alias);
  if (!stmt.step()) return std::nullopt;
  return model_by_id(store, stmt.int64(0));
}

std::vector<AliasRecord> list_aliases(Store& store) {
  auto stmt = store.db().prepare("SELECT name, alias, model_id FROM model_aliases ORDER BY name, alias");
  std::vector<std::pair<std::pair<std::string, std::string>, std::int64_t>> rows;
  while (stmt.step()) rows.push_back({{stmt.text(0), stmt.text(1)}, stmt.int64(2)});
  std::vector<AliasRecord> out;
  for (const auto& [key, id] : rows) out.push_back({key.first, key.second, model_by_id(store, id)});
  return out;
}

std::vector<AliasEvent> alias_history(Store& store, const std::string& name) {
  sql::Database& db = store.db();
  auto stmt = db.prepare(
      "SELECT name, alias, action, model_id, previous_model_id, at, by, reason, gate FROM alias_history "
      "WHERE name = ? ORDER BY id");
  stmt.bind(1, name);
  std::vector<AliasEvent> out;
  while (stmt.step()) {
    AliasEvent e;
    e.name = stmt.text(0);
    e.alias = stmt.text(1);
    e.action = stmt.text(2);
    e.version = version_of_model_id(db, stmt, 3);
    e.previous = version_of_model_id(db, stmt, 4);
    e.at = stmt.text(5);
    e.by = stmt.text(6);
    e.reason = stmt.text(7);
    if (!stmt.is_null(8)) e.gate = json_from_text(stmt.text(8), "gate", "an alias change of " + e.name + "@" + e.alias);
    out.push_back(e);
  }
  return out;
}

ModelRecord rollback_alias(Store& store, const std::string& name, const std::string& alias, const std::string& by,
                           const std::string& reason) {
  validate_alias_name(alias);
  std::int64_t previous_id = 0;
  {
    auto stmt = store.db().prepare(
        "SELECT previous_model_id FROM alias_history WHERE name = ? AND alias = ? ORDER BY id DESC LIMIT 1");
    stmt.bind(1, name).bind(2, alias);
    if (!stmt.step()) throw not_found("alias '" + name + "@" + alias + "' is not set");
    if (stmt.is_null(0))
      throw usage_error("cannot roll back " + name + "@" + alias + ": it had no holder before its last change");
    previous_id = stmt.int64(0);
  }
  ModelRecord previous = model_by_id(store, previous_id);
  set_alias(store, previous, alias, "rollback", by, reason);
  return previous;
}

// ---------------------------------------------------------------- retrains

const char* retrain_outcome_name(RetrainOutcome outcome) {
  switch (outcome) {
    case RetrainOutcome::kTrained: return "trained";
    case RetrainOutcome::kPromoted: return "promoted";
    case RetrainOutcome::kRefused: return "refused";
    case RetrainOutcome::kSkipped: return "skipped";
    case RetrainOutcome::kFailed: return "failed";
  }
  return "?";
}

void record_retrain(Store& store, const RetrainRecord& r) {
  sql::Transaction txn(store.db());
  insert_retrain(store, r);
  txn.commit();
}

std::optional<RetrainRecord> last_trained_retrain(Store& store, const std::string& config) {
  auto stmt = store.db().prepare(std::string("SELECT ") + kRetrainColumns +
                                 " WHERE r.config = ? AND r.outcome IN ('trained', 'promoted', 'refused') "
                                 "ORDER BY r.id DESC LIMIT 1");
  stmt.bind(1, config);
  if (!stmt.step()) return std::nullopt;
  return read_retrain(stmt);
}

std::vector<RetrainRecord> list_retrains(Store& store) {
  auto stmt = store.db().prepare(std::string("SELECT ") + kRetrainColumns + " ORDER BY r.id");
  std::vector<RetrainRecord> out;
  while (stmt.step()) out.push_back(read_retrain(stmt));
  return out;
}

}  // namespace anneal
