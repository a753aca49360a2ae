#include "anneal/hash.h"

#include <sodium.h>

#include <mutex>

#include "anneal/error.h"

namespace anneal {
namespace {

// sodium_init() picks the fastest BLAKE2b code for this CPU; it is
// idempotent and thread-safe, so every entry point simply makes sure of it.
void ensure_sodium() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (sodium_init() < 0) throw failure("libsodium failed to initialize");
  });
}

static_assert(sizeof(crypto_generichash_state) <= 384, "Hasher::state_ is too small");

}  // namespace

Hasher::Hasher() {
  ensure_sodium();
  crypto_generichash_init(reinterpret_cast<crypto_generichash_state*>(state_), nullptr, 0,
                          sizeof(Digest));
}

void Hasher::update(std::string_view bytes) {
  crypto_generichash_update(reinterpret_cast<crypto_generichash_state*>(state_),
                            reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

Digest Hasher::finish() {
  Digest digest;
  crypto_generichash_final(reinterpret_cast<crypto_generichash_state*>(state_), digest.data(),
                           digest.size());
  return digest;
}

Digest hash_bytes(std::string_view bytes) {
  ensure_sodium();
  Digest digest;
  crypto_generichash(digest.data(), digest.size(),
                     reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), nullptr, 0);
  return digest;
}

static_assert(crypto_shorthash_BYTES == 8 && crypto_shorthash_KEYBYTES == 16);

std::uint64_t short_hash(std::string_view bytes, const ShortHashKey& key) {
  ensure_sodium();
  unsigned char out[crypto_shorthash_BYTES];
  crypto_shorthash(out, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), key.data());
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= std::uint64_t{out[i]} << (8 * i);
  return value;
}

std::string to_hex(const Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(digest.size() * 2, '0');
  for (std::size_t i = 0; i < digest.size(); ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 15];
  }
  return hex;
}

bool is_hex_digest(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace anneal
