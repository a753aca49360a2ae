// InferenceNetwork on oneDNN: a chain of primitives built per batch size,
// with int8 inner products and convolutions for quantized models and a CSR
// kernel for sparse dense layers. See include/anneal/inference.h.
#include "anneal/inference.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string_view>
#include <oneapi/dnnl/dnnl.hpp>

#include "anneal/backend.h"
#include "anneal/error.h"
#include "anneal/network.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_common.h"
#include "engine/cpu/cpu_kernels.h"

namespace anneal {
namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;
using MD = memory::desc;

bool is_activation(const std::string& name) {
  return name == "relu" || name == "tanh" || name == "sigmoid" || name == "gelu";
}

Activation activation_of(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "tanh") return Activation::kTanh;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "gelu") return Activation::kGelu;
  return Activation::kNone;
}

double option(const LayerSpec& s, const char* key, double fallback) {
  for (const auto& [k, v] : s.options)
    if (k == key) return v;
  return fallback;
}

// One layer of the built chain (Network::describe() order), fused
// activation folded in.
struct ChainLayer {
  LayerSpec spec;
  Activation fused = Activation::kNone;
  std::string prefix;  // dense/conv: "3.dense"
  std::string text;
  Dims in, out;        // per sample
};

// The layers Network builds for `layers`: its describe() re-parsed, so the
// names and the implicit flatten match the trained network exactly.
std::vector<ChainLayer> chain_of(const std::string& layers, const Dims& input) {
  std::unique_ptr<Backend> backend = cpu::make_cpu_backend(BackendOptions{});
  NetworkOptions options;
  options.input_shape = input;
  options.batch = 1;
  Network network(layers, options, *backend);
  const std::vector<LayerSpec> built = parse_layer_spec(network.describe());
  std::vector<ChainLayer> out;
  Dims shape = input;
  for (std::size_t i = 0; i < built.size(); ++i) {
    ChainLayer c;
    c.spec = built[i];
    c.text = built[i].text;
    c.in = shape;
    const std::string& name = c.spec.name;
    const int index = int(out.size());
    if (name == "dense" || name == "conv") {
      if (i + 1 < built.size() && is_activation(built[i + 1].name) && built[i + 1].name != "gelu") {
        c.fused = activation_of(built[i + 1].name);
        c.text += " " + built[i + 1].name;
        ++i;
      }
      c.prefix = std::to_string(index) + "." + name;
      if (name == "dense") {
        c.out = Dims{std::int64_t(c.spec.args[0])};
      } else {
        const auto k = std::int64_t(c.spec.args[1]);
        const auto stride = std::int64_t(option(c.spec, "stride", 1));
        const auto pad = std::int64_t(option(c.spec, "pad", 0));
        c.out = Dims{std::int64_t(c.spec.args[0]), (shape[1] + 2 * pad - k) / stride + 1,
                     (shape[2] + 2 * pad - k) / stride + 1};
      }
    } else if (name == "maxpool" || name == "avgpool") {
      const auto k = std::int64_t(c.spec.args[0]);
      const auto stride = std::int64_t(option(c.spec, "stride", double(k)));
      c.out = Dims{shape[0], (shape[1] - k) / stride + 1, (shape[2] - k) / stride + 1};
    } else if (name == "flatten") {
      c.out = Dims{shape.product()};
    } else if (name == "dropout" || is_activation(name)) {
      c.out = shape;
    } else {
      throw usage_error("layer '" + c.text + "': int8 and sparse inference support dense, conv, pooling, "
                        "flatten, dropout and activations, not " + name);
    }
    shape = c.out;
    out.push_back(std::move(c));
  }
  return out;
}

dnnl::algorithm algorithm_of(Activation a) { return cpu::eltwise_algorithm(a, false); }

// The geometry of a convolution lowered to a matrix product (im2col): each
// output pixel becomes one row of its input patch in (C, KH, KW) order, each
// run of KW bytes padded to kq (a multiple of 4, VNNI's group of bytes):
// row[(c·k + ky)·kq + kx] = input[c][y·stride + ky][x·stride + kx].
// The padding columns meet zero weights, so im2col copies whole kq-byte runs
// and leaves whatever follows each run's k bytes in them.
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
  std::int64_t oh = 0, ow = 0, k = 0, stride = 1, group = 1;
  std::uint8_t flip = 0;  // XORed into every byte copied (0x80: s8 to u8 + 128)
  std::int64_t kq() const { return (k + 3) / 4 * 4; }
  std::int64_t cols() const { return c * k * kq(); }
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
      cpu::gather_dwords(src + b * image + y * row_step, table, count, flip4, dst + (b * oh + y) * out_row);
}

// An activation tensor in the chain: its memory and its scale (1 for fp32).
struct Value {
  Value() = default;
  Value(memory m, float s, memory::dims hwc = {}) : mem(std::move(m)), scale(s), hwc_image(std::move(hwc)) {}
  memory mem;
  float scale = 1.0f;
  // Set (to its (N, C, H, W) dims) when `mem` is a 2-D view of an image
  // stored (N, H, W, C): its features run in H, W, C order, not the C, H, W
  // order Network flattens in, so a dense layer permutes its weights to match.
  memory::dims hwc_image;
  dt type() const { return mem.get_desc().data_type(); }
  bool int8() const { return type() == dt::s8 || type() == dt::u8; }
};

// A compiled chain for one batch size.
struct Plan {
  std::int64_t n = 0;
  bool observing = false;
  memory input, output;  // user memories: handles set on each call
  std::vector<memory> input_views;  // other views of the input (a leading flatten)
  std::vector<std::function<void(dnnl::stream&)>> steps;
  std::vector<InferenceLayerInfo> info;
  std::vector<std::vector<float>> owned;  // host buffers the CSR steps use
};

double zero_fraction(const std::vector<float>& w) {
  if (w.empty()) return 0;
  std::size_t zeros = 0;
  for (float v : w) zeros += v == 0.0f;
  return double(zeros) / double(w.size());
}

}  // namespace

// ---- CSR kernel ---------------------------------------------------------------

CsrMatrix CsrMatrix::from_dense(const float* w, std::int64_t rows, std::int64_t cols) {
  CsrMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.row_ptr.reserve(std::size_t(rows + 1));
  m.row_ptr.push_back(0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c)
      if (const float v = w[r * cols + c]; v != 0.0f) {
        m.col.push_back(std::int32_t(c));
        m.values.push_back(v);
      }
    m.row_ptr.push_back(std::int64_t(m.values.size()));
  }
  return m;
}

namespace {

constexpr std::int64_t kCsrBlock = 64;  // samples per accumulator row: 4 AVX-512 registers

// acc[0..64) += Σ_j values[j] · xt[col[j]·ld .. +64): one output neuron over a
// block of 64 samples. Cloned for AVX-512 and AVX2 (the project builds
// without -march), picked at load time.
__attribute__((target_clones("avx512f", "avx2", "default")))
void csr_row_block(const std::int32_t* col, const float* values, std::int64_t nnz, const float* xt,
                   std::int64_t ld, float* acc) {
  for (std::int64_t j = 0; j < nnz; ++j) {
    const float w = values[j];
    const float* x = xt + std::int64_t(col[j]) * ld;
    for (std::int64_t t = 0; t < kCsrBlock; ++t) acc[t] += w * x[t];
  }
}

}  // namespace

void sparse_dense_forward(const CsrMatrix& w, const float* bias, bool relu, const float* x,
                          std::int64_t n, float* y, std::vector<float>& scratch) {
  // xt (I, Np): x transposed and zero-padded to whole blocks, so each
  // nonzero w[o, i] adds w times one contiguous row of samples.
  const std::int64_t in = w.cols, out = w.rows;
  const std::int64_t np = (n + kCsrBlock - 1) / kCsrBlock * kCsrBlock;
  scratch.assign(std::size_t(in * np), 0.0f);
  float* xt = scratch.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t s = 0; s < n; ++s) xt[i * np + s] = x[s * in + i];
  const std::int64_t blocks = np / kCsrBlock;
#pragma omp parallel for schedule(static) collapse(2)
  for (std::int64_t b = 0; b < blocks; ++b)
    for (std::int64_t o = 0; o < out; ++o) {
      alignas(64) float acc[kCsrBlock];
      std::fill_n(acc, kCsrBlock, bias ? bias[o] : 0.0f);
      const std::int64_t begin = w.row_ptr[std::size_t(o)], end = w.row_ptr[std::size_t(o) + 1];
      csr_row_block(w.col.data() + begin, w.values.data() + begin, end - begin, xt + b * kCsrBlock, np, acc);
      const std::int64_t rows = std::min(kCsrBlock, n - b * kCsrBlock);
      for (std::int64_t t = 0; t < rows; ++t)
        y[(b * kCsrBlock + t) * out + o] = relu ? std::max(acc[t], 0.0f) : acc[t];
    }
}

std::vector<WeightedLayer> weighted_layers(const std::string& layers, const Dims& input_shape) {
  std::vector<WeightedLayer> out;
  for (const ChainLayer& c : chain_of(layers, input_shape)) {
    if (c.prefix.empty()) continue;
    WeightedLayer w;
    w.prefix = c.prefix;
    w.text = c.text;
    w.conv = c.spec.name == "conv";
    w.relu = c.fused == Activation::kRelu;
    w.out = c.out[0];
    w.weight_dims = c.in.with_batch(c.out[0]).to_vector();
    if (w.conv) {
      const auto k = std::int64_t(c.spec.args[1]);
      w.weight_dims = {c.out[0], c.in[0], k, k};
    }
    out.push_back(std::move(w));
  }
  if (!out.empty()) out.back().last = true;
  return out;
}

// ---- the chain ------------------------------------------------------------------

class InferenceNetwork::Impl {
 public:
  explicit Impl(InferenceSpec spec)
      : spec_(std::move(spec)), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    chain_ = chain_of(spec_.layers, spec_.input_shape);
    std::size_t weighted = 0;
    for (const ChainLayer& c : chain_) {
      if (c.prefix.empty()) continue;
      auto it = spec_.weights.find(c.prefix);
      if (it == spec_.weights.end()) throw corrupt("inference: no weights for layer " + c.prefix);
      const InferenceWeights& w = it->second;
      const std::int64_t o = c.out[0];
      std::int64_t fan_in = c.in.product();
      if (c.spec.name == "conv") fan_in = c.in[0] * std::int64_t(c.spec.args[1]) * std::int64_t(c.spec.args[1]);
      if (std::int64_t(w.weight.size()) != o * fan_in || std::int64_t(w.bias.size()) != o)
        throw corrupt("inference: layer " + c.prefix + " weights have the wrong size");
      if (spec_.int8 && (std::int64_t(w.q.size()) != o * fan_in || std::int64_t(w.scales.size()) != o ||
                         !(w.input_scale > 0) || (!(w.output_scale > 0) && &c != last_weighted())))
        throw corrupt("inference: layer " + c.prefix + " lacks its int8 weights or scales");
      ++weighted;
    }
    if (weighted == 0) throw usage_error("inference: the network has no dense or conv layer");
  }

  void forward(const float* x, std::int64_t rows, float* y, const Observer* observe) {
    if (rows <= 0) return;
    Plan& plan = plan_for(rows, observe != nullptr);
    plan.input.set_data_handle(const_cast<float*>(x));
    for (memory& v : plan.input_views) v.set_data_handle(const_cast<float*>(x));
    plan.output.set_data_handle(y);
    observer_ = observe;
    try {
      for (auto& step : plan.steps) step(stream_);
      stream_.wait();
    } catch (const dnnl::error& e) {
      throw failure(std::string("inference: oneDNN: ") + e.what());
    }
    observer_ = nullptr;
  }

  std::vector<InferenceLayerInfo> describe() const {
    return plans_.empty() ? std::vector<InferenceLayerInfo>() : plans_.back()->info;
  }

 private:
  const ChainLayer* last_weighted() const {
    const ChainLayer* last = nullptr;
    for (const ChainLayer& c : chain_)
      if (!c.prefix.empty()) last = &c;
    return last;
  }

  Plan& plan_for(std::int64_t n, bool observing) {
    for (auto& p : plans_)
      if (p->n == n && p->observing == observing) return *p;
    try {
      plans_.push_back(build(n, observing));
    } catch (const dnnl::error& e) {
      throw failure(std::string("inference: oneDNN refused the network: ") + e.what());
    }
    return *plans_.back();
  }

  // v converted to descriptor `md` at `scale`: v itself when it already is,
  // else a reorder step into a new memory.
  Value convert(Plan& plan, const Value& v, const MD& md, float scale) {
    const bool same_scale = std::fabs(v.scale - scale) <= 1e-12f * std::max(1.0f, std::fabs(scale));
    if (v.mem.get_desc() == md && same_scale) return v;
    memory dst(md, engine_);
    dnnl::primitive_attr attr;
    const float ratio = v.scale / scale;
    if (ratio != 1.0f) attr.set_output_scales(0, {ratio});
    dnnl::reorder::primitive_desc pd(engine_, v.mem.get_desc(), engine_, md, attr);
    dnnl::reorder r(pd);
    memory src = v.mem;
    plan.steps.push_back([r, src, dst](dnnl::stream& s) mutable { r.execute(s, src, dst); });
    return {dst, scale};
  }

  // The plain fp32 (N, F...) form of v.
  Value plain_f32(Plan& plan, const Value& v) {
    MD md(v.mem.get_desc().dims(), dt::f32, plain_tag(int(v.mem.get_desc().dims().size())));
    return convert(plan, v, md, 1.0f);
  }

  static tag plain_tag(int rank) { return rank == 2 ? tag::ab : rank == 4 ? tag::abcd : tag::a; }

  void add_primitive(Plan& plan, dnnl::primitive p, std::unordered_map<int, memory> args) {
    plan.steps.push_back([p, args](dnnl::stream& s) { p.execute(s, args); });
  }

  memory weights_memory(const MD& want, const MD& have, const void* data, const std::vector<float>& scales) {
    memory src(have, engine_, const_cast<void*>(data));
    memory dst(want, engine_);
    dnnl::primitive_attr attr;
    if (!scales.empty()) attr.set_output_scales(1, scales);  // mask 1: per output channel (dim 0)
    dnnl::reorder::primitive_desc pd(engine_, have, engine_, want, attr);
    dnnl::reorder(pd).execute(stream_, src, dst);
    stream_.wait();
    return dst;
  }

  dnnl::primitive_attr weighted_attr(Activation fused, const std::vector<float>& oscales) {
    dnnl::primitive_attr attr;
    if (!oscales.empty()) attr.set_output_scales(1 << 1, oscales);  // per dst channel (dim 1)
    if (fused != Activation::kNone) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, algorithm_of(fused), 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    return attr;
  }

  // A dense or conv layer in int8: input quantized (u8 after a relu, else
  // s8), s8 weights with per-channel scales, bias pre-divided into the
  // accumulator's scale, and the output rescaled to the next layer's scale
  // (oneDNN 2.x: dst = oscale · (Σ src·wei + bias), then post-ops).
  //
  // A conv with fewer than 4 input channels runs as im2col and an int8
  // matmul (int8_conv_as_matmul); `pool`, when set, is the pooling layer
  // after it, which that path then runs too (the result is pooled).
  Value int8_layer(Plan& plan, const ChainLayer& c, const InferenceWeights& w, Value cur, bool last,
                   const ChainLayer* pool) {
    const bool conv = c.spec.name == "conv";
    const std::int64_t n = plan.n, o = c.out[0];
    const dt src_type = cur.int8() ? cur.type() : dt::s8;
    const float s_in = cur.int8() ? cur.scale : w.input_scale;
    // A fused relu leaves non-negative values: u8 doubles their resolution.
    // tanh/sigmoid cannot run on a rescaled accumulator: fp32 output then.
    const bool f32_out = last || (c.fused != Activation::kNone && c.fused != Activation::kRelu);
    const dt dst_type = f32_out ? dt::f32 : c.fused == Activation::kRelu ? dt::u8 : dt::s8;
    const float s_out = f32_out ? 1.0f : w.output_scale;
    std::vector<float> oscales(static_cast<std::size_t>(o)), bias(static_cast<std::size_t>(o));
    for (std::int64_t i = 0; i < o; ++i) {
      const float acc_scale = s_in * w.scales[std::size_t(i)];
      oscales[std::size_t(i)] = acc_scale / s_out;
      bias[std::size_t(i)] = w.bias[std::size_t(i)] / acc_scale;
    }
    // Relu commutes with the positive rescale; tanh/sigmoid come here only
    // with an fp32 output, where the post-op sees real values.
    const dnnl::primitive_attr attr = weighted_attr(c.fused, oscales);
    MD bias_md({o}, dt::f32, tag::a);
    if (!conv) {
      const std::int64_t in = c.in.product();
      MD src_md({n, in}, src_type, tag::ab);
      MD w_any({o, in}, dt::s8, tag::any);
      MD dst_md({n, o}, dst_type, tag::ab);
      dnnl::inner_product_forward::desc d(dnnl::prop_kind::forward_inference, src_md, w_any, bias_md, dst_md);
      dnnl::inner_product_forward::primitive_desc pd(d, attr, engine_);
      Value src = convert(plan, cur, pd.src_desc(), s_in);
      memory wm;
      if (!cur.hwc_image.empty() && src.mem.get() == cur.mem.get()) {
        // Weights (O, C, H, W) row-major → (O, H, W, C) row-major, the
        // order of the input's features, then into the primitive's layout.
        const memory::dims& d = cur.hwc_image;
        const memory::dims w4{o, d[1], d[2], d[3]};
        memory ohwc = weights_memory(MD(w4, dt::s8, tag::acdb), MD(w4, dt::s8, tag::abcd), w.q.data(), {});
        wm = weights_memory(pd.weights_desc(), MD({o, in}, dt::s8, tag::ab), ohwc.get_data_handle(), {});
      } else {
        wm = weights_memory(pd.weights_desc(), MD({o, in}, dt::s8, tag::ab), w.q.data(), {});
      }
      memory bm(bias_md, engine_);
      std::memcpy(bm.get_data_handle(), bias.data(), bias.size() * sizeof(float));
      memory dst(pd.dst_desc(), engine_);
      add_primitive(plan, dnnl::inner_product_forward(pd),
                    {{DNNL_ARG_SRC, src.mem}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dst}});
      plan.info.push_back({c.text, "int8 inner product", zero_fraction(w.weight)});
      return {dst, s_out};
    }
    if (lowers_to_matmul(c))
      return int8_conv_as_matmul(plan, c, w, cur, src_type, s_in, dst_type, s_out, attr, bias, pool);
    const auto k = std::int64_t(c.spec.args[1]);
    const auto stride = std::int64_t(option(c.spec, "stride", 1));
    const auto pad = std::int64_t(option(c.spec, "pad", 0));
    MD src_any({n, c.in[0], c.in[1], c.in[2]}, src_type, tag::any);
    MD w_any({o, c.in[0], k, k}, dt::s8, tag::any);
    MD dst_any({n, o, c.out[1], c.out[2]}, dst_type, tag::any);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                      src_any, w_any, bias_md, dst_any, {stride, stride}, {pad, pad}, {pad, pad});
    dnnl::convolution_forward::primitive_desc pd(d, attr, engine_);
    {
      // oneDNN 2.6 tries brgconv first; on this Zen 5 its jit_int8 kernel
      // ran the Fashion-MNIST CNN's second conv (32→64, 3×3, 14×14, batch
      // 256, 1 thread) 8% faster (15.1 against 16.4 µs a row). Take jit_int8
      // when it exists: a choice by shape only, never by a timing, so
      // predictions stay reproducible.
      // A fresh descriptor: copies share one handle, which next_impl moves.
      dnnl::convolution_forward::primitive_desc probe(d, attr, engine_);
      while (!std::string_view(probe.impl_info_str()).starts_with("jit_int8") && probe.next_impl()) {
      }
      if (std::string_view(probe.impl_info_str()).starts_with("jit_int8")) pd = probe;
    }
    Value src = convert(plan, cur, pd.src_desc(), s_in);
    memory wm = weights_memory(pd.weights_desc(), MD({o, c.in[0], k, k}, dt::s8, tag::abcd), w.q.data(), {});
    memory bm(bias_md, engine_);
    std::memcpy(bm.get_data_handle(), bias.data(), bias.size() * sizeof(float));
    memory dst(pd.dst_desc(), engine_);
    add_primitive(plan, dnnl::convolution_forward(pd),
                  {{DNNL_ARG_SRC, src.mem}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dst}});
    plan.info.push_back({c.text, "int8 convolution", zero_fraction(w.weight)});
    return {dst, s_out};
  }

  // VNNI multiplies groups of 4 input channels; with fewer (the first conv
  // of a grey image: 1) oneDNN's convolutions pad each group and ran the
  // Fashion-MNIST CNN's first layer (1→32, 3×3, 28×28) at 7 µs a row, 60
  // GOP/s (batch 256, 1 thread). As im2col (patches of 3 runs of 3 bytes,
  // each padded to 4) and a u8 matmul it took about 1 + 3.9 µs, and the
  // maxpool after it 1.0-1.9 µs instead of 3.7-6.6 (see Im2col).
  static bool lowers_to_matmul(const ChainLayer& c) { return c.spec.name == "conv" && c.in[0] < 4; }

  // A pooling layer that int8_conv_as_matmul can run on conv c's rows:
  // a window equal to its stride that tiles c's output exactly.
  static bool pools_conv_rows(const ChainLayer& c, const ChainLayer& next) {
    if (next.spec.name != "maxpool" && next.spec.name != "avgpool") return false;
    const auto p = std::int64_t(next.spec.args[0]);
    return std::int64_t(option(next.spec, "stride", double(p))) == p && p > 0 && c.out[1] % p == 0 &&
           c.out[2] % p == 0;
  }

  Value int8_conv_as_matmul(Plan& plan, const ChainLayer& c, const InferenceWeights& w, const Value& cur,
                            dt src_type, float s_in, dt dst_type, float s_out, const dnnl::primitive_attr& attr,
                            const std::vector<float>& bias, const ChainLayer* pool) {
    const std::int64_t n = plan.n, o = c.out[0], ic = c.in[0];
    const auto k = std::int64_t(c.spec.args[1]);
    const auto pad = std::int64_t(option(c.spec, "pad", 0));
    Im2col g;
    g.c = ic;
    g.hp = c.in[1] + 2 * pad;
    g.wp = c.in[2] + 2 * pad;
    g.oh = c.out[1];
    g.ow = c.out[2];
    g.k = k;
    g.stride = std::int64_t(option(c.spec, "stride", 1));
    const std::int64_t patch = ic * k * k, kq = g.kq(), kp = g.cols();
    g.group = pool ? std::int64_t(pool->spec.args[0]) : 1;

    // The input quantized into the interior of a zero-padded (N, C, Hp, Wp)
    // buffer whose border is never written (plus the bytes im2col may read
    // past its end).
    memory padded(MD({n * ic * g.hp * g.wp + g.overread()}, src_type, tag::a), engine_);
    std::memset(padded.get_data_handle(), 0, padded.get_desc().get_size());
    MD interior_md({n, ic, c.in[1], c.in[2]}, src_type, memory::dims{ic * g.hp * g.wp, g.hp * g.wp, g.wp, 1});
    memory interior(interior_md, engine_,
                    static_cast<std::uint8_t*>(padded.get_data_handle()) + pad * g.wp + pad);
    {
      dnnl::primitive_attr q;
      const float ratio = cur.scale / s_in;
      if (ratio != 1.0f) q.set_output_scales(0, {ratio});
      dnnl::reorder r(dnnl::reorder::primitive_desc(engine_, cur.mem.get_desc(), engine_, interior_md, q));
      memory src = cur.mem;
      plan.steps.push_back([r, src, interior](dnnl::stream& s) mutable { r.execute(s, src, interior); });
    }

    // cols (M, KP) · W (KP, O): W is the (O, C, K, K) weights transposed,
    // its padding rows zero like the padding columns of cols.
    //
    // A signed input goes into cols as u8 with zero point 128 (q + 128, the
    // byte with its top bit flipped): VNNI multiplies u8 by s8, and oneDNN's
    // s8-input matmul (a compensation pass) ran ~10% slower. The 128 · Σ
    // weights this adds to each output channel comes off the bias below.
    // (oneDNN 2.6's reorder left the zero point off the tail of short rows,
    // hence the flip in im2col rather than in the quantizing reorder.)
    const std::int32_t zero_point = src_type == dt::s8 ? 128 : 0;
    g.flip = zero_point ? 0x80 : 0;
    const dt cols_type = dt::u8;
    const std::int64_t m = n * g.rows_per_image();
    memory cols(MD({m, kp}, cols_type, tag::ab), engine_);
    plan.steps.push_back([g, offsets = im2col_offsets(g), padded, cols, n](dnnl::stream& s) {
      s.wait();  // the quantized input must be complete before the host loop reads it
      im2col(g, offsets, static_cast<const std::uint8_t*>(padded.get_data_handle()),
             static_cast<std::uint8_t*>(cols.get_data_handle()), n);
    });
    MD bias_md({1, o}, dt::f32, tag::ab);
    dnnl::matmul::desc d(cols.get_desc(), MD({kp, o}, dt::s8, tag::any), bias_md, MD({m, o}, dst_type, tag::ab));
    dnnl::matmul::primitive_desc pd(d, attr, engine_);
    std::vector<std::int8_t> wt(std::size_t(kp * o), 0);
    for (std::int64_t oc = 0; oc < o; ++oc)
      for (std::int64_t run = 0; run < ic * k; ++run)  // (c, ky)
        for (std::int64_t kx = 0; kx < k; ++kx)
          wt[std::size_t((run * kq + kx) * o + oc)] = w.q[std::size_t(oc * patch + run * k + kx)];
    memory wm = weights_memory(pd.weights_desc(), MD({kp, o}, dt::s8, tag::ab), wt.data(), {});
    memory bm(bias_md, engine_);
    std::vector<float> shifted = bias;
    for (std::int64_t oc = 0; oc < o; ++oc) {
      std::int64_t sum = 0;
      for (std::int64_t t = 0; t < patch; ++t) sum += w.q[std::size_t(oc * patch + t)];
      shifted[std::size_t(oc)] -= float(zero_point * sum);
    }
    std::memcpy(bm.get_data_handle(), shifted.data(), shifted.size() * sizeof(float));
    memory dst(pd.dst_desc(), engine_);
    add_primitive(plan, dnnl::matmul(pd),
                  {{DNNL_ARG_SRC, cols}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dst}});
    plan.info.push_back({c.text, "int8 matmul (im2col)", zero_fraction(w.weight)});
    if (!pool) {
      // Rows (N, OH, OW) by O: the conv's output in (N, H, W, C).
      MD nhwc({n, o, g.oh, g.ow}, dst_type, tag::acdb);
      return {memory(nhwc, engine_, dst.get_data_handle()), s_out};
    }
    // Rows (N·OH/p, p, p, OW/p) by O: a (N·OH/p, (OW/p)·O, p, p) image in
    // (N, H, W, C), pooled to (N·OH/p, (OW/p)·O, 1, 1), which is the pooled
    // (N, O, OH/p, OW/p) in (N, H, W, C).
    const std::int64_t p = g.group, rows = n * g.oh / p, chans = g.ow / p * o;
    MD view({rows, chans, p, p}, dst_type, tag::acdb);
    MD pooled({rows, chans, 1, 1}, dst_type, tag::acdb);
    dnnl::pooling_forward::desc pool_d(dnnl::prop_kind::forward_inference,
                                       pool->spec.name == "maxpool" ? dnnl::algorithm::pooling_max
                                                                    : dnnl::algorithm::pooling_avg_exclude_padding,
                                       view, pooled, {p, p}, {p, p}, {0, 0}, {0, 0});
    memory pool_src(view, engine_, dst.get_data_handle());
    memory pool_dst(pooled, engine_);
    add_primitive(plan, dnnl::pooling_forward(dnnl::pooling_forward::primitive_desc(pool_d, engine_)),
                  {{DNNL_ARG_SRC, pool_src}, {DNNL_ARG_DST, pool_dst}});
    plan.info.push_back({pool->text, "int8 pooling (of the matmul's rows)", 0});
    MD out({n, o, g.oh / p, g.ow / p}, dst_type, tag::acdb);
    return {memory(out, engine_, pool_dst.get_data_handle()), s_out};
  }

  // fp32 oneDNN dense (inner product) on a plain (N, I) input.
  std::pair<Value, dnnl::primitive> f32_dense(Plan& plan, const ChainLayer& c, const InferenceWeights& w,
                                              const Value& src, const MD& dst_md) {
    const std::int64_t o = c.out[0], in = c.in.product();
    MD bias_md({o}, dt::f32, tag::a);
    MD w_any({o, in}, dt::f32, tag::any);
    dnnl::inner_product_forward::desc d(dnnl::prop_kind::forward_inference, src.mem.get_desc(), w_any, bias_md,
                                        dst_md);
    dnnl::inner_product_forward::primitive_desc pd(d, weighted_attr(c.fused, {}), engine_);
    memory wm = weights_memory(pd.weights_desc(), MD({o, in}, dt::f32, tag::ab), w.weight.data(), {});
    memory bm(bias_md, engine_, const_cast<float*>(w.bias.data()));
    memory dst(dst_md, engine_);
    dnnl::primitive p = dnnl::inner_product_forward(pd);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, src.mem}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dst}};
    plan.steps.push_back([p, args](dnnl::stream& s) { p.execute(s, args); });
    (void)plan;
    return {Value{dst, 1.0f}, p};
  }

  Value dense_f32_or_sparse(Plan& plan, const ChainLayer& c, const InferenceWeights& w, Value cur) {
    const std::int64_t n = plan.n, o = c.out[0], in = c.in.product();
    Value src = plain_f32(plan, cur);
    MD dst_md({n, o}, dt::f32, tag::ab);
    const double sparsity = zero_fraction(w.weight);
    const bool candidate = sparsity >= 0.5 && (c.fused == Activation::kNone || c.fused == Activation::kRelu);
    if (!candidate || spec_.sparse == SparseKernel::kDense) {
      auto [v, p] = f32_dense(plan, c, w, src, dst_md);
      plan.info.push_back({c.text, "fp32 inner product", sparsity});
      return v;
    }
    auto csr = std::make_shared<CsrMatrix>(CsrMatrix::from_dense(w.weight.data(), o, in));
    auto scratch = std::make_shared<std::vector<float>>();
    memory dst(dst_md, engine_);
    const bool relu = c.fused == Activation::kRelu;
    const float* bias = w.bias.data();
    memory src_mem = src.mem;
    auto sparse_step = [csr, scratch, dst, src_mem, bias, relu, n](dnnl::stream& s) {
      s.wait();  // the input must be complete before the host kernel reads it
      sparse_dense_forward(*csr, bias, relu, static_cast<const float*>(src_mem.get_data_handle()), n,
                           static_cast<float*>(dst.get_data_handle()), *scratch);
    };
    bool use_sparse = spec_.sparse == SparseKernel::kSparse;
    if (spec_.sparse == SparseKernel::kMeasure) {
      // Time both at this batch size on a zeroed input of their own (no
      // denormals or NaNs; the plan's input may not exist yet).
      memory probe_src(src.mem.get_desc(), engine_);
      std::memset(probe_src.get_data_handle(), 0, std::size_t(n * in) * sizeof(float));
      Plan probe;
      probe.n = n;
      auto [dv, dense_p] = f32_dense(probe, c, w, Value{probe_src, 1.0f}, dst_md);
      std::vector<float> probe_out(std::size_t(n * o));
      auto time = [&](const std::function<void()>& f) {
        f();
        std::vector<double> t;
        for (int r = 0; r < 5; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          f();
          t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin(), t.end());
        return t[2];
      };
      const double dense_s = time([&] {
        for (auto& step : probe.steps) step(stream_);
        stream_.wait();
      });
      const double sparse_s = time([&] {
        sparse_dense_forward(*csr, bias, relu, static_cast<const float*>(probe_src.get_data_handle()), n,
                             probe_out.data(), *scratch);
      });
      use_sparse = sparse_s < dense_s;
      if (!use_sparse) {
        auto [v, p] = f32_dense(plan, c, w, src, dst_md);
        plan.info.push_back({c.text, "fp32 inner product (measured faster than csr)", sparsity});
        return v;
      }
    }
    if (!use_sparse) {
      auto [v, p] = f32_dense(plan, c, w, src, dst_md);
      plan.info.push_back({c.text, "fp32 inner product", sparsity});
      return v;
    }
    plan.steps.push_back(sparse_step);
    plan.info.push_back({c.text, "sparse csr", sparsity});
    return {dst, 1.0f};
  }

  Value conv_f32(Plan& plan, const ChainLayer& c, const InferenceWeights& w, Value cur) {
    const std::int64_t n = plan.n, o = c.out[0];
    const auto k = std::int64_t(c.spec.args[1]);
    const auto stride = std::int64_t(option(c.spec, "stride", 1));
    const auto pad = std::int64_t(option(c.spec, "pad", 0));
    MD bias_md({o}, dt::f32, tag::a);
    MD src_any({n, c.in[0], c.in[1], c.in[2]}, dt::f32, tag::any);
    MD w_any({o, c.in[0], k, k}, dt::f32, tag::any);
    MD dst_any({n, o, c.out[1], c.out[2]}, dt::f32, tag::any);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                      src_any, w_any, bias_md, dst_any, {stride, stride}, {pad, pad}, {pad, pad});
    dnnl::convolution_forward::primitive_desc pd(d, weighted_attr(c.fused, {}), engine_);
    Value src = convert(plan, cur, pd.src_desc(), 1.0f);
    memory wm = weights_memory(pd.weights_desc(), MD({o, c.in[0], k, k}, dt::f32, tag::abcd), w.weight.data(), {});
    memory bm(bias_md, engine_, const_cast<float*>(w.bias.data()));
    memory dst(pd.dst_desc(), engine_);
    add_primitive(plan, dnnl::convolution_forward(pd),
                  {{DNNL_ARG_SRC, src.mem}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dst}});
    plan.info.push_back({c.text, "fp32 convolution", zero_fraction(w.weight)});
    return {dst, 1.0f};
  }

  Value pool(Plan& plan, const ChainLayer& c, Value cur) {
    const auto k = std::int64_t(c.spec.args[0]);
    const auto stride = std::int64_t(option(c.spec, "stride", double(k)));
    MD dst_any({plan.n, c.out[0], c.out[1], c.out[2]}, cur.type(), tag::any);
    dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_inference,
                                  c.spec.name == "maxpool" ? dnnl::algorithm::pooling_max
                                                           : dnnl::algorithm::pooling_avg_exclude_padding,
                                  cur.mem.get_desc(), dst_any, {stride, stride}, {k, k}, {0, 0}, {0, 0});
    dnnl::pooling_forward::primitive_desc pd(d, engine_);
    memory dst(pd.dst_desc(), engine_);
    add_primitive(plan, dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, cur.mem}, {DNNL_ARG_DST, dst}});
    plan.info.push_back({c.text, std::string(cur.int8() ? "int8" : "fp32") + " pooling", 0});
    // Max and mean of values sharing one scale keep that scale.
    return {dst, cur.scale};
  }

  std::unique_ptr<Plan> build(std::int64_t n, bool observing) {
    auto plan = std::make_unique<Plan>();
    plan->n = n;
    plan->observing = observing;
    const Dims in_dims = spec_.input_shape.with_batch(n);
    plan->input = memory(MD(cpu::to_dnnl_dims(in_dims), dt::f32, plain_tag(in_dims.rank() == 2 ? 2 : 4)),
                         engine_, DNNL_MEMORY_NONE);
    Value cur{plan->input, 1.0f};
    std::size_t k = 0;
    const ChainLayer* last = last_weighted();
    for (std::size_t i = 0; i < chain_.size(); ++i) {
      const ChainLayer& c = chain_[i];
      const std::string& name = c.spec.name;
      if (!c.prefix.empty()) {
        const InferenceWeights& w = spec_.weights.at(c.prefix);
        // A pooling after a conv lowered to a matmul runs on its rows, unless
        // the conv's own output is to be observed.
        const ChainLayer* pool = nullptr;
        if (spec_.int8 && !observing && lowers_to_matmul(c) && i + 1 < chain_.size() &&
            pools_conv_rows(c, chain_[i + 1]))
          pool = &chain_[i + 1];
        if (spec_.int8) cur = int8_layer(*plan, c, w, cur, &c == last, pool);
        else if (name == "dense") cur = dense_f32_or_sparse(*plan, c, w, cur);
        else cur = conv_f32(*plan, c, w, cur);
        if (observing) observe_step(*plan, cur, k);
        ++k;
        if (pool) ++i;  // already run
      } else if (name == "maxpool" || name == "avgpool") {
        cur = pool(*plan, c, cur);
      } else if (name == "flatten" && spec_.int8 && cur.int8() && &c + 1 != chain_.data() + chain_.size() &&
                 (&c + 1)->spec.name == "dense" &&
                 cur.mem.get_desc() == MD(cur.mem.get_desc().dims(), cur.type(), tag::acdb)) {
        // An int8 image in (N, H, W, C), as the int8 conv and pool leave it,
        // already is a row-major (N, H·W·C) matrix: the int8 dense after it
        // reads it as such with its weights permuted once (int8_layer),
        // instead of a reorder to (N, C, H, W) on every batch.
        const memory::dims dims = cur.mem.get_desc().dims();
        cur = {memory(MD({n, c.out[0]}, cur.type(), tag::ab), engine_, cur.mem.get_data_handle()), cur.scale, dims};
        plan->info.push_back({c.text, "view (H, W, C order)", 0});
      } else if (name == "flatten") {
        // Row-major (C, H, W) order as Network flattens; the 2-D view
        // shares the plain 4-D buffer.
        MD plain(cur.mem.get_desc().dims(), cur.type(), tag::abcd);
        Value flat = convert(*plan, cur, plain, cur.scale);
        MD md2({n, c.out[0]}, cur.type(), tag::ab);
        if (flat.mem.get() == plan->input.get()) {
          cur = {memory(md2, engine_, DNNL_MEMORY_NONE), cur.scale};
          plan->input_views.push_back(cur.mem);
        } else {
          cur = {memory(md2, engine_, flat.mem.get_data_handle()), cur.scale};
        }
        plan->info.push_back({c.text, "reorder", 0});
      } else if (is_activation(name)) {
        Value f = plain_f32(*plan, cur);
        memory dst(f.mem.get_desc(), engine_);
        dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, algorithm_of(activation_of(name)),
                                      f.mem.get_desc(), 0.0f, 0.0f);
        dnnl::eltwise_forward::primitive_desc pd(d, engine_);
        add_primitive(*plan, dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, f.mem}, {DNNL_ARG_DST, dst}});
        plan->info.push_back({c.text, "fp32 eltwise", 0});
        cur = {dst, 1.0f};
      }  // dropout: identity at inference
    }
    plan->output = memory(MD({n, spec_.outputs}, dt::f32, tag::ab), engine_, DNNL_MEMORY_NONE);
    if (cur.mem.get_desc().dims() != memory::dims{n, spec_.outputs})
      throw usage_error("inference: the network's output is not (N, " + std::to_string(spec_.outputs) + ")");
    Value out = convert(*plan, cur, plan->output.get_desc(), 1.0f);
    if (out.mem.get_data_handle() != plan->output.get_data_handle()) {
      // The last step wrote elsewhere: copy into the caller's buffer.
      dnnl::reorder::primitive_desc pd(engine_, out.mem.get_desc(), engine_, plan->output.get_desc());
      dnnl::reorder r(pd);
      memory src = out.mem;
      Plan* p = plan.get();
      plan->steps.push_back([r, src, p](dnnl::stream& s) mutable { r.execute(s, src, p->output); });
    }
    return plan;
  }

  void observe_step(Plan& plan, const Value& v, std::size_t k) {
    Value f = plain_f32(plan, v);
    memory m = f.mem;
    plan.steps.push_back([this, m, k](dnnl::stream& s) {
      s.wait();
      const auto& dims = m.get_desc().dims();
      std::size_t count = 1;
      for (auto d : dims) count *= std::size_t(d);
      if (observer_ && *observer_) (*observer_)(k, static_cast<const float*>(m.get_data_handle()), count);
    });
  }

  InferenceSpec spec_;
  std::vector<ChainLayer> chain_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<std::unique_ptr<Plan>> plans_;
  const Observer* observer_ = nullptr;
};

InferenceNetwork::InferenceNetwork(InferenceSpec spec) : impl_(std::make_unique<Impl>(std::move(spec))) {}
InferenceNetwork::~InferenceNetwork() = default;

void InferenceNetwork::forward(const float* x, std::int64_t rows, float* y) { impl_->forward(x, rows, y, nullptr); }

void InferenceNetwork::forward(const float* x, std::int64_t rows, float* y, const Observer& observe) {
  impl_->forward(x, rows, y, &observe);
}

std::vector<InferenceLayerInfo> InferenceNetwork::describe() const { return impl_->describe(); }

}  // namespace anneal
