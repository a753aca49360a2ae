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
#include <mutex>
#include <optional>
#include <set>
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
  // Writes every prepared object that is not stored intact, durably: one
  // ObjectStaging's stage() and publish(). The caller holds
  // Store::writer_lock(). Returns the bytes added to disk (0 for objects
  // already there).
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
  friend class ObjectStaging;
  // Throws when the store's encryption record no longer names the key this
  // process writes with (see commit).
  void check_key_current() const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Objects on their way into the store, in two steps, so that an operation
// that writes as it reads (a streamed import) can write as it goes and
// still leave objects/ untouched when it fails half way:
//   stage()    compresses each object (in parallel on oneTBB) into its own
//              file in tmp/; nothing under objects/ changes;
//   publish()  on a pool of I/O threads (they wait on the disk, not the
//              CPU) fsyncs every staged file, links it into place and
//              fsyncs every directory it touched; returns the bytes added.
// Destroyed unpublished (an error, a refused input), the staging unlinks
// its files; a crash leaves them in tmp/, where gc removes them.
//
// What is stored is decided by stage(), under the caller's writer lock
// (Store::writer_lock(), held from the first stage() until the catalog
// commit that refers to the objects, so gc waits): an object present and
// verifying is skipped, one missing is staged, one whose file is damaged is
// staged again and replaces it at publish(); an object staged already (a
// chunk that occurs twice) is skipped. Memory: about 200 bytes per object
// staged, never its bytes.
//
// stage() is thread-safe (several stream builders stage into one staging
// at once); publish() is called once every stage() has returned. Each runs
// in parallel inside. The ObjectStore must outlive the staging.
class ObjectStaging {
 public:
  explicit ObjectStaging(const ObjectStore& store);
  ~ObjectStaging();
  ObjectStaging(const ObjectStaging&) = delete;
  ObjectStaging& operator=(const ObjectStaging&) = delete;

  // Stages every object of `objects` that is neither stored intact nor
  // staged already. The objects' bytes are read here and not kept. Throws on
  // a write error (the disk full: the message names the file) and when the
  // store's key changed since this process opened it; what was staged
  // before stays staged, what this call wrote is unlinked.
  void stage(const std::vector<const PreparedObject*>& objects);

  // Makes every staged object durable and puts it in place; an object a
  // concurrent writer put there first is kept as it is. Returns the bytes
  // added to disk. Called once; afterwards the staging is empty. On an
  // error the files not yet in place are unlinked.
  std::uint64_t publish();

 private:
  struct Staged;
  const ObjectStore* store_;
  std::string batch_;  // makes temporary names unique among writers
  std::mutex mutex_;  // guards what follows
  std::vector<Staged> staged_;
  std::set<std::string> ids_;  // staged, being staged, or found intact
  std::size_t files_named_ = 0;
  bool published_ = false;
};

}  // namespace anneal
