// Dense (inner product) and convolution on oneDNN, forward, backward data and
// backward weights. Both keep fp32 master weights plain (O, I...) — the
// layout checkpoints and optimizers see — and let oneDNN pick the layout it
// computes in (format_tag::any). When the two differ, the working copy is
// refreshed once per weight update (keyed on Tensor::version), not per call.
//
// Built batch_invariant (networks that only predict), forward runs so that
// a sample's output is the same bits in any batch: dense on
// RowInvariantProduct (cpu_gemm.h), conv as one oneDNN primitive for a
// single image run image by image. oneDNN's batched primitives choose
// kernels, blocking and layouts by the batch size (an AVX2 inner product of
// 232 rows sums in another order than one of 256).
#include <algorithm>
#include <optional>

#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_ops.h"

namespace anneal::cpu {
namespace {

using dnnl::prop_kind;
using tag = memory::format_tag;

// What dense and conv share: working weights, gradient write-back, and the
// per-batch plan list. `Derived` supplies the primitive descriptors.
struct WeightedPlan {
  MemDesc x_md;    // the input's descriptor as it arrives (the cache key)
  Dims x_dims;
  std::shared_ptr<const CpuLayout> x_layout;  // dx is shaped like x
  MemDesc src_md;  // the input as the primitives read it
  MemDesc dst_md;
  MemDesc forward_weights_md, backward_data_weights_md;  // as each primitive reads W
  // What the backward primitives chose for their activations (usually the
  // forward's layouts; differs e.g. for bf16 convs with few channels).
  MemDesc bwd_data_diff_src_md, bwd_data_diff_dst_md, bwd_weights_src_md, bwd_weights_diff_dst_md;
  Dims y_dims;
  std::shared_ptr<const CpuLayout> y_layout;
  Exec forward;
  bool backward_ready = false;
  Exec backward_data;
  Exec backward_weights;
  MemDesc diff_weights_md;
};

class WeightedOpBase {
 protected:
  WeightedOpBase(CpuContext& ctx, Dims weight_dims, std::int64_t out, DType compute)
      : ctx_(ctx), weight_dims_(weight_dims), out_(out), compute_(compute) {
    bias_md_ = plain_md(Dims{out_}, DType::kF32);
  }

  // Master weights take the layout backward-weights writes gradients in
  // for the expected batch (so no gradient reorder); each primitive then
  // reads W in the layout it prefers, through a copy refreshed once per
  // weight update when that differs (fp32 inner products: never).
  void choose_master_layout(const MemDesc& md) { master_weights_md_ = md; }

  void shape_master(Tensor& weights, Tensor& bias) {
    weights.reshape(weight_dims_, DType::kF32, make_layout(master_weights_md_), *ctx_.allocator);
    bias.reshape(Dims{out_}, DType::kF32, make_layout(bias_md_), *ctx_.allocator);
  }

  void check_master(const Tensor& weights, const Tensor& bias) const {
    if (md_of(weights) != master_weights_md_ || md_of(bias) != bias_md_)
      throw failure("cpu backend: parameters not shaped by this op's shape_parameters()");
  }

  // The weights in layout `md`: the master itself or a refreshed copy.
  const void* weights_as(const Tensor& weights, const MemDesc& md) {
    if (md == master_weights_md_) return weights.data();
    WorkingCopy* copy = nullptr;
    for (auto& c : copies_)
      if (c->md == md) copy = c.get();
    if (copy == nullptr) {
      copies_.push_back(std::make_unique<WorkingCopy>());
      copy = copies_.back().get();
      copy->md = md;
    }
    if (weights.data() != copy->from || weights.version() != copy->version) {
      void* out = copy->buffer.ensure(md.get_size(), *ctx_.allocator);
      reorders_.run(ctx_, master_weights_md_, weights.data(), md, out);
      copy->from = weights.data();
      copy->version = weights.version();
    }
    return copy->buffer.data();
  }

  void run_forward(WeightedPlan& plan, const Tensor& x, const Tensor& weights, const Tensor& bias,
                   Tensor& y) {
    check_master(weights, bias);
    plan.forward.set(DNNL_ARG_SRC, conform(ctx_, reorders_, x, plan.src_md, converted_x_));
    plan.forward.set(DNNL_ARG_WEIGHTS, weights_as(weights, plan.forward_weights_md));
    plan.forward.set(DNNL_ARG_BIAS, bias.data());
    shape_output(ctx_, y, plan.y_dims, plan.y_layout);
    plan.forward.set(DNNL_ARG_DST, y.data());
    plan.forward.run(ctx_);
  }

  void run_backward_data(WeightedPlan& plan, const Tensor& dy, const Tensor& weights,
                         Tensor& dx) {
    plan.backward_data.set(DNNL_ARG_DIFF_DST,
                           conform(ctx_, reorders_, dy, plan.bwd_data_diff_dst_md, converted_dy_));
    plan.backward_data.set(DNNL_ARG_WEIGHTS, weights_as(weights, plan.backward_data_weights_md));
    // dx mirrors x: when the primitive's diff_src is in another layout or
    // dtype (the fp32 network input under bf16), convert it back.
    shape_output(ctx_, dx, plan.x_dims, plan.x_layout);
    if (plan.bwd_data_diff_src_md == plan.x_md) {
      plan.backward_data.set(DNNL_ARG_DIFF_SRC, dx.data());
      plan.backward_data.run(ctx_);
    } else {
      void* tmp = diff_src_.ensure(plan.bwd_data_diff_src_md.get_size(), *ctx_.allocator);
      plan.backward_data.set(DNNL_ARG_DIFF_SRC, tmp);
      plan.backward_data.run(ctx_);
      reorders_.run(ctx_, plan.bwd_data_diff_src_md, tmp, plan.x_md, dx.data());
    }
  }

  void run_backward_weights(WeightedPlan& plan, const Tensor& x, const Tensor& dy,
                            Tensor& dweights, Tensor& dbias, bool accumulate) {
    check_master(dweights, dbias);
    plan.backward_weights.set(DNNL_ARG_SRC,
                              conform(ctx_, reorders_, x, plan.bwd_weights_src_md, converted_x_));
    plan.backward_weights.set(
        DNNL_ARG_DIFF_DST, conform(ctx_, reorders_, dy, plan.bwd_weights_diff_dst_md, converted_dy_));
    const bool direct_weights = !accumulate && plan.diff_weights_md == master_weights_md_;
    void* dw = direct_weights
                   ? dweights.data()
                   : diff_weights_.ensure(plan.diff_weights_md.get_size(), *ctx_.allocator);
    void* db = !accumulate ? dbias.data() : diff_bias_.ensure(bias_md_.get_size(), *ctx_.allocator);
    plan.backward_weights.set(DNNL_ARG_DIFF_WEIGHTS, dw);
    plan.backward_weights.set(DNNL_ARG_DIFF_BIAS, db);
    plan.backward_weights.run(ctx_);
    if (!direct_weights)
      reorders_.run(ctx_, plan.diff_weights_md, dw, master_weights_md_, dweights.data(), accumulate);
    if (accumulate) reorders_.run(ctx_, bias_md_, db, bias_md_, dbias.data(), true);
  }

  // Records a backward-data primitive's chosen layouts in `plan` and builds
  // it; Primitive is inner_product_ or convolution_backward_data.
  template <typename Primitive>
  void set_backward_data(WeightedPlan& plan, const typename Primitive::primitive_desc& pd) {
    plan.backward_data_weights_md = pd.weights_desc();
    plan.bwd_data_diff_src_md = pd.diff_src_desc();
    plan.bwd_data_diff_dst_md = pd.diff_dst_desc();
    plan.backward_data = Exec(Primitive(pd), pd, ctx_,
                              {{DNNL_ARG_DIFF_DST, plan.bwd_data_diff_dst_md},
                               {DNNL_ARG_WEIGHTS, plan.backward_data_weights_md},
                               {DNNL_ARG_DIFF_SRC, plan.bwd_data_diff_src_md}});
  }

  // The same for a backward-weights primitive.
  template <typename Primitive>
  void set_backward_weights(WeightedPlan& plan, const typename Primitive::primitive_desc& pd) {
    plan.diff_weights_md = pd.diff_weights_desc();
    plan.bwd_weights_src_md = pd.src_desc();
    plan.bwd_weights_diff_dst_md = pd.diff_dst_desc();
    plan.backward_weights = Exec(Primitive(pd), pd, ctx_,
                                 {{DNNL_ARG_SRC, plan.bwd_weights_src_md},
                                  {DNNL_ARG_DIFF_DST, plan.bwd_weights_diff_dst_md},
                                  {DNNL_ARG_DIFF_WEIGHTS, plan.diff_weights_md},
                                  {DNNL_ARG_DIFF_BIAS, bias_md_}});
  }

  dnnl::primitive_attr attr_with(Activation fused) const { return fused_attr(fused); }

  static dnnl::primitive_attr plain_attr() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  }

  CpuContext& ctx_;
  Dims weight_dims_;
  std::int64_t out_;
  DType compute_;
  MemDesc master_weights_md_, bias_md_;
  struct WorkingCopy {
    MemDesc md;
    ScratchBuffer buffer;
    const void* from = nullptr;
    std::uint64_t version = ~std::uint64_t{0};
  };
  std::vector<std::unique_ptr<WorkingCopy>> copies_;
  std::vector<std::unique_ptr<WeightedPlan>> plans_;
  Reorders reorders_;
  ScratchBuffer converted_x_, converted_dy_, diff_src_, diff_weights_,
      diff_bias_;
};

// ---- Dense ----------------------------------------------------------------

class CpuDenseOp final : public DenseOp, private WeightedOpBase {
 public:
  CpuDenseOp(CpuContext& ctx, const DenseSpec& spec)
      : WeightedOpBase(ctx, spec.in.with_batch(spec.out), spec.out, spec.compute), spec_(spec) {
    // An image input arrives in whatever layout the previous op picked,
    // unknown here: keep master weights plain and let each primitive choose.
    // A batch-invariant op packs plain weights for its own kernel.
    if (spec_.in.rank() != 1 || spec_.batch_invariant) {
      if (spec_.batch_invariant) invariant_.emplace(ctx_, spec_.out, spec_.fused, spec_.compute);
      choose_master_layout(plain_md(weight_dims_, DType::kF32));
      return;
    }
    try {
      const auto dt = to_dnnl(spec_.compute);
      const std::int64_t n = std::max<std::int64_t>(spec_.batch, 1);
      MemDesc src_any(to_dnnl_dims(spec_.in.with_batch(n)), dt, tag::any);
      MemDesc w_any(to_dnnl_dims(weight_dims_), dt, tag::any);
      MemDesc dst_any({n, spec_.out}, dt, tag::any);
      dnnl::inner_product_forward::desc fd(prop_kind::forward_training, src_any, w_any, bias_md_,
                                           dst_any);
      dnnl::inner_product_forward::primitive_desc fpd(fd, plain_attr(), ctx_.engine);
      MemDesc dw_any(to_dnnl_dims(weight_dims_), memory::data_type::f32, tag::any);
      dnnl::inner_product_backward_weights::desc wd(fpd.src_desc(), dw_any, bias_md_,
                                                    fpd.dst_desc());
      dnnl::inner_product_backward_weights::primitive_desc wpd(wd, plain_attr(), ctx_.engine, fpd);
      choose_master_layout(wpd.diff_weights_desc());
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "dense " + spec_.in.str() + " -> " + std::to_string(spec_.out));
    }
  }

  void shape_parameters(Tensor& weights, Tensor& bias) override { shape_master(weights, bias); }

  void forward(const Tensor& x, const Tensor& weights, const Tensor& bias, Tensor& y) override {
    if (invariant_) {
      invariant_forward(x, weights, bias, y);
      return;
    }
    run_forward(plan_for(x), x, weights, bias, y);
  }

  void backward_data(const Tensor& dy, const Tensor& weights, Tensor& dx) override {
    if (invariant_) throw failure("dense: an op built batch_invariant has no backward pass");
    WeightedPlan& plan = backward_plan_for_batch(dy.batch());
    run_backward_data(plan, dy, weights, dx);
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweights, Tensor& dbias,
                        bool accumulate) override {
    if (invariant_) throw failure("dense: an op built batch_invariant has no backward pass");
    WeightedPlan& plan = plan_for(x);
    make_backward(plan);
    run_backward_weights(plan, x, dy, dweights, dbias, accumulate);
  }

 private:
  WeightedPlan& plan_for(const Tensor& x) {
    const MemDesc& x_md = md_of(x);
    if (WeightedPlan* p = find_plan(plans_, x_md)) {
      last_ = p;
      return *p;
    }
    if (x.dims().without_batch() != spec_.in)
      throw failure("dense: input " + x.dims().str() + " does not match " + spec_.in.str());
    auto plan = std::make_unique<WeightedPlan>();
    plan->x_md = x_md;
    plan->x_dims = x.dims();
    plan->x_layout = std::dynamic_pointer_cast<const CpuLayout>(x.shared_layout());
    plan->src_md = with_dtype(x_md, spec_.compute);
    const std::int64_t n = x.batch();
    plan->y_dims = Dims{n, spec_.out};
    try {
      MemDesc dst_any({n, spec_.out}, to_dnnl(spec_.compute), tag::any);
      MemDesc w_any(to_dnnl_dims(weight_dims_), to_dnnl(spec_.compute), tag::any);
      dnnl::inner_product_forward::desc d(prop_kind::forward_training, plan->src_md, w_any,
                                          bias_md_, dst_any);
      fwd_pd_ = dnnl::inner_product_forward::primitive_desc(d, attr_with(spec_.fused), ctx_.engine);
      plan->dst_md = fwd_pd_.dst_desc();
      plan->forward_weights_md = fwd_pd_.weights_desc();
      plan->forward = Exec(dnnl::inner_product_forward(fwd_pd_), fwd_pd_, ctx_,
                           {{DNNL_ARG_SRC, plan->src_md},
                            {DNNL_ARG_WEIGHTS, plan->forward_weights_md},
                            {DNNL_ARG_BIAS, bias_md_},
                            {DNNL_ARG_DST, plan->dst_md}});
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "dense forward for input " + md_string(x_md));
    }
    plan->y_layout = make_layout(plan->dst_md);
    plans_.push_back(std::move(plan));
    last_ = plans_.back().get();
    return *last_;
  }

  // backward_data gets only dy: use the plan of the latest forward with the
  // same batch size (the forward whose output dy differentiates).
  WeightedPlan& backward_plan_for_batch(std::int64_t n) {
    WeightedPlan* plan = nullptr;
    if (last_ != nullptr && last_->y_dims[0] == n) plan = last_;
    for (auto& p : plans_)
      if (plan == nullptr && p->y_dims[0] == n) plan = p.get();
    if (plan == nullptr) throw failure("dense: backward before forward for batch " + std::to_string(n));
    make_backward(*plan);
    return *plan;
  }

  void make_backward(WeightedPlan& plan) {
    if (plan.backward_ready) return;
    try {
      dnnl::inner_product_forward::desc fd(prop_kind::forward_training, plan.src_md,
                                           plan.forward_weights_md, bias_md_, plan.dst_md);
      dnnl::inner_product_forward::primitive_desc hint(fd, plain_attr(), ctx_.engine);
      const auto dt = to_dnnl(spec_.compute);
      MemDesc w_any(to_dnnl_dims(weight_dims_), dt, tag::any);
      MemDesc src_any(to_dnnl_dims(plan.x_dims), dt, tag::any);
      MemDesc dst_any(to_dnnl_dims(plan.y_dims), dt, tag::any);
      dnnl::inner_product_backward_data::desc bd(src_any, w_any, dst_any);
      dnnl::inner_product_backward_data::primitive_desc bpd(bd, plain_attr(), ctx_.engine, hint);
      set_backward_data<dnnl::inner_product_backward_data>(plan, bpd);
      MemDesc dw_any(to_dnnl_dims(weight_dims_), memory::data_type::f32, tag::any);
      dnnl::inner_product_backward_weights::desc wd(src_any, dw_any, bias_md_, dst_any);
      dnnl::inner_product_backward_weights::primitive_desc wpd(wd, plain_attr(), ctx_.engine, hint);
      set_backward_weights<dnnl::inner_product_backward_weights>(plan, wpd);
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "dense backward for input " + md_string(plan.x_md));
    }
    plan.backward_ready = true;
  }

  // The plain master weights and bias handed to the kernel, repacked when
  // either changes (a checkpoint load, a weight update).
  void invariant_forward(const Tensor& x, const Tensor& weights, const Tensor& bias, Tensor& y) {
    check_master(weights, bias);
    if (x.dims().without_batch() != spec_.in)
      throw failure("dense: input " + x.dims().str() + " does not match " + spec_.in.str());
    const Packed now{weights.data(), weights.version(), bias.data(), bias.version()};
    if (!invariant_->has_weights() || !(now == packed_)) {
      ctx_.stream.wait();  // the host reads the weights next
      invariant_->set_weights(static_cast<const float*>(weights.data()), static_cast<const float*>(bias.data()),
                              spec_.in.product());
      packed_ = now;
    }
    invariant_->forward(x, y);
  }

  DenseSpec spec_;
  dnnl::inner_product_forward::primitive_desc fwd_pd_;
  WeightedPlan* last_ = nullptr;
  std::optional<InvariantDense> invariant_;  // set when built batch_invariant
  struct Packed {
    const void* weights;
    std::uint64_t weights_version;
    const void* bias;
    std::uint64_t bias_version;
    bool operator==(const Packed&) const = default;
  } packed_{};
};

// ---- Convolution ------------------------------------------------------------

class CpuConvOp final : public ConvOp, private WeightedOpBase {
 public:
  CpuConvOp(CpuContext& ctx, const ConvSpec& spec)
      : WeightedOpBase(ctx, Dims{spec.out_channels, spec.in[0], spec.kernel, spec.kernel},
                       spec.out_channels, spec.compute),
        spec_(spec) {
    out_h_ = (spec.in[1] + 2 * spec.pad - spec.kernel) / spec.stride + 1;
    out_w_ = (spec.in[2] + 2 * spec.pad - spec.kernel) / spec.stride + 1;
    // fp32 3x3 stride-1 convs with 16k channels have Winograd F(4,3)
    // kernels for all three passes, ~25% faster than the direct ones here
    // (conv 32->64 on 14x14, batch 128: 24 -> 18 ms per step on one core).
    // Use them when oneDNN has them for this shape; else direct. oneDNN
    // also accepts other channel counts by padding to 16, which for a
    // 1-channel image input is ~10x slower than direct.
    if (spec_.compute == DType::kF32 && spec_.kernel == 3 && spec_.stride == 1 &&
        spec_.in[0] % 16 == 0 && spec_.out_channels % 16 == 0) {
      alg_ = dnnl::algorithm::convolution_winograd;
      // Forward only: plain masters, and ImageConv falls back to direct
      // where Winograd has no kernel for one image.
      if (spec_.batch_invariant) {
        choose_master_layout(plain_md(weight_dims_, DType::kF32));
        return;
      }
      try {
        choose_master_layout(master_layout_for(alg_));
        return;
      } catch (const dnnl::error&) {
        alg_ = dnnl::algorithm::convolution_direct;
      }
    }
    if (spec_.batch_invariant) {
      choose_master_layout(plain_md(weight_dims_, DType::kF32));
      return;
    }
    try {
      choose_master_layout(master_layout_for(alg_));
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "conv " + spec_.in.str());
    }
  }

  void shape_parameters(Tensor& weights, Tensor& bias) override { shape_master(weights, bias); }

  void forward(const Tensor& x, const Tensor& weights, const Tensor& bias, Tensor& y) override {
    if (spec_.batch_invariant) {
      invariant_forward(x, weights, bias, y);
      return;
    }
    run_forward(plan_for(x), x, weights, bias, y);
  }

  void backward_data(const Tensor& dy, const Tensor& weights, Tensor& dx) override {
    if (spec_.batch_invariant) throw failure("conv: an op built batch_invariant has no backward pass");
    WeightedPlan* plan = nullptr;
    if (last_ != nullptr && last_->y_dims[0] == dy.batch()) plan = last_;
    for (auto& p : plans_)
      if (plan == nullptr && p->y_dims[0] == dy.batch()) plan = p.get();
    if (plan == nullptr) throw failure("conv: backward before forward");
    make_backward(*plan);
    run_backward_data(*plan, dy, weights, dx);
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweights, Tensor& dbias,
                        bool accumulate) override {
    if (spec_.batch_invariant) throw failure("conv: an op built batch_invariant has no backward pass");
    WeightedPlan& plan = plan_for(x);
    make_backward(plan);
    run_backward_weights(plan, x, dy, dweights, dbias, accumulate);
  }

 private:
  // One image at a time through one primitive (ImageConv), the weights in
  // its layout through the working copy kept per weight version.
  void invariant_forward(const Tensor& x, const Tensor& weights, const Tensor& bias, Tensor& y) {
    check_master(weights, bias);
    if (x.dims().without_batch() != spec_.in)
      throw failure("conv: input " + x.dims().str() + " does not match " + spec_.in.str());
    if (!image_.built())
      image_.build(ctx_,
                   ImageConvGeometry{spec_.in[0], spec_.in[1], spec_.in[2], spec_.out_channels, spec_.kernel,
                                     spec_.stride, spec_.pad, out_h_, out_w_},
                   to_dnnl(spec_.compute), alg_, attr_with(spec_.fused));
    const std::int64_t n = x.batch();
    const void* src = conform(ctx_, reorders_, x, with_batch(image_.src_md(), n), converted_x_);
    const void* w = weights_as(weights, image_.weights_md());
    shape_output(ctx_, y, Dims{n, spec_.out_channels, out_h_, out_w_}, image_.dst_layout(n));
    image_.run(ctx_, src, w, bias.data(), y.data(), n);
  }

  // The layout backward-weights writes dW in for the expected batch under
  // `alg`; throws dnnl::error when `alg` has no implementation for this conv
  // (forward with the fused activation, backward data or backward weights).
  MemDesc master_layout_for(dnnl::algorithm alg) {
    const auto dt = to_dnnl(spec_.compute);
    const std::int64_t n = std::max<std::int64_t>(spec_.batch, 1);
    MemDesc src_any(to_dnnl_dims(spec_.in.with_batch(n)), dt, tag::any);
    MemDesc w_any(to_dnnl_dims(weight_dims_), dt, tag::any);
    MemDesc dst_any({n, spec_.out_channels, out_h_, out_w_}, dt, tag::any);
    dnnl::convolution_forward::desc fd(prop_kind::forward_training, alg, src_any, w_any,
                                       bias_md_, dst_any, strides(), padding(), padding());
    dnnl::convolution_forward::primitive_desc fpd(fd, plain_attr(), ctx_.engine);
    dnnl::convolution_forward::primitive_desc fused_pd(fd, attr_with(spec_.fused), ctx_.engine);
    dnnl::convolution_backward_data::desc bd(alg, src_any, w_any, dst_any, strides(), padding(),
                                             padding());
    dnnl::convolution_backward_data::primitive_desc bpd(bd, plain_attr(), ctx_.engine, fpd);
    MemDesc dw_any(to_dnnl_dims(weight_dims_), memory::data_type::f32, tag::any);
    dnnl::convolution_backward_weights::desc wd(alg, fpd.src_desc(), dw_any, bias_md_,
                                                fpd.dst_desc(), strides(), padding(), padding());
    dnnl::convolution_backward_weights::primitive_desc wpd(wd, plain_attr(), ctx_.engine, fpd);
    return wpd.diff_weights_desc();
  }

  memory::dims strides() const { return {spec_.stride, spec_.stride}; }
  memory::dims padding() const { return {spec_.pad, spec_.pad}; }

  WeightedPlan& plan_for(const Tensor& x) {
    const MemDesc& x_md = md_of(x);
    if (WeightedPlan* p = find_plan(plans_, x_md)) {
      last_ = p;
      return *p;
    }
    if (x.dims().without_batch() != spec_.in)
      throw failure("conv: input " + x.dims().str() + " does not match " + spec_.in.str());
    auto plan = std::make_unique<WeightedPlan>();
    plan->x_md = x_md;
    plan->x_dims = x.dims();
    plan->x_layout = std::dynamic_pointer_cast<const CpuLayout>(x.shared_layout());
    const std::int64_t n = x.batch();
    plan->y_dims = Dims{n, spec_.out_channels, out_h_, out_w_};
    try {
      const auto dt = to_dnnl(spec_.compute);
      MemDesc src_any({n, spec_.in[0], spec_.in[1], spec_.in[2]}, dt, tag::any);
      MemDesc dst_any(to_dnnl_dims(plan->y_dims), dt, tag::any);
      MemDesc w_any(to_dnnl_dims(weight_dims_), dt, tag::any);
      dnnl::convolution_forward::desc d(prop_kind::forward_training,
                                        alg_, src_any, w_any,
                                        bias_md_, dst_any, strides(), padding(), padding());
      fwd_pd_ = dnnl::convolution_forward::primitive_desc(d, attr_with(spec_.fused), ctx_.engine);
      plan->src_md = fwd_pd_.src_desc();
      plan->dst_md = fwd_pd_.dst_desc();
      plan->forward_weights_md = fwd_pd_.weights_desc();
      plan->forward = Exec(dnnl::convolution_forward(fwd_pd_), fwd_pd_, ctx_,
                           {{DNNL_ARG_SRC, plan->src_md},
                            {DNNL_ARG_WEIGHTS, plan->forward_weights_md},
                            {DNNL_ARG_BIAS, bias_md_},
                            {DNNL_ARG_DST, plan->dst_md}});
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "conv forward for input " + md_string(x_md));
    }
    plan->y_layout = make_layout(plan->dst_md);
    plans_.push_back(std::move(plan));
    last_ = plans_.back().get();
    return *last_;
  }

  void make_backward(WeightedPlan& plan) {
    if (plan.backward_ready) return;
    try {
      dnnl::convolution_forward::desc fd(prop_kind::forward_training,
                                         alg_, plan.src_md,
                                         plan.forward_weights_md, bias_md_, plan.dst_md,
                                         strides(), padding(), padding());
      dnnl::convolution_forward::primitive_desc hint(fd, plain_attr(), ctx_.engine);
      const auto dt = to_dnnl(spec_.compute);
      MemDesc w_any(to_dnnl_dims(weight_dims_), dt, tag::any);
      MemDesc src_any(to_dnnl_dims(plan.x_dims), dt, tag::any);
      MemDesc dst_any(to_dnnl_dims(plan.y_dims), dt, tag::any);
      dnnl::convolution_backward_data::desc bd(alg_, src_any,
                                               w_any, dst_any, strides(), padding(), padding());
      dnnl::convolution_backward_data::primitive_desc bpd(bd, plain_attr(), ctx_.engine, hint);
      set_backward_data<dnnl::convolution_backward_data>(plan, bpd);
      MemDesc dw_any(to_dnnl_dims(weight_dims_), memory::data_type::f32, tag::any);
      dnnl::convolution_backward_weights::desc wd(alg_, src_any,
                                                  dw_any, bias_md_, dst_any, strides(), padding(),
                                                  padding());
      dnnl::convolution_backward_weights::primitive_desc wpd(wd, plain_attr(), ctx_.engine, hint);
      set_backward_weights<dnnl::convolution_backward_weights>(plan, wpd);
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "conv backward for input " + md_string(plan.x_md));
    }
    plan.backward_ready = true;
  }

  ConvSpec spec_;
  std::int64_t out_h_ = 0, out_w_ = 0;
  dnnl::algorithm alg_ = dnnl::algorithm::convolution_direct;
  dnnl::convolution_forward::primitive_desc fwd_pd_;
  WeightedPlan* last_ = nullptr;
  ImageConv image_;  // built batch_invariant: the forward, built at the first one
};

}  // namespace

std::unique_ptr<DenseOp> make_dense_op(CpuContext& ctx, const DenseSpec& spec) {
  return std::make_unique<CpuDenseOp>(ctx, spec);
}

std::unique_ptr<ConvOp> make_conv_op(CpuContext& ctx, const ConvSpec& spec) {
  return std::make_unique<CpuConvOp>(ctx, spec);
}

}  // namespace anneal::cpu
