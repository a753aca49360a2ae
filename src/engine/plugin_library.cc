// See plugin_library.h.
#include "engine/plugin_library.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace anneal::engine {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> plugin_dirs() {
  if (const char* dir = std::getenv("ANNEAL_PLUGIN_DIR"); dir && *dir) return {dir};
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (error) return {};
  return {exe.parent_path(), exe.parent_path().parent_path() / "lib" / "anneal"};
}

// A plugin runs with the rights of whoever runs anneal, root's included: it
// is loaded only when the file and its directory belong to root or to that
// user and nobody else may write them (as ssh judges its key files), so no
// other local user can plant or swap the code. Links are judged by what
// they point at. Returns why a path fails that, or "".
std::string unsafe_to_load(const fs::path& file) {
  for (const fs::path& path : {file, file.parent_path()}) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return path.string() + ": cannot stat: " + std::strerror(errno);
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
      return path.string() + " belongs to uid " + std::to_string(st.st_uid) + ", neither root nor this user";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return path.string() + " may be written by others (mode " + mode + "); chmod go-w " + path.string();
    }
  }
  return "";
}

}  // namespace

PluginEntry find_plugin_entry(const std::string& file, const char* symbol, const std::string& what,
                              const std::string& needs, const std::string& kind) {
  std::string searched;
  for (const fs::path& dir : plugin_dirs()) {
    const fs::path path = dir / file;
    searched += (searched.empty() ? "" : ", ") + dir.string();
    if (!fs::exists(path)) continue;
    if (std::string unsafe = unsafe_to_load(path); !unsafe.empty())
      return {nullptr, path.string(), file + " is not loaded: " + unsafe};
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handle) {
      const char* why = ::dlerror();
      return {nullptr, path.string(),
              file + " cannot be loaded: " + (why ? why : "dlopen failed") + " (are " + needs + " installed?)"};
    }
    void* address = ::dlsym(handle, symbol);
    ::dlclose(handle);  // RTLD_NODELETE: stays mapped
    if (!address) return {nullptr, path.string(), path.string() + " is not an anneal " + kind + " plugin"};
    return {address, path.string(), ""};
  }
  return {nullptr, "",
          what + " is not installed (no " + file + " in " +
              (searched.empty() ? std::string("any plugin directory") : searched) + ")"};
}

}  // namespace anneal::engine
