// init --encrypt, encrypt, rekey: encryption at rest (docs/STORE.md,
// "Encryption").
#include <iostream>

#include "anneal/encryption.h"
#include "anneal/error.h"
#include "anneal/store.h"
#include "command.h"
#include "output.h"

namespace anneal::cli {
namespace {

namespace fs = std::filesystem;

// The key a command encrypts with: read from where keys come from, or, when
// that names a file that does not exist yet, a new random key written there.
// A systemd credential is only ever read, and so is the key of a store
// already encrypted: a mistyped path must not leave a stray new key behind.
std::shared_ptr<const StoreKey> key_to_encrypt_with(const std::string& command, const GlobalOptions& global,
                                                    bool& created) {
  const fs::path& store = global.store;
  auto source = configured_key_source(global.access.key_file, global.access.key_file_source);
  if (!source)
    throw usage_error("anneal " + command + ": give the key file with --key-file FILE or $ANNEAL_KEY_FILE "
                      "(a new key is written there when FILE does not exist)");
  created = false;
  try {
    return read_key_file(*source, store);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound || source->source == "systemd credential anneal-key") throw;
    std::error_code ec;
    if (fs::exists(store / "catalog.db", ec) && read_encryption_record(store))
      throw failure(store.string() + ": already encrypted, and the " + e.what() +
                    "; give the store's key (a new one is written only for a store not yet encrypted)");
  }
  created = true;
  return create_key_file(*source, store);
}

void note_created(bool created, const StoreKey& key) {
  if (created)
    std::cerr << "note: wrote a new key (" << key.id_hex()
              << ") to the key file; keep a copy apart from the store: without it the store cannot be read\n";
}

// Prints the outcome of a rewrite; exit 1 when objects were damaged.
int report(const Invocation& inv, const char* verb, const StoreKey& key, const RewriteReport& r, bool created,
           nlohmann::json extra = nlohmann::json::object()) {
  if (inv.global.json) {
    extra["store"] = inv.global.store.string();
    extra["key_id"] = key.id_hex();
    extra["key_created"] = created;
    extra["objects_rewritten"] = r.rewritten;
    extra["objects_already"] = r.already;
    extra["damaged"] = r.damaged;
    print_json(extra);
  } else {
    std::cout << verb << " " << r.rewritten << " objects with key " << key.id_hex() << " (" << r.already
              << " were already)\n";
    for (const std::string& d : r.damaged) std::cout << "damaged, left as it is: " << terminal_text(d) << "\n";
  }
  if (r.damaged.empty()) return kExitOk;
  std::cerr << "anneal: " << r.damaged.size()
            << " damaged objects could not be encrypted; 'anneal fsck' lists what they belong to\n";
  return kExitFailure;
}

int run_encrypt(const Invocation& inv) {
  bool created = false;
  auto key = key_to_encrypt_with("encrypt", inv.global, created);
  note_created(created, *key);
  RewriteReport r = encrypt_store(inv.global.store, key, inv.global.access);
  return report(inv, "encrypted", *key, r, created);
}

int run_rekey(const Invocation& inv) {
  auto source = configured_key_source(inv.global.access.key_file, inv.global.access.key_file_source);
  if (!source)
    throw usage_error("anneal rekey: give the current key with --key-file FILE or $ANNEAL_KEY_FILE");
  auto old_key = read_key_file(*source, inv.global.store);
  const KeySource new_source{inv.args["new-key-file"].as<std::string>(), "--new-key-file"};
  std::shared_ptr<const StoreKey> new_key;
  bool created = false;
  try {
    new_key = read_key_file(new_source, inv.global.store);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound) throw;
    // Finishing an interrupted rotation needs the key it was rotating to,
    // which exists: a new one could never open the store, and would be a
    // stray secret left behind.
    if (auto record = read_encryption_record(inv.global.store); record && record->retiring)
      throw usage_error("--new-key-file " + new_source.path.string() +
                        ": no such file; a key rotation was interrupted, and finishing it takes the key file it "
                        "was rotating to");
    new_key = create_key_file(new_source, inv.global.store);
    created = true;
  }
  note_created(created, *new_key);
  RewriteReport r = rekey_store(inv.global.store, old_key, new_key, inv.global.access);
  if (!inv.global.json)
    std::cerr << "note: the store now needs the new key; the old key file is no longer needed by it\n";
  return report(inv, "re-encrypted", *new_key, r, created);
}

}  // namespace

unsigned outside_file_mode(const GlobalOptions& global) {
  const unsigned mode = 0666u & ~global.user_umask;
  return read_encryption_record(global.store) ? mode & 0600u : mode;
}

int run_init_encrypted(const Invocation& inv) {
  bool created_key = false;
  auto key = key_to_encrypt_with("init --encrypt", inv.global, created_key);
  note_created(created_key, *key);
  const bool created = Store::init(inv.global.store);
  RewriteReport r = encrypt_store(inv.global.store, key, inv.global.access);
  if (!inv.global.json && r.damaged.empty()) {
    if (created) std::cout << "created store " << terminal_text(inv.global.store.string()) << ", encrypted with key " << key->id_hex() << "\n";
    else std::cout << "store at " << terminal_text(inv.global.store.string()) << " is encrypted with key " << key->id_hex() << " ("
                   << r.rewritten << " objects encrypted now)\n";
    return kExitOk;
  }
  return report(inv, "encrypted", *key, r, created_key,
                {{"created", created}, {"schema_version", Store::schema_version()}, {"encrypted", true}});
}

void add_crypto_commands(std::vector<Command>& out) {
  out.push_back({"encrypt", "--key-file FILE",
                 "encrypt an existing store's objects with a key",
                 "Encrypts every object (XChaCha20-Poly1305) with the key in --key-file FILE (or "
                 "$ANNEAL_KEY_FILE); when FILE does not exist a new random key is written there. "
                 "From then on every command needs the key. Objects are rewritten one at a time, "
                 "each atomically, while imports and gc wait: after a crash the store still reads "
                 "and running encrypt again finishes the job. Catalog metadata (dataset, run and "
                 "model names, schemas, configs, metrics) stays unencrypted; see docs/STORE.md. Once "
                 "every object is encrypted it appends a store.encrypt audit record (the key's id, "
                 "never the key or its path).",
                 nullptr, {}, run_encrypt});
  out.push_back({"rekey", "--key-file OLD --new-key-file NEW",
                 "re-encrypt an encrypted store's objects with a new key",
                 "Re-encrypts every object from the key in --key-file (or $ANNEAL_KEY_FILE) to the "
                 "key in --new-key-file, written there when that file does not exist. Run it with "
                 "nothing else using the store. A crash leaves the store refusing other commands "
                 "until rekey is run again with the same two keys, which finishes it. After the "
                 "switch to the new key it appends a store.rekey audit record (both keys' ids).",
                 [](po::options_description& o) {
                   o.add_options()("new-key-file", po::value<std::string>()->required()->value_name("FILE"),
                                   "the new key (created when FILE does not exist)");
                 },
                 {}, run_rekey});
}

}  // namespace anneal::cli
