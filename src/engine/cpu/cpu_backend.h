// The CPU backend's factory, for the device registry (device.cc) only.
#pragma once

#include <memory>

#include "anneal/device.h"

namespace anneal::cpu {

// oneDNN on this machine's cores: fp32 always, bf16 when the CPU has
// AVX512_BF16 or AMX, int8 always. Throws anneal::Error kFailure when oneDNN
// has no CPU engine.
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options);

}  // namespace anneal::cpu
