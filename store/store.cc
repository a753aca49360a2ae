#include "anneal/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "anneal/encryption.h"
#include "anneal/error.h"
#include "permissions.h"
#include "sqlite.h"

namespace anneal {
namespace fs = std::filesystem;

namespace {

// Forward-only catalog migrations. Migration i brings user_version from i to
// i + 1; each runs in its own transaction. Never edit a released migration:
// append a new one. docs/STORE.md documents the resulting schema.
const std::vector<const char*>& migrations() {
  static const std::vector<const char*> kMigrations = {
      // 1: datasets, their immutable versions and the chunked streams they own.
      R"sql(
      CREATE TABLE datasets (
        id          INTEGER PRIMARY KEY,
        name        TEXT NOT NULL UNIQUE,
        created_at  TEXT NOT NULL
      );
      CREATE TABLE dataset_versions (
        id           INTEGER PRIMARY KEY,
        dataset_id   INTEGER NOT NULL REFERENCES datasets(id),
        version      INTEGER NOT NULL CHECK (version >= 1),
        created_at   TEXT NOT NULL,
        fingerprint  TEXT NOT NULL,
        format       TEXT NOT NULL,
        rows         INTEGER NOT NULL,
        train_rows   INTEGER NOT NULL,
        test_rows    INTEGER NOT NULL,
        label_column TEXT NOT NULL,
        schema_json  TEXT NOT NULL,
        options_json TEXT NOT NULL,
        UNIQUE (dataset_id, version),
        UNIQUE (dataset_id, fingerprint)
      );
      CREATE TABLE blobs (
        hash  TEXT PRIMARY KEY,
        size  INTEGER NOT NULL
      ) WITHOUT ROWID;
      CREATE TABLE blob_chunks (
        blob    TEXT NOT NULL REFERENCES blobs(hash) ON DELETE CASCADE,
        seq     INTEGER NOT NULL,
        object  TEXT NOT NULL,
        length  INTEGER NOT NULL,
        PRIMARY KEY (blob, seq)
      ) WITHOUT ROWID;
      CREATE INDEX blob_chunks_by_object ON blob_chunks(object);
      CREATE TABLE dataset_streams (
        version_id  INTEGER NOT NULL REFERENCES dataset_versions(id),
        role        TEXT NOT NULL,
        blob        TEXT NOT NULL REFERENCES blobs(hash),
        file_name   TEXT,
        dtype       TEXT,
        shape       TEXT,
        PRIMARY KEY (version_id, role)
      );
      CREATE INDEX dataset_streams_by_blob ON dataset_streams(blob);
      -- Every owner of blobs; gc keeps exactly these. Later migrations that
      -- add owners (models, checkpoints) recreate this view.
      CREATE VIEW referenced_blobs AS SELECT blob FROM dataset_streams;
      )sql",
      // 2: training runs, their per-epoch metrics, checkpoints and the model
      // versions they register. Checkpoints and models own blobs, so the view
      // of referenced blobs now includes them.
      R"sql(
      CREATE TABLE runs (
        id                 INTEGER PRIMARY KEY,
        name               TEXT NOT NULL,
        dataset_version_id INTEGER NOT NULL REFERENCES dataset_versions(id),
        config_text        TEXT NOT NULL,
        status             TEXT NOT NULL
                           CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
        started_at         TEXT NOT NULL,
        ended_at           TEXT,
        host               TEXT NOT NULL,
        error              TEXT,
        summary_json       TEXT NOT NULL DEFAULT '{}'
      );
      CREATE TABLE run_metrics (
        run_id  INTEGER NOT NULL REFERENCES runs(id),
        epoch   INTEGER NOT NULL,
        name    TEXT NOT NULL,
        value   REAL,
        PRIMARY KEY (run_id, epoch, name)
      ) WITHOUT ROWID;
      CREATE TABLE checkpoints (
        id          INTEGER PRIMARY KEY,
        run_id      INTEGER NOT NULL REFERENCES runs(id),
        step        INTEGER NOT NULL,
        created_at  TEXT NOT NULL,
        blob        TEXT NOT NULL REFERENCES blobs(hash),
        score       REAL,
        UNIQUE (run_id, step)
      );
      CREATE INDEX checkpoints_by_blob ON checkpoints(blob);
      CREATE TABLE models (
        id            INTEGER PRIMARY KEY,
        name          TEXT NOT NULL,
        version       INTEGER NOT NULL CHECK (version >= 1),
        created_at    TEXT NOT NULL,
        run_id        INTEGER NOT NULL UNIQUE REFERENCES runs(id),
        blob          TEXT NOT NULL REFERENCES blobs(hash),
        lineage_json  TEXT NOT NULL,
        metrics_json  TEXT NOT NULL,
        UNIQUE (name, version)
      );
      CREATE INDEX models_by_blob ON models(blob);
      DROP VIEW referenced_blobs;
      CREATE VIEW referenced_blobs AS
        SELECT blob FROM dataset_streams
        UNION SELECT blob FROM checkpoints
        UNION SELECT blob FROM models;
      )sql",
      // 3: the job queue, model aliases with their history, and the record of
      // nightly retrains. None of them owns blobs.
      R"sql(
      CREATE TABLE jobs (
        id               INTEGER PRIMARY KEY,
        name             TEXT NOT NULL,
        config_text      TEXT NOT NULL,
        config_source    TEXT NOT NULL,
        priority         INTEGER NOT NULL,
        cores            INTEGER NOT NULL CHECK (cores >= 1),
        timeout_s        REAL,
        state            TEXT NOT NULL
                         CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
        attempts         INTEGER NOT NULL DEFAULT 0,
        max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        submitted        REAL NOT NULL,
        started          REAL,
        ended            REAL,
        not_before       REAL NOT NULL DEFAULT 0,
        worker           TEXT,
        lease_expires    REAL,
        run_id           INTEGER REFERENCES runs(id),
        model_id         INTEGER REFERENCES models(id),
        error            TEXT
      );
      CREATE INDEX jobs_by_state ON jobs(state, priority, id);
      CREATE TABLE model_aliases (
        name      TEXT NOT NULL,
        alias     TEXT NOT NULL,
        model_id  INTEGER NOT NULL REFERENCES models(id),
        PRIMARY KEY (name, alias)
      );
      CREATE TABLE alias_history (
        id                 INTEGER PRIMARY KEY,
        name               TEXT NOT NULL,
        alias              TEXT NOT NULL,
        action             TEXT NOT NULL,
        model_id           INTEGER REFERENCES models(id),
        previous_model_id  INTEGER REFERENCES models(id),
        at                 TEXT NOT NULL,
        by                 TEXT NOT NULL,
        reason             TEXT NOT NULL
      );
      CREATE TABLE retrains (
        id           INTEGER PRIMARY KEY,
        config       TEXT NOT NULL,
        config_hash  TEXT NOT NULL,
        dataset      TEXT NOT NULL,
        outcome      TEXT NOT NULL
                     CHECK (outcome IN ('trained', 'promoted', 'refused', 'skipped', 'failed')),
        started      REAL NOT NULL,
        ended        REAL NOT NULL,
        run_id       INTEGER REFERENCES runs(id),
        model_id     INTEGER REFERENCES models(id),
        detail       TEXT NOT NULL
      );
      CREATE INDEX retrains_by_config ON retrains(config, id);
      )sql",
      // 4: the claim generation of each job, the fencing token of its
      // attempts: every claim (a takeover too) increments it, and a write
      // made on behalf of an attempt checks it in its own transaction.
      R"sql(
      ALTER TABLE jobs ADD COLUMN claim INTEGER NOT NULL DEFAULT 0;
      )sql",
      // 5: what a promotion gate compared (its JSON object: both scores,
      // the rows they were measured on, the decision), on the alias move it
      // allowed and on the retrain it decided; NULL where there was none.
      R"sql(
      ALTER TABLE alias_history ADD COLUMN gate TEXT;
      ALTER TABLE retrains ADD COLUMN gate TEXT;
      )sql",
      // 6: distributed jobs: how many ranks the worker starts the job on
      // through mpirun (1: a plain child process) and the hostfile it gives
      // mpirun ('' for none).
      R"sql(
      ALTER TABLE jobs ADD COLUMN ranks INTEGER NOT NULL DEFAULT 1 CHECK (ranks >= 1);
      ALTER TABLE jobs ADD COLUMN hostfile TEXT NOT NULL DEFAULT '';
      )sql",
      // 7: the audit trail (anneal/audit.h): one hash-chained record per
      // change, and its head (count and last hash), updated in the same
      // transaction, so a record deleted from the end is detected. A store
      // upgraded to this version starts an empty chain.
      R"sql(
      CREATE TABLE audit (
        seq        INTEGER PRIMARY KEY CHECK (seq >= 1),
        at         TEXT NOT NULL,
        user       TEXT NOT NULL,
        host       TEXT NOT NULL,
        command    TEXT NOT NULL,
        action     TEXT NOT NULL,
        detail     TEXT NOT NULL,
        prev_hash  TEXT NOT NULL,
        hash       TEXT NOT NULL
      );
      CREATE TABLE audit_head (
        id     INTEGER PRIMARY KEY CHECK (id = 1),
        count  INTEGER NOT NULL,
        hash   TEXT NOT NULL
      );
      INSERT INTO audit_head(id, count, hash)
        VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');
      )sql",
      // 8: the data checks a retrain ran before it promoted (its JSON
      // report, anneal/data_check.h), NULL where none ran.
      R"sql(
      ALTER TABLE retrains ADD COLUMN data_checks TEXT;
      )sql",
  };
  return kMigrations;
}

void migrate(sql::Database& db, const fs::path& root) {
  for (;;) {
    sql::Transaction txn(db);
    auto stmt = db.prepare("PRAGMA user_version");
    stmt.step();
    int current = static_cast<int>(stmt.int64(0));
    int latest = static_cast<int>(migrations().size());
    if (current > latest)
      throw failure((root / "catalog.db").string() + ": catalog schema version " +
                    std::to_string(current) + " is newer than this anneal understands (" +
                    std::to_string(latest) + "); upgrade anneal");
    if (current == latest) return;  // the transaction rolls back: nothing was changed
    db.exec(migrations()[static_cast<std::size_t>(current)]);
    db.exec("PRAGMA user_version = " + std::to_string(current + 1));
    txn.commit();
  }
}

void create_private_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw failure(errno_message(path, "cannot create"));
  ::close(fd);
}

// Makes an existing directory or file of the store owner-only: clears the
// group and other permission bits. Refuses one owned by another user, whose
// mode this process cannot (and should not) change.
void restrict_to_owner(const fs::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) throw failure(errno_message(path, "cannot stat"));
  if (st.st_uid != ::geteuid())
    throw usage_error(path.string() + " belongs to user id " + std::to_string(st.st_uid) +
                      ", not to you; a store must be owned by the user that runs anneal");
  if ((st.st_mode & 077) != 0 && ::chmod(path.c_str(), st.st_mode & 0700) != 0)
    throw failure(errno_message(path, "cannot make it owner-only"));
}

}  // namespace

struct Store::Impl {
  Impl(fs::path r, bool create, StoreAccess a)
      : root(std::move(r)), access(std::move(a)), db(root / "catalog.db", create), objects(root) {}
  fs::path root;
  StoreAccess access;
  sql::Database db;
  ObjectStore objects;
};

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;
Store::Store(Store&&) noexcept = default;

int Store::schema_version() { return static_cast<int>(migrations().size()); }

bool Store::init(const fs::path& root) {
  bool existed = fs::exists(root / "catalog.db");
  std::error_code ec;
  if (!existed && fs::exists(root, ec)) {
    // A directory that is not a store yet: only an empty one becomes one,
    // because init makes it owner-only, and doing that to a directory
    // holding other things (a home directory given by mistake) would lock
    // others out of them.
    if (!fs::is_directory(root, ec))
      throw usage_error(root.string() + " exists and is not a directory; a store is created only in a new or empty directory");
    if (!fs::is_empty(root, ec))
      throw usage_error(root.string() + " is not empty and holds no store; a store is created only in a new or "
                        "empty directory, because it is made owner-only (0700)");
  }
  // An existing store another user owns is refused before anything in it
  // is touched (the catalog migrated, directories made), as every command
  // refuses it; modes that are too open are what init tightens below.
  if (existed) check_store_permissions(root, /*owner_only=*/true);
  make_private_dir(root);
  for (const char* sub : {"objects", "tmp", "locks"}) make_private_dir(root / sub);
  // All 256 fan-out directories up front, as restic does: a store is
  // long-lived, and creating them lazily costs the first imports a mkdir each.
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 256; ++i) make_private_dir(root / "objects" / std::string{kHex[i >> 4], kHex[i & 15]});
  // SQLite gives its -wal and -shm files the permissions of the database
  // file, so creating that 0600 first keeps the whole catalog owner-only.
  if (!existed) create_private_file(root / "catalog.db");
  Impl impl(root, /*create=*/true, StoreAccess{});
  migrate(impl.db, root);
  // Owner-only, however the directory came to be (made by hand with 0755,
  // or a store from before this rule): the store holds the business's data.
  restrict_to_owner(root);
  for (const char* sub : {"objects", "tmp", "locks", "logs"})
    if (fs::exists(root / sub, ec)) restrict_to_owner(root / sub);
  for (const char* file : {"catalog.db", "catalog.db-wal", "catalog.db-shm"})
    if (fs::exists(root / file, ec)) restrict_to_owner(root / file);
  sync_dir(root);
  return !existed;
}

Store Store::open(const fs::path& root, const StoreAccess& access) {
  if (!fs::exists(root / "catalog.db"))
    throw not_found("no anneal store at " + root.string()).with(Remedy::kCreateStore);
  // Before anything is opened or created: a store another user owns or
  // others may write is not used (docs/STORE.md, "Permissions").
  check_store_permissions(root);
  for (const char* sub : {"objects", "tmp", "locks"}) make_private_dir(root / sub);
  // The key first: a missing or wrong one fails before anything is changed.
  auto keys = open_store_keys(root, access.key_file, access.key_file_source);
  auto impl = std::make_unique<Impl>(root, /*create=*/false, access);
  impl->objects.set_keys(std::move(keys));
  migrate(impl->db, root);
  return Store(std::move(impl));
}

Store Store::open_catalog(const fs::path& root, const StoreAccess& access) {
  if (!fs::exists(root / "catalog.db"))
    throw not_found("no anneal store at " + root.string()).with(Remedy::kCreateStore);
  // Before anything is opened or created: a store another user owns or
  // others may write is not used (docs/STORE.md, "Permissions").
  check_store_permissions(root);
  for (const char* sub : {"objects", "tmp", "locks"}) make_private_dir(root / sub);
  auto impl = std::make_unique<Impl>(root, /*create=*/false, access);
  migrate(impl->db, root);
  return Store(std::move(impl));
}

const fs::path& Store::root() const { return impl_->root; }
const StoreAccess& Store::access() const { return impl_->access; }
const ObjectStore& Store::objects() const { return impl_->objects; }
sql::Database& Store::db() { return impl_->db; }

FileLock Store::writer_lock() const {
  return FileLock(impl_->root / "locks" / "gc.lock", FileLock::Mode::kShared);
}

FileLock Store::gc_lock() const {
  return FileLock(impl_->root / "locks" / "gc.lock", FileLock::Mode::kExclusive);
}

}  // namespace anneal
