#include "anneal/chunker.h"

#include <array>
#include <bit>
#include <cstdint>

namespace anneal {
namespace {

// The gear table: 256 pseudo-random 64-bit values from SplitMix64 seeded with
// 0x616e6e65616c (the bytes "anneal"). Part of the on-disk contract: changing
// it changes every cut (not correctness, but dedup against older versions).
constexpr std::array<std::uint64_t, 256> make_gear_table() {
  std::array<std::uint64_t, 256> table{};
  std::uint64_t state = 0x616e6e65616cULL;
  for (auto& entry : table) {
    state += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    entry = z ^ (z >> 31);
  }
  return table;
}
constexpr auto kGear = make_gear_table();

// A mask of `bits` ones in the high end of the word: the gear hash shifts
// left, so the high bits carry the most recent 64 bytes' influence.
constexpr std::uint64_t high_mask(int bits) { return bits <= 0 ? 0 : ~0ULL << (64 - bits); }

std::size_t next_cut(const unsigned char* data, std::size_t size, const ChunkParams& p,
                     std::uint64_t mask_strict, std::uint64_t mask_loose) {
  if (size <= p.min_size) return size;
  std::size_t limit = size < p.max_size ? size : p.max_size;
  std::size_t normal = size < p.avg_size ? size : p.avg_size;
  std::uint64_t hash = 0;
  std::size_t i = p.min_size;
  // Before the average size a stricter mask (harder to match) and after it a
  // looser one: FastCDC's normalization pulls chunk sizes towards the average.
  for (; i < normal; ++i) {
    hash = (hash << 1) + kGear[data[i]];
    if ((hash & mask_strict) == 0) return i + 1;
  }
  for (; i < limit; ++i) {
    hash = (hash << 1) + kGear[data[i]];
    if ((hash & mask_loose) == 0) return i + 1;
  }
  return limit;
}

struct Masks {
  std::uint64_t strict, loose;
};
Masks masks_of(const ChunkParams& params) {
  const int bits = std::bit_width(params.avg_size) - 1;  // log2(avg)
  return {high_mask(bits + 2), high_mask(bits - 2)};
}

}  // namespace

std::size_t first_chunk_end(std::string_view data, const ChunkParams& params) {
  if (data.empty()) return 0;
  const Masks masks = masks_of(params);
  return next_cut(reinterpret_cast<const unsigned char*>(data.data()), data.size(), params, masks.strict,
                  masks.loose);
}

std::vector<std::size_t> chunk_ends(std::string_view data, const ChunkParams& params) {
  const auto [mask_strict, mask_loose] = masks_of(params);
  std::vector<std::size_t> ends;
  ends.reserve(data.size() / params.avg_size + 2);
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  std::size_t offset = 0;
  while (offset < data.size()) {
    offset += next_cut(bytes + offset, data.size() - offset, params, mask_strict, mask_loose);
    ends.push_back(offset);
  }
  return ends;
}

}  // namespace anneal
