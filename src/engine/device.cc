// The device registry: which backends this build can make and which one
// `auto` picks. See include/anneal/device.h.
#include "anneal/device.h"

#include <string>

#include "anneal/backend_plugin.h"
#include "anneal/build_info.h"
#include "anneal/error.h"
#include "anneal/spelling.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/plugin_library.h"

namespace anneal {

Device parse_device(std::string_view name) {
  if (name == "auto") return Device::kAuto;
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  throw unknown_name_error("device", name, {"auto", "cpu", "cuda"});
}

const char* device_name(Device device) {
  switch (device) {
    case Device::kAuto: return "auto";
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
  }
  return "?";
}

namespace {

// The file a device's plugin is built as, and what its backend is called.
const char* plugin_file(Device device) { return device == Device::kCuda ? "libanneal-cuda.so" : "?"; }
const char* plugin_backend_name(Device device) { return device == Device::kCuda ? "CUDA" : "?"; }

// A device's plugin, loaded, or why it is not there.
struct LoadedPlugin {
  const BackendPlugin* plugin = nullptr;
  std::string reason;  // when plugin is null
};

LoadedPlugin load_plugin(Device device) {
  const engine::PluginEntry found =
      engine::find_plugin_entry(plugin_file(device), kBackendPluginEntry,
                                std::string("the ") + plugin_backend_name(device) + " backend",
                                std::string("its ") + plugin_backend_name(device) + " libraries", "backend");
  if (!found.address) return {nullptr, found.reason};
  const BackendPlugin* plugin = reinterpret_cast<BackendPluginEntry>(found.address)();
  if (!plugin) return {nullptr, found.path + " is not an anneal backend plugin"};
  // The ABI first: the rest of the struct is only read when it matches.
  if (plugin->abi != kBackendPluginAbi)
    return {nullptr, found.path + " is a plugin of ABI " + std::to_string(plugin->abi) + ", not " +
                         std::to_string(kBackendPluginAbi) + "; install the package matching this anneal"};
  if (std::string_view(plugin->build) != build::kPluginBuild || plugin->device != device || !plugin->probe ||
      !plugin->make)
    return {nullptr, found.path + " was built for anneal " + std::string(plugin->build) + ", not this " +
                         build::kPluginBuild + "; install the package matching this anneal"};
  return {plugin, ""};
}

}  // namespace

std::vector<BackendAvailability> available_backends() {
  // In `auto`'s order of preference: a GPU plugin that finds its device,
  // then the CPU, built in and always usable.
  std::vector<BackendAvailability> out;
  const LoadedPlugin cuda = load_plugin(Device::kCuda);
  out.push_back(cuda.plugin ? cuda.plugin->probe() : BackendAvailability{Device::kCuda, false, cuda.reason});
  out.push_back({Device::kCpu, true, ""});
  return out;
}

std::vector<std::string> passed_over_by_auto() {
  std::vector<std::string> passed;
  for (const BackendAvailability& a : available_backends()) {
    if (a.usable) break;
    passed.push_back(std::string(device_name(a.device)) + ": " + a.reason);
  }
  return passed;
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  const Device device = options.device;
  if (options.threads < 1 || options.threads > 1024)
    throw usage_error("threads must be in 1..1024, not " + std::to_string(options.threads));
  for (const BackendAvailability& a : available_backends()) {
    if (device != Device::kAuto && a.device != device) continue;
    if (!a.usable) {
      if (device == Device::kAuto) continue;
      throw usage_error(std::string("device ") + device_name(device) + ": " + a.reason +
                        "; use device cpu or auto");
    }
    if (a.device == Device::kCpu) return cpu::make_cpu_backend(options);
    const LoadedPlugin plugin = load_plugin(a.device);
    if (!plugin.plugin) throw failure(std::string("device ") + device_name(a.device) + ": " + plugin.reason);
    BackendOptions for_plugin = options;
    for_plugin.device = a.device;
    std::unique_ptr<Backend> backend = plugin.plugin->make(for_plugin);
    if (options.int8 && !backend->capabilities().int8) {
      if (device == Device::kAuto) continue;
      throw usage_error(std::string("device ") + device_name(a.device) + ": int8 models run on the CPU backend (the " +
                        device_name(a.device) + " backend has no int8 ops); use device cpu or auto");
    }
    return backend;
  }
  throw failure("no usable backend");
}

}  // namespace anneal
