// Who may use a store: its owner, and no one else may write it
// (docs/STORE.md, "Permissions"). For store/ only: Store::open refuses a
// store that breaks the rule, fsck reports every file that does.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace anneal {

// What is wrong with `path`, a file or directory of the store at `root`
// whose stat(2) is `st`, for the process running anneal: it belongs to
// another user than the effective one, or its group or others may write it.
// One line naming the path, what is wrong and the command that fixes it;
// nullopt when neither.
std::optional<std::string> permission_problem(const std::filesystem::path& path, const struct stat& st,
                                              const std::filesystem::path& root);

// Refuses (kFailure) the store at `root` when the directory itself, one of
// its own entries (the catalog and its -wal and -shm, objects/, tmp/,
// locks/, logs/, the encryption file) or a lock file breaks the rule: a
// process that used it would write files its owner cannot read, or read a
// catalog and objects anyone may have changed. Run before anything in the
// store is opened or created. `owner_only`: judge the owners alone (init,
// which makes the modes owner-only itself).
void check_store_permissions(const std::filesystem::path& root, bool owner_only = false);

// Every entry of the store at `root` that breaks the rule, each one line
// (permission_problem) keyed by its path; an entry that cannot be read is
// a line too. Symbolic links are judged by what they point at.
std::vector<std::pair<std::filesystem::path, std::string>> store_permission_problems(
    const std::filesystem::path& root);

}  // namespace anneal
