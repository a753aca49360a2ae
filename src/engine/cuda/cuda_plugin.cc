// libanneal-cuda.so's entry point: the CUDA backend as a backend plugin
// (anneal/backend_plugin.h). Built only where CMake finds the CUDA toolkit
// (-DANNEAL_CUDA=auto|on|off); the anneal executable never links it.
//
// The probe asks the CUDA runtime for a device. The backend's ops (dense on
// cuBLASLt, convolution and pooling on cuDNN, the elementwise, loss and
// optimizer kernels) are not in this build yet: until they are, the probe
// reports a device it finds as not usable, saying so, and `auto` trains on
// the CPU. Nothing here pretends to train.
#include <cuda_runtime_api.h>

#include <string>

#include "anneal/backend_plugin.h"
#include "anneal/build_info.h"
#include "anneal/error.h"

namespace anneal::cuda {
namespace {

// "no CUDA-capable device is detected (cudaErrorNoDevice)".
std::string runtime_error_text(cudaError_t status) {
  return std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
}

// The first device's name and compute capability, or why there is none.
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
    cudaDeviceProp properties{};
    const cudaError_t props = cudaGetDeviceProperties(&properties, 0);
    const std::string device =
        props == cudaSuccess ? std::string(properties.name) + " (compute capability " +
                                   std::to_string(properties.major) + "." + std::to_string(properties.minor) + ")"
                             : "a CUDA device";
    a.reason = "found " + device + ", but this build's CUDA backend has no training ops yet";
  } catch (...) {  // a probe must not throw: std::bad_alloc building the text
    a.reason = "no usable CUDA device: the probe failed";
  }
  return a;
}

std::unique_ptr<Backend> make(const BackendOptions&) {
  const BackendAvailability a = probe();
  throw usage_error(std::string("device cuda: ") + a.reason + "; use device cpu or auto");
}

constexpr BackendPlugin kPlugin{kBackendPluginAbi, build::kPluginBuild, Device::kCuda, &probe, &make};

}  // namespace
}  // namespace anneal::cuda

extern "C" __attribute__((visibility("default"))) const anneal::BackendPlugin* anneal_backend_plugin_v1() {
  return &anneal::cuda::kPlugin;
}
