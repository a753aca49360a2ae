// libanneal-cuda.so: the CUDA backend's plugin entry (anneal/backend_plugin.h).
// It links the CUDA runtime alone: its probe asks the runtime for a device,
// and only when a backend is made does it load libanneal-cuda-ops.so from
// the plugin directories, the backend itself with cuBLASLt and cuDNN
// (cuda_backend.cc). Every command that resolves `auto` probes, so the
// probe must stay cheap: cuBLASLt and cuDNN map hundreds of MB of address
// space, which a process under `ulimit -v` may not have to spare.
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "anneal/backend_plugin.h"
#include "anneal/build_info.h"
#include "anneal/error.h"
#include "engine/plugin_library.h"

namespace anneal::cuda {
namespace {

// "no CUDA-capable device is detected (cudaErrorNoDevice)".
std::string runtime_error_text(cudaError_t status) {
  return std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
}

// The oldest GPU the kernels are built for (CMAKE_CUDA_ARCHITECTURES).
constexpr int kMinComputeCapability = 75;

// Whether device 0 is usable, and why not.
BackendAvailability probe() noexcept {
  BackendAvailability a{Device::kCuda, false, ""};
  try {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      a.reason = "no usable CUDA device: " + runtime_error_text(status);
      return a;
    }
    if (count == 0) {
      a.reason = "no usable CUDA device: the CUDA runtime found none";
      return a;
    }
    cudaDeviceProp p{};
    const cudaError_t props = cudaGetDeviceProperties(&p, 0);
    if (props != cudaSuccess) {
      a.reason = "no usable CUDA device: " + runtime_error_text(props);
      return a;
    }
    if (p.major * 10 + p.minor < kMinComputeCapability) {
      a.reason = std::string(p.name) + " has compute capability " + std::to_string(p.major) + "." +
                 std::to_string(p.minor) + "; the CUDA backend needs 7.5 (Turing) or newer";
      return a;
    }
    a.usable = true;
  } catch (...) {  // a probe must not throw: std::bad_alloc building the text
    a.usable = false;
    a.reason = "no usable CUDA device: the probe failed";
  }
  return a;
}

// The backend library, found where the registry found this plugin (the
// same lookup, plugin_library.h) and loaded once; its factory.
using MakeBackend = Backend* (*)(const BackendOptions*);
MakeBackend backend_factory() {
  const engine::PluginEntry found =
      engine::find_plugin_entry("libanneal-cuda-ops.so", "anneal_cuda_make_backend", "the CUDA backend's library",
                                "cuBLAS and cuDNN", "CUDA backend");
  if (!found.address) throw failure("device cuda: " + found.reason);
  return reinterpret_cast<MakeBackend>(found.address);
}

std::unique_ptr<Backend> make(const BackendOptions& options) {
  const BackendAvailability a = probe();
  if (!a.usable) throw usage_error(std::string("device cuda: ") + a.reason + "; use device cpu or auto");
  return std::unique_ptr<Backend>(backend_factory()(&options));
}

constexpr BackendPlugin kPlugin{kBackendPluginAbi, build::kPluginBuild, Device::kCuda, &probe, &make};

}  // namespace
}  // namespace anneal::cuda

extern "C" __attribute__((visibility("default"))) const anneal::BackendPlugin* anneal_backend_plugin_v1() {
  return &anneal::cuda::kPlugin;
}
