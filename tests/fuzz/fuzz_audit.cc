// The audit trail's records as anneal reads them back from a catalog that
// anyone with write access to catalog.db may have edited: audit_log,
// verify_audit (with and without --expect-head) and the key check the last
// encrypt or rekey record names. Whatever the rows hold (any bytes, NUL
// and invalid UTF-8 included, a seq or hash of the wrong type, a detail
// that is not JSON), reading them returns or throws anneal::Error.
//
// The input is a list of records, each nine fields (seq, at, user, host,
// command, action, detail, prev_hash, hash), each field a type byte and a
// one-byte length before its bytes. The first byte picks the mode:
//   even: a count byte and a hash field for the head row, then the rows,
//         inserted as given (types too, where the table takes them);
//   odd:  the fields' text is kept and the chain made as anneal makes it
//         (seq 1..N, each prev_hash and hash computed), which must verify:
//         an encoding that two different records shared, or bytes a
//         column cannot hold back unchanged, would fail it.
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "anneal/audit.h"
#include "anneal/store.h"
#include "fuzz_target.h"
#include "sqlite.h"

namespace {

namespace fs = std::filesystem;

// One store for the whole run, removed at exit: creating a store per input
// (256 directories, the migrations) would cost more than the check.
class ScratchStore {
 public:
  ScratchStore() {
    std::string dir = (fs::temp_directory_path() / "anneal-fuzz-audit-XXXXXX").string();
    if (::mkdtemp(dir.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    root_ = fs::path(dir) / "store";
    anneal::Store::init(root_);
    store_.emplace(anneal::Store::open_catalog(root_));
  }
  ~ScratchStore() {
    store_.reset();
    std::error_code ec;
    fs::remove_all(root_.parent_path(), ec);
  }
  ScratchStore(const ScratchStore&) = delete;
  ScratchStore& operator=(const ScratchStore&) = delete;
  anneal::Store& store() { return *store_; }

 private:
  fs::path root_;
  std::optional<anneal::Store> store_;
};

// Reads the input front to back; past its end every field is empty.
class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::string bytes() {
    std::size_t n = byte();
    n = std::min(n, size_ - std::min(at_, size_));
    std::string out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

struct Field {
  std::uint8_t type;  // mod 3: 0 text, 1 integer (the bytes big-endian), 2 real
  std::string bytes;
};

void bind(anneal::sql::Statement& stmt, int index, const Field& f) {
  switch (f.type % 3) {
    case 1: {
      std::uint64_t v = 0;
      for (char c : f.bytes) v = v * 256 + static_cast<unsigned char>(c);
      stmt.bind(index, static_cast<std::int64_t>(v));
      return;
    }
    case 2: stmt.bind(index, static_cast<double>(f.bytes.size()) / 3.0); return;
    default: stmt.bind(index, f.bytes); return;
  }
}

void read_back(anneal::Store& store, const std::optional<std::string>& expect_head) {
  anneal::fuzz::expect_error_or_success([&] { (void)anneal::audit_log(store); });
  anneal::fuzz::expect_error_or_success([&] { (void)anneal::verify_audit(store); });
  if (expect_head) anneal::fuzz::expect_error_or_success([&] { (void)anneal::verify_audit(store, expect_head); });
  anneal::fuzz::expect_error_or_success([&] { (void)anneal::audit_recorded_key_check(store); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ScratchStore scratch;
  anneal::Store& store = scratch.store();
  anneal::sql::Database& db = store.db();
  Reader in(data, size);
  const bool chain = in.byte() % 2 == 1;
  // Raw mode: the head row's count and hash come before the records.
  const std::int64_t head_count = chain ? 0 : in.byte();
  const std::string head_hash = chain ? std::string() : in.bytes();
  std::vector<std::vector<Field>> records;
  while (!in.done() && records.size() < 64) {
    std::vector<Field> fields;
    for (int i = 0; i < 9; ++i) {
      Field f;
      f.type = in.byte();
      f.bytes = in.bytes();
      fields.push_back(std::move(f));
    }
    records.push_back(std::move(fields));
  }

  db.exec("DELETE FROM audit");
  if (!chain) {
    for (const auto& r : records) {
      try {
        auto stmt = db.prepare(
            "INSERT INTO audit(seq, at, user, host, command, action, detail, prev_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
        for (int i = 0; i < 9; ++i) bind(stmt, i + 1, r[static_cast<std::size_t>(i)]);
        stmt.run();
      } catch (const anneal::Error&) {
        // A row the table refuses (a duplicate or negative seq) is one an
        // editor could not have left either.
      }
    }
    db.prepare("UPDATE audit_head SET count = ?, hash = ? WHERE id = 1").bind(1, head_count).bind(2, head_hash).run();
    read_back(store, head_hash);
    return 0;
  }

  std::string prev = anneal::audit_genesis_hash();
  std::int64_t seq = 0;
  for (const auto& f : records) {
    anneal::AuditRecord r;
    r.seq = ++seq;
    r.at = f[1].bytes;
    r.user = f[2].bytes;
    r.host = f[3].bytes;
    r.command = f[4].bytes;
    r.action = f[5].bytes;
    r.detail = f[6].bytes;
    r.prev_hash = prev;
    r.hash = anneal::audit_record_hash(r);
    db.prepare(
          "INSERT INTO audit(seq, at, user, host, command, action, detail, prev_hash, hash) "
          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
        .bind(1, r.seq).bind(2, r.at).bind(3, r.user).bind(4, r.host).bind(5, r.command).bind(6, r.action)
        .bind(7, r.detail).bind(8, r.prev_hash).bind(9, r.hash).run();
    prev = r.hash;
  }
  db.prepare("UPDATE audit_head SET count = ?, hash = ? WHERE id = 1").bind(1, seq).bind(2, prev).run();
  const anneal::AuditVerdict verdict = anneal::verify_audit(store, prev);
  if (!verdict.ok() || verdict.records != seq) {
    std::fprintf(stderr, "a chain made as anneal makes it does not verify: %s\n", verdict.problem.c_str());
    std::abort();
  }
  const std::vector<anneal::AuditRecord> back = anneal::audit_log(store);
  for (std::size_t i = 0; i < back.size(); ++i)
    if (back[i].command != records[i][4].bytes || back[i].detail != records[i][6].bytes) {
      std::fprintf(stderr, "record %zu does not read back as written\n", i + 1);
      std::abort();
    }
  read_back(store, std::nullopt);
  return 0;
}
