#include "permissions.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <system_error>

#include "anneal/error.h"
#include "anneal/fs.h"

namespace anneal {
namespace fs = std::filesystem;

namespace {

// "alice (uid 1001)", or "uid 1001" for a uid with no passwd entry.
// getpwuid_r: fsck may ask from several threads.
std::string user_text(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buffer[4096];
  if (::getpwuid_r(uid, &pw, buffer, sizeof buffer, &found) == 0 && found && found->pw_name)
    return std::string(found->pw_name) + " (uid " + std::to_string(uid) + ")";
  return "uid " + std::to_string(uid);
}

// The name chown takes for `uid`: the user name, else the number.
std::string chown_name(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buffer[4096];
  if (::getpwuid_r(uid, &pw, buffer, sizeof buffer, &found) == 0 && found && found->pw_name) return found->pw_name;
  return std::to_string(uid);
}

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

std::optional<std::string> permission_problem(const fs::path& path, const struct stat& st, const fs::path& root) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    // The store itself is someone else's: the caller is the wrong user
    // (root included: files it made there would be root's, unreadable to
    // the owner). A file inside the caller's own store that another user
    // made: only giving it back fixes it.
    if (path == root)
      return path.string() + " belongs to " + user_text(st.st_uid) + ", not to " + user_text(me) +
             ", who runs anneal: a store is used only by its owner; run anneal as " + chown_name(st.st_uid);
    return path.string() + " belongs to " + user_text(st.st_uid) + ", not to " + user_text(me) +
           ", who owns the store and runs anneal: give it back with 'chown -R " + chown_name(me) + " " + root.string() +
           "' (as root)";
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return path.string() + " is writable by " + ((st.st_mode & S_IWOTH) ? "others" : "its group") + " (mode " +
           mode_text(st.st_mode) + "): anyone who may write it can change the store; make the store owner-only with "
           "'chmod -R go-rwx " + root.string() + "'";
  return std::nullopt;
}

void check_store_permissions(const fs::path& root, bool owner_only) {
  auto check = [&](const fs::path& path, bool must_exist) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT && !must_exist) return;
      throw failure(errno_message(path, "cannot stat"));
    }
    if (owner_only && st.st_uid == ::geteuid()) return;
    if (auto problem = permission_problem(path, st, root)) throw failure(*problem);
  };
  // The directory first: when it is another user's, that is the one line
  // to say, whatever is inside.
  check(root, true);
  for (const char* entry : {"catalog.db", "catalog.db-wal", "catalog.db-shm", "objects", "tmp", "locks", "logs",
                            "encryption"})
    check(root / entry, false);
  std::error_code ec;
  const fs::path locks = root / "locks";
  if (fs::is_directory(locks, ec)) {
    for (fs::directory_iterator it(locks, ec), end; !ec && it != end; it.increment(ec)) check(it->path(), false);
    if (ec) throw failure(locks.string() + ": cannot list: " + ec.message());
  }
}

std::vector<std::pair<fs::path, std::string>> store_permission_problems(const fs::path& root) {
  std::vector<std::pair<fs::path, std::string>> out;
  auto check = [&](const fs::path& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      // Gone since it was listed (gc, a finished write): nothing to judge.
      if (errno != ENOENT) out.emplace_back(path, errno_message(path, "cannot stat"));
      return;
    }
    if (auto problem = permission_problem(path, st, root)) out.emplace_back(path, *problem);
  };
  check(root);
  std::error_code ec;
  // A directory this user cannot list is reported itself (another user's,
  // or one without the owner's permissions); what is under it is skipped.
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) check(it->path());
  if (ec) out.emplace_back(root, root.string() + ": cannot list the store: " + ec.message());
  return out;
}

}  // namespace anneal
