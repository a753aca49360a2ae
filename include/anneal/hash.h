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
std::string to_hex(const Digest& digest);
// True when `text` is exactly 64 lowercase hex digits.
bool is_hex_digest(std::string_view text);

}  // namespace anneal
