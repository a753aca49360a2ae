#include "engine/cpu/cpu_kernels.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "engine/cpu/cpu_gemm.h"

namespace anneal::cpu {
namespace {

// The arguments are copied to locals first: read through the struct, they
// could alias the arrays being written and would block vectorization.
#define ANNEAL_ADAM_LOOP                                                          \
  const float gs = a.grad_scale, l2 = a.l2, b1 = a.beta1, b2 = a.beta2;           \
  const float decay = a.decay, step = a.step_size, ibc2 = a.inv_sqrt_bc2;         \
  const float eps = a.epsilon;                                                    \
  for (std::int64_t i = 0; i < n; ++i) {                                          \
    const float grad = g[i] * gs + l2 * w[i];                                     \
    const float mi = b1 * m[i] + (1.0f - b1) * grad;                              \
    const float vi = b2 * v[i] + (1.0f - b2) * grad * grad;                       \
    m[i] = mi;                                                                    \
    v[i] = vi;                                                                    \
    w[i] = w[i] * decay - step * mi / (std::sqrt(vi) * ibc2 + eps);               \
  }

#define ANNEAL_SGD_LOOP                                                           \
  const float lr = a.lr, mom = a.momentum, wd = a.weight_decay, gs = a.grad_scale; \
  if (mom == 0.0f) {                                                              \
    for (std::int64_t i = 0; i < n; ++i) w[i] -= lr * (g[i] * gs + wd * w[i]);    \
  } else if (a.nesterov) {                                                        \
    for (std::int64_t i = 0; i < n; ++i) {                                        \
      const float grad = g[i] * gs + wd * w[i];                                   \
      const float vi = mom * velocity[i] + grad;                                  \
      velocity[i] = vi;                                                           \
      w[i] -= lr * (grad + mom * vi);                                             \
    }                                                                             \
  } else {                                                                        \
    for (std::int64_t i = 0; i < n; ++i) {                                        \
      const float vi = mom * velocity[i] + g[i] * gs + wd * w[i];                 \
      velocity[i] = vi;                                                           \
      w[i] -= lr * vi;                                                            \
    }                                                                             \
  }

// The __restrict__ qualifiers tell the vectorizer the arrays do not overlap
// (they are distinct tensors).
// Written with intrinsics: GCC keeps sqrt's errno branch (and so scalar
// code) whatever the optimize attribute says.
__attribute__((target("avx512f,avx512vl,fma"))) void adam_avx512(
    float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
    float* __restrict__ v, std::int64_t n, const AdamKernelArgs& a) {
  const __m512 gs = _mm512_set1_ps(a.grad_scale), l2 = _mm512_set1_ps(a.l2);
  const __m512 b1 = _mm512_set1_ps(a.beta1), c1 = _mm512_set1_ps(1.0f - a.beta1);
  const __m512 b2 = _mm512_set1_ps(a.beta2), c2 = _mm512_set1_ps(1.0f - a.beta2);
  const __m512 decay = _mm512_set1_ps(a.decay), step = _mm512_set1_ps(a.step_size);
  const __m512 ibc2 = _mm512_set1_ps(a.inv_sqrt_bc2), eps = _mm512_set1_ps(a.epsilon);
  const unsigned int saved_csr = _mm_getcsr();
  _mm_setcsr(saved_csr | 0x8040);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 wi = _mm512_loadu_ps(w + i);
    const __m512 grad = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(g + i), gs), _mm512_mul_ps(l2, wi));
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(c1, grad));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)),
                                    _mm512_mul_ps(_mm512_mul_ps(c2, grad), grad));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    // sqrt(v) as v * rsqrt(v) and 1/denom as rcp(denom), each estimate
    // (14 bits) refined by one Newton step to about 1 ulp: a third of the
    // cost of vsqrtps plus vdivps, which dominated the step's non-GEMM time.
    const __m512 half = _mm512_set1_ps(0.5f), three_halves = _mm512_set1_ps(1.5f), two = _mm512_set1_ps(2.0f);
    const __mmask16 positive = _mm512_cmp_ps_mask(vi, _mm512_setzero_ps(), _CMP_GT_OQ);
    __m512 r = _mm512_maskz_rsqrt14_ps(__mmask16(0xFFFF), vi);
    r = _mm512_mul_ps(r, _mm512_fnmadd_ps(_mm512_mul_ps(half, vi), _mm512_mul_ps(r, r), three_halves));
    const __m512 root = _mm512_maskz_mul_ps(positive, vi, r);
    const __m512 denom = _mm512_fmadd_ps(root, ibc2, eps);
    __m512 inv = _mm512_maskz_rcp14_ps(__mmask16(0xFFFF), denom);
    inv = _mm512_mul_ps(inv, _mm512_fnmadd_ps(denom, inv, two));
    _mm512_storeu_ps(w + i, _mm512_fnmadd_ps(_mm512_mul_ps(step, mi), inv, _mm512_mul_ps(wi, decay)));
  }
  _mm_setcsr(saved_csr);
  const std::int64_t rest = n - i;
  w += i, g += i, m += i, v += i;
  for (std::int64_t j = 0; j < rest; ++j) {
    const float grad = g[j] * a.grad_scale + a.l2 * w[j];
    const float mi = a.beta1 * m[j] + (1.0f - a.beta1) * grad;
    const float vi = a.beta2 * v[j] + (1.0f - a.beta2) * grad * grad;
    m[j] = mi;
    v[j] = vi;
    w[j] = w[j] * a.decay - a.step_size * mi / (std::sqrt(vi) * a.inv_sqrt_bc2 + a.epsilon);
  }
}

void adam_generic(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                  float* __restrict__ v, std::int64_t n, const AdamKernelArgs& a);

// The scalar loop's arithmetic eight lanes at a time: the same multiplies,
// adds, correctly rounded sqrt and divide in the same order, and no FMA
// (the target has none to contract them into), so it gives the scalar
// loop's bits exactly: an AVX2 server updates the weights as before, about
// eight times faster. The scalar loop's sqrt and divide per element made
// Adam a third of an AVX2 training step's time on the MLP of docs/examples.
__attribute__((target("avx2"))) void adam_avx2(
    float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
    float* __restrict__ v, std::int64_t n, const AdamKernelArgs& a) {
  const __m256 gs = _mm256_set1_ps(a.grad_scale), l2 = _mm256_set1_ps(a.l2);
  const __m256 b1 = _mm256_set1_ps(a.beta1), c1 = _mm256_set1_ps(1.0f - a.beta1);
  const __m256 b2 = _mm256_set1_ps(a.beta2), c2 = _mm256_set1_ps(1.0f - a.beta2);
  const __m256 decay = _mm256_set1_ps(a.decay), step = _mm256_set1_ps(a.step_size);
  const __m256 ibc2 = _mm256_set1_ps(a.inv_sqrt_bc2), eps = _mm256_set1_ps(a.epsilon);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wi = _mm256_loadu_ps(w + i);
    const __m256 grad = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), gs), _mm256_mul_ps(l2, wi));
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(c1, grad));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                    _mm256_mul_ps(_mm256_mul_ps(c2, grad), grad));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), ibc2), eps);
    _mm256_storeu_ps(w + i, _mm256_sub_ps(_mm256_mul_ps(wi, decay), _mm256_div_ps(_mm256_mul_ps(step, mi), denom)));
  }
  adam_generic(w + i, g + i, m + i, v + i, n - i, a);  // the tail: the loop itself
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

// One vpgatherdd fetches 16 dwords at arbitrary byte offsets: the im2col of
// a 3x3, 1-channel conv copies 3 dwords per output row, where a scalar loop
// spent more time on loop control than on copying.
__attribute__((target("avx512f"))) void gather_dwords_avx512(
    const std::uint8_t* src, const std::int32_t* offsets, std::int64_t n, std::uint32_t flip,
    std::uint8_t* dst) {
  const __m512i f = _mm512_set1_epi32(std::int32_t(flip));
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i index = _mm512_loadu_si512(offsets + i);
    // The masked form: GCC 12's unmasked one reads an uninitialized register.
    const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), __mmask16(0xFFFF), index, src, 1);
    _mm512_storeu_si512(dst + 4 * i, _mm512_xor_si512(v, f));
  }
  if (i < n) {
    const __mmask16 tail = __mmask16((1u << (n - i)) - 1);
    const __m512i index = _mm512_maskz_loadu_epi32(tail, offsets + i);
    const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), tail, index, src, 1);
    _mm512_mask_storeu_epi32(dst + 4 * i, tail, _mm512_xor_si512(v, f));
  }
}

void gather_dwords_generic(const std::uint8_t* src, const std::int32_t* offsets, std::int64_t n,
                           std::uint32_t flip, std::uint8_t* dst) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t v;
    std::memcpy(&v, src + offsets[i], 4);
    v ^= flip;
    std::memcpy(dst + 4 * i, &v, 4);
  }
}

}  // namespace

// One choice for every hand-written kernel (cpu_gemm.h, kernel_isa): the
// CPU's, lowered by ONEDNN_MAX_CPU_ISA as oneDNN's is. oneDNN's avx512_core
// implies AVX-512F, VL, BW and DQ, and this CPU has FMA with them.
bool kernels_use_avx512() { return kernel_isa() == KernelIsa::kAvx512; }

void adam_kernel(float* w, const float* g, float* m, float* v, std::int64_t n,
                 const AdamKernelArgs& a) {
  switch (kernel_isa()) {
    case KernelIsa::kAvx512: adam_avx512(w, g, m, v, n, a); break;
    case KernelIsa::kAvx2: adam_avx2(w, g, m, v, n, a); break;
    case KernelIsa::kScalar: adam_generic(w, g, m, v, n, a); break;
  }
}

void adam_kernel_scalar(float* w, const float* g, float* m, float* v, std::int64_t n, const AdamKernelArgs& a) {
  adam_generic(w, g, m, v, n, a);
}

void gather_dwords(const std::uint8_t* src, const std::int32_t* offsets, std::int64_t n,
                   std::uint32_t flip, std::uint8_t* dst) {
  if (kernels_use_avx512()) {
    gather_dwords_avx512(src, offsets, n, flip, dst);
  } else {
    gather_dwords_generic(src, offsets, n, flip, dst);
  }
}

void sgd_kernel(float* w, const float* g, float* velocity, std::int64_t n,
                const SgdKernelArgs& a) {
  if (kernels_use_avx512()) {
    sgd_avx512(w, g, velocity, n, a);
  } else {
    sgd_generic(w, g, velocity, n, a);
  }
}

}  // namespace anneal::cpu
