#include "serve/tokens.h"

#include <sodium.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "anneal/error.h"

namespace anneal::serve {
namespace {

constexpr std::size_t kMinTokenBytes = 16;

std::array<unsigned char, 32> digest_of(std::string_view token) {
  std::array<unsigned char, 32> digest{};
  crypto_generichash(digest.data(), digest.size(), reinterpret_cast<const unsigned char*>(token.data()),
                     token.size(), nullptr, 0);
  return digest;
}

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& why) {
  throw Error(ErrorKind::kUsage, Subject::kTokensFile, file.string() + ": " + why);
}

}  // namespace

std::size_t TokenTable::count(Role role) const {
  std::size_t n = 0;
  for (const Entry& entry : entries_) n += entry.role == role;
  return n;
}

TokenTable TokenTable::read(const std::filesystem::path& file) {
  if (sodium_init() < 0) throw failure("libsodium could not be initialised");
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) refuse(file, "cannot be read (no such file?)");
  if (!S_ISREG(st.st_mode)) refuse(file, "is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    refuse(file, std::string("is open to other users (mode ") + mode + "); it must be owner-only (chmod 600)");
  }
  std::ifstream in(file);
  if (!in) refuse(file, "cannot be read");
  TokenTable table;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    std::istringstream words(line);
    std::string role, token, extra;
    words >> role >> token;
    const std::string where = "line " + std::to_string(number);
    if (token.empty() || (words >> extra)) refuse(file, where + ": expected ROLE TOKEN");
    Entry entry{digest_of(token), Role::kPredict};
    if (role == "admin") entry.role = Role::kAdmin;
    else if (role != "predict") refuse(file, where + ": unknown role '" + role + "' (expected predict or admin)");
    if (token.size() < kMinTokenBytes)
      refuse(file, where + ": a token must be at least " + std::to_string(kMinTokenBytes) + " bytes");
    table.entries_.push_back(entry);
  }
  if (table.entries_.empty()) refuse(file, "holds no token");
  return table;
}

std::optional<Role> TokenTable::role_of(std::string_view token) const {
  const std::array<unsigned char, 32> digest = digest_of(token);
  // Every entry is compared, whichever matches, and the best role kept
  // without a branch on the comparison.
  int role = 0;
  for (const Entry& entry : entries_) {
    const int equal = sodium_memcmp(digest.data(), entry.digest.data(), digest.size()) == 0;
    const int mine = static_cast<int>(entry.role) * equal;
    role = role > mine ? role : mine;
  }
  if (role == 0) return std::nullopt;
  return static_cast<Role>(role);
}

}  // namespace anneal::serve
