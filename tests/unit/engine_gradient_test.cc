// Finite-difference checks of every layer's backward pass (input gradients
// and parameter gradients) and of the losses' gradients, in fp32.
//
// The scalar checked is L = Σ r ⊙ y for a fixed random r, so ∂L/∂y = r is fed
// to backward(). Each sampled coordinate is differentiated numerically with
// central differences at two step sizes; where the two disagree the
// perturbation crossed a kink (relu, max-pool argmax) and the coordinate is
// skipped, so the check is strict where the function is smooth without
// being flaky where it is not. Most coordinates must be checked.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "anneal/backend.h"
#include "anneal/network.h"
#include "test_util.h"

namespace anneal {
namespace {

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class GradientCheck {
 public:
  GradientCheck(const std::string& spec, const Dims& input, std::int64_t batch = 3)
      : backend_(test::cpu_backend()), scope_(backend_->enter()) {
    NetworkOptions options;
    options.input_shape = input;
    options.seed = 11;
    options.input_gradient = true;
    options.batch = batch;
    net_ = std::make_unique<Network>(spec, options, *backend_);
    x_host_ = random_values(std::size_t(input.product() * batch), 3);
    backend_->shape_plain(x_, input.with_batch(batch), DType::kF32);
    backend_->copy_from_host(x_host_.data(), x_);
    const Tensor& y = net_->forward(x_, ctx_);
    r_ = random_values(std::size_t(y.elements()), 5);
    backend_->shape_like(dy_, y, DType::kF32);
    backend_->copy_from_host(r_.data(), dy_);
  }

  double objective() {
    const Tensor& y = net_->forward(x_, ctx_);
    std::vector<float> h(std::size_t(y.elements()));
    backend_->copy_to_host(y, h.data());
    double s = 0;
    for (std::size_t i = 0; i < h.size(); ++i) s += double(h[i]) * double(r_[i]);
    return s;
  }

  // Analytic gradients for the current values: backward with dy = r.
  void run_backward(std::vector<float>& input_grad, std::vector<std::vector<float>>& param_grads) {
    net_->forward(x_, ctx_);
    net_->backward(dy_, ctx_);
    const Tensor& dx = net_->input_gradient();
    input_grad.resize(std::size_t(dx.elements()));
    backend_->copy_to_host(dx, input_grad.data());
    param_grads.clear();
    for (Parameter* p : net_->parameters()) {
      param_grads.emplace_back(std::size_t(p->grad.elements()));
      backend_->copy_to_host(p->grad, param_grads.back().data());
    }
  }

  // Numeric ∂L/∂v[i] with step h, where `set` writes the host values into the tensor.
  template <typename Set>
  double numeric(std::vector<float>& values, std::size_t i, float h, Set set) {
    const float original = values[i];
    values[i] = original + h;
    set();
    const double up = objective();
    values[i] = original - h;
    set();
    const double down = objective();
    values[i] = original;
    set();
    return (up - down) / (2.0 * double(h));
  }

  // Compares analytic and numeric gradients of one tensor on up to 24 coordinates.
  template <typename Set>
  void compare(const std::string& what, std::vector<float>& values,
               const std::vector<float>& analytic, Set set) {
    ASSERT_EQ(values.size(), analytic.size()) << what;
    const std::size_t stride = std::max<std::size_t>(1, values.size() / 24);
    int checked = 0, skipped = 0;
    for (std::size_t i = 0; i < values.size(); i += stride) {
      const double n1 = numeric(values, i, 2e-3f, set);
      const double n2 = numeric(values, i, 1e-3f, set);
      const double scale = std::max({std::fabs(n1), std::fabs(n2), 1.0});
      if (std::fabs(n1 - n2) > 2e-2 * scale) {  // a kink between the two steps
        ++skipped;
        continue;
      }
      const double a = analytic[i];
      const double tolerance = 1e-2 * std::max({std::fabs(a), std::fabs(n2), 1.0});
      EXPECT_NEAR(a, n2, tolerance) << what << "[" << i << "]";
      ++checked;
    }
    EXPECT_GE(checked, 3 * skipped) << what << ": too many coordinates near a kink";
    EXPECT_GT(checked, 0) << what;
  }

  void check_all() {
    std::vector<float> input_grad;
    std::vector<std::vector<float>> param_grads;
    run_backward(input_grad, param_grads);
    // The analytic gradients must not be trivially zero.
    double norm = 0;
    for (float g : input_grad) norm += double(g) * g;
    for (const auto& pg : param_grads)
      for (float g : pg) norm += double(g) * g;
    EXPECT_GT(norm, 1e-6);

    compare("input", x_host_, input_grad, [&] { backend_->copy_from_host(x_host_.data(), x_); });
    auto params = net_->parameters();
    for (std::size_t k = 0; k < params.size(); ++k) {
      Parameter& p = *params[k];
      std::vector<float> values(std::size_t(p.value.elements()));
      backend_->copy_to_host(p.value, values.data());
      compare(p.name, values, param_grads[k],
              [&] { backend_->copy_from_host(values.data(), p.value); });
    }
  }

  Backend& backend() { return *backend_; }
  Network& net() { return *net_; }

 private:
  std::unique_ptr<Backend> backend_;  // one thread: the shapes are tiny
  std::unique_ptr<ExecutionScope> scope_;
  std::unique_ptr<Network> net_;
  PassContext ctx_{true, false, 7, 0};
  std::vector<float> x_host_, r_;
  Tensor x_, dy_;
};

struct LayerCase {
  const char* spec;
  std::vector<std::int64_t> input;
};

class LayerGradient : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerGradient, MatchesFiniteDifferences) {
  const LayerCase& c = GetParam();
  GradientCheck check(c.spec, Dims(c.input));
  check.check_all();
}

INSTANTIATE_TEST_SUITE_P(
    Layers, LayerGradient,
    ::testing::Values(
        LayerCase{"dense(4)", {5}},
        LayerCase{"dense(4) relu", {5}},      // relu fused into the inner product
        LayerCase{"dense(3) tanh", {5}},      // tanh fused
        LayerCase{"dense(3) sigmoid", {5}},   // sigmoid fused
        LayerCase{"dense(3) gelu", {5}},      // gelu runs as its own layer
        LayerCase{"relu", {7}},
        LayerCase{"tanh", {7}},
        LayerCase{"sigmoid", {7}},
        LayerCase{"conv(3,3,pad=1)", {2, 5, 5}},
        LayerCase{"conv(2,3,stride=2)", {2, 7, 7}},
        LayerCase{"conv(3,3,pad=1) relu", {2, 3, 3}},
        LayerCase{"conv(2,3) dense(3)", {1, 5, 5}},   // implicit flatten into dense
        LayerCase{"conv(2,3) flatten layernorm", {1, 5, 5}},
        LayerCase{"maxpool(2)", {2, 4, 4}},
        LayerCase{"maxpool(3,stride=2)", {1, 7, 7}},
        LayerCase{"avgpool(2)", {2, 4, 4}},
        LayerCase{"conv(4,3,pad=1) maxpool(2) conv(3,3,pad=1) avgpool(2) flatten dense(3)", {2, 8, 8}},
        LayerCase{"dropout(0.5)", {10}},
        LayerCase{"batchnorm", {4}},
        LayerCase{"conv(3,3,pad=1) batchnorm", {2, 4, 4}},
        LayerCase{"layernorm", {6}},
        LayerCase{"dense(6) relu dense(5) batchnorm dense(4) layernorm dense(3)", {5}},
        LayerCase{"periodic(3,sigma=1)", {4}},             // the first layer: input gradient too
        LayerCase{"dense(3) periodic(2) dense(2)", {5}},   // inside a network, its dx feeding the dense
        LayerCase{"ple(4)", {3}},                          // its input gradient: 1/w inside a bin
        LayerCase{"ple(5) dense(2)", {4}},                 // the first layer, a dense after it
        LayerCase{"ensemble(3)", {4}},                     // the members' rows, input gradient summed over them
        LayerCase{"dense(3) ensemble(2) relu dense(2)", {5}},  // inside a network, shared layers after it
        // the members' own output layers (the last dense after it), a fused
        // activation, and widths past one 16-column panel of the product
        LayerCase{"ensemble(3) dense(20) tanh dense(17) sigmoid", {4}},
        // 16k channels in and out, 3x3, stride 1: the Winograd kernels (no
        // relu: with this many outputs a kink between the two steps is likely)
        LayerCase{"conv(16,3,pad=1)", {16, 5, 5}},
        // relu's gradient applied on the maxpool's output
        LayerCase{"conv(3,3,pad=1) relu maxpool(2) dense(2)", {2, 4, 4}}),
    [](const ::testing::TestParamInfo<LayerCase>& info) {
      std::string name = std::to_string(info.index) + "_";
      for (const char* p = info.param.spec; *p; ++p)
        name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
      return name;
    });

// Dropout masks come from the key (seed, micro-step, layer): the same key
// gives the same mask, another micro-step another one.
TEST(Dropout, MaskIsAFunctionOfTheKey) {
  // The shapes here are tiny: one thread is fastest and keeps the suite
  // quick on a busy machine.
  auto backend = test::cpu_backend();
  const auto scope = backend->enter();
  NetworkOptions options;
  options.input_shape = Dims{64};
  Network net("dropout(0.5)", options, *backend);
  Tensor x;
  backend->shape_plain(x, Dims{2, 64}, DType::kF32);
  std::vector<float> ones(128, 1.0f);
  backend->copy_from_host(ones.data(), x);
  auto run = [&](std::uint64_t micro_step) {
    std::vector<float> out(128);
    backend->copy_to_host(net.forward(x, PassContext{true, false, 1, micro_step}), out.data());
    return out;
  };
  const auto a = run(0), b = run(0), c = run(1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int kept = 0;
  for (float v : a) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f);
    kept += v != 0.0f;
  }
  EXPECT_GT(kept, 40);
  EXPECT_LT(kept, 88);
  std::vector<float> eval(128);
  backend->copy_to_host(net.forward(x, PassContext{false, false, 1, 0}), eval.data());
  EXPECT_EQ(eval, ones);  // inference: identity
}

// The loss gradients (what the LossOp writes into dpred) against finite
// differences of the summed loss.
// A weighted case is the loss with class weights (classification only).
struct LossCase {
  LossKind kind;
  bool weighted;
};

class LossGradient : public ::testing::TestWithParam<LossCase> {};

TEST_P(LossGradient, MatchesFiniteDifferences) {
  const LossKind kind = GetParam().kind;
  // The shapes here are tiny: one thread is fastest and keeps the suite
  // quick on a busy machine.
  auto backend = test::cpu_backend();
  const auto scope = backend->enter();
  const std::int64_t n = 4, k = kind == LossKind::kSoftmaxCrossEntropy ? 5 : 1;
  std::vector<float> weights;
  if (GetParam().weighted)
    weights = kind == LossKind::kSoftmaxCrossEntropy ? std::vector<float>{0.5f, 2.0f, 1.0f, 3.0f, 0.25f}
                                                     : std::vector<float>{0.3f, 4.0f};
  auto loss = backend->loss(kind, k, weights);
  std::vector<float> pred = random_values(std::size_t(n * k), 9);
  std::vector<float> labels(n);
  for (std::int64_t i = 0; i < n; ++i)
    labels[std::size_t(i)] = kind == LossKind::kSoftmaxCrossEntropy ? float(i % k)
                             : kind == LossKind::kBinaryCrossEntropy ? float(i % 2)
                                                                      : 0.3f * float(i) - 0.5f;
  Tensor p, y, dp;
  backend->shape_plain(p, Dims{n, k}, DType::kF32);
  backend->shape_plain(y, Dims{n}, DType::kF32);
  backend->copy_from_host(labels.data(), y);
  auto total = [&] {
    backend->copy_from_host(pred.data(), p);
    loss->set_totals(LossTotals{});
    loss->forward_backward(p, y, nullptr, 1.0f, nullptr);
    return loss->totals().loss_sum;
  };
  backend->copy_from_host(pred.data(), p);
  loss->forward_backward(p, y, &dp, 1.0f, nullptr);
  std::vector<float> analytic(pred.size());
  backend->copy_to_host(dp, analytic.data());
  for (std::size_t i = 0; i < pred.size(); ++i) {
    const float h = 1e-2f, original = pred[i];
    pred[i] = original + h;
    const double up = total();
    pred[i] = original - h;
    const double down = total();
    pred[i] = original;
    EXPECT_NEAR(analytic[i], (up - down) / (2 * h), 2e-2) << loss_name(kind) << " [" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Losses, LossGradient,
                         ::testing::Values(LossCase{LossKind::kSoftmaxCrossEntropy, false},
                                           LossCase{LossKind::kBinaryCrossEntropy, false},
                                           LossCase{LossKind::kMeanSquaredError, false},
                                           LossCase{LossKind::kMeanAbsoluteError, false},
                                           LossCase{LossKind::kSoftmaxCrossEntropy, true},
                                           LossCase{LossKind::kBinaryCrossEntropy, true}),
                         [](const ::testing::TestParamInfo<LossCase>& info) {
                           return std::string(loss_name(info.param.kind)) + (info.param.weighted ? "_weighted" : "");
                         });

// Class weights by hand: logits 0 give p = 1/2 for either class.
// softmax_ce, label 1 with weight 3: loss 3·log 2, dz = 3·(p − onehot) =
// (1.5, −1.5). bce, label 1 with weight 4: loss 4·log 2, dz = 4·(σ(0) − 1)
// = −2; label 0 with weight 0.5: dz = 0.5·(σ(0) − 0) = 0.25.
TEST(LossClassWeights, ChangeTheGradientAsComputedByHand) {
  auto backend = test::cpu_backend();
  const auto scope = backend->enter();
  Tensor p, y, dp;
  {
    const std::vector<float> w = {1.0f, 3.0f};
    auto loss = backend->loss(LossKind::kSoftmaxCrossEntropy, 2, w);
    const std::vector<float> pred = {0.0f, 0.0f}, label = {1.0f};
    backend->shape_plain(p, Dims{1, 2}, DType::kF32);
    backend->shape_plain(y, Dims{1}, DType::kF32);
    backend->copy_from_host(pred.data(), p);
    backend->copy_from_host(label.data(), y);
    loss->forward_backward(p, y, &dp, 1.0f, nullptr);
    std::vector<float> g(2);
    backend->copy_to_host(dp, g.data());
    // oneDNN's log-softmax is within a few ulps of the exact value.
    EXPECT_NEAR(g[0], 1.5f, 1e-5);
    EXPECT_NEAR(g[1], -1.5f, 1e-5);
    EXPECT_NEAR(loss->totals().loss_sum, 3 * std::log(2.0), 1e-5);
    EXPECT_EQ(loss->totals().count, 1);
  }
  {
    const std::vector<float> w = {0.5f, 4.0f};
    auto loss = backend->loss(LossKind::kBinaryCrossEntropy, 1, w);
    const std::vector<float> pred = {0.0f, 0.0f}, label = {1.0f, 0.0f};
    backend->shape_plain(p, Dims{2, 1}, DType::kF32);
    backend->shape_plain(y, Dims{2}, DType::kF32);
    backend->copy_from_host(pred.data(), p);
    backend->copy_from_host(label.data(), y);
    loss->forward_backward(p, y, &dp, 1.0f, nullptr);
    std::vector<float> g(2);
    backend->copy_to_host(dp, g.data());
    EXPECT_FLOAT_EQ(g[0], -2.0f);
    EXPECT_FLOAT_EQ(g[1], 0.25f);
    EXPECT_NEAR(loss->totals().loss_sum, 4.5 * std::log(2.0), 1e-6);
  }
}

}  // namespace
}  // namespace anneal
