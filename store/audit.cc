#include "anneal/audit.h"

#include <pwd.h>
#include <unistd.h>

#include <limits.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "anneal/encryption.h"
#include "anneal/error.h"
#include "anneal/hash.h"
#include "anneal/store.h"
#include "audit_trail.h"

namespace anneal {
namespace {

// Each field's length as 8 bytes, least significant first, then its bytes:
// no field's contents can be mistaken for a boundary.
void add_field(std::string& out, std::string_view field) {
  std::uint64_t n = field.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(field);
}

constexpr const char* kRecordColumns = "seq, at, user, host, command, action, detail, prev_hash, hash";

AuditRecord read_record(const sql::Statement& s) {
  return {s.int64(0), s.text(1), s.text(2), s.text(3), s.text(4), s.text(5), s.text(6), s.text(7), s.text(8)};
}

std::optional<AuditHead> read_head(sql::Database& db) {
  auto stmt = db.prepare("SELECT count, hash FROM audit_head WHERE id = 1");
  if (!stmt.step()) return std::nullopt;
  return AuditHead{stmt.int64(0), stmt.text(1)};
}

constexpr const char* kElided = "<elided>";

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// Whether a flag or config key names a secret: a key (--key-file, a
// config's encryption.key), a password or passphrase, a token, a credential.
bool names_secret(std::string_view name) {
  const std::string n = lower(name);
  for (const char* word : {"key", "password", "passphrase", "passwd", "secret", "token", "credential"})
    if (n.find(word) != std::string::npos) return true;
  return false;
}

// A config key such as encryption.key: what the left of KEY=VALUE is, as
// opposed to a path that happens to hold '='.
bool is_key_name(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == '-';
  }) && !text.starts_with("-");
}

// The word as a POSIX shell would read it back: quoted unless it is plain.
// An elided value stays visible as <elided>, outside the quotes.
std::string shell_word(std::string_view word) {
  if (word.ends_with(kElided)) {
    const std::string_view prefix = word.substr(0, word.size() - std::string_view(kElided).size());
    return (prefix.empty() ? std::string() : shell_word(prefix)) + kElided;
  }
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
    return std::isalnum(c) || std::string_view("_./:=@%+,-").find(static_cast<char>(c)) != std::string_view::npos;
  });
  if (plain) return std::string(word);
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// What the encryption record says that the chain does not (AuditVerdict::
// unrecorded), given the key check the chain last recorded.
std::string unrecorded_encryption(const std::filesystem::path& root, const std::string& recorded) {
  const std::optional<EncryptionRecord> record = read_encryption_record(root);
  auto id = [](const std::string& check) { return check.substr(0, 16); };
  const std::string remedy =
      ": an encryption or a key rotation was killed before it recorded its change, or ran before anneal "
      "recorded them; running it again with the store's key finishes and records it";
  if (!record) {
    if (recorded.empty()) return "";
    return "audit trail: the last store.encrypt or store.rekey record says the store is encrypted with key " +
           id(recorded) + ", yet " + encryption_record_path(root).string() +
           " is missing (the store's encryption record was removed without anneal)";
  }
  const std::string now = to_hex(record->check);
  if (recorded == now) return "";
  // A rotation not yet finished has not changed the key the store is under:
  // its record comes when it ends.
  if (record->retiring && recorded == to_hex(*record->retiring)) return "";
  return "audit trail: the store is encrypted with key " + id(now) + " (" + encryption_record_path(root).string() +
         "), but " +
         (recorded.empty() ? std::string("no store.encrypt or store.rekey record says so")
                           : "the last store.encrypt or store.rekey record names key " + id(recorded)) +
         remedy;
}

}  // namespace

AuditActor current_user_actor() {
  AuditActor actor;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw && pw->pw_name) actor.user = pw->pw_name;
  else actor.user = "uid " + std::to_string(::geteuid());
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) == 0) actor.host = host;
  else actor.host = "unknown";
  return actor;
}

std::string audit_command_line(const std::vector<std::string>& argv) {
  std::string out;
  bool elide_next = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string word = argv[i];
    if (i == 0) {
      word = std::filesystem::path(word).filename().string();
    } else if (elide_next) {
      word = kElided;
      elide_next = false;
    } else if (word.starts_with("--") && names_secret(word.substr(2, word.find('=') - 2))) {
      // --key-file=PATH or --key-file PATH: the value goes either way.
      if (const std::size_t eq = word.find('='); eq != std::string::npos) word = word.substr(0, eq + 1) + kElided;
      else elide_next = true;
    } else if (const std::size_t eq = word.find('=');
               eq != std::string::npos && eq > 0 && is_key_name(word.substr(0, eq)) &&
               names_secret(word.substr(0, eq))) {
      word = word.substr(0, eq + 1) + kElided;  // --set encryption.key=VALUE
    }
    if (!out.empty()) out += ' ';
    out += shell_word(word);
  }
  return out;
}

const std::string& audit_genesis_hash() {
  static const std::string zeros(64, '0');
  return zeros;
}

std::string audit_encoding(const AuditRecord& r) {
  std::string out = "anneal-audit-v1\n";
  add_field(out, std::to_string(r.seq));
  add_field(out, r.at);
  add_field(out, r.user);
  add_field(out, r.host);
  add_field(out, r.command);
  add_field(out, r.action);
  add_field(out, r.detail);
  add_field(out, r.prev_hash);
  return out;
}

std::string audit_record_hash(const AuditRecord& record) { return to_hex(hash_bytes(audit_encoding(record))); }

void append_audit(Store& store, std::string_view action, const nlohmann::json& detail) {
  sql::Database& db = store.db();
  std::optional<AuditHead> head = read_head(db);
  if (!head)
    throw corrupt("catalog: audit_head: the audit trail's head row is missing (deleted by hand?); no change "
                  "can be recorded until it is restored (docs/STORE.md, \"Audit trail\")");
  const AuditActor& actor = store.access().actor;
  AuditRecord r;
  r.seq = head->count + 1;
  r.at = sql::timestamp_now();
  r.user = actor.user;
  r.host = actor.host;
  r.command = actor.command;
  r.action = std::string(action);
  r.detail = detail.dump();
  r.prev_hash = head->hash;
  r.hash = audit_record_hash(r);
  db.prepare(std::string("INSERT INTO audit(") + kRecordColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
      .bind(1, r.seq).bind(2, r.at).bind(3, r.user).bind(4, r.host).bind(5, r.command).bind(6, r.action)
      .bind(7, r.detail).bind(8, r.prev_hash).bind(9, r.hash).run();
  db.prepare("UPDATE audit_head SET count = ?, hash = ? WHERE id = 1").bind(1, r.seq).bind(2, r.hash).run();
}

void record_audit_action(Store& store, std::string_view action, const nlohmann::json& detail) {
  sql::Transaction txn(store.db());
  append_audit(store, action, detail);
  txn.commit();
}

std::string recorded_key_check(sql::Database& db) {
  auto stmt = db.prepare(
      "SELECT detail FROM audit WHERE action IN ('store.encrypt', 'store.rekey') ORDER BY seq DESC LIMIT 1");
  if (!stmt.step()) return "";
  // A detail that does not parse was edited; the chain check names it.
  const nlohmann::json detail = nlohmann::json::parse(stmt.text(0), nullptr, /*allow_exceptions=*/false);
  if (!detail.is_object() || !detail.contains("key_check") || !detail["key_check"].is_string()) return "";
  return detail["key_check"].get<std::string>();
}

std::string audit_recorded_key_check(Store& store) { return recorded_key_check(store.db()); }

std::vector<AuditRecord> audit_log(Store& store) {
  auto stmt = store.db().prepare(std::string("SELECT ") + kRecordColumns + " FROM audit ORDER BY seq");
  std::vector<AuditRecord> out;
  while (stmt.step()) out.push_back(read_record(stmt));
  return out;
}

AuditVerdict verify_audit(Store& store, const std::optional<std::string>& expect_head) {
  sql::Database& db = store.db();
  AuditVerdict v;
  // One read transaction: the head and the records are one snapshot even
  // while other processes append.
  db.exec("BEGIN");
  struct EndRead {
    sql::Database& db;
    ~EndRead() {
      try {
        db.exec("COMMIT");
      } catch (...) {
        // A read transaction has nothing to lose; closing the connection ends it.
      }
    }
  } end_read{db};
  v.head = read_head(db);
  v.unrecorded = unrecorded_encryption(store.root(), recorded_key_check(db));
  auto fail = [&](std::optional<std::int64_t> seq, std::string problem) {
    v.bad_seq = seq;
    v.problem = std::move(problem);
    return v;
  };
  std::string prev = audit_genesis_hash();
  std::int64_t expected = 1;
  // The genesis hash is the head an empty chain prints, and every chain
  // starts from it (record 1's prev_hash): noted then, it is still there.
  bool expected_found = !expect_head || *expect_head == audit_genesis_hash();
  auto stmt = db.prepare(std::string("SELECT ") + kRecordColumns + " FROM audit ORDER BY seq");
  while (stmt.step()) {
    AuditRecord r = read_record(stmt);
    const std::string name = "audit record " + std::to_string(expected);
    if (r.seq != expected) {
      return fail(expected, name + " is missing: the records go from " + std::to_string(expected - 1) + " to " +
                                std::to_string(r.seq) + " (deleted, or renumbered)");
    }
    if (audit_record_hash(r) != r.hash)
      return fail(r.seq, name + ": its hash does not match its contents (the record was edited or moved)");
    if (r.prev_hash != prev)
      return fail(r.seq, name + ": it does not name the hash of record " + std::to_string(r.seq - 1) +
                             " (a record before it was edited, replaced or reordered)");
    if (expect_head && r.hash == *expect_head) expected_found = true;
    prev = r.hash;
    ++expected;
    ++v.records;
  }
  if (!v.head)
    return fail(std::nullopt, "audit head: the row holding the count and last hash of the chain is missing");
  if (v.head->count > v.records)
    return fail(v.records + 1, "audit record " + std::to_string(v.records + 1) + " is missing: the head says " +
                                   std::to_string(v.head->count) + " records, the chain ends at " +
                                   std::to_string(v.records) + " (records deleted from the end)");
  if (v.head->count < v.records)
    return fail(v.head->count + 1, "audit record " + std::to_string(v.head->count + 1) +
                                       ": the head says the chain ends before it (a record was added without "
                                       "anneal, or the head row was edited)");
  if (v.head->hash != prev)
    return fail(v.records == 0 ? std::nullopt : std::optional<std::int64_t>(v.records),
                "audit head: its hash " + v.head->hash + " is not that of the last record (" + prev + ")");
  if (!expected_found)
    return fail(std::nullopt, "audit chain: no record has the expected hash " + *expect_head +
                                  " (the chain was truncated or rewritten since that hash was noted)");
  return v;
}

}  // namespace anneal
