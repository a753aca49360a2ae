// No errno from sqrt: lets GCC vectorize the loops below.
#pragma GCC optimize("no-math-errno")

#include "engine/cpu/cpu_kernels.h"

#include <cmath>

namespace anneal::cpu {
namespace {

#define ANNEAL_ADAM_LOOP                                                          \
  for (std::int64_t i = 0; i < n; ++i) {                                          \
    const float grad = g[i] * a.grad_scale + a.l2 * w[i];                         \
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * grad;                    \
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * grad * grad;             \
    m[i] = mi;                                                                    \
    v[i] = vi;                                                                    \
    w[i] = w[i] * a.decay - a.step_size * mi / (std::sqrt(vi) * a.inv_sqrt_bc2 + a.epsilon); \
  }

#define ANNEAL_SGD_LOOP                                                           \
  if (a.momentum == 0.0f) {                                                       \
    for (std::int64_t i = 0; i < n; ++i)                                          \
      w[i] -= a.lr * (g[i] * a.grad_scale + a.weight_decay * w[i]);               \
  } else {                                                                        \
    for (std::int64_t i = 0; i < n; ++i) {                                        \
      const float grad = g[i] * a.grad_scale + a.weight_decay * w[i];             \
      const float vi = a.momentum * velocity[i] + grad;                           \
      velocity[i] = vi;                                                           \
      w[i] -= a.lr * (a.nesterov ? grad + a.momentum * vi : vi);                  \
    }                                                                             \
  }

// The __restrict__ qualifiers tell the vectorizer the arrays do not overlap
// (they are distinct tensors).
__attribute__((target("avx512f,avx512vl,fma"))) void adam_avx512(
    float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
    float* __restrict__ v, std::int64_t n, const AdamKernelArgs& a) {
  ANNEAL_ADAM_LOOP
}

void adam_generic(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                  float* __restrict__ v, std::int64_t n, const AdamKernelArgs& a) {
  ANNEAL_ADAM_LOOP
}

__attribute__((target("avx512f,avx512vl,fma"))) void sgd_avx512(
    float* __restrict__ w, const float* __restrict__ g, float* __restrict__ velocity,
    std::int64_t n, const SgdKernelArgs& a) {
  ANNEAL_SGD_LOOP
}

void sgd_generic(float* __restrict__ w, const float* __restrict__ g,
                 float* __restrict__ velocity, std::int64_t n, const SgdKernelArgs& a) {
  ANNEAL_SGD_LOOP
}

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("fma");
  return yes;
}

}  // namespace

void adam_kernel(float* w, const float* g, float* m, float* v, std::int64_t n,
                 const AdamKernelArgs& a) {
  if (has_avx512()) {
    adam_avx512(w, g, m, v, n, a);
  } else {
    adam_generic(w, g, m, v, n, a);
  }
}

void sgd_kernel(float* w, const float* g, float* velocity, std::int64_t n,
                const SgdKernelArgs& a) {
  if (has_avx512()) {
    sgd_avx512(w, g, velocity, n, a);
  } else {
    sgd_generic(w, g, velocity, n, a);
  }
}

}  // namespace anneal::cpu
