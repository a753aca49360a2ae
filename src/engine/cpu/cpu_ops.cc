// Eltwise, pooling, batch norm and layer norm on oneDNN primitives. Each op
// keys its cached primitives on the input's descriptor (which carries the
// batch size and the layout the previous op chose), computes in that layout,
// and gives outputs and gradients that same layout.
#include "engine/cpu/cpu_ops.h"

namespace anneal::cpu {
namespace {

using dnnl::prop_kind;
using tag = memory::format_tag;

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

std::shared_ptr<const CpuLayout> layout_of(const Tensor& t) {
  return std::dynamic_pointer_cast<const CpuLayout>(t.shared_layout());
}

// ---- Eltwise ----------------------------------------------------------------

class CpuEltwiseOp final : public EltwiseOp {
 public:
  CpuEltwiseOp(CpuContext& ctx, const EltwiseSpec& spec) : ctx_(ctx), spec_(spec) {}

  void forward(const Tensor& x, Tensor& y) override {
    Plan& plan = plan_for(x);
    shape_output(ctx_, y, x.dims(), plan.layout);
    plan.forward.set(DNNL_ARG_SRC, x.data());
    plan.forward.set(DNNL_ARG_DST, y.data());
    plan.forward.run(ctx_);
  }

  void backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    run_backward(plan_for(x), false, x, dy, dx);
  }

  void backward_from_output(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    run_backward(plan_for(y), true, y, dy, dx);
  }

 private:
  struct Plan {
    MemDesc x_md;
    std::shared_ptr<const CpuLayout> layout;
    Exec forward;
    Exec backward[2];  // [from_output]
  };

  Plan& plan_for(const Tensor& x) {
    const MemDesc& md = md_of(x);
    if (Plan* p = find_plan(plans_, md)) return *p;
    auto plan = std::make_unique<Plan>();
    plan->x_md = md;
    plan->layout = layout_of(x);
    try {
      dnnl::eltwise_forward::desc d(prop_kind::forward_training,
                                    eltwise_algorithm(spec_.kind, false), md, 0.0f, 0.0f);
      dnnl::eltwise_forward::primitive_desc pd(d, user_scratchpad(), ctx_.engine);
      plan->forward = Exec(dnnl::eltwise_forward(pd), pd, ctx_,
                           {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, md}});
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, std::string(activation_name(spec_.kind)) + " forward " + md_string(md));
    }
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }

  void run_backward(Plan& plan, bool from_output, const Tensor& data, const Tensor& dy,
                    Tensor& dx) {
    Exec& exec = plan.backward[from_output ? 1 : 0];
    const MemDesc& md = plan.x_md;
    if (!exec.valid()) {
      try {
        const dnnl::algorithm alg = eltwise_algorithm(spec_.kind, from_output);
        dnnl::eltwise_forward::desc fd(prop_kind::forward_training, alg, md, 0.0f, 0.0f);
        dnnl::eltwise_forward::primitive_desc hint(fd, user_scratchpad(), ctx_.engine);
        dnnl::eltwise_backward::desc bd(alg, md, md, 0.0f, 0.0f);
        dnnl::eltwise_backward::primitive_desc pd(bd, user_scratchpad(), ctx_.engine, hint);
        exec = Exec(dnnl::eltwise_backward(pd), pd, ctx_,
                    {{from_output ? DNNL_ARG_DST : DNNL_ARG_SRC, md},
                     {DNNL_ARG_DIFF_DST, md},
                     {DNNL_ARG_DIFF_SRC, md}});
      } catch (const dnnl::error& e) {
        rethrow_dnnl(e, std::string(activation_name(spec_.kind)) + " backward " + md_string(md));
      }
    }
    exec.set(from_output ? DNNL_ARG_DST : DNNL_ARG_SRC, data.data());
    exec.set(DNNL_ARG_DIFF_DST, conform(ctx_, reorders_, dy, md, converted_dy_));
    shape_output(ctx_, dx, data.dims(), plan.layout);
    exec.set(DNNL_ARG_DIFF_SRC, dx.data());
    exec.run(ctx_);
  }

  CpuContext& ctx_;
  EltwiseSpec spec_;
  std::vector<std::unique_ptr<Plan>> plans_;
  Reorders reorders_;
  ScratchBuffer converted_dy_;
};

// ---- Pooling ----------------------------------------------------------------

class CpuPoolOp final : public PoolOp {
 public:
  CpuPoolOp(CpuContext& ctx, const PoolSpec& spec) : ctx_(ctx), spec_(spec) {
    out_h_ = (spec.in[1] - spec.kernel) / spec.stride + 1;
    out_w_ = (spec.in[2] - spec.kernel) / spec.stride + 1;
  }

  void forward(const Tensor& x, Tensor& y) override {
    Plan& plan = plan_for(x);
    plan.forward.set(DNNL_ARG_SRC, x.data());
    shape_output(ctx_, y, plan.y_dims, plan.y_layout);
    plan.forward.set(DNNL_ARG_DST, y.data());
    if (spec_.max) plan.forward.set(DNNL_ARG_WORKSPACE, plan.workspace.data());
    plan.forward.run(ctx_);
  }

  void backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    Plan& plan = plan_for(x);
    if (!plan.backward.valid()) {
      try {
        dnnl::pooling_backward::desc bd(algorithm(), plan.x_md, plan.y_md, strides(), kernel(),
                                        padding(), padding());
        dnnl::pooling_backward::primitive_desc pd(bd, user_scratchpad(), ctx_.engine, plan.pd);
        std::vector<std::pair<int, MemDesc>> args = {{DNNL_ARG_DIFF_DST, plan.y_md},
                                                     {DNNL_ARG_DIFF_SRC, plan.x_md}};
        if (spec_.max) args.push_back({DNNL_ARG_WORKSPACE, plan.pd.workspace_desc()});
        plan.backward = Exec(dnnl::pooling_backward(pd), pd, ctx_, args);
      } catch (const dnnl::error& e) {
        rethrow_dnnl(e, "pool backward " + md_string(plan.x_md));
      }
    }
    plan.backward.set(DNNL_ARG_DIFF_DST, conform(ctx_, reorders_, dy, plan.y_md, converted_dy_));
    if (spec_.max) plan.backward.set(DNNL_ARG_WORKSPACE, plan.workspace.data());
    shape_output(ctx_, dx, x.dims(), plan.x_layout);
    plan.backward.set(DNNL_ARG_DIFF_SRC, dx.data());
    plan.backward.run(ctx_);
  }

 private:
  struct Plan {
    MemDesc x_md, y_md;
    Dims y_dims;
    std::shared_ptr<const CpuLayout> x_layout, y_layout;
    dnnl::pooling_forward::primitive_desc pd;
    Exec forward, backward;
    ScratchBuffer workspace;
  };

  dnnl::algorithm algorithm() const {
    return spec_.max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
  }
  memory::dims strides() const { return {spec_.stride, spec_.stride}; }
  memory::dims kernel() const { return {spec_.kernel, spec_.kernel}; }
  static memory::dims padding() { return {0, 0}; }

  Plan& plan_for(const Tensor& x) {
    const MemDesc& md = md_of(x);
    if (Plan* p = find_plan(plans_, md)) return *p;
    if (x.dims().without_batch() != spec_.in)
      throw failure("pool: input " + x.dims().str() + " does not match " + spec_.in.str());
    auto plan = std::make_unique<Plan>();
    plan->x_md = md;
    plan->x_layout = layout_of(x);
    plan->y_dims = Dims{x.batch(), spec_.in[0], out_h_, out_w_};
    try {
      MemDesc y_any(to_dnnl_dims(plan->y_dims), md.data_type(), tag::any);
      dnnl::pooling_forward::desc d(prop_kind::forward_training, algorithm(), md, y_any,
                                    strides(), kernel(), padding(), padding());
      plan->pd = dnnl::pooling_forward::primitive_desc(d, user_scratchpad(), ctx_.engine);
      plan->y_md = plan->pd.dst_desc();
      std::vector<std::pair<int, MemDesc>> args = {{DNNL_ARG_SRC, md}, {DNNL_ARG_DST, plan->y_md}};
      if (spec_.max) {
        const MemDesc ws = plan->pd.workspace_desc();
        args.push_back({DNNL_ARG_WORKSPACE, ws});
        plan->workspace.ensure(ws.get_size(), *ctx_.allocator);
      }
      plan->forward = Exec(dnnl::pooling_forward(plan->pd), plan->pd, ctx_, args);
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "pool forward " + md_string(md));
    }
    plan->y_layout = make_layout(plan->y_md);
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }

  CpuContext& ctx_;
  PoolSpec spec_;
  std::int64_t out_h_ = 0, out_w_ = 0;
  std::vector<std::unique_ptr<Plan>> plans_;
  Reorders reorders_;
  ScratchBuffer converted_dy_;
};

// ---- Batch norm and layer norm --------------------------------------------------

// Both normalizations share one shape of code; `layer` picks oneDNN's layer
// normalization (per-sample statistics over the last dim) over batch
// normalization (per-channel statistics over N, H, W).
class CpuNormOp final : public NormOp {
 public:
  CpuNormOp(CpuContext& ctx, const NormSpec& spec, bool layer)
      : ctx_(ctx), spec_(spec), layer_(layer) {
    params_md_ = plain_md(Dims{spec.in[0]}, DType::kF32);
    if (layer_) params_md_ = plain_md(Dims{spec.in[spec.in.rank() - 1]}, DType::kF32);
  }

  void shape_parameters(Tensor& scale, Tensor& shift) override {
    const Dims d{params_md_.data.dims[0]};
    scale.reshape(d, DType::kF32, make_layout(params_md_), *ctx_.allocator);
    shift.reshape(d, DType::kF32, make_layout(params_md_), *ctx_.allocator);
  }

  void forward_training(const Tensor& x, const Tensor& scale, const Tensor& shift, Tensor& y,
                        Tensor& mean, Tensor& variance) override {
    Plan& plan = plan_for(x);
    shape_output(ctx_, mean, plan.stat_dims, plan.stat_layout);
    shape_output(ctx_, variance, plan.stat_dims, plan.stat_layout);
    shape_output(ctx_, y, x.dims(), plan.x_layout);
    Exec& e = plan.training;
    e.set(DNNL_ARG_SRC, x.data());
    e.set(DNNL_ARG_SCALE, scale.data());
    e.set(DNNL_ARG_SHIFT, shift.data());
    e.set(DNNL_ARG_DST, y.data());
    e.set(DNNL_ARG_MEAN, mean.data());
    e.set(DNNL_ARG_VARIANCE, variance.data());
    e.run(ctx_);
  }

  void forward_inference(const Tensor& x, const Tensor& scale, const Tensor& shift,
                         const Tensor& mean, const Tensor& variance, Tensor& y) override {
    Plan& plan = plan_for(x);
    shape_output(ctx_, y, x.dims(), plan.x_layout);
    if (layer_) {
      // Layer norm has no running statistics: each sample's own are used.
      Exec& e = plan.training;
      const std::size_t stat_bytes = plan.stat_md.get_size();
      e.set(DNNL_ARG_SRC, x.data());
      e.set(DNNL_ARG_SCALE, scale.data());
      e.set(DNNL_ARG_SHIFT, shift.data());
      e.set(DNNL_ARG_DST, y.data());
      e.set(DNNL_ARG_MEAN, inference_mean_.ensure(stat_bytes, *ctx_.allocator));
      e.set(DNNL_ARG_VARIANCE, inference_variance_.ensure(stat_bytes, *ctx_.allocator));
      e.run(ctx_);
      return;
    }
    if (!plan.inference.valid()) {
      try {
        const auto flags = dnnl::normalization_flags::use_scale |
                           dnnl::normalization_flags::use_shift |
                           dnnl::normalization_flags::use_global_stats;
        dnnl::batch_normalization_forward::desc d(prop_kind::forward_inference, plan.x_md,
                                                  spec_.epsilon, flags);
        dnnl::batch_normalization_forward::primitive_desc pd(d, user_scratchpad(), ctx_.engine);
        plan.inference = Exec(dnnl::batch_normalization_forward(pd), pd, ctx_,
                              {{DNNL_ARG_SRC, plan.x_md},
                               {DNNL_ARG_SCALE, params_md_},
                               {DNNL_ARG_SHIFT, params_md_},
                               {DNNL_ARG_MEAN, plan.stat_md},
                               {DNNL_ARG_VARIANCE, plan.stat_md},
                               {DNNL_ARG_DST, plan.x_md}});
      } catch (const dnnl::error& e) {
        rethrow_dnnl(e, "batchnorm inference " + md_string(plan.x_md));
      }
    }
    Exec& e = plan.inference;
    e.set(DNNL_ARG_SRC, x.data());
    e.set(DNNL_ARG_SCALE, scale.data());
    e.set(DNNL_ARG_SHIFT, shift.data());
    e.set(DNNL_ARG_MEAN, mean.data());
    e.set(DNNL_ARG_VARIANCE, variance.data());
    e.set(DNNL_ARG_DST, y.data());
    e.run(ctx_);
  }

  void backward(const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& shift,
                const Tensor& mean, const Tensor& variance, Tensor& dx, Tensor& dscale,
                Tensor& dshift, bool accumulate) override {
    Plan& plan = plan_for(x);
    if (!plan.backward.valid()) {
      try {
        const auto flags = norm_flags();
        const std::vector<std::pair<int, MemDesc>> args = {
            {DNNL_ARG_SRC, plan.x_md},          {DNNL_ARG_MEAN, plan.stat_md},
            {DNNL_ARG_VARIANCE, plan.stat_md},  {DNNL_ARG_DIFF_DST, plan.x_md},
            {DNNL_ARG_SCALE, params_md_},       {DNNL_ARG_SHIFT, params_md_},
            {DNNL_ARG_DIFF_SRC, plan.x_md},
            {DNNL_ARG_DIFF_SCALE, params_md_},  {DNNL_ARG_DIFF_SHIFT, params_md_}};
        if (layer_) {
          dnnl::layer_normalization_backward::desc d(prop_kind::backward, plan.x_md, plan.x_md,
                                                     plan.stat_md, spec_.epsilon, flags);
          dnnl::layer_normalization_backward::primitive_desc pd(d, user_scratchpad(), ctx_.engine,
                                                                plan.ln_pd);
          plan.backward = Exec(dnnl::layer_normalization_backward(pd), pd, ctx_, args);
        } else {
          dnnl::batch_normalization_backward::desc d(prop_kind::backward, plan.x_md, plan.x_md,
                                                     spec_.epsilon, flags);
          dnnl::batch_normalization_backward::primitive_desc pd(d, user_scratchpad(), ctx_.engine,
                                                                plan.bn_pd);
          plan.backward = Exec(dnnl::batch_normalization_backward(pd), pd, ctx_, args);
        }
      } catch (const dnnl::error& e) {
        rethrow_dnnl(e, std::string(layer_ ? "layernorm" : "batchnorm") + " backward " +
                            md_string(plan.x_md));
      }
    }
    Exec& e = plan.backward;
    e.set(DNNL_ARG_SRC, x.data());
    e.set(DNNL_ARG_MEAN, mean.data());
    e.set(DNNL_ARG_VARIANCE, variance.data());
    e.set(DNNL_ARG_DIFF_DST, conform(ctx_, reorders_, dy, plan.x_md, converted_dy_));
    e.set(DNNL_ARG_SCALE, scale.data());
    e.set(DNNL_ARG_SHIFT, shift.data());
    shape_output(ctx_, dx, x.dims(), plan.x_layout);
    e.set(DNNL_ARG_DIFF_SRC, dx.data());
    const std::size_t pbytes = params_md_.get_size();
    void* ds = accumulate ? diff_scale_.ensure(pbytes, *ctx_.allocator) : dscale.data();
    void* dsh = accumulate ? diff_shift_.ensure(pbytes, *ctx_.allocator) : dshift.data();
    e.set(DNNL_ARG_DIFF_SCALE, ds);
    e.set(DNNL_ARG_DIFF_SHIFT, dsh);
    e.run(ctx_);
    if (accumulate) {
      reorders_.run(ctx_, params_md_, ds, params_md_, dscale.data(), true);
      reorders_.run(ctx_, params_md_, dsh, params_md_, dshift.data(), true);
    }
  }

 private:
  struct Plan {
    MemDesc x_md, stat_md;
    Dims stat_dims;
    std::shared_ptr<const CpuLayout> x_layout, stat_layout;
    dnnl::batch_normalization_forward::primitive_desc bn_pd;
    dnnl::layer_normalization_forward::primitive_desc ln_pd;
    Exec training, inference, backward;
  };

  static dnnl::normalization_flags norm_flags() {
    return dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  }

  Plan& plan_for(const Tensor& x) {
    const MemDesc& md = md_of(x);
    if (Plan* p = find_plan(plans_, md)) return *p;
    if (x.dims().without_batch() != spec_.in)
      throw failure("norm: input " + x.dims().str() + " does not match " + spec_.in.str());
    auto plan = std::make_unique<Plan>();
    plan->x_md = md;
    plan->x_layout = layout_of(x);
    plan->stat_dims = layer_ ? Dims{x.batch()} : Dims{spec_.in[0]};
    plan->stat_md = plain_md(plan->stat_dims, DType::kF32);
    plan->stat_layout = make_layout(plan->stat_md);
    const std::vector<std::pair<int, MemDesc>> args = {
        {DNNL_ARG_SRC, md},           {DNNL_ARG_SCALE, params_md_},
        {DNNL_ARG_SHIFT, params_md_}, {DNNL_ARG_DST, md},
        {DNNL_ARG_MEAN, plan->stat_md}, {DNNL_ARG_VARIANCE, plan->stat_md}};
    try {
      if (layer_) {
        dnnl::layer_normalization_forward::desc d(prop_kind::forward_training, md, plan->stat_md,
                                                  spec_.epsilon, norm_flags());
        plan->ln_pd =
            dnnl::layer_normalization_forward::primitive_desc(d, user_scratchpad(), ctx_.engine);
        plan->training = Exec(dnnl::layer_normalization_forward(plan->ln_pd), plan->ln_pd, ctx_, args);
      } else {
        dnnl::batch_normalization_forward::desc d(prop_kind::forward_training, md, spec_.epsilon,
                                                  norm_flags());
        plan->bn_pd =
            dnnl::batch_normalization_forward::primitive_desc(d, user_scratchpad(), ctx_.engine);
        plan->training = Exec(dnnl::batch_normalization_forward(plan->bn_pd), plan->bn_pd, ctx_, args);
      }
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, std::string(layer_ ? "layernorm" : "batchnorm") + " forward " + md_string(md));
    }
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }

  CpuContext& ctx_;
  NormSpec spec_;
  bool layer_;
  MemDesc params_md_;
  std::vector<std::unique_ptr<Plan>> plans_;
  Reorders reorders_;
  ScratchBuffer converted_dy_, diff_scale_, diff_shift_, inference_mean_, inference_variance_;
};

}  // namespace

std::unique_ptr<EltwiseOp> make_eltwise_op(CpuContext& ctx, const EltwiseSpec& spec) {
  return std::make_unique<CpuEltwiseOp>(ctx, spec);
}

std::unique_ptr<PoolOp> make_pool_op(CpuContext& ctx, const PoolSpec& spec) {
  return std::make_unique<CpuPoolOp>(ctx, spec);
}

std::unique_ptr<NormOp> make_batch_norm_op(CpuContext& ctx, const NormSpec& spec) {
  return std::make_unique<CpuNormOp>(ctx, spec, false);
}

std::unique_ptr<NormOp> make_layer_norm_op(CpuContext& ctx, const NormSpec& spec) {
  return std::make_unique<CpuNormOp>(ctx, spec, true);
}

}  // namespace anneal::cpu
