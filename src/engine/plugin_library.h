// Finding and opening anneal's plugins: libraries the executable loads with
// dlopen so that it links no GPU or MPI library itself (the backend plugins
// of anneal/backend_plugin.h, the communicator plugin of
// anneal/communicator.h). Looked for in $ANNEAL_PLUGIN_DIR when set, else
// beside the executable (the build tree), else in ../lib/anneal/ from the
// executable's directory (what the packages install: /usr/lib/anneal/).
// Only a file whose file and directory belong to root or to the user
// running anneal, writable by nobody else, is loaded; any other is refused
// with the reason. A library, once opened, stays loaded for the life of
// the process (RTLD_NODELETE): objects it made may outlive any handle.
#pragma once

#include <string>

namespace anneal::engine {

struct PluginEntry {
  void* address = nullptr;  // the entry symbol, when found
  std::string path;         // the library it was found in
  std::string reason;       // why there is none, one line, when address is null
};

// Looks for `file` in the plugin directories and returns the address of its
// `symbol`. Reasons name `what` ("the CUDA backend") when the file is in no
// directory, the libraries a failed load may lack (`needs`, "its CUDA
// libraries"), and `kind` ("backend") when the file has no such symbol.
PluginEntry find_plugin_entry(const std::string& file, const char* symbol, const std::string& what,
                              const std::string& needs, const std::string& kind);

}  // namespace anneal::engine
