// Device: which Backend runs a network, resolved once per command.
//
//   anneal::BackendOptions options;
//   options.device = anneal::parse_device("auto");
//   options.threads = 2;
//   std::unique_ptr<anneal::Backend> backend = anneal::make_backend(options);
//
// The registry knows every backend this build can make, each with a probe
// that says whether it is usable here. `auto` takes the first usable one in
// order of preference (a GPU backend before the CPU); naming a device asks
// for exactly that one. The CPU backend is always built in and always
// usable; a GPU backend is a plugin loaded when first asked for
// (anneal/backend_plugin.h), so the executable links no GPU library.
// Nothing above the registry names a device.
//
// Thread-safety: the functions are pure apart from probing the hardware;
// call them from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/backend.h"

namespace anneal {

enum class Device : std::uint8_t {
  kAuto,  // the best usable backend: a GPU when one is usable, else the CPU
  kCpu,   // oneDNN on this machine's cores
  kCuda,  // cuBLAS/cuDNN on an NVIDIA GPU
};

// "auto" | "cpu" | "cuda"; kUsage naming the closest otherwise.
Device parse_device(std::string_view name);
const char* device_name(Device device);

// What a command asks of its backend.
struct BackendOptions {
  Device device = Device::kAuto;
  int threads = 1;  // compute threads (the CPU backend's team; host-side work of a GPU backend)
  // The network has int8 layers: `auto` passes over a backend without int8
  // ops (BackendCapabilities::int8), and a device named here that has none
  // is refused (kUsage).
  bool int8 = false;
  // false lets a backend pick faster algorithms whose results vary run to
  // run (a GPU's atomics-based convolution gradients); the CPU backend is
  // deterministic either way. BackendCapabilities::deterministic says what
  // the backend made of it.
  bool deterministic = true;
  // true lets a GPU run fp32 matrix products and convolutions on TF32
  // tensor cores (10-bit mantissa inputs); false keeps full fp32.
  bool tf32 = false;
};

// What the registry knows about one backend on this machine.
struct BackendAvailability {
  Device device = Device::kCpu;
  bool usable = false;
  std::string reason;  // why not, when !usable: "no usable CUDA device: ..."
};

// Every device this build knows, in `auto`'s order of preference, with
// whether it is usable here.
std::vector<BackendAvailability> available_backends();

// For `auto`: one entry per device it prefers to the one it picks here and
// finds unusable, saying why ("cuda: no usable CUDA device: ..."); empty
// when it gets its first choice.
std::vector<std::string> passed_over_by_auto();

// Makes the backend for options.device (kAuto resolved as above). Throws
// anneal::Error kUsage, one line, when the named device is not usable here
// ("device cuda: no usable CUDA device: ...; use device cpu or auto") or
// has no int8 ops when options.int8 asks for them, and kFailure when a
// usable one fails to start. `options.threads` must be in
// 1..1024 (kUsage otherwise).
std::unique_ptr<Backend> make_backend(const BackendOptions& options);

}  // namespace anneal
