// The rest of the inference-only ops: the fp32 convolution of pruned models
// (Backend::inference_conv without int8) and pooling of f32, s8 or u8
// tensors (Backend::inference_pool). Both run oneDNN's forward_inference
// primitives in the layouts oneDNN picks; the conv one image at a time.
#include "engine/cpu/cpu_ops.h"

namespace anneal::cpu {
namespace {

using tag = memory::format_tag;
using dt = memory::data_type;

class CpuFp32ConvOp final : public InferenceConvOp {
 public:
  CpuFp32ConvOp(CpuContext& ctx, InferenceConvSpec spec) : ctx_(ctx), spec_(std::move(spec)) {
    const std::int64_t o = spec_.out_channels, k = spec_.kernel;
    if (std::int64_t(spec_.weights.weight.size()) != o * spec_.in[0] * k * k ||
        std::int64_t(spec_.weights.bias.size()) != o)
      throw corrupt("inference: conv " + spec_.in.str() + " -> " + std::to_string(o) +
                    ": weights have the wrong size");
    out_h_ = (spec_.in[1] + 2 * spec_.pad - k) / spec_.stride + 1;
    out_w_ = (spec_.in[2] + 2 * spec_.pad - k) / spec_.stride + 1;
  }

  bool runs_pool() const override { return false; }

  // x (N, C, H, W) f32, any layout -> y (N, O, Ho, Wo) f32 in the layout
  // oneDNN picks, one image at a time (ImageConv: a sample's output is the
  // same bits in any batch).
  void forward(const Tensor& x, Tensor& y) override {
    if (x.dims().without_batch() != spec_.in || x.dtype() != DType::kF32)
      throw failure("inference conv: input " + x.dims().str() + " does not match f32 " + spec_.in.str());
    const std::int64_t o = spec_.out_channels, c = spec_.in[0], k = spec_.kernel;
    if (!image_.built()) {
      image_.build(ctx_, ImageConvGeometry{c, spec_.in[1], spec_.in[2], o, k, spec_.stride, spec_.pad, out_h_, out_w_},
                   dt::f32, dnnl::algorithm::convolution_direct, fused_attr(spec_.fused));
      void* w = weights_.ensure(image_.weights_md().get_size(), *ctx_.allocator);
      reorder_now(ctx_, MemDesc({o, c, k, k}, dt::f32, tag::abcd), spec_.weights.weight.data(), image_.weights_md(),
                  w);
    }
    const std::int64_t n = x.batch();
    const void* src = conform(ctx_, reorders_, x, with_batch(image_.src_md(), n), converted_x_);
    shape_output(ctx_, y, Dims{n, o, out_h_, out_w_}, image_.dst_layout(n));
    image_.run(ctx_, src, weights_.data(), spec_.weights.bias.data(), y.data(), n);
    kernel_ = "fp32 convolution";
  }

  std::string kernel() const override { return kernel_; }

 private:
  CpuContext& ctx_;
  InferenceConvSpec spec_;
  std::int64_t out_h_ = 0, out_w_ = 0;
  ImageConv image_;        // built at the first forward
  ScratchBuffer weights_;  // in the layout image_ reads
  Reorders reorders_;
  ScratchBuffer converted_x_;
  std::string kernel_;
};

class CpuInferencePoolOp final : public InferenceOp {
 public:
  CpuInferencePoolOp(CpuContext& ctx, const InferencePoolSpec& spec) : ctx_(ctx), spec_(spec) {
    out_h_ = (spec.in[1] - spec.kernel) / spec.stride + 1;
    out_w_ = (spec.in[2] - spec.kernel) / spec.stride + 1;
  }

  // x (N, C, H, W) any dtype and layout -> y (N, C, Ho, Wo), x's dtype; max
  // and mean of values sharing one scale keep that scale.
  void forward(const Tensor& x, Tensor& y) override {
    Plan& plan = plan_for(x);
    shape_output(ctx_, y, Dims{x.batch(), spec_.in[0], out_h_, out_w_}, plan.y_layout);
    plan.exec.set(DNNL_ARG_SRC, x.data());
    plan.exec.set(DNNL_ARG_DST, y.data());
    plan.exec.run(ctx_);
    kernel_ = x.dtype() == DType::kF32 ? "fp32 pooling" : "int8 pooling";
  }

  std::string kernel() const override { return kernel_; }

 private:
  struct Plan {
    MemDesc x_md;
    std::shared_ptr<const CpuLayout> y_layout;
    Exec exec;
  };

  Plan& plan_for(const Tensor& x) {
    const MemDesc& x_md = md_of(x);
    if (Plan* p = find_plan(plans_, x_md)) return *p;
    if (x.dims().without_batch() != spec_.in)
      throw failure("inference pool: input " + x.dims().str() + " does not match " + spec_.in.str());
    auto plan = std::make_unique<Plan>();
    plan->x_md = x_md;
    try {
      MemDesc y_any({x.batch(), spec_.in[0], out_h_, out_w_}, x_md.data_type(), tag::any);
      dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_inference,
                                    spec_.max ? dnnl::algorithm::pooling_max
                                              : dnnl::algorithm::pooling_avg_exclude_padding,
                                    x_md, y_any, {spec_.stride, spec_.stride}, {spec_.kernel, spec_.kernel},
                                    {0, 0}, {0, 0});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::pooling_forward::primitive_desc pd(d, attr, ctx_.engine);
      plan->y_layout = make_layout(pd.dst_desc());
      plan->exec = Exec(dnnl::pooling_forward(pd), pd, ctx_, {{DNNL_ARG_SRC, x_md}, {DNNL_ARG_DST, pd.dst_desc()}});
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "inference pool for input " + md_string(x_md));
    }
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }

  CpuContext& ctx_;
  InferencePoolSpec spec_;
  std::int64_t out_h_ = 0, out_w_ = 0;
  std::vector<std::unique_ptr<Plan>> plans_;
  std::string kernel_;
};

}  // namespace

std::unique_ptr<InferenceOp> make_inference_dense_op(CpuContext& ctx, InferenceDenseSpec spec) {
  if (spec.int8) return make_int8_dense_op(ctx, spec);
  return make_sparse_dense_op(ctx, std::move(spec));
}

std::unique_ptr<InferenceConvOp> make_inference_conv_op(CpuContext& ctx, InferenceConvSpec spec) {
  if (spec.int8) return make_int8_conv_op(ctx, spec);
  return std::make_unique<CpuFp32ConvOp>(ctx, std::move(spec));
}

std::unique_ptr<InferenceOp> make_inference_pool_op(CpuContext& ctx, const InferencePoolSpec& spec) {
  return std::make_unique<CpuInferencePoolOp>(ctx, spec);
}

}  // namespace anneal::cpu
