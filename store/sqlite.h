// A thin RAII layer over the SQLite C API, for store/ only. Every failure
// throws anneal::Error carrying SQLite's message; SQLITE_BUSY past the busy
// timeout becomes kBusy.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace anneal::sql {

class Statement;

// Now, as the catalog writes every timestamp: ISO 8601 UTC, "2026-11-22T17:40:00Z".
std::string timestamp_now();

class Database {
 public:
  // Opens (creating when `create`) the database file; WAL journal, foreign
  // keys on, a busy timeout so concurrent writers queue instead of failing.
  Database(const std::filesystem::path& path, bool create);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(std::string_view sql);
  Statement prepare(std::string_view sql);
  std::int64_t last_insert_id() const;
  sqlite3* handle() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

// A prepared statement. Bind parameters are 1-based as in SQLite; columns are
// 0-based.
class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& operator=(Statement&&) = delete;

  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view value);
  Statement& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
  Statement& bind(int index, const std::string& value) { return bind(index, std::string_view(value)); }
  Statement& bind_null(int index);

  // Advances; true while a row is available.
  bool step();
  // Runs a statement that returns no rows.
  void run() { while (step()) {} }
  void reset();

  std::int64_t int64(int column) const;
  double real(int column) const;
  std::string text(int column) const;
  bool is_null(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE ... COMMIT; rolls back on destruction unless committed.
// IMMEDIATE takes the write lock up front, so two importers serialize on it
// rather than deadlocking on a read-to-write upgrade.
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Database& db_;
  bool done_ = false;
};

}  // namespace anneal::sql
