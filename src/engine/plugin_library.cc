// See plugin_library.h.
#include "engine/plugin_library.h"

#include <dlfcn.h>

#include <cstdlib>
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

}  // namespace

PluginEntry find_plugin_entry(const std::string& file, const char* symbol, const std::string& what,
                              const std::string& needs, const std::string& kind) {
  std::string searched;
  for (const fs::path& dir : plugin_dirs()) {
    const fs::path path = dir / file;
    searched += (searched.empty() ? "" : ", ") + dir.string();
    if (!fs::exists(path)) continue;
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
