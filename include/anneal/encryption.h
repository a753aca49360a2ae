// Encryption at rest: the store key, where it comes from, and the store's
// record of which key it is encrypted with. docs/STORE.md ("Encryption")
// gives the formats; object_store.cc encrypts and decrypts the objects.
//
// A key is 32 random bytes, kept in a key file outside the store as 64 hex
// digits (and an optional newline). The store records only a check value
// derived from the key (BLAKE2b-256 keyed with it), never the key, so a
// wrong key is told apart from a damaged store before any object is read.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anneal {

struct StoreAccess;  // anneal/store.h

using KeyId = std::array<std::uint8_t, 8>;

// A key in memory, wiped when destroyed.
class StoreKey {
 public:
  static constexpr std::size_t kSize = 32;
  explicit StoreKey(const std::array<std::uint8_t, kSize>& bytes);
  ~StoreKey();
  StoreKey(const StoreKey&) = delete;
  StoreKey& operator=(const StoreKey&) = delete;

  static std::shared_ptr<const StoreKey> generate();

  const std::uint8_t* bytes() const { return bytes_.data(); }
  // BLAKE2b-256 keyed with the key over "anneal key check v1": stored in the
  // store; its first 8 bytes are the key id each object header carries.
  const std::array<std::uint8_t, 32>& check() const { return check_; }
  KeyId id() const;
  std::string id_hex() const;

 private:
  std::array<std::uint8_t, kSize> bytes_;
  std::array<std::uint8_t, 32> check_;
};

// The keys an ObjectStore works with: the one new objects are encrypted
// with (null: objects are written in plaintext) and every key an object
// may be read with. Immutable once built; shared between threads.
struct KeyRing {
  std::shared_ptr<const StoreKey> write;
  std::vector<std::shared_ptr<const StoreKey>> read;
  const StoreKey* find(const KeyId& id) const;
};

// Where a key comes from, in this order: --key-file (StoreAccess), else
// $ANNEAL_KEY_FILE, else the systemd credential $CREDENTIALS_DIRECTORY/
// anneal-key when that file exists. `source` names it in messages ("--key-
// file", "$ANNEAL_KEY_FILE", "systemd credential anneal-key") without the
// key file's path, so a message recorded somewhere (a job's error in the
// catalog) does not say where the key lies.
struct KeySource {
  std::filesystem::path path;
  std::string source;
};
// `key_file`: the file given, if any (--key-file in cli/), which messages
// name as `key_file_source` (the caller's name for it: cli/ passes its flag).
std::optional<KeySource> configured_key_source(const std::optional<std::filesystem::path>& key_file,
                                               std::string_view key_file_source);

// Refuses (kUsage, one line naming key.source and the path) a key file that
// lies inside the store at `store`: resolved with symbolic links followed
// (of the file and of every directory above it), it must not be the store
// or anything under it. A key beside the data it protects protects nothing
// (a copy or backup of the store carries it), and the store's tmp/ is
// emptied by gc, which would delete the only copy of the key. Every
// function below that takes a key path checks this first.
void check_key_outside_store(const KeySource& key, const std::filesystem::path& store);

// Reads the key file of the store at `store`, which must lie outside it
// (check_key_outside_store). It must be a regular file that neither group
// nor others may read or write (as ssh demands of a private key), holding
// 64 hex digits. kNotFound when it does not exist; kFailure for the rest,
// one line naming `source` and what was expected.
std::shared_ptr<const StoreKey> read_key_file(const KeySource& key, const std::filesystem::path& store);
// Writes a new random key to key.path, outside the store at `store` (mode
// 0600, created exclusively: an existing file is never overwritten) and
// returns it.
std::shared_ptr<const StoreKey> create_key_file(const KeySource& key, const std::filesystem::path& store);

std::string key_id_hex(const KeyId& id);

// STORE/encryption: whether the store is encrypted and with which key. A
// key rotation in progress also names the key being retired.
struct EncryptionRecord {
  std::array<std::uint8_t, 32> check{};
  std::optional<std::array<std::uint8_t, 32>> retiring;
};
std::filesystem::path encryption_record_path(const std::filesystem::path& root);
// nullopt when the store is not encrypted (no record); kCorrupt when the
// record cannot be parsed.
std::optional<EncryptionRecord> read_encryption_record(const std::filesystem::path& root);
// Replaces the record atomically and durably.
void write_encryption_record(const std::filesystem::path& root, const EncryptionRecord& record);

// What Store::open hands its ObjectStore: null for a store that is not
// encrypted; for an encrypted one, the configured key, checked against the
// record. A missing key, a wrong key and an unfinished rotation are each a
// one-line kFailure (exit 1) naming the store, before anything is read;
// A key file given (`key_file`, named `key_file_source` in messages) on a
// store that is not encrypted is kUsage.
std::shared_ptr<const KeyRing> open_store_keys(const std::filesystem::path& root,
                                               const std::optional<std::filesystem::path>& key_file,
                                               std::string_view key_file_source);

// `anneal encrypt` and `anneal rekey`: rewrite every object of the store at
// `root` under a new key, one at a time, each atomically (a temporary file
// renamed over the old one), under the store's gc lock (no import or gc runs
// meanwhile). The record is written first, so a crash leaves a store whose
// every object still reads (by its header: plaintext, or encrypted with a
// key the record names) and a rerun finishes the job.
struct RewriteReport {
  std::uint64_t rewritten = 0;  // objects encrypted (again) by this run
  std::uint64_t already = 0;    // objects already under the key
  std::vector<std::string> damaged;  // objects that failed verification: left as they are
};
// Encrypts a plaintext store (or finishes an interrupted encrypt) with
// `key`. kFailure when the store is encrypted with another key.
// The audit record goes in as `access.actor`.
RewriteReport encrypt_store(const std::filesystem::path& root, std::shared_ptr<const StoreKey> key,
                            const StoreAccess& access);
// Re-encrypts an encrypted store from `old_key` to `new_key` (or finishes an
// interrupted rotation between the same two keys).
RewriteReport rekey_store(const std::filesystem::path& root, std::shared_ptr<const StoreKey> old_key,
                          std::shared_ptr<const StoreKey> new_key, const StoreAccess& access);

}  // namespace anneal
