// The dynamic loss scale's update rule (precision fp16), written once for
// every backend: the CPU backend runs it on the host, the CUDA backend in a
// one-thread kernel, so both adapt the scale identically. The contract is
// Backend::unscale_gradients's.
#pragma once

#ifdef __CUDACC__
#define ANNEAL_HOST_DEVICE __host__ __device__
#else
#define ANNEAL_HOST_DEVICE
#endif

namespace anneal::engine {

// The scale stays a power of two in [1, 2^24]: multiplying by it and by its
// inverse is exact in fp32, so unscaled gradients carry no rounding from it.
inline constexpr float kMinLossScale = 1.0f;
inline constexpr float kMaxLossScale = 16777216.0f;  // 2^24

// state = [scale, good steps in a row, skipped steps in all, the caller's] after a step
// whose scaled gradients were all finite (or not).
ANNEAL_HOST_DEVICE inline void update_loss_scale(float* state, bool finite, int growth_interval) {
  if (!finite) {
    state[0] = state[0] * 0.5f < kMinLossScale ? kMinLossScale : state[0] * 0.5f;
    state[1] = 0.0f;
    state[2] += 1.0f;
    return;
  }
  state[1] += 1.0f;
  if (state[1] >= float(growth_interval)) {
    state[0] = state[0] * 2.0f > kMaxLossScale ? kMaxLossScale : state[0] * 2.0f;
    state[1] = 0.0f;
  }
}

}  // namespace anneal::engine

#undef ANNEAL_HOST_DEVICE
