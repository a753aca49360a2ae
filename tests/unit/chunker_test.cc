#include "anneal/chunker.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "anneal/hash.h"

namespace anneal {
namespace {

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::set<std::string> chunk_ids(const std::string& data, const ChunkParams& params) {
  std::set<std::string> ids;
  std::size_t begin = 0;
  for (std::size_t end : chunk_ends(data, params)) {
    ids.insert(to_hex(hash_bytes(std::string_view(data).substr(begin, end - begin))));
    begin = end;
  }
  return ids;
}

TEST(Chunker, CoversInputWithinBounds) {
  std::string data = random_bytes(20 << 20, 1);
  auto ends = chunk_ends(data, kSourceChunking);
  ASSERT_FALSE(ends.empty());
  EXPECT_EQ(ends.back(), data.size());
  std::size_t begin = 0;
  for (std::size_t i = 0; i < ends.size(); ++i) {
    std::size_t size = ends[i] - begin;
    if (i + 1 < ends.size()) {
      EXPECT_GE(size, kSourceChunking.min_size);
    }
    EXPECT_LE(size, kSourceChunking.max_size);
    begin = ends[i];
  }
  // ~1 MiB average on random data.
  double average = static_cast<double>(data.size()) / static_cast<double>(ends.size());
  EXPECT_GT(average, 0.6 * (1 << 20));
  EXPECT_LT(average, 1.6 * (1 << 20));
}

TEST(Chunker, EmptyAndTinyInputs) {
  EXPECT_TRUE(chunk_ends("", kSourceChunking).empty());
  auto ends = chunk_ends("abc", kSourceChunking);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0], 3u);
}

TEST(Chunker, InsertionNearStartSharesAllButACoupleOfChunks) {
  std::string original = random_bytes(32 << 20, 2);
  std::string edited = original;
  edited.insert(1000, "a few inserted bytes near the start of the file\n");
  auto before = chunk_ids(original, kSourceChunking);
  auto after = chunk_ids(edited, kSourceChunking);
  std::size_t new_chunks = 0;
  for (const auto& id : after) new_chunks += before.count(id) ? 0 : 1;
  EXPECT_GE(after.size(), 16u);
  EXPECT_LE(new_chunks, 2u) << "of " << after.size() << " chunks";
}

TEST(Chunker, InsertionInTheMiddleAndAppendShareTheRest) {
  std::string original = random_bytes(32 << 20, 3);
  std::string edited = original;
  edited.insert(original.size() / 2, random_bytes(5000, 4));
  edited += random_bytes(300000, 5);
  auto before = chunk_ids(original, kSourceChunking);
  auto after = chunk_ids(edited, kSourceChunking);
  std::size_t new_chunks = 0;
  for (const auto& id : after) new_chunks += before.count(id) ? 0 : 1;
  EXPECT_LE(new_chunks, 4u) << "of " << after.size() << " chunks";
}

TEST(Chunker, IsDeterministic) {
  std::string data = random_bytes(8 << 20, 6);
  EXPECT_EQ(chunk_ends(data, kTensorChunking), chunk_ends(data, kTensorChunking));
}

}  // namespace
}  // namespace anneal
