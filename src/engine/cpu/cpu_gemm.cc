#include "engine/cpu/cpu_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace anneal::cpu {
namespace {

constexpr std::int64_t kPanel = 16;  // output columns per packed panel
constexpr int kMaxPanels = 6;        // panels one tile may span
// Below this many multiply-adds a product runs on the calling thread alone:
// waking the OpenMP team would cost more than it saves.
constexpr std::int64_t kParallelFmas = std::int64_t{1} << 16;

// One register tile's work: R rows by P panels of y, over the whole of k.
struct Tile {
  const float* x;              // the tile's first row
  std::int64_t ldx;
  std::int64_t k;              // the reduction length (in)
  const float* w;              // the tile's first panel
  std::int64_t panel_stride;   // floats from one panel to the next (in · 16)
  const float* bias;           // padded bias at the tile's first column
  float* y;                    // y at the tile's first row and column
  std::int64_t ldy;
  std::int64_t cols;           // y columns from the first one that exist
  bool relu;
};
using TileFn = void (*)(const Tile&);

// Each kernel keeps R·P accumulators (times 2 for AVX2, whose panel is two
// registers) plus the panel values and one broadcast row value in
// registers: 32 vector registers on AVX-512, 16 on AVX2.
constexpr int avx512_panels(int rows) { return rows == 0 ? 0 : std::min(kMaxPanels, 24 / rows); }
constexpr int avx2_panels(int rows) { return rows == 0 ? 0 : std::min(kMaxPanels, 6 / rows); }
constexpr int kAvx512Rows = 12;
constexpr int kAvx2Rows = 6;

// The loops over R and P have constant bounds and are unrolled, so the
// accumulators stay in registers. For every (row, column) the arithmetic
// is acc = fma(x[k], w[k], acc) for k in order, then acc + bias, then relu
// as max(v, 0) = (v > 0 ? v : 0): exactly what scalar_rows() does.
template <int R, int P>
__attribute__((target("avx512f"))) void tile_avx512(const Tile& t) {
  __m512 acc[R][P];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const float* xr[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) xr[r] = t.x + r * t.ldx;
  for (std::int64_t k = 0; k < t.k; ++k) {
    __m512 w[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) w[p] = _mm512_loadu_ps(t.w + p * t.panel_stride + k * kPanel);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(xr[r][k]);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xv, w[p], acc[r][p]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const std::int64_t left = t.cols - p * kPanel;
    if (left <= 0) break;
    const auto mask = static_cast<__mmask16>(left >= kPanel ? 0xFFFFu : (1u << left) - 1u);
    const __m512 b = _mm512_loadu_ps(t.bias + p * kPanel);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512 v = _mm512_add_ps(acc[r][p], b);
      // maskz_max: _mm512_max_ps trips GCC 12's -Wmaybe-uninitialized (its
      // _mm512_undefined_ps pass-through); with every lane kept they are one.
      if (t.relu) v = _mm512_maskz_max_ps(__mmask16(0xFFFF), v, zero);
      _mm512_mask_storeu_ps(t.y + r * t.ldy + p * kPanel, mask, v);
    }
  }
}

template <int R, int P>
__attribute__((target("avx2,fma"))) void tile_avx2(const Tile& t) {
  __m256 acc[R][P][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p][0] = acc[r][p][1] = _mm256_setzero_ps();
  const float* xr[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) xr[r] = t.x + r * t.ldx;
  for (std::int64_t k = 0; k < t.k; ++k) {
    __m256 w[P][2];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      w[p][0] = _mm256_loadu_ps(t.w + p * t.panel_stride + k * kPanel);
      w[p][1] = _mm256_loadu_ps(t.w + p * t.panel_stride + k * kPanel + 8);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(xr[r] + k);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        acc[r][p][0] = _mm256_fmadd_ps(xv, w[p][0], acc[r][p][0]);
        acc[r][p][1] = _mm256_fmadd_ps(xv, w[p][1], acc[r][p][1]);
      }
    }
  }
  const __m256 zero = _mm256_setzero_ps();
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const std::int64_t left = t.cols - p * kPanel - h * 8;
      if (left <= 0) break;
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::min<std::int64_t>(left, 8))), lane);
      const __m256 b = _mm256_loadu_ps(t.bias + p * kPanel + h * 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        __m256 v = _mm256_add_ps(acc[r][p][h], b);
        if (t.relu) v = _mm256_max_ps(v, zero);
        _mm256_maskstore_ps(t.y + r * t.ldy + p * kPanel + h * 8, mask, v);
      }
    }
}

// Tables of the tile kernels by [rows][panels]; null where a tile of that
// shape would not fit the registers (never asked for).
using TileTable = std::array<std::array<TileFn, kMaxPanels + 1>, kAvx512Rows + 1>;

template <int R, int P>
constexpr TileFn avx512_fn() {
  if constexpr (R >= 1 && R <= kAvx512Rows && P >= 1 && P <= avx512_panels(R)) return &tile_avx512<R, P>;
  return nullptr;
}
template <int R, int P>
constexpr TileFn avx2_fn() {
  if constexpr (R >= 1 && R <= kAvx2Rows && P >= 1 && P <= avx2_panels(R)) return &tile_avx2<R, P>;
  return nullptr;
}
template <int R, std::size_t... P>
constexpr std::array<TileFn, kMaxPanels + 1> avx512_row(std::index_sequence<P...>) {
  return {avx512_fn<R, int(P)>()...};
}
template <int R, std::size_t... P>
constexpr std::array<TileFn, kMaxPanels + 1> avx2_row(std::index_sequence<P...>) {
  return {avx2_fn<R, int(P)>()...};
}
template <std::size_t... R>
constexpr TileTable avx512_table(std::index_sequence<R...>) {
  return {avx512_row<int(R)>(std::make_index_sequence<kMaxPanels + 1>())...};
}
template <std::size_t... R>
constexpr TileTable avx2_table(std::index_sequence<R...>) {
  return {avx2_row<int(R)>(std::make_index_sequence<kMaxPanels + 1>())...};
}
constexpr TileTable kAvx512Tiles = avx512_table(std::make_index_sequence<kAvx512Rows + 1>());
constexpr TileTable kAvx2Tiles = avx2_table(std::make_index_sequence<kAvx512Rows + 1>());

}  // namespace

KernelIsa kernel_isa() {
  // oneDNN's effective ISA (ONEDNN_MAX_CPU_ISA lowers it) capped by what
  // the CPU reports, read once.
  static const KernelIsa chosen = [] {
    const auto effective = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    auto allows = [&](dnnl::cpu_isa level) {
      const auto bits = static_cast<unsigned>(level);
      return (effective & bits) == bits;
    };
    if (allows(dnnl::cpu_isa::avx512_core) && __builtin_cpu_supports("avx512f")) return KernelIsa::kAvx512;
    if (allows(dnnl::cpu_isa::avx2) && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return KernelIsa::kAvx2;
    return KernelIsa::kScalar;
  }();
  return chosen;
}

const char* kernel_isa_name(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512: return "avx512";
    case KernelIsa::kAvx2: return "avx2";
    case KernelIsa::kScalar: break;
  }
  return "scalar";
}

void RowInvariantProduct::set_weights(const float* weights, const float* bias, std::int64_t out, std::int64_t in,
                                      MemoryAllocator& allocator) {
  out_ = out;
  in_ = in;
  panels_ = (out + kPanel - 1) / kPanel;
  const auto packed_floats = std::size_t(panels_ * in * kPanel);
  auto* packed = static_cast<float*>(packed_.ensure(packed_floats * sizeof(float), allocator));
  std::memset(packed, 0, packed_floats * sizeof(float));
  for (std::int64_t o = 0; o < out; ++o)
    for (std::int64_t k = 0; k < in; ++k)
      packed[(o / kPanel * in + k) * kPanel + o % kPanel] = weights[o * in + k];
  auto* b = static_cast<float*>(bias_.ensure(std::size_t(panels_ * kPanel) * sizeof(float), allocator));
  std::fill_n(b, panels_ * kPanel, 0.0f);
  std::copy_n(bias, out, b);
}

void RowInvariantProduct::run(const float* x, std::int64_t ldx, std::int64_t rows, bool relu, float* y) const {
  if (rows <= 0 || out_ == 0) return;
  const auto* packed = static_cast<const float*>(packed_.data());
  const auto* bias = static_cast<const float*>(bias_.data());
  // (An OpenMP region costs even with a team of one.)
  const bool parallel = rows * out_ * in_ >= kParallelFmas && omp_get_max_threads() > 1;
  const KernelIsa chosen = kernel_isa();
  if (chosen == KernelIsa::kScalar) {
    // One std::fma chain per element, as the vector tiles compute it.
#pragma omp parallel for schedule(static) if (parallel)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < out_; ++o) {
        const float* w = packed + (o / kPanel) * in_ * kPanel + o % kPanel;
        float acc = 0.0f;
        for (std::int64_t k = 0; k < in_; ++k) acc = std::fma(x[r * ldx + k], w[k * kPanel], acc);
        const float v = acc + bias[o];
        y[r * out_ + o] = relu ? (v > 0.0f ? v : 0.0f) : v;
      }
    return;
  }
  const TileTable& tiles = chosen == KernelIsa::kAvx512 ? kAvx512Tiles : kAvx2Tiles;
  const int max_rows = chosen == KernelIsa::kAvx512 ? kAvx512Rows : kAvx2Rows;
  auto panels_for = [&](std::int64_t r) {
    return std::int64_t(chosen == KernelIsa::kAvx512 ? avx512_panels(int(r)) : avx2_panels(int(r)));
  };
  // Work items: the full row blocks by groups of panels (group-major, so
  // a thread's consecutive items share panels), then the last, short
  // block's groups, which take more panels per tile.
  const std::int64_t blocks = rows / max_rows, tail_rows = rows % max_rows;
  const std::int64_t full_panels = panels_for(max_rows), tail_panels = panels_for(tail_rows);
  const std::int64_t full_groups = (panels_ + full_panels - 1) / full_panels;
  const std::int64_t tail_groups = tail_rows ? (panels_ + tail_panels - 1) / tail_panels : 0;
  const std::int64_t items = full_groups * blocks + tail_groups;
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t i = 0; i < items; ++i) {
    std::int64_t group, first_row, tile_rows, group_panels;
    if (i < full_groups * blocks) {
      group = i / blocks;
      first_row = (i % blocks) * max_rows;
      tile_rows = max_rows;
      group_panels = full_panels;
    } else {
      group = i - full_groups * blocks;
      first_row = blocks * max_rows;
      tile_rows = tail_rows;
      group_panels = tail_panels;
    }
    const std::int64_t first_panel = group * group_panels;
    const std::int64_t panels = std::min(group_panels, panels_ - first_panel);
    const Tile t{x + first_row * ldx,
                 ldx,
                 in_,
                 packed + first_panel * in_ * kPanel,
                 in_ * kPanel,
                 bias + first_panel * kPanel,
                 y + first_row * out_ + first_panel * kPanel,
                 out_,
                 out_ - first_panel * kPanel,
                 relu};
    tiles[std::size_t(tile_rows)][std::size_t(panels)](t);
  }
}

InvariantDense::InvariantDense(CpuContext& ctx, std::int64_t out, Activation fused, DType compute)
    : ctx_(ctx), out_(out), fused_(fused), compute_(compute) {
  if (compute != DType::kF32 && compute != DType::kBF16)
    throw failure(std::string("cpu backend: no batch-invariant dense in ") + dtype_name(compute));
  if (fused != Activation::kNone && fused != Activation::kRelu && fused != Activation::kTanh &&
      fused != Activation::kSigmoid)
    throw failure(std::string("cpu backend: dense cannot fuse ") + activation_name(fused));
}

void InvariantDense::set_weights(const float* weights, const float* bias, std::int64_t in) {
  in_ = in;
  if (compute_ == DType::kF32) {
    product_.set_weights(weights, bias, out_, in, *ctx_.allocator);
    return;
  }
  std::vector<float> rounded(weights, weights + out_ * in);
  for (float& w : rounded) w = bf16_to_f32(f32_to_bf16(w));
  product_.set_weights(rounded.data(), bias, out_, in, *ctx_.allocator);
}

void InvariantDense::forward(const Tensor& x, Tensor& y) {
  if (!has_weights()) throw failure("cpu backend: batch-invariant dense run before its weights were set");
  const std::int64_t n = x.batch();
  if (x.elements() != n * in_)
    throw failure("dense: input " + x.dims().str() + " does not have " + std::to_string(in_) + " features");
  // The rows as plain fp32: x itself when it is, else converted (a reorder
  // moves or widens values exactly).
  const MemDesc plain_f32 = plain_md(x.dims(), DType::kF32);
  const float* rows = nullptr;
  const bool round_input = compute_ == DType::kBF16 && x.dtype() == DType::kF32;
  if (md_of(x) == plain_f32 && !round_input) {
    rows = static_cast<const float*>(x.data());
  } else {
    auto* converted = static_cast<float*>(rows_.ensure(plain_f32.get_size(), *ctx_.allocator));
    reorders_.run(ctx_, md_of(x), x.data(), plain_f32, converted);
    ctx_.stream.wait();  // the host kernel reads it next
    if (round_input)
      for (std::int64_t i = 0; i < n * in_; ++i) converted[i] = bf16_to_f32(f32_to_bf16(converted[i]));
    rows = converted;
  }
  if (n != layout_rows_) {
    layout_ = make_layout(plain_md(Dims{n, out_}, compute_));
    layout_rows_ = n;
  }
  shape_output(ctx_, y, Dims{n, out_}, layout_);
  float* result = compute_ == DType::kF32
                      ? static_cast<float*>(y.data())
                      : static_cast<float*>(result_.ensure(std::size_t(n * out_) * sizeof(float), *ctx_.allocator));
  product_.run(rows, in_, n, fused_ == Activation::kRelu, result);
  if (fused_ == Activation::kTanh || fused_ == Activation::kSigmoid) {
    const std::int64_t elements = n * out_;
    ActivationPlan* plan = nullptr;
    for (auto& p : activations_)
      if (p->elements == elements) plan = p.get();
    if (plan == nullptr) {
      auto made = std::make_unique<ActivationPlan>();
      made->elements = elements;
      const MemDesc md = plain_md(Dims{elements}, DType::kF32);
      try {
        dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, eltwise_algorithm(fused_, false), md,
                                      0.0f, 0.0f);
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::eltwise_forward::primitive_desc pd(d, attr, ctx_.engine);
        made->exec = Exec(dnnl::eltwise_forward(pd), pd, ctx_, {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
      } catch (const dnnl::error& e) {
        rethrow_dnnl(e, std::string(activation_name(fused_)) + " of a dense output");
      }
      activations_.push_back(std::move(made));
      plan = activations_.back().get();
    }
    plan->exec.set(DNNL_ARG_SRC, result);
    plan->exec.set(DNNL_ARG_DST, result);
    plan->exec.run(ctx_);
    ctx_.stream.wait();
  }
  if (compute_ == DType::kBF16) {
    auto* out = static_cast<std::uint16_t*>(y.data());
    for (std::int64_t i = 0; i < n * out_; ++i) out[i] = f32_to_bf16(result[i]);
  }
}

}  // namespace anneal::cpu
