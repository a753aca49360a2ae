#include "anneal/encryption.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>

#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/fs.h"
#include "anneal/hash.h"
#include "anneal/object_store.h"
#include "anneal/store.h"
#include "audit_trail.h"
#include "sqlite.h"

namespace anneal {
namespace fs = std::filesystem;

namespace {

void ensure_sodium() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (sodium_init() < 0) throw failure("libsodium failed to initialize");
  });
}

constexpr char kCheckMessage[] = "anneal key check v1";
constexpr char kRecordMagic[] = "anneal-encryption 1";

std::string hex(const std::uint8_t* bytes, std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Parses exactly 2 * out.size() hex digits.
template <std::size_t N>
bool parse_hex(std::string_view text, std::array<std::uint8_t, N>& out) {
  if (text.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i) {
    int hi = hex_value(text[2 * i]), lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

KeyId id_of(const std::array<std::uint8_t, 32>& check) {
  KeyId id;
  std::memcpy(id.data(), check.data(), id.size());
  return id;
}

}  // namespace

StoreKey::StoreKey(const std::array<std::uint8_t, kSize>& bytes) : bytes_(bytes) {
  ensure_sodium();
  crypto_generichash(check_.data(), check_.size(), reinterpret_cast<const unsigned char*>(kCheckMessage),
                     sizeof(kCheckMessage) - 1, bytes_.data(), bytes_.size());
}

StoreKey::~StoreKey() { sodium_memzero(bytes_.data(), bytes_.size()); }

std::shared_ptr<const StoreKey> StoreKey::generate() {
  ensure_sodium();
  std::array<std::uint8_t, kSize> bytes;
  randombytes_buf(bytes.data(), bytes.size());
  auto key = std::make_shared<const StoreKey>(bytes);
  sodium_memzero(bytes.data(), bytes.size());
  return key;
}

KeyId StoreKey::id() const { return id_of(check_); }
std::string StoreKey::id_hex() const { return hex(check_.data(), 8); }

const StoreKey* KeyRing::find(const KeyId& id) const {
  for (const auto& key : read)
    if (key->id() == id) return key.get();
  return nullptr;
}

std::optional<KeySource> configured_key_source(const std::optional<fs::path>& key_file,
                                               std::string_view key_file_source) {
  if (key_file) return KeySource{*key_file, std::string(key_file_source)};
  if (const char* env = std::getenv("ANNEAL_KEY_FILE"); env && *env) return KeySource{env, "$ANNEAL_KEY_FILE"};
  // systemd's LoadCredential=anneal-key:PATH puts the key here, readable by
  // the service alone (packaging/systemd).
  if (const char* dir = std::getenv("CREDENTIALS_DIRECTORY"); dir && *dir) {
    fs::path path = fs::path(dir) / "anneal-key";
    std::error_code ec;
    if (fs::exists(path, ec)) return KeySource{path, "systemd credential anneal-key"};
  }
  return std::nullopt;
}

namespace {

// `path` absolute, with every symbolic link of the part that exists
// followed and the rest normalized (a directory not yet created holds no
// link).
fs::path resolved(const fs::path& path) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) absolute = path;
  // A link whose target does not exist yet is followed too (weakly_canonical
  // stops at it): the file would be created where it leads.
  for (int hops = 0; hops < 40 && fs::is_symlink(absolute, ec); ++hops) {
    const fs::path target = fs::read_symlink(absolute, ec);
    if (ec) break;
    absolute = target.is_absolute() ? target : absolute.parent_path() / target;
  }
  fs::path real = fs::weakly_canonical(absolute, ec);
  if (ec) real = absolute.lexically_normal();
  // "dir/" and "dir" are the same directory: compare without the empty
  // last component a trailing separator leaves.
  if (!real.has_filename() && real.has_parent_path() && real != real.root_path()) real = real.parent_path();
  return real;
}

// Whether `inner` is `outer` or lies under it (both resolved): compared
// component by component, so /data/store2 is not inside /data/store.
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i)
    if (i == inner.end() || *i != *o) return false;
  return true;
}

}  // namespace

void check_key_outside_store(const KeySource& key, const fs::path& store) {
  const fs::path real_key = resolved(key.path), real_store = resolved(store);
  if (within(real_key, real_store))
    throw usage_error(key.source + " " + key.path.string() + ": the key file lies inside the store (" +
                      real_store.string() + "); keep it outside: a copy of the store would carry its key, and "
                      "garbage collection deletes what lies in the store's tmp/");
}

std::shared_ptr<const StoreKey> read_key_file(const KeySource& key, const fs::path& store) {
  check_key_outside_store(key, store);
  const std::string where = "key file (" + key.source + ")";
  // A symbolic link is followed (secrets mounted by an orchestrator are
  // links); the checks below are of the file it leads to.
  int fd = ::open(key.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) throw not_found(where + ": does not exist");
  if (fd < 0) throw failure(where + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    throw failure(where + ": cannot stat: " + std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw failure(where + ": is not a regular file; expected a file holding 64 hex digits");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw failure(where + ": group or others may access it (mode " + mode +
                  "); a key file must be owner-only (chmod 600)");
  }
  std::string text = read_whole_file(fd, static_cast<std::uint64_t>(st.st_size), key.path);
  ::close(fd);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::array<std::uint8_t, StoreKey::kSize> bytes;
  const bool ok = parse_hex(text, bytes);
  sodium_memzero(text.data(), text.size());
  if (!ok)
    throw failure(where + ": expected 64 hex digits (32 bytes, e.g. from 'openssl rand -hex 32'), found " +
                  std::to_string(st.st_size) + " bytes of something else");
  auto out = std::make_shared<const StoreKey>(bytes);
  sodium_memzero(bytes.data(), bytes.size());
  return out;
}

std::shared_ptr<const StoreKey> create_key_file(const KeySource& source, const fs::path& store) {
  check_key_outside_store(source, store);
  const fs::path& path = source.path;
  auto key = StoreKey::generate();
  std::string text = hex(key->bytes(), StoreKey::kSize) + "\n";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw failure(errno_message(path, "cannot create the key file"));
  std::string_view rest = text;
  while (!rest.empty()) {
    ssize_t w = ::write(fd, rest.data(), rest.size());
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(path.c_str());
      sodium_memzero(text.data(), text.size());
      errno = error;
      throw failure(errno_message(path, "cannot write the key file"));
    }
    rest.remove_prefix(static_cast<std::size_t>(w));
  }
  sodium_memzero(text.data(), text.size());
  // The key must be on disk before any object is encrypted with it.
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    errno = error;
    throw failure(errno_message(path, "fsync failed"));
  }
  ::close(fd);
  sync_dir(path.has_parent_path() ? path.parent_path() : fs::path("."));
  return key;
}

fs::path encryption_record_path(const fs::path& root) { return root / "encryption"; }

std::optional<EncryptionRecord> read_encryption_record(const fs::path& root) {
  const fs::path path = encryption_record_path(root);
  std::string text;
  try {
    text = std::string(FileSnapshot(path).bytes());
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) return std::nullopt;
    throw;
  }
  EncryptionRecord record;
  std::istringstream lines(text);
  std::string line;
  bool magic = false, have_key = false;
  for (int n = 1; std::getline(lines, line); ++n) {
    auto bad = [&](const std::string& what) {
      return corrupt(path.string() + ":" + std::to_string(n) + ": " + what).with(Remedy::kCheckStore);
    };
    if (n == 1) {
      if (line != kRecordMagic) throw bad("expected '" + std::string(kRecordMagic) + "'");
      magic = true;
      continue;
    }
    std::istringstream words(line);
    std::string field, value;
    words >> field >> value;
    std::array<std::uint8_t, 32> check;
    if (!parse_hex(value, check)) throw bad("expected 'key' or 'retiring' and 64 hex digits");
    if (field == "key") {
      record.check = check;
      have_key = true;
    } else if (field == "retiring") {
      record.retiring = check;
    } else {
      throw bad("unknown field '" + field + "'");
    }
  }
  if (!magic || !have_key)
    throw corrupt(path.string() + ": incomplete: expected a 'key' line").with(Remedy::kCheckStore);
  return record;
}

void write_encryption_record(const fs::path& root, const EncryptionRecord& record) {
  std::string text = std::string(kRecordMagic) + "\nkey " + hex(record.check.data(), 32) + "\n";
  if (record.retiring) text += "retiring " + hex(record.retiring->data(), 32) + "\n";
  write_file_atomic(encryption_record_path(root), text, root / "tmp", /*replace=*/true);
}

std::shared_ptr<const KeyRing> open_store_keys(const fs::path& root, const std::optional<fs::path>& key_file,
                                               std::string_view key_file_source) {
  auto record = read_encryption_record(root);
  // --key-file on a store that is not encrypted: whoever typed it believes
  // it is, and would otherwise write plaintext unawares. ($ANNEAL_KEY_FILE
  // and the credential are settings of the environment, meant for whichever
  // store is encrypted, and are not held against a plaintext one.)
  if (!record && key_file)
    throw Error(ErrorKind::kUsage, Subject::kKeyFile, ": the store at " + root.string() + " is not encrypted",
                Remedy::kEncryptStore);
  if (!record) return nullptr;
  const std::string store = root.string();
  if (record->retiring)
    throw failure(store + ": a key rotation was interrupted").with(Remedy::kFinishRotation);
  auto source = configured_key_source(key_file, key_file_source);
  if (!source)
    throw failure(store + ": the store is encrypted").with(Remedy::kGiveKey);
  std::shared_ptr<const StoreKey> key;
  try {
    key = read_key_file(*source, root);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kUsage) throw;  // a key file inside the store: the flag's fault, exit 2
    throw failure(store + ": " + e.what());
  }
  if (sodium_memcmp(key->check().data(), record->check.data(), 32) != 0)
    throw failure(store + ": wrong key: the key file (" + source->source + ") holds key " + key->id_hex() +
                  ", the store is encrypted with key " + hex(record->check.data(), 8));
  auto ring = std::make_shared<KeyRing>();
  ring->write = key;
  ring->read.push_back(key);
  return ring;
}

std::string key_id_hex(const KeyId& id) { return hex(id.data(), id.size()); }

namespace {

// Rewrites every object under ring.write; `after_each` runs after each
// object rewritten (the caller's fault point, named literally there so the
// crash matrix finds it).
RewriteReport rewrite_all(const fs::path& root, std::shared_ptr<const KeyRing> ring, void (*after_each)()) {
  ObjectStore objects(root);
  objects.set_keys(std::move(ring));
  RewriteReport report;
  std::vector<std::string> ids = objects.list();
  std::sort(ids.begin(), ids.end());  // the same order on a rerun, for tests and for the reader of a log
  std::set<fs::path> dirs;
  for (const std::string& id : ids) {
    std::string problem;
    switch (objects.rewrite(id, problem)) {
      case ObjectStore::Rewrite::kAlready: ++report.already; break;
      case ObjectStore::Rewrite::kDamaged: report.damaged.push_back(id + ": " + problem); break;
      case ObjectStore::Rewrite::kRewritten:
        ++report.rewritten;
        dirs.insert(objects.path_of(id).parent_path());
        after_each();
        break;
    }
  }
  for (const fs::path& dir : dirs) sync_dir(dir);
  return report;
}

// The store's gc lock, exclusive: no import, training or gc writes objects
// while they are rewritten (Store::gc_lock(), taken without opening the
// store, since Store::open refuses a store whose rotation is unfinished).
FileLock exclusive_store_lock(const fs::path& root) {
  if (!fs::exists(root / "catalog.db"))
    throw not_found("no anneal store at " + root.string()).with(Remedy::kCreateStore);
  return FileLock(root / "locks" / "gc.lock", FileLock::Mode::kExclusive);
}

// Appends the audit record of an encrypt or rekey that has switched the
// store to `key`, in one catalog transaction with the check of what the
// chain last recorded. The switch (STORE/encryption) is a file and cannot
// commit with the catalog: a crash between the two leaves a store under a
// key the chain does not name, which verify_audit reports (unrecorded) and
// which this appends on the rerun. A rerun that rewrote nothing and finds
// its key recorded changed nothing, and records nothing. Only the key's
// check and id go in, never the key or where its file lies.
void record_key_switch(const fs::path& root, const StoreAccess& access, std::string_view action,
                       const StoreKey& key, const StoreKey* old_key, const RewriteReport& report) {
  Store store = Store::open_catalog(root, access);
  sql::Database& db = store.db();
  sql::Transaction tx(db);
  const std::string check = to_hex(key.check());
  if (report.rewritten == 0 && recorded_key_check(db) == check) return;
  nlohmann::json detail = {{"key_id", key.id_hex()},
                           {"key_check", check},
                           {"objects_rewritten", report.rewritten},
                           {"objects_already", report.already},
                           {"objects_damaged", report.damaged.size()}};
  if (old_key) {
    detail["old_key_id"] = old_key->id_hex();
    detail["old_key_check"] = to_hex(old_key->check());
  }
  append_audit(store, action, detail);
  tx.commit();
}

}  // namespace

RewriteReport encrypt_store(const fs::path& root, std::shared_ptr<const StoreKey> key, const StoreAccess& access) {
  FileLock lock = exclusive_store_lock(root);
  auto record = read_encryption_record(root);
  if (record && record->retiring)
    throw failure(root.string() + ": a key rotation was interrupted").with(Remedy::kFinishRotation);
  if (record && sodium_memcmp(record->check.data(), key->check().data(), 32) != 0)
    throw failure(root.string() + ": already encrypted with key " + hex(record->check.data(), 8) + ", not with key " +
                  key->id_hex())
        .with(Remedy::kRotateKey);
  // The record first: from here on every process needs the key, and
  // whatever is left plaintext by a crash still reads (and is finished by
  // the rerun).
  if (!record) write_encryption_record(root, EncryptionRecord{key->check(), std::nullopt});
  auto ring = std::make_shared<KeyRing>();
  ring->write = key;
  ring->read = {key};
  RewriteReport report = rewrite_all(root, ring, [] { fault_point("encrypt.object-rewritten"); });
  // Recorded once every object is under the key, with how many this run
  // rewrote: a run killed before here is recorded by its rerun.
  record_key_switch(root, access, "store.encrypt", *key, nullptr, report);
  return report;
}

RewriteReport rekey_store(const fs::path& root, std::shared_ptr<const StoreKey> old_key,
                          std::shared_ptr<const StoreKey> new_key, const StoreAccess& access) {
  FileLock lock = exclusive_store_lock(root);
  if (sodium_memcmp(old_key->check().data(), new_key->check().data(), 32) == 0)
    throw usage_error(Subject::kNewKeyFile, ": the new key is the old key (" + old_key->id_hex() + ")");
  auto record = read_encryption_record(root);
  if (!record) throw failure(root.string() + ": not encrypted").with(Remedy::kEncryptStore);
  auto same = [](const std::array<std::uint8_t, 32>& a, const StoreKey& k) {
    return sodium_memcmp(a.data(), k.check().data(), 32) == 0;
  };
  const bool fresh = same(record->check, *old_key) && !record->retiring;
  const bool resumed = same(record->check, *new_key) && (!record->retiring || same(*record->retiring, *old_key));
  if (!fresh && !resumed) {
    std::string expected = "key " + hex(record->check.data(), 8);
    if (record->retiring) expected = "key " + hex(record->retiring->data(), 8) + " (rotating to " + expected + ")";
    throw failure(root.string() + ": wrong key: the store is encrypted with " + expected + "; the old key given is " +
                  old_key->id_hex() + ", the new key " + new_key->id_hex());
  }
  // Both keys in the record while objects are under either: a crash leaves
  // a store that says so, and only a rerun with both keys opens it.
  if (fresh) write_encryption_record(root, EncryptionRecord{new_key->check(), old_key->check()});
  fault_point("rekey.record-written");
  auto ring = std::make_shared<KeyRing>();
  ring->write = new_key;
  ring->read = {new_key, old_key};
  RewriteReport report = rewrite_all(root, ring, [] { fault_point("rekey.object-rewritten"); });
  write_encryption_record(root, EncryptionRecord{new_key->check(), std::nullopt});
  // Switched to the new key, not yet recorded: the window record_key_switch
  // describes, where a test kills it.
  fault_point("rekey.key-switched");
  record_key_switch(root, access, "store.rekey", *new_key, old_key.get(), report);
  return report;
}

}  // namespace anneal
