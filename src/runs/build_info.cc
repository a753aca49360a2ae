// Build info: the version and commit this binary was built from, as CMake
// generated them into anneal/build_info.h.
#include "anneal/version.h"

#include "anneal/build_info.h"

namespace anneal {

std::string version() { return build::kVersion; }
std::string git_commit() { return build::kGitCommit; }

}  // namespace anneal
