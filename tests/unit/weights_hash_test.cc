// The weights hash framing (anneal/weights_hash.h, docs/STORE.md "Weights
// hash"): the bytes it hashes, written out by hand here, and that different
// tensors never frame to the same bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "anneal/hash.h"
#include "anneal/weights_hash.h"

namespace anneal {
namespace {

std::string u64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += char((v >> (8 * i)) & 0xff);
  return s;
}

TEST(WeightsHashFraming, IsTheDocumentedBytes) {
  // Two tensors: "w" f32 [2] = {1.0, -0.0}, then "b" u8 [3] = {1, 2, 3}.
  std::string framed;
  framed += u64(1) + "w" + u64(3) + "f32" + u64(1) + u64(2) + u64(8);
  framed += std::string("\x00\x00\x80\x3f\x00\x00\x00\x80", 8);
  framed += u64(1) + "b" + u64(2) + "u8" + u64(1) + u64(3) + u64(3) + "\x01\x02\x03";
  WeightsHasher h;
  const std::vector<std::int64_t> two = {2}, three = {3};
  h.add_f32("w", two, std::vector<float>{1.0f, -0.0f});
  h.add_u8("b", three, "\x01\x02\x03");
  EXPECT_EQ(h.finish_hex(), to_hex(hash_bytes(framed)));
}

TEST(WeightsHashFraming, F64IsLittleEndianDoubles) {
  std::string framed = u64(1) + "x" + u64(3) + "f64" + u64(0) + u64(8) + std::string("\x00\x00\x00\x00\x00\x00\xf0\x3f", 8);
  WeightsHasher h;
  h.add_f64("x", {}, std::vector<double>{1.0});  // a scalar: no dims, one element
  EXPECT_EQ(h.finish_hex(), to_hex(hash_bytes(framed)));
}

std::string one(std::string_view name, WeightsDtype dtype, std::vector<std::int64_t> dims, std::string_view values) {
  WeightsHasher h;
  h.add(name, dtype, dims, values);
  return h.finish_hex();
}

TEST(WeightsHashFraming, DifferentTensorsNeverFrameAlike) {
  const std::string eight(8, '\x01');
  const std::vector<std::string> hashes = {
      one("ab", WeightsDtype::kU8, {8}, eight),
      one("a", WeightsDtype::kU8, {8}, eight),         // a shorter name
      one("ab", WeightsDtype::kU8, {2, 4}, eight),     // other dims, same count
      one("ab", WeightsDtype::kU8, {4, 2}, eight),
      one("ab", WeightsDtype::kF32, {2}, eight),       // the same bytes as another dtype
      one("ab", WeightsDtype::kF64, {1}, eight),
      one("ab", WeightsDtype::kF64, {1, 1}, eight),
  };
  for (std::size_t i = 0; i < hashes.size(); ++i)
    for (std::size_t j = i + 1; j < hashes.size(); ++j) EXPECT_NE(hashes[i], hashes[j]) << i << " " << j;
  // One tensor split into two, or a name's bytes moved into the values.
  WeightsHasher split;
  split.add_u8("ab", std::vector<std::int64_t>{4}, eight.substr(0, 4));
  split.add_u8("ab", std::vector<std::int64_t>{4}, eight.substr(4));
  EXPECT_NE(split.finish_hex(), hashes[0]);
  EXPECT_EQ(one("ab", WeightsDtype::kU8, {8}, eight), hashes[0]) << "the same tensor, the same hash";
}

TEST(WeightsHashFraming, ValuesThatAreNotTheDimsWorthAreAProgrammingError) {
  WeightsHasher h;
  const std::vector<std::int64_t> dims = {2, 3};
  EXPECT_THROW(h.add_f32("w", dims, std::vector<float>(5)), std::invalid_argument);
  const std::vector<std::int64_t> negative = {-1};
  EXPECT_THROW(h.add_u8("w", negative, ""), std::invalid_argument);
}

}  // namespace
}  // namespace anneal
