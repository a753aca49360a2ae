// The int8 dense and conv of an inference-only network
// (Backend::inference_dense / inference_conv with int8): s8 weights with a
// scale per output channel, the input quantized (u8 after a relu, else s8),
// the bias pre-divided into the accumulator's scale, and the output rescaled
// to the next layer's scale by oneDNN's output scales (oneDNN 2.x:
// dst = oscale · (Σ src·wei + bias), then the post-ops).
//
// Exact on every ISA. oneDNN's int8 kernels multiply u8 by s8. With VNNI
// (vpdpbusd) each product goes straight into a 32-bit sum. Without it
// (AVX2, AVX-512 without VNNI) they use vpmaddubsw, which adds two
// neighbouring products into a SATURATING 16-bit sum: 255·127·2 = 64770 does
// not fit in 32767, so large inputs against large weights silently clip; and
// for an s8 input oneDNN's non-VNNI convolutions halve the weights (a lost
// bit). What stays exact there is a u8 input against weights of |w| <= 64
// (255·64·2 = 32640). So on such a CPU (Int8Exactness) these ops
//   * give oneDNN u8 inputs only: an s8 byte q goes in as q + 128 (its top
//     bit flipped), and 128·Σw comes off the bias in accumulator units;
//   * split weights beyond ±64 in two halves, hi = w >> 1 and lo = w − hi
//     (both within ±64), against two copies of each input row:
//     Σ x·hi + Σ x·lo = Σ x·w, exactly, at twice the multiply cost;
//   * run a conv on oneDNN's own int8 conv only for a u8 input and weights
//     within ±64 (the usual case: a conv after a relu, 7-bit weights), else
//     as im2col and a matmul (split weights' copies are columns there).
// quantize_model gives such a CPU weights within ±64 (int8_weight_levels),
// which need no split; a model quantized with ±127 on a VNNI CPU still runs
// exactly, only slower.
#include <cstring>
#include <string_view>

#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_ops.h"

namespace anneal::cpu {
namespace {

using tag = memory::format_tag;
using dt = memory::data_type;

bool is_int8(DType d) { return d == DType::kS8 || d == DType::kU8; }

// The largest |weight| a non-VNNI product is exact for (see the top).
constexpr int kPairExactWeight = 64;

// (O, I) weights -> (O, copies·I): each row as is (copies 1), or its two
// halves hi = w >> 1 and lo = w − hi side by side (copies 2).
std::vector<std::int8_t> split_weights(const std::vector<std::int8_t>& q, std::int64_t out, std::int64_t in,
                                       int copies) {
  if (copies == 1) return q;
  std::vector<std::int8_t> w(std::size_t(out * 2 * in));
  for (std::int64_t o = 0; o < out; ++o)
    for (std::int64_t i = 0; i < in; ++i) {
      const int v = q[std::size_t(o * in + i)], hi = v >> 1;  // arithmetic shift: floor(v / 2)
      w[std::size_t(o * 2 * in + i)] = std::int8_t(hi);
      w[std::size_t(o * 2 * in + in + i)] = std::int8_t(v - hi);
    }
  return w;
}

// dst (n, copies·in) u8 = each row of src (n, in) `copies` times, every byte
// XORed with `flip` (0x80: s8 q to u8 q + 128).
void widen_rows(const std::uint8_t* src, std::int64_t n, std::int64_t in, int copies, std::uint8_t flip,
                std::uint8_t* dst) {
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < n; ++b)
    for (int c = 0; c < copies; ++c) {
      const std::uint8_t* from = src + b * in;
      std::uint8_t* to = dst + (b * copies + c) * in;
      for (std::int64_t i = 0; i < in; ++i) to[i] = from[i] ^ flip;
    }
}

// What int8 dense and conv share: the weights checked, the per-channel
// output scales and the bias in accumulator units, the primitive attribute.
class Int8Layer {
 protected:
  Int8Layer(CpuContext& ctx, const InferenceWeights& w, const Int8Activations& quant, Activation fused,
            std::int64_t out, std::int64_t fan_in, const std::string& what)
      : ctx_(ctx), quant_(quant), fused_(fused), out_(out) {
    if (std::int64_t(w.q.size()) != out * fan_in || std::int64_t(w.scales.size()) != out ||
        std::int64_t(w.bias.size()) != out || !(quant.input_scale > 0) ||
        (quant.output != DType::kF32 && !(quant.output_scale > 0)))
      throw corrupt("inference: " + what + " lacks its int8 weights or scales");
    if (quant.output == DType::kU8 && fused != Activation::kRelu)
      throw usage_error("inference: " + what + ": a u8 output needs a fused relu");
    if (quant.output != DType::kF32 && fused != Activation::kNone && fused != Activation::kRelu)
      throw usage_error("inference: " + what + ": tanh/sigmoid need an f32 output");
    // acc = Σ q_x·q_w is in units of s_in·s_w[o]; dst = act(acc + bias/(s_in·s_w[o])) · s_in·s_w[o] / s_out.
    // Relu commutes with the positive rescale; tanh/sigmoid come here only
    // with an f32 output (s_out = 1), where the post-op sees real values.
    const float s_in = quant.input_scale;
    const float s_out = quant.output == DType::kF32 ? 1.0f : quant.output_scale;
    oscales_.resize(std::size_t(out));
    bias_.resize(std::size_t(out));
    for (std::int64_t i = 0; i < out; ++i) {
      const float acc_scale = s_in * w.scales[std::size_t(i)];
      oscales_[std::size_t(i)] = acc_scale / s_out;
      bias_[std::size_t(i)] = w.bias[std::size_t(i)] / acc_scale;
    }
    q_ = w.q;
    pairs_saturate_ = int8_pairs_saturate();
    int max_w = 0;
    for (std::int8_t v : q_) max_w = std::max(max_w, std::abs(int(v)));
    copies_ = pairs_saturate_ && max_w > kPairExactWeight ? 2 : 1;
  }

  // 128 · Σ_i q[o, i] per output channel: what a u8 input of zero point 128
  // adds to each accumulator.
  std::vector<float> zero_point_share() const {
    std::vector<float> share(std::size_t(out_), 0.0f);
    const std::int64_t fan_in = std::int64_t(q_.size()) / out_;
    for (std::int64_t o = 0; o < out_; ++o) {
      std::int64_t sum = 0;
      for (std::int64_t i = 0; i < fan_in; ++i) sum += q_[std::size_t(o * fan_in + i)];
      share[std::size_t(o)] = float(128 * sum);
    }
    return share;
  }

  dnnl::primitive_attr attr() const {
    dnnl::primitive_attr attr = fused_attr(fused_);
    attr.set_output_scales(1 << 1, oscales_);  // per dst channel (dim 1)
    return attr;
  }

  // The type x is quantized to: its own when int8, else s8.
  static dt src_type(const Tensor& x) { return is_int8(x.dtype()) ? to_dnnl(x.dtype()) : dt::s8; }
  // The factor taking x to the primitive's input scale: an int8 x already
  // is at quant.input_scale (the builder's promise); an f32 x is quantized.
  float input_ratio(const Tensor& x) const { return is_int8(x.dtype()) ? 1.0f : 1.0f / quant_.input_scale; }

  CpuContext& ctx_;
  Int8Activations quant_;
  Activation fused_;
  std::int64_t out_;
  std::vector<float> oscales_, bias_;  // (O)
  std::vector<std::int8_t> q_;         // (O, I...) row-major
  // This CPU's int8 products add pairs into 16 bits (no VNNI): inputs go in
  // as u8, weights beyond ±64 are split over `copies_` = 2 (see the top).
  bool pairs_saturate_ = false;
  int copies_ = 1;
  Reorders reorders_;
  std::string kernel_;
};

// ---- dense ----------------------------------------------------------------------

class CpuInt8DenseOp final : public InferenceOp, private Int8Layer {
 public:
  CpuInt8DenseOp(CpuContext& ctx, const InferenceDenseSpec& spec)
      : Int8Layer(ctx, spec.weights, spec.quant, spec.fused, spec.out, spec.in.product(),
                  "dense " + spec.in.str() + " -> " + std::to_string(spec.out)),
        in_(spec.in) {}

  // x (N, I) or (N, C, H, W): f32, s8 or u8, any layout -> y (N, O) at quant.output
  void forward(const Tensor& x, Tensor& y) override {
    Plan& plan = plan_for(x);
    const void* src = x.data();
    if (!plan.hwc) {
      // The (N, I) row-major matrix: plain x (an image reordered to plain
      // C, H, W order first, exactly), quantized when it is f32.
      const void* plain = conform(ctx_, reorders_, x, plain_md(x.dims(), x.dtype()), plain_x_);
      src = plain;
      if (!is_int8(x.dtype())) {
        const MemDesc q_md({x.batch(), in_.product()}, src_type(x), tag::ab);
        void* q = quantized_x_.ensure(q_md.get_size(), *ctx_.allocator);
        reorders_.run_scaled(ctx_, MemDesc({x.batch(), in_.product()}, dt::f32, tag::ab), plain, q_md, q,
                             input_ratio(x));
        src = q;
      }
    }
    if (plan.widen) {
      ctx_.stream.wait();  // the quantized rows must be complete before the host loop reads them
      void* wide = widened_x_.ensure(plan.src_md.get_size(), *ctx_.allocator);
      widen_rows(static_cast<const std::uint8_t*>(src), x.batch(), in_.product(), copies_, plan.flip,
                 static_cast<std::uint8_t*>(wide));
      src = wide;
    }
    shape_output(ctx_, y, Dims{x.batch(), out_}, plan.y_layout);
    plan.exec.set(DNNL_ARG_SRC, src);
    plan.exec.set(DNNL_ARG_WEIGHTS, plan.weights.data());
    plan.exec.set(DNNL_ARG_BIAS, plan.bias.data());
    plan.exec.set(DNNL_ARG_DST, y.data());
    plan.exec.run(ctx_);
    kernel_ = plan.hwc ? "int8 inner product (image read in H, W, C order)" : "int8 inner product";
    if (copies_ > 1) kernel_ += ", weights split in two halves";
  }

  std::string kernel() const override { return kernel_; }

 private:
  struct Plan {
    MemDesc x_md, src_md;
    bool hwc = false;        // x is an int8 image stored (N, H, W, C), read as it is
    bool widen = false;      // a host pass makes the u8 (N, copies·I) matrix the product reads
    std::uint8_t flip = 0;   // 0x80 when that pass turns s8 bytes into u8 + 128
    std::vector<float> bias; // bias_, less the zero point's share when flipped
    std::shared_ptr<const CpuLayout> y_layout;
    Exec exec;
    ScratchBuffer weights;
  };

  Plan& plan_for(const Tensor& x) {
    const MemDesc& x_md = md_of(x);
    if (Plan* p = find_plan(plans_, x_md)) return *p;
    if (x.dims().without_batch().product() != in_.product())
      throw failure("int8 dense: input " + x.dims().str() + " does not match " + in_.str());
    auto plan = std::make_unique<Plan>();
    plan->x_md = x_md;
    const std::int64_t n = x.batch(), in = in_.product(), o = out_;
    // An int8 image in (N, H, W, C), as the int8 conv and pool leave it,
    // already is a row-major (N, H·W·C) matrix: read it as such with the
    // weights permuted once to match, instead of reordering every batch to
    // (N, C, H, W), the order Network flattens in.
    const Dims& d = x.dims();
    plan->hwc = d.rank() == 4 && is_int8(x.dtype()) &&
                x_md == MemDesc(to_dnnl_dims(d), to_dnnl(x.dtype()), tag::acdb);
    // Where pairs saturate, the product reads u8 only: s8 rows are flipped
    // (and copied `copies_` times) by widen_rows.
    const dt bytes = src_type(x);
    plan->flip = pairs_saturate_ && bytes == dt::s8 ? 0x80 : 0;
    plan->widen = pairs_saturate_ && (plan->flip != 0 || copies_ > 1);
    plan->src_md = MemDesc({n, copies_ * in}, pairs_saturate_ ? dt::u8 : bytes, tag::ab);
    plan->bias = bias_;
    if (plan->flip) {
      const std::vector<float> share = zero_point_share();
      for (std::int64_t i = 0; i < o; ++i) plan->bias[std::size_t(i)] -= share[std::size_t(i)];
    }
    const MemDesc y_md({n, o}, to_dnnl(quant_.output), tag::ab), bias_md({o}, dt::f32, tag::a);
    plan->y_layout = make_layout(y_md);
    try {
      dnnl::inner_product_forward::desc desc(dnnl::prop_kind::forward_inference, plan->src_md,
                                             MemDesc({o, copies_ * in}, dt::s8, tag::any), bias_md, y_md);
      dnnl::inner_product_forward::primitive_desc pd(desc, attr(), ctx_.engine);
      plan->exec = Exec(dnnl::inner_product_forward(pd), pd, ctx_,
                        {{DNNL_ARG_SRC, plan->src_md},
                         {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                         {DNNL_ARG_BIAS, bias_md},
                         {DNNL_ARG_DST, y_md}});
      void* w = plan->weights.ensure(pd.weights_desc().get_size(), *ctx_.allocator);
      const MemDesc plain_w({o, copies_ * in}, dt::s8, tag::ab);
      std::vector<std::int8_t> rows = q_;
      if (plan->hwc) {
        // Weights (O, C, H, W) row-major -> (O, H, W, C) row-major, the
        // order of the input's features.
        const memory::dims w4{o, d[1], d[2], d[3]};
        reorder_now(ctx_, MemDesc(w4, dt::s8, tag::abcd), q_.data(), MemDesc(w4, dt::s8, tag::acdb), rows.data());
      }
      const std::vector<std::int8_t> split = split_weights(rows, o, in, copies_);
      reorder_now(ctx_, plain_w, split.data(), pd.weights_desc(), w);
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "int8 dense for input " + md_string(x_md));
    }
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }

  Dims in_;
  std::vector<std::unique_ptr<Plan>> plans_;
  ScratchBuffer plain_x_, quantized_x_, widened_x_;
};

// ---- conv -----------------------------------------------------------------------

// The geometry of a convolution lowered to a matrix product (im2col): each
// output pixel becomes one row of its input patch in (C, KH, KW) order, each
// run of KW bytes padded to kq (a multiple of 4, VNNI's group of bytes):
// row[(c·k + ky)·kq + kx] = input[c][y·stride + ky][x·stride + kx].
// The padding columns meet zero weights, so im2col copies whole kq-byte runs
// and leaves whatever follows each run's k bytes in them. With copies = 2
// (split weights, see the top) each row holds its patch twice, side by side.
//
// Rows are ordered (n, oh, j, ow') with ow = group·ow' + j. With group 1
// that is plain (N, OH, OW): the product (rows, O) is the conv's output in
// (N, H, W, C). With group = a following non-overlapping pooling window p,
// the p×p pixels each pooled output reads lie in p² contiguous runs of
// OW/p pixels, so the pooling reads the product as (N·OH/p, (OW/p)·O, p, p)
// in (N, H, W, C): one big channel vector per output row instead of one
// small one per output pixel (oneDNN's int8 pooling runs a kernel call per
// output pixel and vector).
struct Im2col {
  std::int64_t c = 0, hp = 0, wp = 0;  // input channels, padded input height and width
  std::int64_t oh = 0, ow = 0, k = 0, stride = 1, group = 1, copies = 1;
  std::uint8_t flip = 0;  // XORed into every byte copied (0x80: s8 to u8 + 128)
  std::int64_t kq() const { return (k + 3) / 4 * 4; }
  std::int64_t patch_cols() const { return c * k * kq(); }
  std::int64_t cols() const { return copies * patch_cols(); }
  std::int64_t rows_per_image() const { return oh * ow; }
  // Bytes im2col may read past the end of the padded input.
  std::int64_t overread() const { return kq() - k; }
};

// The byte offsets of the dwords of one output image row's ow matmul rows,
// in (j, ow') order, from the first input byte of its top window row: the
// same for every y, so im2col is one gather per output image row.
std::vector<std::int32_t> im2col_offsets(const Im2col& g) {
  std::vector<std::int32_t> offsets;
  offsets.reserve(std::size_t(g.ow * g.cols() / 4));
  for (std::int64_t j = 0; j < g.group; ++j)
    for (std::int64_t x = 0; x < g.ow / g.group; ++x)
      for (std::int64_t copy = 0; copy < g.copies; ++copy)
        for (std::int64_t ch = 0; ch < g.c; ++ch)
          for (std::int64_t ky = 0; ky < g.k; ++ky)
            for (std::int64_t q = 0; q < g.kq(); q += 4)
              offsets.push_back(std::int32_t(ch * g.hp * g.wp + ky * g.wp + (g.group * x + j) * g.stride + q));
  return offsets;
}

// dst (n·oh·ow, cols()) from src (n, c, hp, wp), already zero-padded and
// followed by overread() readable bytes; `offsets` from im2col_offsets(g).
void im2col(const Im2col& g, const std::vector<std::int32_t>& offsets, const std::uint8_t* src,
            std::uint8_t* dst, std::int64_t n) {
  const std::int64_t image = g.c * g.hp * g.wp, row_step = g.stride * g.wp, oh = g.oh;
  const std::int64_t out_row = g.ow * g.cols(), count = std::int64_t(offsets.size());
  const std::uint32_t flip4 = 0x01010101u * g.flip;
  const std::int32_t* table = offsets.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t y = 0; y < oh; ++y)
      gather_dwords(src + b * image + y * row_step, table, count, flip4, dst + (b * oh + y) * out_row);
}

class CpuInt8ConvOp final : public InferenceConvOp, private Int8Layer {
 public:
  CpuInt8ConvOp(CpuContext& ctx, const InferenceConvSpec& spec)
      : Int8Layer(ctx, spec.weights, spec.quant, spec.fused, spec.out_channels,
                  spec.in[0] * spec.kernel * spec.kernel,
                  "conv " + spec.in.str() + " -> " + std::to_string(spec.out_channels)),
        spec_(spec) {
    spec_.weights = {};  // Int8Layer keeps what runs
    out_h_ = (spec.in[1] + 2 * spec.pad - spec.kernel) / spec.stride + 1;
    out_w_ = (spec.in[2] + 2 * spec.pad - spec.kernel) / spec.stride + 1;
    // VNNI multiplies groups of 4 input channels; with fewer (the first conv
    // of a grey image: 1) oneDNN's convolutions pad each group and ran the
    // Fashion-MNIST CNN's first layer (1→32, 3×3, 28×28) at 7 µs a row, 60
    // GOP/s (batch 256, 1 thread). As im2col (patches of 3 runs of 3 bytes,
    // each padded to 4) and a u8 matmul it took about 1 + 3.9 µs, and the
    // maxpool after it 1.0-1.9 µs instead of 3.7-6.6 (see Im2col).
    as_matmul_ = spec.in[0] < 4;
    // A pooling whose window equals its stride and tiles the output exactly
    // runs on the matmul's rows.
    const std::int64_t p = spec.pool;
    runs_pool_ = as_matmul_ && p > 0 && out_h_ % p == 0 && out_w_ % p == 0;
  }

  bool runs_pool() const override { return runs_pool_; }

  // x (N, C, H, W): f32, s8 or u8, any layout -> y (N, O, Ho, Wo) at quant.output
  // (pooled to (N, O, Ho/p, Wo/p) when runs_pool())
  void forward(const Tensor& x, Tensor& y) override {
    if (x.dims().without_batch() != spec_.in)
      throw failure("int8 conv: input " + x.dims().str() + " does not match " + spec_.in.str());
    // Where int8 pairs saturate (see the top), oneDNN's conv is exact only
    // for u8 inputs and weights within ±64; otherwise im2col, whose input
    // reaches oneDNN as u8 and whose split weights are extra columns.
    if (as_matmul_ || (pairs_saturate_ && (copies_ > 1 || src_type(x) != dt::u8))) {
      forward_as_matmul(matmul_plan_for(x), x, y);
      return;
    }
    ConvPlan& plan = conv_plan_for(x);
    const void* src = x.data();
    if (md_of(x) != plan.src_md) {
      void* q = converted_x_.ensure(plan.src_md.get_size(), *ctx_.allocator);
      reorders_.run_scaled(ctx_, md_of(x), x.data(), plan.src_md, q, input_ratio(x));
      src = q;
    }
    shape_output(ctx_, y, Dims{x.batch(), out_, out_h_, out_w_}, plan.y_layout);
    plan.exec.set(DNNL_ARG_SRC, src);
    plan.exec.set(DNNL_ARG_WEIGHTS, plan.weights.data());
    plan.exec.set(DNNL_ARG_BIAS, bias_.data());
    plan.exec.set(DNNL_ARG_DST, y.data());
    plan.exec.run(ctx_);
    kernel_ = "int8 convolution";
  }

  std::string kernel() const override { return kernel_; }

 private:
  struct ConvPlan {
    MemDesc x_md, src_md;
    std::shared_ptr<const CpuLayout> y_layout;
    Exec exec;
    ScratchBuffer weights;
  };

  struct MatmulPlan {
    MemDesc x_md;
    Im2col g;
    std::vector<std::int32_t> offsets;
    MemDesc interior_md;        // x's place inside `padded`
    ScratchBuffer padded;       // (N, C, Hp, Wp) + overread, border zero
    ScratchBuffer cols;         // (M, KP) u8
    ScratchBuffer product;      // (M, O) before pooling (pooled plans only)
    ScratchBuffer weights;
    std::vector<float> bias;    // bias_ less the zero point's share
    Exec matmul, pool;
    Dims y_dims;
    std::shared_ptr<const CpuLayout> y_layout;
  };

  ConvPlan& conv_plan_for(const Tensor& x) {
    const MemDesc& x_md = md_of(x);
    if (ConvPlan* p = find_plan(conv_plans_, x_md)) return *p;
    auto plan = std::make_unique<ConvPlan>();
    plan->x_md = x_md;
    const std::int64_t n = x.batch(), o = out_, c = spec_.in[0], k = spec_.kernel;
    const MemDesc bias_md({o}, dt::f32, tag::a);
    try {
      MemDesc src_any({n, c, spec_.in[1], spec_.in[2]}, src_type(x), tag::any);
      MemDesc w_any({o, c, k, k}, dt::s8, tag::any);
      MemDesc dst_any({n, o, out_h_, out_w_}, to_dnnl(quant_.output), tag::any);
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                        src_any, w_any, bias_md, dst_any, {spec_.stride, spec_.stride},
                                        {spec_.pad, spec_.pad}, {spec_.pad, spec_.pad});
      const dnnl::primitive_attr a = attr();
      dnnl::convolution_forward::primitive_desc pd(d, a, ctx_.engine);
      {
        // oneDNN 2.6 tries brgconv first; on this Zen 5 its jit_int8 kernel
        // ran the Fashion-MNIST CNN's second conv (32→64, 3×3, 14×14, batch
        // 256, 1 thread) 8% faster (15.1 against 16.4 µs a row). Take jit_int8
        // when it exists: a choice by shape only, never by a timing, so
        // predictions stay reproducible.
        // A fresh descriptor: copies share one handle, which next_impl moves.
        dnnl::convolution_forward::primitive_desc probe(d, a, ctx_.engine);
        while (!std::string_view(probe.impl_info_str()).starts_with("jit_int8") && probe.next_impl()) {
        }
        if (std::string_view(probe.impl_info_str()).starts_with("jit_int8")) pd = probe;
      }
      plan->src_md = pd.src_desc();
      plan->y_layout = make_layout(pd.dst_desc());
      plan->exec = Exec(dnnl::convolution_forward(pd), pd, ctx_,
                        {{DNNL_ARG_SRC, pd.src_desc()},
                         {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                         {DNNL_ARG_BIAS, bias_md},
                         {DNNL_ARG_DST, pd.dst_desc()}});
      void* w = plan->weights.ensure(pd.weights_desc().get_size(), *ctx_.allocator);
      reorder_now(ctx_, MemDesc({o, c, k, k}, dt::s8, tag::abcd), q_.data(), pd.weights_desc(), w);
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "int8 conv for input " + md_string(x_md));
    }
    conv_plans_.push_back(std::move(plan));
    return *conv_plans_.back();
  }

  MatmulPlan& matmul_plan_for(const Tensor& x) {
    const MemDesc& x_md = md_of(x);
    if (MatmulPlan* p = find_plan(matmul_plans_, x_md)) return *p;
    auto plan = std::make_unique<MatmulPlan>();
    plan->x_md = x_md;
    const std::int64_t n = x.batch(), o = out_, ic = spec_.in[0], k = spec_.kernel, pad = spec_.pad;
    Im2col& g = plan->g;
    g.c = ic;
    g.hp = spec_.in[1] + 2 * pad;
    g.wp = spec_.in[2] + 2 * pad;
    g.oh = out_h_;
    g.ow = out_w_;
    g.k = k;
    g.stride = spec_.stride;
    g.group = runs_pool_ ? spec_.pool : 1;
    g.copies = copies_;
    const std::int64_t patch = ic * k * k, kq = g.kq(), kp = g.cols();
    const dt in_type = src_type(x);

    // The input quantized into the interior of a zero-padded (N, C, Hp, Wp)
    // buffer whose border is never written (plus the bytes im2col may read
    // past its end).
    const std::size_t padded_bytes = std::size_t(n * ic * g.hp * g.wp + g.overread());
    std::memset(plan->padded.ensure(padded_bytes, *ctx_.allocator), 0, padded_bytes);
    plan->interior_md =
        MemDesc({n, ic, spec_.in[1], spec_.in[2]}, in_type, memory::dims{ic * g.hp * g.wp, g.hp * g.wp, g.wp, 1});

    // cols (M, KP) · W (KP, O): W is the (O, C, K, K) weights transposed,
    // its padding rows zero like the padding columns of cols.
    //
    // A signed input goes into cols as u8 with zero point 128 (q + 128, the
    // byte with its top bit flipped): VNNI multiplies u8 by s8, and oneDNN's
    // s8-input matmul (a compensation pass) ran ~10% slower. The 128 · Σ
    // weights this adds to each output channel comes off the bias below.
    // (oneDNN 2.6's reorder left the zero point off the tail of short rows,
    // hence the flip in im2col rather than in the quantizing reorder.)
    const std::int32_t zero_point = in_type == dt::s8 ? 128 : 0;
    g.flip = zero_point ? 0x80 : 0;
    plan->offsets = im2col_offsets(g);
    const std::int64_t m = n * g.rows_per_image();
    plan->cols.ensure(std::size_t(m * kp), *ctx_.allocator);
    const dt dst_type = to_dnnl(quant_.output);
    const MemDesc cols_md({m, kp}, dt::u8, tag::ab), bias_md({1, o}, dt::f32, tag::ab), product_md({m, o}, dst_type, tag::ab);
    try {
      dnnl::matmul::desc d(cols_md, MemDesc({kp, o}, dt::s8, tag::any), bias_md, product_md);
      dnnl::matmul::primitive_desc pd(d, attr(), ctx_.engine);
      // split: (O, copies·patch), each copy's patch in (C, KH, KW) order.
      const std::vector<std::int8_t> split = split_weights(q_, o, patch, copies_);
      std::vector<std::int8_t> wt(std::size_t(kp * o), 0);
      for (std::int64_t oc = 0; oc < o; ++oc)
        for (std::int64_t run = 0; run < copies_ * ic * k; ++run)  // (copy, c, ky)
          for (std::int64_t kx = 0; kx < k; ++kx)
            wt[std::size_t((run * kq + kx) * o + oc)] = split[std::size_t(oc * copies_ * patch + run * k + kx)];
      void* w = plan->weights.ensure(pd.weights_desc().get_size(), *ctx_.allocator);
      reorder_now(ctx_, MemDesc({kp, o}, dt::s8, tag::ab), wt.data(), pd.weights_desc(), w);
      plan->bias = bias_;
      if (zero_point) {
        const std::vector<float> share = zero_point_share();
        for (std::int64_t oc = 0; oc < o; ++oc) plan->bias[std::size_t(oc)] -= share[std::size_t(oc)];
      }
      plan->matmul = Exec(dnnl::matmul(pd), pd, ctx_,
                          {{DNNL_ARG_SRC, cols_md},
                           {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                           {DNNL_ARG_BIAS, bias_md},
                           {DNNL_ARG_DST, product_md}});
      if (!runs_pool_) {
        // Rows (N, OH, OW) by O: the conv's output in (N, H, W, C).
        plan->y_dims = Dims{n, o, g.oh, g.ow};
        plan->y_layout = make_layout(MemDesc({n, o, g.oh, g.ow}, dst_type, tag::acdb));
      } else {
        // Rows (N·OH/p, p, p, OW/p) by O: a (N·OH/p, (OW/p)·O, p, p) image
        // in (N, H, W, C), pooled to (N·OH/p, (OW/p)·O, 1, 1), which is the
        // pooled (N, O, OH/p, OW/p) in (N, H, W, C).
        const std::int64_t p = g.group, rows = n * g.oh / p, chans = g.ow / p * o;
        plan->product.ensure(product_md.get_size(), *ctx_.allocator);
        const MemDesc view({rows, chans, p, p}, dst_type, tag::acdb), pooled({rows, chans, 1, 1}, dst_type, tag::acdb);
        dnnl::pooling_forward::desc pool_d(dnnl::prop_kind::forward_inference,
                                           spec_.pool_max ? dnnl::algorithm::pooling_max
                                                          : dnnl::algorithm::pooling_avg_exclude_padding,
                                           view, pooled, {p, p}, {p, p}, {0, 0}, {0, 0});
        dnnl::primitive_attr pool_attr;
        pool_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::pooling_forward::primitive_desc pool_pd(pool_d, pool_attr, ctx_.engine);
        plan->pool = Exec(dnnl::pooling_forward(pool_pd), pool_pd, ctx_, {{DNNL_ARG_SRC, view}, {DNNL_ARG_DST, pooled}});
        plan->y_dims = Dims{n, o, g.oh / p, g.ow / p};
        plan->y_layout = make_layout(MemDesc({n, o, g.oh / p, g.ow / p}, dst_type, tag::acdb));
      }
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "int8 conv as matmul for input " + md_string(x_md));
    }
    matmul_plans_.push_back(std::move(plan));
    return *matmul_plans_.back();
  }

  // x -> quantized into the padded buffer -> im2col -> cols · W (+ bias) -> y
  // (or -> product -> pooled into y)
  void forward_as_matmul(MatmulPlan& plan, const Tensor& x, Tensor& y) {
    const Im2col& g = plan.g;
    const std::int64_t n = x.batch();
    auto* padded = static_cast<std::uint8_t*>(plan.padded.data());
    reorders_.run_scaled(ctx_, md_of(x), x.data(), plan.interior_md, padded + spec_.pad * g.wp + spec_.pad,
                         input_ratio(x));
    ctx_.stream.wait();  // the quantized input must be complete before the host loop reads it
    auto* cols = static_cast<std::uint8_t*>(plan.cols.data());
    im2col(g, plan.offsets, padded, cols, n);
    shape_output(ctx_, y, plan.y_dims, plan.y_layout);
    plan.matmul.set(DNNL_ARG_SRC, cols);
    plan.matmul.set(DNNL_ARG_WEIGHTS, plan.weights.data());
    plan.matmul.set(DNNL_ARG_BIAS, plan.bias.data());
    plan.matmul.set(DNNL_ARG_DST, runs_pool_ ? plan.product.data() : y.data());
    plan.matmul.run(ctx_);
    if (runs_pool_) {
      plan.pool.set(DNNL_ARG_SRC, plan.product.data());
      plan.pool.set(DNNL_ARG_DST, y.data());
      plan.pool.run(ctx_);
    }
    kernel_ = runs_pool_ ? std::string("int8 matmul (im2col) with its ") + (spec_.pool_max ? "maxpool" : "avgpool") +
                               " on the rows"
                         : "int8 matmul (im2col)";
    if (copies_ > 1) kernel_ += ", weights split in two halves";
  }

  InferenceConvSpec spec_;
  std::int64_t out_h_ = 0, out_w_ = 0;
  bool as_matmul_ = false, runs_pool_ = false;
  std::vector<std::unique_ptr<ConvPlan>> conv_plans_;
  std::vector<std::unique_ptr<MatmulPlan>> matmul_plans_;
  ScratchBuffer converted_x_;
};

}  // namespace

std::unique_ptr<InferenceOp> make_int8_dense_op(CpuContext& ctx, const InferenceDenseSpec& spec) {
  return std::make_unique<CpuInt8DenseOp>(ctx, spec);
}

std::unique_ptr<InferenceConvOp> make_int8_conv_op(CpuContext& ctx, const InferenceConvSpec& spec) {
  return std::make_unique<CpuInt8ConvOp>(ctx, spec);
}

}  // namespace anneal::cpu
