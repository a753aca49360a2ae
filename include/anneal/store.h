// Store: one anneal store on local disk, the SQLite catalog beside the object
// store. See docs/STORE.md for the layout.
//
//   STORE/catalog.db   SQLite (WAL): datasets, versions, streams, chunks
//   STORE/objects/     content-addressed objects (ObjectStore)
//   STORE/tmp/         in-flight writes; anything here is garbage once no
//                      anneal process holds STORE/locks/gc.lock
//   STORE/locks/       advisory lock files
//
// A Store is used by one thread at a time (it owns one SQLite connection);
// open one per thread or per process. Several processes may open the same
// store at once.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "anneal/audit.h"
#include "anneal/fs.h"
#include "anneal/object_store.h"

namespace anneal {

namespace sql {
class Database;
}

// Who opens a store, and with what: made once by whoever starts the process
// (cli/main.cc from its command line) and handed to every Store::open, so
// that the store knows nothing of flags and nothing process-wide is set.
struct StoreAccess {
  // Who the audit trail names for the changes made through this store. The
  // default: the effective user and host, no command line (code that is not
  // the CLI: the unit tests).
  AuditActor actor = current_user_actor();
  // --key-file: the key of an encrypted store. Without it the key comes
  // from $ANNEAL_KEY_FILE or the systemd credential (anneal/encryption.h);
  // with it, a store that is not encrypted is refused (kUsage).
  std::optional<std::filesystem::path> key_file;
  // How messages name key_file (KeySource::source): cli/ gives its flag
  // ("--key-file"); the default words serve code that is not the CLI.
  std::string key_file_source = "given key file";
};

class Store {
 public:
  // Creates a store at `root` (directories 0700, files 0600) or, when one is
  // already there, brings its catalog schema up to date. Returns true when it
  // created a new store.
  static bool init(const std::filesystem::path& root);

  // Opens an existing store, applying pending catalog migrations. Throws
  // kNotFound when `root` holds no store; for an encrypted store, the key
  // errors of open_store_keys (anneal/encryption.h) before anything is read.
  static Store open(const std::filesystem::path& root, const StoreAccess& access = StoreAccess{});
  // Opens the catalog alone, with no key: for what reads or appends to the
  // catalog and touches no object (audit log and verify, which so need no
  // key; encrypt and rekey recording their change, as access.actor). In an
  // encrypted store its objects() reads no encrypted object and writes none
  // (check_key_current).
  static Store open_catalog(const std::filesystem::path& root, const StoreAccess& access = StoreAccess{});

  ~Store();
  Store(Store&&) noexcept;
  Store& operator=(Store&&) = delete;

  const std::filesystem::path& root() const;
  // What it was opened with: the audit actor its changes are recorded as,
  // the --key-file (a worker hands both on to the stores it opens).
  const StoreAccess& access() const;
  const ObjectStore& objects() const;
  sql::Database& db();

  // Held (shared) by every writer of new objects from its first object write
  // until its catalog commit; gc takes it exclusively, so gc never removes an
  // object a concurrent import has written but not yet recorded.
  FileLock writer_lock() const;
  FileLock gc_lock() const;

  // The catalog schema version this binary writes.
  static int schema_version();

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace anneal
