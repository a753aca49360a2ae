#include "anneal/object_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "anneal/error.h"
#include "anneal/hash.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;

class ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.path() / "objects");
    fs::create_directories(dir_.path() / "tmp");
  }
  test::TempDir dir_;
  ObjectStore store_{dir_.path()};
};

TEST_F(ObjectStoreTest, RoundTripsAndNamesObjectsByContentHash) {
  std::string bytes(100000, 'x');
  std::string id = store_.put(bytes);
  EXPECT_EQ(id, to_hex(hash_bytes(bytes)));
  EXPECT_TRUE(store_.contains(id));
  EXPECT_EQ(store_.get(id, "test"), bytes);
  // Compressed: 100000 identical bytes take far less space.
  EXPECT_LT(store_.stored_size(id), 1000u);
  EXPECT_TRUE(fs::is_empty(dir_.path() / "tmp"));
}

TEST_F(ObjectStoreTest, FilesAreOwnerOnly) {
  std::string id = store_.put("private");
  struct stat st;
  ASSERT_EQ(::stat(store_.path_of(id).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(ObjectStoreTest, WritingAnExistingObjectIsANoOp) {
  std::string id = store_.put("same bytes");
  auto before = fs::last_write_time(store_.path_of(id));
  PreparedObject again = store_.prepare("same bytes");
  EXPECT_EQ(store_.commit({&again}), 0u);
  EXPECT_EQ(fs::last_write_time(store_.path_of(id)), before);
  EXPECT_EQ(store_.list().size(), 1u);
}

// A streamed import stages as it reads and publishes only at the end: a
// staging dropped unpublished (bad input found late) leaves objects/ and
// tmp/ exactly as they were.
TEST_F(ObjectStoreTest, StagingDroppedUnpublishedLeavesNothing) {
  const std::string kept = store_.put("stored before");
  std::string a(50000, 'a'), b(50000, 'b');
  PreparedObject pa = store_.prepare(a), pb = store_.prepare(b);
  {
    ObjectStaging staging(store_);
    staging.stage({&pa});
    staging.stage({&pb});
    EXPECT_FALSE(store_.contains(pa.id));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path() / "tmp"), fs::directory_iterator()), 2);
  }
  EXPECT_TRUE(fs::is_empty(dir_.path() / "tmp"));
  EXPECT_EQ(store_.list(), std::vector<std::string>{kept});
}

TEST_F(ObjectStoreTest, StagingPublishesEachObjectOnceAndCountsOnlyNewBytes) {
  const std::string old_id = store_.put("stored before");
  std::string a(50000, 'a');
  PreparedObject pa = store_.prepare(a), again = store_.prepare(a), old = store_.prepare("stored before");
  ObjectStaging staging(store_);
  staging.stage({&pa, &old});
  staging.stage({&again});  // the same chunk in a later piece: staged once
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path() / "tmp"), fs::directory_iterator()), 1);
  const std::uint64_t added = staging.publish();
  EXPECT_EQ(added, store_.stored_size(pa.id));
  EXPECT_EQ(store_.get(pa.id, "test"), a);
  EXPECT_EQ(store_.get(old_id, "test"), "stored before");
  EXPECT_TRUE(fs::is_empty(dir_.path() / "tmp"));
  EXPECT_THROW(staging.stage({&pa}), std::logic_error);
}

// Staging decides what to write when it stages: a damaged file is staged
// again and replaced at publish (importing the same data heals it).
TEST_F(ObjectStoreTest, StagingReplacesADamagedObjectAtPublish) {
  std::string bytes(20000, 'd');
  const std::string id = store_.put(bytes);
  { std::ofstream(store_.path_of(id), std::ios::binary | std::ios::trunc) << "garbage"; }
  ASSERT_TRUE(store_.check(id));
  PreparedObject p = store_.prepare(bytes);
  ObjectStaging staging(store_);
  staging.stage({&p});
  EXPECT_TRUE(store_.check(id)) << "replaced only at publish";
  EXPECT_GT(staging.publish(), 0u);
  EXPECT_FALSE(store_.check(id));
}

TEST_F(ObjectStoreTest, FlippedByteAnywhereIsCaughtOnReadAndCheck) {
  std::string bytes;
  for (int i = 0; i < 5000; ++i) bytes += std::to_string(i * 7919) + ",";
  std::string id = store_.put(bytes);
  fs::path path = store_.path_of(id);
  std::string original = test::read_file(path);
  for (std::size_t offset = 0; offset < original.size(); offset += std::max<std::size_t>(1, original.size() / 37)) {
    std::string damaged = original;
    damaged[offset] = static_cast<char>(damaged[offset] ^ 0x10);
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
    test::write_file(path, damaged);
    EXPECT_TRUE(store_.check(id).has_value()) << "flip at offset " << offset;
    try {
      store_.get(id, "dataset demo@v1, source");
      ADD_FAILURE() << "flip at offset " << offset << " was not caught";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt);
      EXPECT_NE(std::string(e.what()).find(id), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("demo@v1"), std::string::npos);
    }
  }
  test::write_file(path, original);
  EXPECT_FALSE(store_.check(id).has_value());
}

// get_into: the same bytes as get, in the caller's buffer; a flipped byte,
// a buffer of another size and a missing object are kCorrupt naming the
// object and its owner.
TEST_F(ObjectStoreTest, GetIntoFillsTheCallersBufferAndVerifies) {
  std::string bytes;
  for (int i = 0; i < 5000; ++i) bytes += std::to_string(i * 7919) + ",";
  std::string id = store_.put(bytes);
  std::string out(bytes.size(), '\0');
  store_.get_into(id, "test", std::span<char>(out.data(), out.size()));
  EXPECT_EQ(out, bytes);

  auto expect_corrupt = [&](std::span<char> buffer, const std::string& what) {
    try {
      store_.get_into(id, "dataset demo@v1, features", buffer);
      ADD_FAILURE() << what << " was not caught";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << what;
      EXPECT_NE(std::string(e.what()).find(id), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("demo@v1, features"), std::string::npos) << e.what();
    }
  };
  std::string shorter(bytes.size() - 1, '\0'), longer(bytes.size() + 1, '\0');
  expect_corrupt(std::span<char>(shorter.data(), shorter.size()), "a buffer one byte short");
  expect_corrupt(std::span<char>(longer.data(), longer.size()), "a buffer one byte long");

  fs::path path = store_.path_of(id);
  std::string original = test::read_file(path);
  for (std::size_t offset = 0; offset < original.size(); offset += std::max<std::size_t>(1, original.size() / 23)) {
    std::string damaged = original;
    damaged[offset] = static_cast<char>(damaged[offset] ^ 0x10);
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
    test::write_file(path, damaged);
    expect_corrupt(std::span<char>(out.data(), out.size()), "a flip at offset " + std::to_string(offset));
  }
  store_.remove(id);
  expect_corrupt(std::span<char>(out.data(), out.size()), "a missing object");
}

TEST_F(ObjectStoreTest, MissingObjectIsReported) {
  std::string id = to_hex(hash_bytes("never stored"));
  EXPECT_EQ(store_.check(id).value_or(""), "missing");
  EXPECT_THROW(store_.get(id, "test"), Error);
}

TEST_F(ObjectStoreTest, RemoveDeletes) {
  std::string id = store_.put("garbage");
  store_.remove(id);
  EXPECT_FALSE(store_.contains(id));
  store_.remove(id);  // absent: not an error
}

// An object file whose header claims far more than its frame can hold is
// refused before anything that size is allocated (a damaged 16-byte header
// could make 'anneal fsck' or any read allocate up to 1 TiB).
TEST(DecodeObjectFile, ImplausibleSizeIsRefusedWithoutAllocating) {
  std::string file = std::string("ANOB\x01\x01\0\0", 8);
  std::uint64_t claimed = std::uint64_t{1} << 39;  // 512 GiB
  for (int i = 0; i < 8; ++i) file += static_cast<char>(claimed >> (8 * i));
  file += std::string("\x28\xb5\x2f\xfd\x00\x00\x01\x00\x00", 9);  // an empty zstd frame
  std::string raw;
  auto problem = decode_object_file(file, raw);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("header claims"), std::string::npos) << *problem;
  EXPECT_TRUE(raw.empty());
}

}  // namespace
}  // namespace anneal
