// Encryption at rest: encrypted objects round-trip and keep their plaintext
// hash as their name; a changed byte anywhere, a wrong key or a file moved
// to another object's name is kCorrupt like a hash mismatch; key files and
// the store's record (docs/STORE.md, "Encryption").
#include "anneal/encryption.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "anneal/audit.h"
#include "anneal/error.h"
#include "anneal/hash.h"
#include "anneal/object_store.h"
#include "anneal/store.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const KeyRing> ring_of(std::shared_ptr<const StoreKey> write,
                                       std::vector<std::shared_ptr<const StoreKey>> read = {}) {
  auto ring = std::make_shared<KeyRing>();
  ring->write = write;
  ring->read = read.empty() ? std::vector<std::shared_ptr<const StoreKey>>{write} : read;
  return ring;
}

// Bytes zstd barely compresses, so an object spans several 64 KiB messages.
std::string noise(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

class EncryptedObjectsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() / "objects");
    fs::create_directories(dir_.path() / "tmp");
    write_encryption_record(dir_.path(), EncryptionRecord{key_->check(), std::nullopt});
    store_.set_keys(ring_of(key_));
  }
  test::TempDir dir_;
  std::shared_ptr<const StoreKey> key_ = StoreKey::generate();
  ObjectStore store_{dir_.path()};
};

TEST_F(EncryptedObjectsTest, RoundTripsUnderThePlaintextHash) {
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{65536}, std::size_t{300000}}) {
    std::string bytes = noise(size, static_cast<unsigned>(size));
    std::string id = store_.put(bytes);
    EXPECT_EQ(id, to_hex(hash_bytes(bytes)));
    EXPECT_EQ(store_.get(id, "test"), bytes);
    std::string out(bytes.size(), '\0');
    store_.get_into(id, "test", std::span<char>(out.data(), out.size()));
    EXPECT_EQ(out, bytes);
    EXPECT_FALSE(store_.check(id).has_value());
    const std::string file = test::read_file(store_.path_of(id));
    EXPECT_EQ(file[4], 2) << "format version 2: encrypted";
    // The same content again adds nothing: dedup by the plaintext hash.
    PreparedObject again = store_.prepare(bytes);
    EXPECT_EQ(store_.commit({&again}), 0u);
  }
}

TEST_F(EncryptedObjectsTest, FilesHoldNoPlaintext) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "distinctive-customer-name-" + std::to_string(i) + ",";
  std::string id = store_.put(text);
  const std::string file = test::read_file(store_.path_of(id));
  EXPECT_EQ(file.find("distinctive-customer-name"), std::string::npos);
  // Nor the zstd frame a plaintext object of the same text holds (zstd
  // codes literals, so the text alone could hide in a plaintext file too).
  fs::create_directories(dir_.path() / "plain" / "objects");
  fs::create_directories(dir_.path() / "plain" / "tmp");
  ObjectStore plain(dir_.path() / "plain");
  const std::string plain_file = test::read_file(plain.path_of(plain.put(text)));
  ASSERT_GT(plain_file.size(), 16u + 32u);
  EXPECT_EQ(file.find(plain_file.substr(16, 32)), std::string::npos);
  EXPECT_EQ(file.find(plain_file.substr(plain_file.size() - 32)), std::string::npos);
}

TEST_F(EncryptedObjectsTest, ChangedByteAnywhereIsCorruptLikeAHashMismatch) {
  std::string bytes = noise(150000, 7);
  std::string id = store_.put(bytes);
  const fs::path path = store_.path_of(id);
  const std::string original = test::read_file(path);
  for (std::size_t offset = 0; offset < original.size(); offset += std::max<std::size_t>(1, original.size() / 53)) {
    std::string damaged = original;
    damaged[offset] = static_cast<char>(damaged[offset] ^ 0x01);
    test::write_file(path, damaged);
    EXPECT_TRUE(store_.check(id).has_value()) << "flip at offset " << offset;
    try {
      store_.get(id, "dataset demo@v1, source");
      ADD_FAILURE() << "flip at offset " << offset << " was not caught";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt);
      EXPECT_NE(std::string(e.what()).find("demo@v1"), std::string::npos);
    }
  }
  // Truncated by one byte, and by a whole message.
  for (std::size_t cut : {std::size_t{1}, std::size_t{65536 + 17}}) {
    test::write_file(path, original.substr(0, original.size() - cut));
    EXPECT_TRUE(store_.check(id).has_value()) << "cut " << cut;
  }
  test::write_file(path, original);
  EXPECT_FALSE(store_.check(id).has_value());
}

TEST_F(EncryptedObjectsTest, AFileUnderAnotherObjectsNameDoesNotDecrypt) {
  std::string a = store_.put("object a");
  std::string b = store_.put("object b");
  test::write_file(store_.path_of(b), test::read_file(store_.path_of(a)));
  auto problem = store_.check(b);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("authentication failed"), std::string::npos) << *problem;
}

TEST_F(EncryptedObjectsTest, AnotherKeyCannotReadAndSaysWhichKeyItNeeds) {
  std::string id = store_.put("secret");
  ObjectStore other(dir_.path());
  auto stranger = StoreKey::generate();
  other.set_keys(ring_of(stranger));
  auto problem = other.check(id);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find(key_->id_hex()), std::string::npos) << *problem;
  EXPECT_THROW(other.get(id, "test"), Error);
  // Without keys: encrypted, nothing to read it with.
  ObjectStore none(dir_.path());
  EXPECT_NE(none.check(id)->find("no key"), std::string::npos);
  std::string raw;
  EXPECT_TRUE(decode_object_file(test::read_file(store_.path_of(id)), raw).has_value());
}

TEST_F(EncryptedObjectsTest, PlaintextObjectsStillReadInAnEncryptedStore) {
  ObjectStore plain(dir_.path());
  // As a store half way through `anneal encrypt`: written before the record.
  fs::remove(encryption_record_path(dir_.path()));
  std::string id = plain.put("written before encryption");
  write_encryption_record(dir_.path(), EncryptionRecord{key_->check(), std::nullopt});
  EXPECT_EQ(store_.get(id, "test"), "written before encryption");
  std::string problem;
  EXPECT_EQ(store_.rewrite(id, problem), ObjectStore::Rewrite::kRewritten);
  EXPECT_EQ(test::read_file(store_.path_of(id))[4], 2);
  EXPECT_EQ(store_.rewrite(id, problem), ObjectStore::Rewrite::kAlready);
  EXPECT_EQ(store_.get(id, "test"), "written before encryption");
  // Now a process that opened it as plaintext may not add objects.
  EXPECT_THROW(plain.put("late plaintext"), Error);
}

TEST_F(EncryptedObjectsTest, CommitRefusesAKeyTheRecordNoLongerNames) {
  auto next = StoreKey::generate();
  write_encryption_record(dir_.path(), EncryptionRecord{next->check(), std::nullopt});
  try {
    store_.put("after a rekey");
    ADD_FAILURE() << "a stale key wrote an object";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key was rotated"), std::string::npos) << e.what();
  }
}

class KeyFileTest : public ::testing::Test {
 protected:
  // The store the key files belong to; they lie beside it, in dir_.
  fs::path store() const { return dir_.path() / "store"; }
  test::TempDir dir_;
};

TEST_F(KeyFileTest, CreatedOwnerOnlyAndReadBack) {
  const fs::path path = dir_.path() / "key";
  auto key = create_key_file({path, "--key-file"}, store());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(test::read_file(path).size(), 65u);
  auto again = read_key_file({path, "--key-file"}, store());
  EXPECT_EQ(again->check(), key->check());
  EXPECT_THROW(create_key_file({path, "--key-file"}, store()), Error) << "an existing key file is never overwritten";
}

TEST_F(KeyFileTest, RefusesGroupOrWorldAccessBadContentAndMissingFiles) {
  const fs::path path = dir_.path() / "key";
  create_key_file({path, "--key-file"}, store());
  ::chmod(path.c_str(), 0644);
  try {
    read_key_file({path, "--key-file"}, store());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0644"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(path.string()), std::string::npos) << "no key path in messages";
  }
  ::chmod(path.c_str(), 0600);
  test::write_file(path, "not hex at all\n");
  ::chmod(path.c_str(), 0600);
  EXPECT_THROW(read_key_file({path, "--key-file"}, store()), Error);
  try {
    read_key_file({dir_.path() / "absent", "--key-file"}, store());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  }
}

TEST_F(KeyFileTest, RefusesAKeyFileInsideTheStore) {
  fs::create_directories(store() / "tmp");
  fs::create_directories(dir_.path() / "store2");
  fs::create_directory_symlink(store() / "tmp", dir_.path() / "link-to-tmp");
  fs::create_symlink(store() / "tmp" / "target.key", dir_.path() / "link.key");
  const std::vector<fs::path> inside = {
      store() / "tmp" / "store.key", store() / "key", store(), store() / "tmp" / ".." / "key",
      dir_.path() / "link-to-tmp" / "store.key",  // a directory that leads into the store
      dir_.path() / "link.key",                   // a file that does
      store() / "not-yet" / "key"};               // under a directory not yet made
  for (const fs::path& path : inside) {
    try {
      check_key_outside_store({path, "--key-file"}, store());
      ADD_FAILURE() << path << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
      EXPECT_TRUE(std::string(e.what()).starts_with("--key-file " + path.string() + ": ")) << e.what();
      EXPECT_NE(std::string(e.what()).find("inside the store"), std::string::npos) << e.what();
    }
    EXPECT_THROW(create_key_file({path, "--new-key-file"}, store()), Error) << path;
  }
  EXPECT_FALSE(fs::exists(store() / "tmp" / "store.key")) << "refused before anything was written";
  EXPECT_FALSE(fs::exists(store() / "key"));
  // Beside the store, in a sibling whose name starts with the store's, and
  // a store reached through a link of its own: all outside.
  check_key_outside_store({dir_.path() / "key", "--key-file"}, store());
  check_key_outside_store({dir_.path() / "store2" / "key", "--key-file"}, store());
  fs::create_directory_symlink(store(), dir_.path() / "store-link");
  check_key_outside_store({dir_.path() / "key", "--key-file"}, dir_.path() / "store-link");
  EXPECT_THROW(check_key_outside_store({store() / "tmp" / "k", "$ANNEAL_KEY_FILE"}, dir_.path() / "store-link"), Error);
}

TEST_F(KeyFileTest, StoreOpenChecksTheKeyBeforeAnythingElse) {
  const fs::path root = dir_.path() / "store";
  Store::init(root);
  auto key = create_key_file({dir_.path() / "key", "--key-file"}, store());
  encrypt_store(root, key, StoreAccess{});
  ::unsetenv("ANNEAL_KEY_FILE");
  ::unsetenv("CREDENTIALS_DIRECTORY");
  try {
    Store::open(root);
    ADD_FAILURE() << "opened without a key";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("encrypted"), std::string::npos) << e.what();
  }
  create_key_file({dir_.path() / "wrong", "--key-file"}, store());
  ::setenv("ANNEAL_KEY_FILE", (dir_.path() / "wrong").c_str(), 1);
  try {
    Store::open(root);
    ADD_FAILURE() << "opened with a wrong key";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFailure);
    EXPECT_NE(std::string(e.what()).find("wrong key"), std::string::npos) << e.what();
  }
  ::setenv("ANNEAL_KEY_FILE", (dir_.path() / "key").c_str(), 1);
  Store store = Store::open(root);
  std::string id = store.objects().put("through the store");
  EXPECT_EQ(test::read_file(store.objects().path_of(id))[4], 2);
  ::unsetenv("ANNEAL_KEY_FILE");
}

TEST_F(KeyFileTest, RekeyMovesEveryObjectToTheNewKey) {
  const fs::path root = dir_.path() / "store";
  Store::init(root);
  auto old_key = StoreKey::generate();
  encrypt_store(root, old_key, StoreAccess{});
  ObjectStore objects(root);
  objects.set_keys(ring_of(old_key));
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(objects.put("object " + std::to_string(i)));
  auto new_key = StoreKey::generate();
  RewriteReport r = rekey_store(root, old_key, new_key, StoreAccess{});
  EXPECT_EQ(r.rewritten, 5u);
  EXPECT_TRUE(r.damaged.empty());
  ObjectStore after(root);
  after.set_keys(ring_of(new_key));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(after.get(ids[i], "test"), "object " + std::to_string(i));
  EXPECT_TRUE(objects.check(ids[0]).has_value()) << "the old key reads nothing any more";
  auto record = read_encryption_record(root);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->check, new_key->check());
  EXPECT_FALSE(record->retiring);
  // Rerun: nothing left to do. The old key as the new one: refused.
  EXPECT_EQ(rekey_store(root, old_key, new_key, StoreAccess{}).rewritten, 0u);
  EXPECT_THROW(rekey_store(root, new_key, new_key, StoreAccess{}), Error);
  EXPECT_THROW(encrypt_store(root, old_key, StoreAccess{}), Error);
}

TEST_F(KeyFileTest, EncryptAndRekeyAreRecordedOnceAndAnUnrecordedSwitchIsNamed) {
  const fs::path root = dir_.path() / "store";
  Store::init(root);
  auto key = StoreKey::generate();
  auto count = [&](const std::string& action) {
    Store store = Store::open_catalog(root);
    std::size_t n = 0;
    for (const AuditRecord& r : audit_log(store)) n += r.action == action;
    return n;
  };
  encrypt_store(root, key, StoreAccess{});
  encrypt_store(root, key, StoreAccess{});  // nothing rewritten, the key recorded: nothing to record
  EXPECT_EQ(count("store.encrypt"), 1u);
  auto new_key = StoreKey::generate();
  rekey_store(root, key, new_key, StoreAccess{});
  rekey_store(root, key, new_key, StoreAccess{});
  EXPECT_EQ(count("store.rekey"), 1u);
  {
    Store store = Store::open_catalog(root);  // no key needed to audit
    EXPECT_EQ(audit_recorded_key_check(store), to_hex(new_key->check()));
    const AuditVerdict v = verify_audit(store);
    EXPECT_TRUE(v.ok()) << v.problem;
    EXPECT_EQ(v.unrecorded, "");
    const AuditRecord last = audit_log(store).back();
    std::array<std::uint8_t, 32> bytes;
    std::copy_n(new_key->bytes(), bytes.size(), bytes.begin());
    EXPECT_EQ(last.detail.find(to_hex(bytes)), std::string::npos) << "the key itself is never recorded";
    EXPECT_NE(last.detail.find("\"old_key_id\":\"" + key->id_hex() + "\""), std::string::npos) << last.detail;
  }
  // What a rekey killed between its final switch and its record leaves.
  auto third = StoreKey::generate();
  write_encryption_record(root, EncryptionRecord{third->check(), std::nullopt});
  {
    Store store = Store::open_catalog(root);
    const AuditVerdict v = verify_audit(store);
    EXPECT_TRUE(v.ok()) << "the chain itself is intact";
    EXPECT_NE(v.unrecorded.find("key " + third->id_hex()), std::string::npos) << v.unrecorded;
    EXPECT_NE(v.unrecorded.find("names key " + new_key->id_hex()), std::string::npos) << v.unrecorded;
  }
  // Mid-rotation (retiring = the recorded key): not yet a change to record.
  write_encryption_record(root, EncryptionRecord{third->check(), new_key->check()});
  {
    Store store = Store::open_catalog(root);
    EXPECT_EQ(verify_audit(store).unrecorded, "");
  }
  rekey_store(root, new_key, third, StoreAccess{});
  EXPECT_EQ(count("store.rekey"), 2u);
  Store store = Store::open_catalog(root);
  EXPECT_EQ(verify_audit(store).unrecorded, "");
}

}  // namespace
}  // namespace anneal
