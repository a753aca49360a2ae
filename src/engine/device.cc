// The device registry: which backends this build can make and which one
// `auto` picks. See include/anneal/device.h.
#include "anneal/device.h"

#include "anneal/error.h"
#include "engine/cpu/cpu_backend.h"
#include "anneal/spelling.h"

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

std::vector<BackendAvailability> available_backends() {
  // In `auto`'s order of preference. The CUDA backend is its own plugin
  // (the CUDA backend issue); until this build carries one, the entry says
  // so, and `auto` falls through to the CPU.
  return {
      {Device::kCuda, false, "no CUDA backend in this build"},
      {Device::kCpu, true, ""},
  };
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
    switch (a.device) {
      case Device::kCpu: return cpu::make_cpu_backend(options);
      case Device::kAuto:
      case Device::kCuda: break;
    }
    throw failure(std::string("device ") + device_name(a.device) + ": listed as usable but not built");
  }
  throw failure("no usable backend");
}

}  // namespace anneal
