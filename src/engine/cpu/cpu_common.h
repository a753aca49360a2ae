// Internal plumbing shared by the oneDNN ops of the CPU backend: layouts,
// cached primitive executions, reorders and scratch memory.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "anneal/backend.h"
#include "anneal/error.h"
#include "anneal/tensor.h"

namespace anneal::cpu {

using dnnl::memory;
using MemDesc = dnnl::memory::desc;

memory::data_type to_dnnl(DType dtype);
DType from_dnnl(memory::data_type dtype);
memory::dims to_dnnl_dims(const Dims& dims);
// The dense row-major descriptor of these dims (rank 1..5).
MemDesc plain_md(const Dims& dims, DType dtype);
// `md` with its element type replaced, blocking kept.
MemDesc with_dtype(const MemDesc& md, DType dtype);
// `md` with its batch (first) dim replaced; only valid for layouts whose
// batch dim is outermost and unblocked (all activations here).
MemDesc with_batch(const MemDesc& md, std::int64_t n);
// A oneDNN descriptor in a short human form, for error messages.
std::string md_string(const MemDesc& md);
// Everything that places a oneDNN descriptor's elements in storage (dims,
// padding, offset, data type, strides and inner blocks), as text: equal
// for two descriptors, in any two processes, exactly when they lay the
// elements out alike.
std::string layout_string(const MemDesc& md);

// A TensorLayout that is a oneDNN memory descriptor.
class CpuLayout final : public TensorLayout {
 public:
  explicit CpuLayout(MemDesc md);
  std::size_t bytes() const override { return md_.get_size(); }
  bool is_plain() const override { return plain_; }
  bool same_as(const TensorLayout& other) const override;
  const MemDesc& md() const { return md_; }

 private:
  MemDesc md_;
  bool plain_;
};

// The oneDNN descriptor of a shaped tensor. Throws kFailure for a tensor
// that is not shaped or was shaped by another backend.
const MemDesc& md_of(const Tensor& t);

// The engine and stream every op of one CpuBackend runs on, plus its memory.
struct CpuContext {
  dnnl::engine engine;
  dnnl::stream stream;
  MemoryAllocator* allocator = nullptr;
};

// Runs a oneDNN call, turning dnnl::error into anneal::Error with `what`.
[[noreturn]] void rethrow_dnnl(const dnnl::error& e, const std::string& what);

// Owned, 64-byte aligned scratch memory that only grows.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ScratchBuffer(ScratchBuffer&& other) noexcept;
  ScratchBuffer& operator=(ScratchBuffer&& other) noexcept;
  void* ensure(std::size_t bytes, MemoryAllocator& allocator);
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
  MemoryAllocator* allocator_ = nullptr;
};

// One primitive with its argument memories, created once and executed many
// times: the memory objects are made once and only their data handles are
// re-pointed (and only when the pointer changes), so executing allocates
// nothing on our side.
class Exec {
 public:
  Exec() = default;
  // `args`: each argument id with the descriptor the primitive expects.
  // A user-mode scratchpad is allocated here when the primitive needs one.
  Exec(dnnl::primitive primitive, const dnnl::primitive_desc_base& pd, CpuContext& ctx,
       const std::vector<std::pair<int, MemDesc>>& args);
  bool valid() const { return static_cast<bool>(primitive_); }
  void set(int arg, const void* data);
  void run(CpuContext& ctx);

 private:
  struct Slot {
    int arg;
    memory mem;
    const void* bound = nullptr;
  };
  dnnl::primitive primitive_;
  std::vector<Slot> slots_;
  std::unordered_map<int, memory> args_;
  ScratchBuffer scratchpad_;
};

// Reorders between two layouts (and dtypes), primitives cached by the pair.
class Reorders {
 public:
  // dst = src, or dst += src when `accumulate` (f32 destinations).
  void run(CpuContext& ctx, const MemDesc& src_md, const void* src, const MemDesc& dst_md,
           void* dst, bool accumulate = false);
  // dst = src · scale, rounded and saturated to dst's type: how int8
  // inference quantizes (f32 to s8/u8), dequantizes and requantizes. A
  // scale of exactly 1 is a plain reorder.
  void run_scaled(CpuContext& ctx, const MemDesc& src_md, const void* src, const MemDesc& dst_md,
                  void* dst, float scale);

 private:
  struct Entry {
    MemDesc src, dst;
    bool accumulate;
    float scale;
    Exec exec;
  };
  Entry& entry_for(CpuContext& ctx, const MemDesc& src_md, const MemDesc& dst_md, bool accumulate,
                   float scale);
  std::vector<Entry> entries_;
};

// dst = src for one-off conversions at build time (weights into the layout
// a primitive wants); waits for the result.
void reorder_now(CpuContext& ctx, const MemDesc& src_md, const void* src, const MemDesc& dst_md,
                 void* dst);

// True when oneDNN's int8 kernels here add u8·s8 products in pairs into a
// saturating 16-bit sum (vpmaddubsw: no VNNI, i.e. below avx512_core_vnni as
// oneDNN dispatches, ONEDNN_MAX_CPU_ISA included). avx2_vnni counts as
// saturating too: oneDNN 2.6 has no int8 gemm for it that we could rely on.
bool int8_pairs_saturate();

// The largest |s8 weight| this CPU's int8 products take at full speed:
// 127 with VNNI, else 64 (255·64·2 fits a 16-bit pair sum). Larger weights
// are still exact, at twice the cost (cpu_int8_ops.cc).
int int8_weight_levels();

// The fraction of zeros in `values` (0 when empty): a layer's sparsity.
double zero_fraction(const std::vector<float>& values);

// An input tensor in the descriptor a primitive wants: the tensor's own
// storage when it already matches, else a converted copy kept in `scratch`.
const void* conform(CpuContext& ctx, Reorders& reorders, const Tensor& t, const MemDesc& want,
                    ScratchBuffer& scratch);

// Shapes `t` as the op output described by `layout`.
void shape_output(CpuContext& ctx, Tensor& t, const Dims& dims,
                  const std::shared_ptr<const CpuLayout>& layout);

// Shorthand for building a layout handle.
inline std::shared_ptr<const CpuLayout> make_layout(const MemDesc& md) {
  return std::make_shared<const CpuLayout>(md);
}

// A plain layout of `dims` in `dtype`, kept in `cache` while it fits: an op
// whose output is plain makes no new layout object in a steady-state step.
inline const std::shared_ptr<const CpuLayout>& cached_plain_layout(std::shared_ptr<const CpuLayout>& cache,
                                                                   const Dims& dims, DType dtype) {
  const MemDesc md = plain_md(dims, dtype);
  if (!cache || cache->md() != md) cache = make_layout(md);
  return cache;
}

// Cached per-batch state of an op: most ops key on the input descriptor
// (which carries the batch size) and keep a short list.
template <typename Plan>
Plan* find_plan(std::vector<std::unique_ptr<Plan>>& plans, const MemDesc& x_md) {
  for (auto& p : plans)
    if (p->x_md == x_md) return p.get();
  return nullptr;
}

// A convolution forward run one image at a time: one oneDNN primitive for
// a batch of one, executed on each image of a batch in turn. Every image
// then goes through the same kernel with the same blocking, so its output
// is the same bits whatever images share its batch (a primitive for the
// whole batch is chosen by the batch size). For the batch-invariant convs.
//
// With a team of several OpenMP threads the images are shared out among
// them, each thread running the primitive alone on its images (oneDNN runs
// a primitive called inside a parallel region on the calling thread): one
// image's work is too small to split well across threads, a batch's
// images are not. A lone image runs on one thread too, so an image never
// runs another way than its neighbours.
struct ImageConvGeometry {
  std::int64_t channels, height, width, out_channels, kernel, stride, pad, out_height, out_width;
};
class ImageConv {
 public:
  // Builds the primitive for one image in dtype `dt` (activations and
  // weights; f32 bias), with `attr` (the fused activation): `alg` when
  // oneDNN implements it for one image, else direct. Layouts are oneDNN's
  // choice, with images outermost (plain when its choice is not).
  void build(CpuContext& ctx, const ImageConvGeometry& g, memory::data_type dt, dnnl::algorithm alg,
             const dnnl::primitive_attr& attr);
  bool built() const { return !lanes_.empty(); }
  // One image's layouts; a batch of n is with_batch(·, n) of them.
  const MemDesc& src_md() const { return src_md_; }
  const MemDesc& weights_md() const { return weights_md_; }
  const MemDesc& dst_md() const { return dst_md_; }
  // y's layout for a batch of n (kept for the latest n).
  const std::shared_ptr<const CpuLayout>& dst_layout(std::int64_t n);
  // dst[i] = conv(src[i]) for the n images at src (in with_batch(src_md(), n)),
  // on the calling thread's OpenMP team.
  void run(CpuContext& ctx, const void* src, const void* weights, const void* bias, void* dst, std::int64_t n);

 private:
  // What one thread runs the primitive with: its own argument memories,
  // scratchpad and stream.
  struct Lane {
    CpuContext ctx;
    Exec exec;
  };
  void add_lane(CpuContext& ctx);

  dnnl::convolution_forward::primitive_desc pd_;
  MemDesc src_md_, weights_md_, dst_md_, bias_md_;
  std::size_t src_stride_ = 0, dst_stride_ = 0;  // bytes per image
  std::vector<std::unique_ptr<Lane>> lanes_;      // by OpenMP thread number
  std::int64_t layout_n_ = -1;
  std::shared_ptr<const CpuLayout> layout_;
};

// The eltwise algorithm for an activation; `from_output` picks the
// *_use_dst_for_bwd variant.
dnnl::algorithm eltwise_algorithm(Activation kind, bool from_output);

// Attributes every forward primitive of a layer op takes: a user-managed
// scratchpad (ops own theirs, so steps allocate nothing) and `fused` as an
// eltwise post-op (none: no post-op).
dnnl::primitive_attr fused_attr(Activation fused);

// bf16 <-> f32 for the few elementwise loops that touch bf16 data.
inline float bf16_to_f32(std::uint16_t v) {
  std::uint32_t bits = std::uint32_t(v) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t bits;
  __builtin_memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return std::uint16_t(bits >> 16);
}

// Element access for the plain loops that take fp32 or bf16 activations
// (periodic, ensemble): load() widens to fp32, store() rounds to the storage.
inline float load(const float* p, std::int64_t i) { return p[i]; }
inline float load(const std::uint16_t* p, std::int64_t i) { return bf16_to_f32(p[i]); }
inline void store(float* p, std::int64_t i, float v) { p[i] = v; }
inline void store(std::uint16_t* p, std::int64_t i, float v) { p[i] = f32_to_bf16(v); }

// Calls f(T{}) with T the storage of `dtype`'s activations (float for f32,
// std::uint16_t for bf16); kUsage naming `op` for any other dtype.
template <typename F>
void with_storage(DType dtype, const char* op, F&& f) {
  if (dtype == DType::kF32) {
    f(float{});
  } else if (dtype == DType::kBF16) {
    f(std::uint16_t{});
  } else {
    throw usage_error(std::string(op) + ": the CPU backend computes it in f32 or bf16, not " + dtype_name(dtype));
  }
}

}  // namespace anneal::cpu
