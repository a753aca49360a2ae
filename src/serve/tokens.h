// The bearer tokens a server accepts, read from an owner-only file: one
// "ROLE TOKEN" per line (ROLE predict or admin), blank lines and '#'
// comments ignored. Only BLAKE2b-256 digests of the tokens are kept, and a
// presented token is checked against every one of them in constant time
// (sodium_memcmp), so neither the time taken nor the memory held says
// anything of the tokens. Internal to src/serve/.
#pragma once

#include <array>
#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

namespace anneal::serve {

// What a token may do: predict (infer, readiness), or admin (also model
// metadata and metrics). Ordered: admin may do what predict may.
enum class Role { kPredict = 1, kAdmin = 2 };

class TokenTable {
 public:
  // Reads `file`. kUsage (Subject::kTokensFile) for a file that is missing,
  // not a regular file, readable or writable by others than its owner, a
  // line that is not "ROLE TOKEN", an unknown role, a token shorter than
  // 16 bytes, or no token at all.
  static TokenTable read(const std::filesystem::path& file);

  // The role of `token` (the bearer credential as sent); nullopt when it
  // is none of the file's. Constant time in the token's content.
  std::optional<Role> role_of(std::string_view token) const;
  std::size_t size() const { return entries_.size(); }
  // How many of the tokens have `role`.
  std::size_t count(Role role) const;

 private:
  struct Entry {
    std::array<unsigned char, 32> digest;
    Role role;
  };
  std::vector<Entry> entries_;
};

}  // namespace anneal::serve
