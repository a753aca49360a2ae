// The one rule both backends apply to Backend::fake_quantize_channels's
// `levels`, so a bad value is refused alike on the CPU and on CUDA.
#pragma once

#include <string>

#include "anneal/error.h"

namespace anneal::engine {

// s8 weights are quantized to ±levels: 1 to 127 (kUsage otherwise).
inline void check_weight_levels(int levels) {
  if (levels < 1 || levels > 127)
    throw usage_error("fake_quantize_channels: weight levels must be 1..127, not " + std::to_string(levels));
}

}  // namespace anneal::engine
