// One bin of the piecewise-linear encoding (PiecewiseLinearOp, anneal/
// backend.h), written once: the CPU loops, the CUDA kernels and the ONNX
// export call these, so all take the same fp32 steps in the same order and
// give the same bits. Plain functions of floats: a GPU kernel can call them
// (ANNEAL_HOST_DEVICE). Thread-safe: pure functions.
#pragma once

#ifdef __CUDACC__
#define ANNEAL_HOST_DEVICE __host__ __device__
#else
#define ANNEAL_HOST_DEVICE
#endif

namespace anneal {

// Bin t of a feature with T bins and edges b[0..T] (b = the feature's row).
struct PiecewiseBin {
  float lower;    // b[t]
  float inverse;  // 1/(b[t+1] − b[t]) in fp32; 0 for an unused bin (b[t+1] == b[t])
  bool open_below;  // t == 0: no clamp at 0
  bool open_above;  // b[t+1] == b[T]: the last used bin, no clamp at 1
};

ANNEAL_HOST_DEVICE inline PiecewiseBin piecewise_bin(const float* b, int t, int bins) {
  const float width = b[t + 1] - b[t];
  PiecewiseBin bin;
  bin.lower = b[t];
  bin.inverse = width > 0.0f ? 1.0f / width : 0.0f;
  bin.open_below = t == 0;
  bin.open_above = b[t + 1] == b[bins];
  return bin;
}

// y = clamp((x − b[t])·(1/w), lo, hi), 0 for an unused bin.
ANNEAL_HOST_DEVICE inline float piecewise_value(const PiecewiseBin& bin, float x) {
  if (bin.inverse == 0.0f) return 0.0f;
  const float z = (x - bin.lower) * bin.inverse;
  if (!bin.open_below && z < 0.0f) return 0.0f;
  if (!bin.open_above && z > 1.0f) return 1.0f;
  return z;
}

// ∂y/∂x: 1/w strictly inside the clamp, 0 on its flat parts and in an unused bin.
ANNEAL_HOST_DEVICE inline float piecewise_slope(const PiecewiseBin& bin, float x) {
  if (bin.inverse == 0.0f) return 0.0f;
  const float z = (x - bin.lower) * bin.inverse;
  if (!bin.open_below && !(z > 0.0f)) return 0.0f;
  if (!bin.open_above && !(z < 1.0f)) return 0.0f;
  return bin.inverse;
}

}  // namespace anneal
