// Content hashes: BLAKE2b-256 (libsodium's crypto_generichash, 32 bytes).
//
// Every object, stream and source file in the store is named by the hash of
// its uncompressed bytes, written as 64 lowercase hex digits. The same digest
// is what `b2sum -l 256 FILE` prints.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace anneal {

using Digest = std::array<std::uint8_t, 32>;

// Streaming hasher. Not thread-safe; use one per thread.
class Hasher {
 public:
  Hasher();
  void update(std::string_view bytes);
  Digest finish();  // the hasher must not be used afterwards

 private:
  alignas(64) unsigned char state_[384];  // crypto_generichash_state, kept opaque here
};

Digest hash_bytes(std::string_view bytes);  // thread-safe

// A keyed 64-bit hash of short inputs: SipHash-2-4 (libsodium's
// crypto_shorthash) of `bytes` under the 16-byte `key`, its 8 output bytes
// read little-endian. Not a content address: for deciding things by content
// (a row's side of a test split) where BLAKE2b's fixed cost per input, two
// 128-byte blocks for a 129-byte row, would dominate. Thread-safe.
using ShortHashKey = std::array<std::uint8_t, 16>;
std::uint64_t short_hash(std::string_view bytes, const ShortHashKey& key);
std::string to_hex(const Digest& digest);
// True when `text` is exactly 64 lowercase hex digits.
bool is_hex_digest(std::string_view text);

}  // namespace anneal
