// The checks both backends apply to a caller's request, written once so
// that the same request is refused alike, with the same words, on the CPU
// and on CUDA. (The arithmetic both must share bit for bit, dropout's mask,
// is engine/random.h's DropoutRule.)
#pragma once

#include <string>

#include "anneal/error.h"
#include "anneal/tensor.h"

namespace anneal::engine {

// s8 weights are quantized to ±levels: 1 to 127 (kUsage otherwise).
inline void check_weight_levels(int levels) {
  if (levels < 1 || levels > 127)
    throw usage_error("fake_quantize_channels: weight levels must be 1..127, not " + std::to_string(levels));
}

// Fake quantization takes fp32 tensors only (backend.h): kUsage otherwise,
// since the request is the caller's (an internal dtype mismatch is kFailure).
inline void check_f32_usage(const Tensor& t, const char* what) {
  if (t.dtype() != DType::kF32)
    throw usage_error(std::string(what) + ": expects an f32 tensor, not " + dtype_name(t.dtype()));
}

}  // namespace anneal::engine
