#include "sqlite.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <utility>

#include "anneal/error.h"

namespace anneal::sql {
namespace {

// The catalog file an I/O error of `db` is about. SQLite says only "disk
// I/O error" or "database or disk is full"; its extended code tells the
// shared-memory index (-shm: mapping or growing it) from the rest, which
// in WAL mode is the -wal journal a change is appended to or the database
// a checkpoint copies it into.
std::string failed_catalog_file(sqlite3* db, int rc) {
  const char* name = sqlite3_db_filename(db, "main");
  const std::string path = name && *name ? name : "catalog.db";
  switch (rc) {
    case SQLITE_IOERR_SHMOPEN:
    case SQLITE_IOERR_SHMSIZE:
    case SQLITE_IOERR_SHMLOCK:
    case SQLITE_IOERR_SHMMAP: return path + "-shm";
    default: return path + " (or its -wal journal)";
  }
}

// One line for a catalog operation that failed with `rc` (an extended
// code): a full disk or quota (SQLITE_FULL, or an I/O error whose errno is
// ENOSPC or EDQUOT) and any other I/O error name the catalog file and the
// cause, which SQLite's own message ("disk I/O error") names neither of;
// everything else is SQLite's message.
std::string catalog_message(sqlite3* db, int rc, std::string_view what, std::string_view sqlite_message) {
  const int primary = rc & 0xff;
  if (db && (primary == SQLITE_FULL || primary == SQLITE_IOERR)) {
    const int err = sqlite3_system_errno(db);
    const std::string file = failed_catalog_file(db, rc);
    if (err == EDQUOT)
      return file + ": cannot write the catalog: the disk quota is exceeded (" + std::strerror(err) +
             "); free space within the quota or raise it, then run the command again";
    if (primary == SQLITE_FULL || err == ENOSPC)
      return file + ": cannot write the catalog: the disk is full (" + std::strerror(ENOSPC) +
             "); free space on its file system, then run the command again";
    return file + ": catalog I/O error" + (err != 0 ? std::string(" (") + std::strerror(err) + ")" : std::string()) +
           " in " + std::string(what) + ": " + std::string(sqlite_message);
  }
  return "catalog: " + std::string(what) + ": " + std::string(sqlite_message);
}

[[noreturn]] void raise(sqlite3* db, int rc, std::string_view what) {
  std::string message = catalog_message(db, rc, what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
    throw busy(message + " (another anneal process holds the catalog)");
  throw failure(message);
}

}  // namespace

std::string timestamp_now() {
  auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Database::Database(const std::filesystem::path& path, bool create) {
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = path.string() + ": cannot open catalog: " +
                          (db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
    sqlite3_close(db_);
    db_ = nullptr;
    throw failure(message);
  }
  // A constructor that throws runs no destructor: a pragma that fails (a
  // full disk under the -shm index) must close the handle here, or a worker
  // that retries leaks a connection (about 100 KB) each time.
  try {
    sqlite3_extended_result_codes(db_, 1);
    // Concurrent importers and workers wait for each other's short write
    // transactions instead of failing.
    sqlite3_busy_timeout(db_, 60000);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");
    exec("PRAGMA foreign_keys=ON");
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
}

Database::~Database() { sqlite3_close_v2(db_); }

void Database::exec(std::string_view sql) {
  std::string text(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string message = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    if ((rc & 0xff) == SQLITE_BUSY) throw busy("catalog: " + message);
    const int primary = rc & 0xff;
    if (primary == SQLITE_FULL || primary == SQLITE_IOERR)
      throw failure(catalog_message(db_, sqlite3_extended_errcode(db_), text.substr(0, 60), message));
    throw failure("catalog: " + message);
  }
}

Statement Database::prepare(std::string_view sql) { return Statement(db_, sql); }

std::int64_t Database::last_insert_id() const { return sqlite3_last_insert_rowid(db_); }

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
  if (rc != SQLITE_OK) raise(db_, rc, "prepare '" + std::string(sql.substr(0, 60)) + "'");
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}

Statement& Statement::bind(int index, std::int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) raise(db_, rc, "bind");
  return *this;
}

Statement& Statement::bind(int index, double value) {
  int rc = sqlite3_bind_double(stmt_, index, value);
  if (rc != SQLITE_OK) raise(db_, rc, "bind");
  return *this;
}

Statement& Statement::bind(int index, std::string_view value) {
  int rc = sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                               SQLITE_UTF8);
  if (rc != SQLITE_OK) raise(db_, rc, "bind");
  return *this;
}

Statement& Statement::bind_null(int index) {
  int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) raise(db_, rc, "bind");
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  raise(db_, rc, "step");
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::int64_t Statement::int64(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::real(int column) const { return sqlite3_column_double(stmt_, column); }
std::string Statement::text(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column)))
           : std::string();
}
bool Statement::is_null(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!done_) {
    try {
      db_.exec("ROLLBACK");
    } catch (...) {
      // A failed rollback leaves SQLite to roll back when the connection
      // closes; there is nothing better to do in a destructor.
    }
  }
}

void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace anneal::sql
