// ObjectStore: immutable, content-addressed, zstd-compressed objects.
//
// An object's id is the BLAKE2b-256 hex digest of its uncompressed bytes. It
// lives at objects/<first two hex digits>/<id> under the store root, written
// once through a temporary file, fsync and an atomic link into place; writing
// an object that already exists is a no-op. Every read decompresses and
// re-hashes, so a damaged object is always caught. In an encrypted store
// (set_keys) new objects are encrypted; the id stays the hash of the
// plaintext, so equal content is still stored once. docs/STORE.md gives the
// file formats. All methods are thread-safe; set_keys is called before any.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anneal {

struct KeyRing;

// An object hashed but not yet on disk. It views the caller's bytes, which
// must outlive it: callers hash everything first (to learn ids) and write
// only once the whole operation is known to succeed; what is already stored
// is decided by commit(), under the writer lock.
struct PreparedObject {
  std::string id;
  std::string_view raw;
};

// Decodes the bytes of one plaintext object file (header, then a zstd frame) into
// `raw`. Returns what is wrong with them, or nullopt when they decode to
// exactly the size the header records. The hash is not checked (the caller
// knows the id). Memory stays within what the frame can really expand to:
// a header claiming more than zstd's largest ratio allows is refused before
// allocating.
std::optional<std::string> decode_object_file(std::string_view file, std::string& raw);

class ObjectStore {
 public:
  // `root` is the store directory; objects/ and tmp/ must exist under it.
  // `level` is the zstd compression level for new objects. Level 1: on
  // numeric CSV it compresses as well as level 3 at three times the speed.
  explicit ObjectStore(std::filesystem::path root, int level = 1);
  ~ObjectStore();
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  // The keys to encrypt new objects with and to read encrypted ones with;
  // null (the default) for a store that is not encrypted. Plaintext objects
  // always read, so a store half way through `anneal encrypt` works.
  void set_keys(std::shared_ptr<const KeyRing> keys);
  bool encrypted() const;
  // Whether the object's file is encrypted (format version 2), by its
  // header alone; false when it is plaintext, missing or unreadable.
  bool stored_encrypted(const std::string& id) const;

  // Hashes `raw`; touches no file.
  PreparedObject prepare(std::string_view raw) const;
  // Writes every prepared object that is not stored intact, durably. The
  // caller holds Store::writer_lock(), so what exists cannot change under
  // it (gc waits): an object present and verifying is skipped, one missing
  // is written, one whose file is damaged is written again and replaces it.
  // Compresses into temporary files (in parallel on oneTBB), then on a pool
  // of I/O threads (they wait on the disk, not the CPU) fsyncs each, links
  // it into place and fsyncs every directory it touched. Returns the bytes
  // added to disk (0 for objects already there).
  std::uint64_t commit(const std::vector<const PreparedObject*>& objects) const;

  // prepare + commit for one object; returns its id.
  std::string put(std::string_view raw) const;

  // Reads and verifies an object. `owner` says what it belongs to ("dataset
  // iris@v2, source") and appears in the error when the object is missing
  // (kNotFound... reported as kCorrupt) or its hash does not match (kCorrupt).
  std::string get(const std::string& id, std::string_view owner) const;
  // get into `out`, which must be exactly the object's size (the catalog
  // knows it): decompressed in place and verified there, with no string in
  // between. The same errors as get, and kCorrupt when the object's size is
  // not out.size(); `out` then holds no meaningful bytes.
  void get_into(const std::string& id, std::string_view owner, std::span<char> out) const;

  // Re-reads an object and returns a description of what is wrong with it,
  // or nullopt when it is intact.
  std::optional<std::string> check(const std::string& id) const;

  bool contains(const std::string& id) const;
  // Size of the object's file on disk; 0 when absent.
  std::uint64_t stored_size(const std::string& id) const;
  // Ids of every object file present, in no particular order.
  std::vector<std::string> list() const;
  // Deletes an object file (gc only). Missing files are not an error.
  void remove(const std::string& id) const;

  std::filesystem::path path_of(const std::string& id) const;

  // For `anneal encrypt` and `anneal rekey`, under the gc lock: rewrites
  // the object `id` under the write key (atomically: a new file renamed
  // over the old) unless it is already encrypted with it. The directory is
  // not synced; the caller syncs each once. kDamaged (with `problem` set)
  // when the object fails verification: it is left as it is.
  enum class Rewrite { kRewritten, kAlready, kDamaged };
  Rewrite rewrite(const std::string& id, std::string& problem) const;

 private:
  // Throws when the store's encryption record no longer names the key this
  // process writes with (see commit).
  void check_key_current() const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anneal
