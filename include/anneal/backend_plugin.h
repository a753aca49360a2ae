// Backend plugins: a Backend built as a shared library of its own, so the
// `anneal` executable links no GPU library and runs where none is installed.
//
// A plugin (libanneal-cuda.so) exports one C function, kBackendPluginEntry,
// returning a BackendPlugin. The device registry (device.h) loads it with
// dlopen when a command asks for its device (or `auto` looks for the best
// one), checks that it was built from the same anneal as the executable, and
// asks its probe whether the hardware is usable here.
//
// The interface across the boundary is C++ (Backend, Error): a plugin is
// only ever loaded by the anneal it was built with, which the build id
// check enforces, so both sides agree on every type. The plugin resolves the
// engine's own symbols (Tensor, Error) from the executable that loads it;
// it links none of anneal's libraries itself.
//
// Where plugins are looked for: $ANNEAL_PLUGIN_DIR when set, else beside the
// executable (the build tree), else ../lib/anneal/ from the executable's
// directory (what the packages install: /usr/lib/anneal/).
#pragma once

#include <cstdint>
#include <memory>

#include "anneal/backend.h"
#include "anneal/device.h"

namespace anneal {

// Raised whenever BackendPlugin or the Backend interface changes shape.
inline constexpr std::uint32_t kBackendPluginAbi = 4;

// The symbol a plugin exports (extern "C", returning const BackendPlugin*).
inline constexpr const char* kBackendPluginEntry = "anneal_backend_plugin_v1";

struct BackendPlugin {
  std::uint32_t abi = kBackendPluginAbi;
  // The anneal version and commit the plugin was built from
  // (build::kPluginBuild, "0.1.0+3f2a9c1d0e4b"): the registry refuses a
  // plugin from another build.
  const char* build = "";
  Device device = Device::kCuda;
  // Whether the plugin's hardware is usable here, and why not. Must not
  // throw; safe to call from any thread.
  BackendAvailability (*probe)() = nullptr;
  // The backend for `options` (options.device is the plugin's). Throws
  // anneal::Error as make_backend documents.
  std::unique_ptr<Backend> (*make)(const BackendOptions& options) = nullptr;
};

// The signature of kBackendPluginEntry.
using BackendPluginEntry = const BackendPlugin* (*)();

}  // namespace anneal
