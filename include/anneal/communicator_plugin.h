// The communicator plugin's entry point (libanneal-mpi.so): what
// make_communicator() (communicator.h) loads when a process was started by
// mpirun. Like the backend plugins (backend_plugin.h) it is only ever
// loaded by the anneal it was built with, which the build check enforces,
// so the interface across is plain C++.
#pragma once

#include <cstdint>
#include <memory>

#include "anneal/communicator.h"

namespace anneal {

// Raised whenever CommunicatorPlugin or the Communicator interface changes.
inline constexpr std::uint32_t kCommunicatorPluginAbi = 3;

// The symbol the plugin exports (extern "C", returning const CommunicatorPlugin*).
inline constexpr const char* kCommunicatorPluginEntry = "anneal_communicator_plugin_v1";

struct CommunicatorPlugin {
  std::uint32_t abi = kCommunicatorPluginAbi;
  const char* build = "";  // build::kPluginBuild of the anneal it was built from
  // Starts MPI (once per process; it is finalized at exit) and returns the
  // world communicator. Throws anneal::Error kFailure.
  std::unique_ptr<Communicator> (*make)() = nullptr;
};

using CommunicatorPluginEntry = const CommunicatorPlugin* (*)();

}  // namespace anneal
