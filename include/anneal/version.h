// The version and build of this anneal binary, for --version and lineage.
#pragma once

#include <string>

namespace anneal {

std::string version();     // "0.1.0"
std::string git_commit();  // short commit hash the binary was built from, or "unknown"

}  // namespace anneal
