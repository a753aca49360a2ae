#include "engine/cpu/cpu_common.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <utility>

namespace anneal::cpu {

memory::data_type to_dnnl(DType dtype) {
  switch (dtype) {
    case DType::kF32: return memory::data_type::f32;
    case DType::kBF16: return memory::data_type::bf16;
    case DType::kS8: return memory::data_type::s8;
    case DType::kU8: return memory::data_type::u8;
    case DType::kF16: break;  // the CPU backend has no fp16 (capabilities().fp16 is false)
  }
  throw failure("cpu backend: unexpected tensor data type");
}

DType from_dnnl(memory::data_type dtype) {
  if (dtype == memory::data_type::f32) return DType::kF32;
  if (dtype == memory::data_type::bf16) return DType::kBF16;
  if (dtype == memory::data_type::s8) return DType::kS8;
  if (dtype == memory::data_type::u8) return DType::kU8;
  throw failure("cpu backend: unexpected oneDNN data type");
}

memory::dims to_dnnl_dims(const Dims& dims) {
  memory::dims out(static_cast<std::size_t>(dims.rank()));
  for (int i = 0; i < dims.rank(); ++i) out[static_cast<std::size_t>(i)] = dims[i];
  return out;
}

MemDesc plain_md(const Dims& dims, DType dtype) {
  using tag = memory::format_tag;
  static constexpr tag kTags[] = {tag::a, tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde};
  if (dims.rank() < 1 || dims.rank() > 5)
    throw failure("cpu backend: tensors have rank 1 to 5, not " + std::to_string(dims.rank()));
  return MemDesc(to_dnnl_dims(dims), to_dnnl(dtype), kTags[dims.rank()]);
}

MemDesc with_dtype(const MemDesc& md, DType dtype) {
  MemDesc out = md;
  out.data.data_type = static_cast<dnnl_data_type_t>(to_dnnl(dtype));
  return out;
}

MemDesc with_batch(const MemDesc& md, std::int64_t n) {
  MemDesc out = md;
  out.data.dims[0] = n;
  out.data.padded_dims[0] = n;
  return out;
}

std::string md_string(const MemDesc& md) {
  std::string s = "{";
  for (int i = 0; i < md.data.ndims; ++i) {
    if (i) s += ",";
    s += std::to_string(md.data.dims[i]);
  }
  switch (md.data_type()) {
    case memory::data_type::f32: return s + "} f32";
    case memory::data_type::bf16: return s + "} bf16";
    case memory::data_type::s8: return s + "} s8";
    case memory::data_type::u8: return s + "} u8";
    default: return s + "} ?";
  }
  return s;
}

std::string layout_string(const MemDesc& md) {
  const dnnl_memory_desc_t& d = md.data;
  auto list = [](const dnnl_dim_t* v, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
      if (i) s += ',';
      s += std::to_string(v[i]);
    }
    return s;
  };
  std::string s = "dims=" + list(d.dims, d.ndims) + " padded=" + list(d.padded_dims, d.ndims) +
                  " padded_offsets=" + list(d.padded_offsets, d.ndims) + " offset0=" + std::to_string(d.offset0) +
                  " type=" + std::to_string(int(d.data_type)) + " format=" + std::to_string(int(d.format_kind));
  if (d.format_kind == dnnl_blocked) {
    const dnnl_blocking_desc_t& b = d.format_desc.blocking;
    s += " strides=" + list(b.strides, d.ndims) + " blocks=" + list(b.inner_blks, b.inner_nblks) +
         " block_dims=" + list(b.inner_idxs, b.inner_nblks);
  }
  // Extra flags (compensations of int8 weights) change the storage too.
  return s + " extra=" + std::to_string(int(d.extra.flags));
}

CpuLayout::CpuLayout(MemDesc md) : md_(std::move(md)) {
  std::vector<std::int64_t> d(md_.data.dims, md_.data.dims + md_.data.ndims);
  plain_ = md_.data.ndims >= 1 && md_.data.ndims <= 5 &&
           md_ == plain_md(Dims(d), from_dnnl(md_.data_type()));
}

bool CpuLayout::same_as(const TensorLayout& other) const {
  const auto* o = dynamic_cast<const CpuLayout*>(&other);
  return o != nullptr && o->md_ == md_;
}

const MemDesc& md_of(const Tensor& t) {
  const auto* layout = dynamic_cast<const CpuLayout*>(t.layout());
  if (layout == nullptr) throw failure("cpu backend: tensor is not shaped by the cpu backend");
  return layout->md();
}

void rethrow_dnnl(const dnnl::error& e, const std::string& what) {
  throw failure("cpu backend: " + what + ": " + e.what());
}

ScratchBuffer::~ScratchBuffer() {
  if (data_ != nullptr) allocator_->deallocate(data_);
}

ScratchBuffer::ScratchBuffer(ScratchBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      allocator_(other.allocator_) {}

ScratchBuffer& ScratchBuffer::operator=(ScratchBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) allocator_->deallocate(data_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    allocator_ = other.allocator_;
  }
  return *this;
}

void* ScratchBuffer::ensure(std::size_t bytes, MemoryAllocator& allocator) {
  if (bytes <= capacity_ && data_ != nullptr) return data_;
  if (data_ != nullptr) allocator_->deallocate(data_);
  data_ = nullptr;
  capacity_ = 0;
  allocator_ = &allocator;
  data_ = allocator.allocate(bytes == 0 ? 64 : bytes);
  capacity_ = bytes;
  return data_;
}

Exec::Exec(dnnl::primitive primitive, const dnnl::primitive_desc_base& pd, CpuContext& ctx,
           const std::vector<std::pair<int, MemDesc>>& args)
    : primitive_(std::move(primitive)) {
  slots_.reserve(args.size() + 1);
  for (const auto& [arg, md] : args) {
    memory mem(md, ctx.engine, DNNL_MEMORY_NONE);
    slots_.push_back({arg, mem, nullptr});
    args_.emplace(arg, mem);
  }
  const MemDesc scratch_md = pd.scratchpad_desc();
  if (scratch_md.get_size() > 0) {
    void* data = scratchpad_.ensure(scratch_md.get_size(), *ctx.allocator);
    memory mem(scratch_md, ctx.engine, data);
    args_.emplace(DNNL_ARG_SCRATCHPAD, mem);
  }
}

void Exec::set(int arg, const void* data) {
  for (Slot& slot : slots_) {
    if (slot.arg != arg) continue;
    if (slot.bound != data) {
      slot.mem.set_data_handle(const_cast<void*>(data));
      slot.bound = data;
    }
    return;
  }
  throw failure("cpu backend: primitive has no argument " + std::to_string(arg));
}

void Exec::run(CpuContext& ctx) {
  try {
    primitive_.execute(ctx.stream, args_);
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, "executing a primitive");
  }
}

Reorders::Entry& Reorders::entry_for(CpuContext& ctx, const MemDesc& src_md, const MemDesc& dst_md,
                                     bool accumulate, float scale) {
  for (Entry& e : entries_)
    if (e.accumulate == accumulate && e.scale == scale && e.src == src_md && e.dst == dst_md) return e;
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    if (scale != 1.0f) attr.set_output_scales(0, {scale});
    dnnl::reorder::primitive_desc pd(ctx.engine, src_md, ctx.engine, dst_md, attr);
    entries_.push_back({src_md, dst_md, accumulate, scale,
                        Exec(dnnl::reorder(pd), pd, ctx,
                             {{DNNL_ARG_FROM, src_md}, {DNNL_ARG_TO, dst_md}})});
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, "creating a reorder " + md_string(src_md) + " -> " + md_string(dst_md));
  }
  return entries_.back();
}

void Reorders::run(CpuContext& ctx, const MemDesc& src_md, const void* src, const MemDesc& dst_md,
                   void* dst, bool accumulate) {
  Entry& entry = entry_for(ctx, src_md, dst_md, accumulate, 1.0f);
  entry.exec.set(DNNL_ARG_FROM, src);
  entry.exec.set(DNNL_ARG_TO, dst);
  entry.exec.run(ctx);
}

void Reorders::run_scaled(CpuContext& ctx, const MemDesc& src_md, const void* src, const MemDesc& dst_md,
                          void* dst, float scale) {
  Entry& entry = entry_for(ctx, src_md, dst_md, false, scale);
  entry.exec.set(DNNL_ARG_FROM, src);
  entry.exec.set(DNNL_ARG_TO, dst);
  entry.exec.run(ctx);
}

void reorder_now(CpuContext& ctx, const MemDesc& src_md, const void* src, const MemDesc& dst_md,
                 void* dst) {
  try {
    memory from(src_md, ctx.engine, const_cast<void*>(src));
    memory to(dst_md, ctx.engine, dst);
    dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine, src_md, ctx.engine, dst_md))
        .execute(ctx.stream, from, to);
    ctx.stream.wait();
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, "reordering " + md_string(src_md) + " -> " + md_string(dst_md));
  }
}

double zero_fraction(const std::vector<float>& values) {
  if (values.empty()) return 0;
  std::size_t zeros = 0;
  for (float v : values) zeros += v == 0.0f;
  return double(zeros) / double(values.size());
}

const void* conform(CpuContext& ctx, Reorders& reorders, const Tensor& t, const MemDesc& want,
                    ScratchBuffer& scratch) {
  const MemDesc& have = md_of(t);
  if (have == want) return t.data();
  void* out = scratch.ensure(want.get_size(), *ctx.allocator);
  reorders.run(ctx, have, t.data(), want, out);
  return out;
}

void shape_output(CpuContext& ctx, Tensor& t, const Dims& dims,
                  const std::shared_ptr<const CpuLayout>& layout) {
  t.reshape(dims, from_dnnl(layout->md().data_type()), layout, *ctx.allocator);
}

namespace {

// The bytes from one image to the next when images are the descriptor's
// outermost dim, unblocked, with nothing between them; 0 otherwise.
std::size_t image_stride(const MemDesc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.offset0 != 0) return 0;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  for (int i = 0; i < b.inner_nblks; ++i)
    if (b.inner_idxs[i] == 0) return 0;
  const std::size_t one = with_batch(md, 1).get_size();
  const auto stride = std::size_t(b.strides[0]) * memory::data_type_size(md.data_type());
  return stride == one ? stride : 0;
}

}  // namespace

void ImageConv::build(CpuContext& ctx, const ImageConvGeometry& g, memory::data_type dt, dnnl::algorithm alg,
                      const dnnl::primitive_attr& attr) {
  using tag = memory::format_tag;
  const MemDesc bias_md({g.out_channels}, memory::data_type::f32, tag::a);
  auto make = [&](dnnl::algorithm a, tag activations) {
    const MemDesc src({1, g.channels, g.height, g.width}, dt, activations);
    const MemDesc w({g.out_channels, g.channels, g.kernel, g.kernel}, dt, tag::any);
    const MemDesc dst({1, g.out_channels, g.out_height, g.out_width}, dt, activations);
    // oneDNN 2.6 ranks its kernels by the propagation kind, and for one
    // image the two fastest here are, on AVX-512, Winograd as
    // forward_inference (F(2,3) on weights transformed once: the training
    // F(4,3) kernel transforms them at every call, 2x slower per image)
    // and direct as forward_training (jit; forward_inference ranks brgconv
    // in nhwc first, 1.2-1.4x slower). On AVX2 both kinds run the same jit
    // kernel. Neither keeps a workspace: nothing is trained.
    const auto kind = a == dnnl::algorithm::convolution_winograd ? dnnl::prop_kind::forward_inference
                                                                  : dnnl::prop_kind::forward_training;
    dnnl::convolution_forward::desc d(kind, a, src, w, bias_md, dst, {g.stride, g.stride}, {g.pad, g.pad},
                                      {g.pad, g.pad});
    return dnnl::convolution_forward::primitive_desc(d, attr, ctx.engine);
  };
  try {
    dnnl::convolution_forward::primitive_desc pd;
    try {
      pd = make(alg, tag::any);
    } catch (const dnnl::error&) {
      if (alg == dnnl::algorithm::convolution_direct) throw;
      alg = dnnl::algorithm::convolution_direct;
      pd = make(alg, tag::any);
    }
    if (image_stride(pd.src_desc()) == 0 || image_stride(pd.dst_desc()) == 0) pd = make(alg, tag::nchw);
    pd_ = pd;
    src_md_ = pd.src_desc();
    weights_md_ = pd.weights_desc();
    dst_md_ = pd.dst_desc();
    bias_md_ = bias_md;
    src_stride_ = image_stride(src_md_);
    dst_stride_ = image_stride(dst_md_);
    lanes_.clear();
    add_lane(ctx);
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, "conv of one image " + md_string(MemDesc({1, g.channels, g.height, g.width}, dt,
                                                                 tag::nchw)));
  }
}

const std::shared_ptr<const CpuLayout>& ImageConv::dst_layout(std::int64_t n) {
  if (n != layout_n_) {
    layout_ = make_layout(with_batch(dst_md_, n));
    layout_n_ = n;
  }
  return layout_;
}

void ImageConv::add_lane(CpuContext& ctx) {
  auto lane = std::make_unique<Lane>();
  try {
    lane->ctx = CpuContext{ctx.engine, dnnl::stream(ctx.engine), ctx.allocator};
    lane->exec = Exec(dnnl::convolution_forward(pd_), pd_, lane->ctx,
                      {{DNNL_ARG_SRC, src_md_}, {DNNL_ARG_WEIGHTS, weights_md_}, {DNNL_ARG_BIAS, bias_md_},
                       {DNNL_ARG_DST, dst_md_}});
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, "conv of one image");
  }
  lanes_.push_back(std::move(lane));
}

void ImageConv::run(CpuContext& ctx, const void* src, const void* weights, const void* bias, void* dst,
                    std::int64_t n) {
  const int threads = std::max(1, omp_get_max_threads());
  while (int(lanes_.size()) < threads) add_lane(ctx);
  ctx.stream.wait();  // src (a reorder on the op's stream) is complete
  std::exception_ptr error;
#pragma omp parallel for schedule(static) if (threads > 1)
  for (std::int64_t i = 0; i < n; ++i) {
    Lane& lane = *lanes_[std::size_t(omp_get_thread_num())];
    try {
      lane.exec.set(DNNL_ARG_WEIGHTS, weights);
      lane.exec.set(DNNL_ARG_BIAS, bias);
      lane.exec.set(DNNL_ARG_SRC, static_cast<const char*>(src) + std::size_t(i) * src_stride_);
      lane.exec.set(DNNL_ARG_DST, static_cast<char*>(dst) + std::size_t(i) * dst_stride_);
      lane.exec.run(lane.ctx);
    } catch (...) {
      // An exception must not leave an OpenMP region: the first is kept
      // and thrown after it.
#pragma omp critical(anneal_image_conv_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

dnnl::algorithm eltwise_algorithm(Activation kind, bool from_output) {
  using alg = dnnl::algorithm;
  switch (kind) {
    case Activation::kRelu: return from_output ? alg::eltwise_relu_use_dst_for_bwd : alg::eltwise_relu;
    case Activation::kTanh: return from_output ? alg::eltwise_tanh_use_dst_for_bwd : alg::eltwise_tanh;
    case Activation::kSigmoid:
      return from_output ? alg::eltwise_logistic_use_dst_for_bwd : alg::eltwise_logistic;
    case Activation::kGelu:
      if (from_output) throw failure("cpu backend: gelu cannot be differentiated from its output");
      return alg::eltwise_gelu_erf;
    case Activation::kNone: break;
  }
  throw failure("cpu backend: no eltwise algorithm for this activation");
}

dnnl::primitive_attr fused_attr(Activation fused) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (fused != Activation::kNone) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, eltwise_algorithm(fused, false), 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

bool int8_pairs_saturate() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto vnni = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_vnni);
  return (isa & vnni) != vnni;
}

int int8_weight_levels() { return int8_pairs_saturate() ? 64 : 127; }

}  // namespace anneal::cpu
