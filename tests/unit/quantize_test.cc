// quantize/: INT8 quantization math and calibration, int8 layers against
// their fp32 reference, the sparse kernel against dense, pruning masks held
// through fine-tuning, and quantized/pruned models round-tripping through
// the store.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <random>

#include "anneal/backend.h"
#include "anneal/error.h"
#include "anneal/network.h"
#include "anneal/quantize.h"
#include "anneal/runs.h"
#include "anneal/trainer.h"
#include "anneal/model_file.h"
#include "test_util.h"

namespace anneal {
namespace {

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// ---- quantization math ------------------------------------------------------

TEST(QuantizeMath, PerChannelDequantizeWithinHalfScale) {
  std::vector<float> w = random_values(16 * 33, 1);
  for (int i = 0; i < 33; ++i) w[5 * 33 + i] = 0.0f;  // an all-zero channel
  w[7 * 33] = 40.0f;                                   // one channel with an outlier
  const QuantizedWeights q = quantize_per_channel(w, 16);
  ASSERT_EQ(q.scales.size(), 16u);
  const std::vector<float> back = dequantize(q);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float scale = q.scales[i / 33];
    EXPECT_LE(std::fabs(back[i] - w[i]), 0.5f * scale * (1 + 1e-5f)) << i;
    EXPECT_LE(std::abs(int(q.q[i])), 127);
  }
  for (int i = 0; i < 33; ++i) EXPECT_EQ(back[5 * 33 + i], 0.0f);
  EXPECT_FLOAT_EQ(q.scales[7], 40.0f / 127.0f);
  EXPECT_THROW(quantize_per_channel(w, 7), Error);
}

TEST(QuantizeMath, CalibrationThresholds) {
  // Mostly N(0,1) with a few huge outliers: minmax keeps them, percentile
  // and entropy clip them away.
  std::vector<float> v = random_values(200000, 2);
  v[10] = 100.0f;
  v[20] = -80.0f;
  ActivationRange range;
  range.add_max(v);
  range.add_histogram(v);
  EXPECT_FLOAT_EQ(range.threshold(CalibrationMethod::kMinMax, 127), 100.0f);
  const float p = range.threshold(CalibrationMethod::kPercentile, 127);
  const float e = range.threshold(CalibrationMethod::kEntropy, 127);
  EXPECT_GT(p, 2.0f);
  EXPECT_LT(p, 10.0f);
  EXPECT_GT(e, 1.0f);
  EXPECT_LT(e, 20.0f);
  EXPECT_EQ(parse_calibration_method("entropy"), CalibrationMethod::kEntropy);
  EXPECT_THROW(parse_calibration_method("kl"), Error);
}

// ---- int8 layers against fp32 ---------------------------------------------------

// A layer spec with weights for every dense/conv layer, as a model holds it.
struct TestModel {
  std::string layers;
  Dims input;
  std::int64_t outputs = 0;
  InferenceOptions inference;  // weights (and, int8, scales) by prefix
};

// The spec's outputs for x through the engine's trainable fp32 Network: the reference.
std::vector<float> network_forward(const TestModel& m, const std::vector<float>& x, std::int64_t rows) {
  std::unique_ptr<Backend> backend = test::cpu_backend();
  NetworkOptions options;
  options.input_shape = m.input;
  options.batch = rows;
  Network net(m.layers, options, *backend);
  EXPECT_FALSE(net.inference_only());
  for (Parameter* p : net.parameters()) {
    const auto dot = p->name.rfind('.');
    const InferenceWeights& w = m.inference.layers.at(p->name.substr(0, dot)).weights;
    backend->copy_from_host(p->name.ends_with("weight") ? w.weight.data() : w.bias.data(), p->value);
  }
  Tensor t;
  backend->shape_plain(t, m.input.with_batch(rows), DType::kF32);
  backend->copy_from_host(x.data(), t);
  PassContext ctx;
  ctx.training = false;
  const Tensor& y = net.forward(t, ctx);
  std::vector<float> out(std::size_t(y.elements()));
  backend->copy_to_host(y, out.data());
  return out;
}

// The outputs of m's inference-only network (int8 when m.inference says so)
// for x; `kernels` gets what each layer ran on, `observe` each dense/conv
// layer's output on the host.
std::vector<float> inference_forward(const TestModel& m, const std::vector<float>& x, std::int64_t rows,
                                     std::vector<LayerKernel>* kernels = nullptr,
                                     const std::function<void(std::size_t, const std::vector<float>&)>& observe = {}) {
  std::unique_ptr<Backend> backend = test::cpu_backend();
  NetworkOptions options;
  options.input_shape = m.input;
  options.outputs = m.outputs;
  options.inference = m.inference;
  Network net(m.layers, options, *backend);
  EXPECT_TRUE(net.inference_only());
  EXPECT_TRUE(net.parameters().empty());  // the ops own the weights
  Tensor t;
  backend->shape_plain(t, m.input.with_batch(rows), DType::kF32);
  backend->copy_from_host(x.data(), t);
  PassContext ctx;
  ctx.training = false;
  std::vector<float> values;
  const Tensor& y = net.forward(t, ctx, [&](std::size_t k, const Tensor& out) {
    if (!observe) return;
    values.resize(std::size_t(out.elements()));
    backend->copy_to_host(out, values.data());
    observe(k, values);
  });
  std::vector<float> out(std::size_t(y.elements()));
  backend->copy_to_host(y, out.data());
  if (kernels) *kernels = net.kernels();
  return out;
}

// An fp32 model with random weights for `layers` on `input`.
TestModel random_model(const std::string& layers, const Dims& input, std::int64_t outputs, std::uint32_t seed) {
  TestModel m{layers, input, outputs, {}};
  std::unique_ptr<Backend> backend = test::cpu_backend();
  for (const WeightedLayer& l : weighted_layers(layers, input, *backend)) {
    std::int64_t n = 1;
    for (auto d : l.weight_dims) n *= d;
    InferenceWeights& w = m.inference.layers[l.prefix].weights;
    w.weight = random_values(std::size_t(n), seed++, 1.0f / std::sqrt(float(n / l.out)));
    w.bias = random_values(std::size_t(l.out), seed++, 0.1f);
  }
  return m;
}

// The int8 version of an fp32 model, with activation scales from the fp32
// network's ranges on x (minmax).
TestModel int8_of(const TestModel& f32, const std::vector<float>& x, std::int64_t rows) {
  std::unique_ptr<Backend> backend = test::cpu_backend();
  const auto layers = weighted_layers(f32.layers, f32.input, *backend);
  std::vector<ActivationRange> ranges(layers.size() + 1);
  ranges[0].add_max(x);
  inference_forward(f32, x, rows, nullptr,
                    [&](std::size_t k, const std::vector<float>& v) { ranges[k + 1].add_max(v); });
  TestModel q = f32;
  q.inference.int8 = true;
  float in = ranges[0].max() / 127.0f;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    InferenceLayer& l = q.inference.layers[layers[k].prefix];
    // As quantize_model does: 8-bit weights with VNNI, 7-bit (±64) without.
    QuantizedWeights qw =
        quantize_per_channel(l.weights.weight, layers[k].out, backend->capabilities().int8_weight_levels);
    l.weights.q = qw.q;
    l.weights.scales = qw.scales;
    l.input_scale = in;
    l.output_scale = layers[k].last ? 0.0f : ranges[k + 1].max() / (layers[k].relu ? 255.0f : 127.0f);
    in = l.output_scale;
  }
  return q;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double relative) {
  ASSERT_EQ(got.size(), want.size());
  double max_ref = 0, max_err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, double(std::fabs(want[i])));
    max_err = std::max(max_err, double(std::fabs(got[i] - want[i])));
  }
  EXPECT_GT(max_ref, 0.0);
  EXPECT_LE(max_err, relative * max_ref) << "max error " << max_err << " of max " << max_ref;
}

constexpr const char* kReadsImage = "none (the int8 dense reads the image)";
constexpr const char* kDenseOnHwc = "int8 inner product (image read in H, W, C order)";

// Also checks that the int8 network's kernels, in order, are `kernels` when given.
void check_int8_against_fp32(const std::string& layers, const Dims& input, std::int64_t outputs,
                             const std::vector<std::string>& kernels = {}) {
  const std::int64_t rows = 37;
  const TestModel f32 = random_model(layers, input, outputs, 11);
  const std::vector<float> x = random_values(std::size_t(rows * input.product()), 3);
  const std::vector<float> reference = network_forward(f32, x, rows);
  expect_close(inference_forward(f32, x, rows), reference, 1e-4);
  std::vector<LayerKernel> info;
  expect_close(inference_forward(int8_of(f32, x, rows), x, rows, &info), reference, 0.04);
  if (!kernels.empty()) {
    std::vector<std::string> got;
    for (const auto& k : info) got.push_back(k.kernel);
    EXPECT_EQ(got, kernels);
  }
  for (std::size_t i = 0; i < info.size(); ++i) {
    if (info[i].layer.starts_with("dense") || info[i].layer.starts_with("conv")) {
      EXPECT_TRUE(info[i].kernel.starts_with("int8")) << info[i].layer << ": " << info[i].kernel;
    }
    // The int8 conv/pool output (N, H, W, C) feeds the dense layer as it is
    // (weights permuted to H, W, C order), with no reorder per batch; the
    // comparison above is what shows the permutation right.
    if (info[i].layer == "flatten") {
      EXPECT_EQ(info[i].kernel, kReadsImage);
      ASSERT_LT(i + 1, info.size());
      EXPECT_EQ(info[i + 1].kernel, kDenseOnHwc);
    }
  }
}

TEST(QuantizeInt8Layer, DenseMatchesFp32) {
  check_int8_against_fp32("dense(24)", Dims{40}, 24, {"int8 inner product"});
}
TEST(QuantizeInt8Layer, DenseReluMatchesFp32) { check_int8_against_fp32("dense(64) relu dense(10)", Dims{50}, 10); }
TEST(QuantizeInt8Layer, ConvMatchesFp32) {
  check_int8_against_fp32("conv(8,3,pad=1) flatten dense(6)", Dims{3, 8, 8}, 6);
}
TEST(QuantizeInt8Layer, ConvReluPoolChainMatchesFp32) {
  check_int8_against_fp32("conv(16,3,pad=1) relu maxpool(2) conv(8,3) relu avgpool(2) flatten dense(32) relu dense(5)",
                          Dims{1, 12, 12}, 5);
}

// Convs with fewer than 4 input channels run as im2col and a u8 matmul
// (a signed input shifted by 128, the shift taken off the bias), and a
// pooling that tiles their output exactly reads the matmul's rows. These
// cover the other shapes of that path: 3 channels, a 5-wide kernel (runs
// of 5 bytes padded to 8), stride 2, a non-square image, no pooling after
// it; an avgpool read from the rows; a pooling that does not tile the
// output (9×9 by 2), which then runs on the conv's (N, H, W, C) output.
TEST(QuantizeInt8Layer, FewChannelConvStrideAndWideKernelMatchesFp32) {
  check_int8_against_fp32("conv(6,5,pad=2,stride=2) relu conv(4,3) relu flatten dense(5)", Dims{3, 13, 11}, 5,
                          {"int8 matmul (im2col)", "int8 convolution", kReadsImage, kDenseOnHwc});
}

TEST(QuantizeInt8Layer, FewChannelConvAvgpoolMatchesFp32) {
  check_int8_against_fp32("conv(8,3) relu avgpool(2) flatten dense(4)", Dims{2, 10, 10}, 4,
                          {"int8 matmul (im2col) with its avgpool on the rows", "run by the conv before it",
                           kReadsImage, kDenseOnHwc});
}

TEST(QuantizeInt8Layer, FewChannelConvUntiledPoolMatchesFp32) {
  check_int8_against_fp32("conv(4,3,pad=1) relu maxpool(2) flatten dense(3)", Dims{1, 9, 9}, 3,
                          {"int8 matmul (im2col)", "int8 pooling", kReadsImage, kDenseOnHwc});
}

// Standalone activations dequantize, and the int8 layer after one
// quantizes again at its own input scale; dropout is the identity.
TEST(QuantizeInt8Layer, StandaloneActivationAndDropoutMatchFp32) {
  check_int8_against_fp32("dense(32) gelu dropout(0.5) dense(16) relu dense(4)", Dims{20}, 4,
                          {"int8 inner product", "fp32 eltwise", "identity at inference", "int8 inner product",
                           "int8 inner product"});
}

// The one builder builds inference-only networks from the spec trainable
// ones come from: the same layer numbering (an implicit flatten included),
// the same checks, and int8/sparse-specific refusals.
TEST(QuantizeInt8Layer, InferenceNetworksComeFromTheOneBuilder) {
  std::unique_ptr<Backend> backend = test::cpu_backend();
  const auto layers = weighted_layers("conv(4,3) relu maxpool(2) dense(8) relu dense(3)", Dims{1, 8, 8}, *backend);
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].prefix, "0.conv");
  EXPECT_EQ(layers[0].text, "conv(4,3) relu");
  EXPECT_EQ(layers[0].weight_dims, (std::vector<std::int64_t>{4, 1, 3, 3}));
  EXPECT_TRUE(layers[0].relu);
  EXPECT_EQ(layers[1].prefix, "3.dense");  // after the maxpool and the implicit flatten
  EXPECT_EQ(layers[1].weight_dims, (std::vector<std::int64_t>{8, 36}));  // flattened first, as trained
  EXPECT_TRUE(layers[2].last);
  EXPECT_FALSE(layers[1].last);
  EXPECT_THROW(weighted_layers("dense(8) batchnorm dense(3)", Dims{4}, *backend), Error);

  TestModel m = random_model("dense(8) relu dense(3)", Dims{4}, 3, 1);
  const std::vector<float> x = random_values(4 * 5, 2);
  TestModel q = int8_of(m, x, 5);
  NetworkOptions options;
  options.input_shape = m.input;
  options.inference = q.inference;
  Network net(m.layers, options, *backend);
  Tensor t;
  backend->shape_plain(t, Dims{5, 4}, DType::kF32);
  backend->copy_from_host(x.data(), t);
  PassContext training;
  EXPECT_THROW(net.forward(t, training), Error);  // inference only
  EXPECT_THROW(net.backward(t, training), Error);
  EXPECT_THROW(net.set_fake_quantization({}), Error);
  // A missing layer, missing scales, or a layer inference cannot run.
  options.inference->layers.erase("1.dense");
  EXPECT_THROW(Network(m.layers, options, *backend), Error);
  options.inference = q.inference;
  options.inference->layers["0.dense"].output_scale = 0;
  EXPECT_THROW(Network(m.layers, options, *backend), Error);
  options.inference = q.inference;
  EXPECT_THROW(Network("dense(8) layernorm dense(3)", options, *backend), Error);
}

// ---- the sparse kernel --------------------------------------------------------

TEST(PruneSparseKernel, CsrEqualsDense) {
  const std::int64_t out = 33, in = 70, n = 130;  // n not a multiple of the 64-sample block
  std::vector<float> w = random_values(std::size_t(out * in), 5);
  const std::vector<float> mask = magnitude_mask(w, 0.9);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] *= mask[i];
  EXPECT_EQ(std::count(w.begin(), w.end(), 0.0f), std::llround(0.9 * double(out * in)));
  const std::vector<float> b = random_values(std::size_t(out), 6);
  const std::vector<float> x = random_values(std::size_t(n * in), 7);
  std::unique_ptr<Backend> backend = test::cpu_backend();
  Tensor xt, y;
  backend->shape_plain(xt, Dims{n, in}, DType::kF32);
  backend->copy_from_host(x.data(), xt);
  for (bool relu : {false, true}) {
    InferenceDenseSpec spec;
    spec.in = Dims{in};
    spec.out = out;
    spec.fused = relu ? Activation::kRelu : Activation::kNone;
    spec.weights.weight = w;
    spec.weights.bias = b;
    spec.sparse = SparseKernel::kSparse;
    std::unique_ptr<InferenceOp> op = backend->inference_dense(spec);
    op->forward(xt, y);
    EXPECT_EQ(op->kernel(), "sparse csr");
    ASSERT_EQ(y.dims(), (Dims{n, out}));
    std::vector<float> got(std::size_t(n * out));
    backend->copy_to_host(y, got.data());
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t o = 0; o < out; ++o) {
        double ref = b[std::size_t(o)];
        for (std::int64_t i = 0; i < in; ++i) ref += double(w[std::size_t(o * in + i)]) * x[std::size_t(s * in + i)];
        if (relu) ref = std::max(ref, 0.0);
        EXPECT_NEAR(got[std::size_t(s * out + o)], ref, 1e-4) << s << "," << o;
      }
  }
}

TEST(PruneSparseKernel, NetworkSparseEqualsDense) {
  TestModel m = random_model("dense(48) relu dense(7)", Dims{30}, 7, 21);
  for (auto& [prefix, l] : m.inference.layers) {
    const std::vector<float> mask = magnitude_mask(l.weights.weight, 0.85);
    for (std::size_t i = 0; i < mask.size(); ++i) l.weights.weight[i] *= mask[i];
  }
  const std::int64_t rows = 100;
  const std::vector<float> x = random_values(std::size_t(rows * 30), 9);
  TestModel sparse = m, dense = m;
  sparse.inference.sparse = SparseKernel::kSparse;
  dense.inference.sparse = SparseKernel::kDense;
  std::vector<LayerKernel> ka, kb;
  const std::vector<float> ya = inference_forward(sparse, x, rows, &ka);
  const std::vector<float> yb = inference_forward(dense, x, rows, &kb);
  expect_close(ya, yb, 1e-5);
  EXPECT_EQ(ka[0].kernel, "sparse csr");
  EXPECT_NEAR(ka[0].sparsity, 0.85, 0.01);
  EXPECT_EQ(kb[0].kernel, "fp32 inner product");
  expect_close(ya, network_forward(m, x, rows), 1e-4);
}

// ---- pruning -------------------------------------------------------------------------

TEST(PruneMath, MagnitudeMaskAndCubicSchedule) {
  const std::vector<float> w = {0.5f, -0.1f, 0.0f, 2.0f, -3.0f, 0.1f, 0.2f, -0.2f};
  const std::vector<float> m = magnitude_mask(w, 0.5);
  // The four smallest: 0, ±0.1, and of the tied ±0.2 the earlier one.
  EXPECT_EQ(m, (std::vector<float>{1, 0, 0, 1, 1, 0, 0, 1}));
  EXPECT_DOUBLE_EQ(cubic_sparsity(0.9, 0, 100), 0.0);
  EXPECT_DOUBLE_EQ(cubic_sparsity(0.9, 100, 100), 0.9);
  EXPECT_DOUBLE_EQ(cubic_sparsity(0.9, 50, 100), 0.9 * (1 - 0.125));
  double last = 0;
  for (int t = 0; t <= 100; ++t) {
    EXPECT_GE(cubic_sparsity(0.9, t, 100), last);
    last = cubic_sparsity(0.9, t, 100);
  }
}

TEST(PruneTrainer, MaskedWeightsStayZeroThroughFineTuning) {
  const std::int64_t rows = 300;
  std::vector<float> x = random_values(std::size_t(rows * 6), 31);
  std::vector<float> y(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) y[std::size_t(r)] = float((x[std::size_t(r * 6)] > 0) + (x[std::size_t(r * 6 + 1)] > 0));
  TrainerConfig config;
  config.layers = "dense(16) relu dense(3)";
  config.classes = 3;
  config.epochs = 3;
  config.batch = 32;
  NullReporter reporter;
  test::CpuTrainer trainer(config, DataView{x, y, {6}}, std::nullopt, reporter);
  const std::vector<float> before = trainer.values("0.dense.weight");
  const std::vector<float> mask = magnitude_mask(before, 0.75);
  trainer.set_mask("0.dense.weight", mask);
  EXPECT_THROW(trainer.set_mask("0.dense.bias.nope", mask), Error);
  trainer.train();
  const std::vector<float> after = trainer.values("0.dense.weight");
  int changed = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (mask[i] == 0.0f) EXPECT_EQ(after[i], 0.0f) << i;  // exactly zero, not just small
    else changed += after[i] != before[i];
  }
  EXPECT_GT(changed, 0);  // the kept weights did train
}

// ---- the model blob and the store --------------------------------------------------

class QuietTraining final : public TrainingReporter {
 public:
  void note(std::string_view) override {}
  void progress(std::string_view, std::uint64_t, std::uint64_t) override {}
  void training(const TrainProgress&) override {}
};

// A store holding one dataset and one small MLP trained on it.
class TrainedStoreTest : public ::testing::Test {
 protected:
  void train_on(const std::string& dataset, const std::string& config_text) {
    test::init_store_with_dataset(root(), dataset, dataset + ".csv");
    Store store = Store::open(root());
    TrainRequest train;
    train.config_text = config_text;
    train.config_source = dataset + ".ini";
    QuietTraining quiet;
    train_model(store, train, quiet);
  }
  std::filesystem::path root() const { return dir_.path() / "store"; }
  test::TempDir dir_;
  NullReporter reporter_;
};

class QuantizeStoreTest : public TrainedStoreTest {
 protected:
  void SetUp() override {
    train_on("iris", "name = iris-mlp\ndataset = iris\nlayers = dense(32) relu dense(16) relu dense(3)\n"
                     "epochs = 60\nbatch = 16\nlr = 0.01\nseed = 3\nthreads = 1\nbaseline = false\n");
  }
};

TEST_F(QuantizeStoreTest, QuantizedModelRoundTripsAndEvaluates) {
  Store store = Store::open(root());
  QuantizeRequest request;
  request.model = "iris-mlp";
  request.calib = "iris";
  request.method = CalibrationMethod::kPercentile;
  CompressResult r = quantize_model(store, request, reporter_);
  EXPECT_EQ(r.model.ref(), "iris-mlp@v2");
  EXPECT_EQ(r.lineage["parent"], "iris-mlp@v1");
  EXPECT_EQ(r.lineage["precision"], "int8");
  const runs::ModelFile parent =
      runs::decode_model(read_model(store, find_model(store, parse_model_ref("iris-mlp@v1"))), "parent");
  const runs::ModelFile child = runs::decode_model(read_model(store, find_model(store, parse_model_ref("iris-mlp@v2"))), "child");
  EXPECT_TRUE(child.int8);
  EXPECT_EQ(child.activation_scales.size(), 3u);
  // The levels this CPU's int8 products take at full speed, recorded.
  const int levels = test::cpu_backend()->capabilities().int8_weight_levels;
  EXPECT_EQ(child.compression.at("weight_levels"), levels);
  EXPECT_EQ(r.lineage["weight_levels"], levels);
  for (std::size_t i = 0; i < child.tensors.size(); ++i) {
    const auto& t = child.tensors[i];
    if (!t.name.ends_with(".weight")) {
      EXPECT_EQ(t.values, parent.tensors[i].values);
      continue;
    }
    EXPECT_EQ(t.encoding, runs::TensorEncoding::kS8);
    const QuantizedWeights again = quantize_per_channel(parent.tensors[i].values, t.dims[0], levels);
    EXPECT_EQ(t.q, again.q);
    EXPECT_EQ(t.scales, again.scales);
  }
  // The int8 blob's weights take a quarter of the fp32 ones' bytes.
  EXPECT_LT(r.lineage["size_bytes"].get<double>(), r.lineage["parent_size_bytes"].get<double>());
  EvalResult e = evaluate_model(store, parse_model_ref("iris-mlp@v2"), parse_dataset_ref("iris"), EvalSplit::kTest, BackendOptions{.device = Device::kCpu, .threads = 1});
  EvalResult p = evaluate_model(store, parse_model_ref("iris-mlp@v1"), parse_dataset_ref("iris"), EvalSplit::kTest, BackendOptions{.device = Device::kCpu, .threads = 1});
  EXPECT_NEAR(e.classification_metrics.accuracy, p.classification_metrics.accuracy, 0.07);
  EXPECT_NEAR(r.metrics["test_accuracy"].get<double>(), e.classification_metrics.accuracy, 1e-12);
  EXPECT_THROW(quantize_model(store, request = [&] { request.model = "iris-mlp@v2"; return request; }(), reporter_),
               Error);  // already int8
}

TEST_F(QuantizeStoreTest, PrunedModelRoundTripsWithExactZeros) {
  Store store = Store::open(root());
  PruneRequest request;
  request.model = "iris-mlp";
  request.sparsity = 0.6;
  request.schedule = PruneSchedule::kGradual;
  request.finetune_epochs = 3;
  request.batch = 16;
  CompressResult r = prune_model(store, request, reporter_);
  const runs::ModelFile child = runs::decode_model(read_model(store, r.model), "child");
  std::size_t zeros = 0, count = 0;
  for (const auto& t : child.tensors)
    if (t.name.ends_with(".weight")) {
      EXPECT_EQ(t.encoding, runs::TensorEncoding::kBitmask);
      for (float v : t.values) zeros += v == 0.0f;
      count += t.values.size();
    }
  EXPECT_NEAR(double(zeros) / double(count), 0.6, 0.01);
  EXPECT_NEAR(r.lineage["sparsity"].get<double>(), double(zeros) / double(count), 1e-12);
  // Encoding again gives the same bytes: nothing is lost in the bitmask form.
  EXPECT_EQ(runs::encode_model(child), read_model(store, r.model));
  EvalResult e = evaluate_model(store, parse_model_ref(r.model.ref()), parse_dataset_ref("iris"), EvalSplit::kTest, BackendOptions{.device = Device::kCpu, .threads = 1});
  EXPECT_GT(e.classification_metrics.accuracy, 0.8);

  PruneRequest structured = request;
  structured.structured = true;
  structured.sparsity = 0.5;
  structured.schedule = PruneSchedule::kOneShot;
  CompressResult s = prune_model(store, structured, reporter_);
  const runs::ModelFile small = runs::decode_model(read_model(store, s.model), "structured");
  EXPECT_EQ(small.layers, "dense(16) relu dense(8) relu dense(3)");
  EvalResult se = evaluate_model(store, parse_model_ref(s.model.ref()), parse_dataset_ref("iris"), EvalSplit::kTest, BackendOptions{.device = Device::kCpu, .threads = 1});
  EXPECT_GT(se.classification_metrics.accuracy, 0.8);
}

TEST_F(QuantizeStoreTest, BadRequestsLeaveNoRun) {
  Store store = Store::open(root());
  const auto runs_before = list_runs(store).size();
  PruneRequest prune;
  prune.model = "iris-mlp";
  prune.sparsity = 1.5;
  EXPECT_THROW(prune_model(store, prune, reporter_), Error);
  prune.sparsity = 0.5;
  prune.schedule = PruneSchedule::kGradual;
  prune.finetune_epochs = 0;
  EXPECT_THROW(prune_model(store, prune, reporter_), Error);
  QuantizeRequest q;
  q.model = "iris-mlp";
  q.calib = "nosuchdata";
  EXPECT_THROW(quantize_model(store, q, reporter_), Error);
  EXPECT_EQ(list_runs(store).size(), runs_before);
  EXPECT_EQ(list_models(store).size(), 1u);
}

// ---- quantization-aware training ---------------------------------------------

// The backend's fake quantization in the weights' own (possibly blocked)
// layout is exactly quantize_per_channel then dequantize, so QAT trains
// against the very weights the int8 model will hold.
TEST(QuantizeQat, FakeQuantizeChannelsEqualsQuantizeDequantize) {
  std::unique_ptr<Backend> backend = test::cpu_backend();
  DenseSpec dense;
  dense.in = Dims{3, 7, 7};
  dense.out = 24;
  ConvSpec conv;
  conv.in = Dims{5, 9, 9};
  conv.out_channels = 16;
  conv.kernel = 3;
  Tensor dw, db, cw, cb;
  backend->dense(dense)->shape_parameters(dw, db);  // (24, 3, 7, 7) in the backend's layout
  backend->conv(conv)->shape_parameters(cw, cb);    // (16, 5, 3, 3)
  std::uint32_t seed = 7;
  for (Tensor* w : {&dw, &cw}) {
    std::vector<float> host = random_values(std::size_t(w->elements()), seed++, 0.3f);
    const std::size_t per = host.size() / std::size_t(w->dims()[0]);
    std::fill_n(host.begin() + std::ptrdiff_t(2 * per), per, 0.0f);  // an all-zero (pruned) channel
    host[per] = 9.0f;                                                // an outlier channel
    backend->copy_from_host(host.data(), *w);
    for (int levels : {127, 64}) {
      Tensor fq;
      backend->fake_quantize_channels(*w, fq, levels);
      EXPECT_EQ(fq.dims(), w->dims());
      std::vector<float> got(host.size());
      backend->copy_to_host(fq, got.data());
      EXPECT_EQ(got, dequantize(quantize_per_channel(host, w->dims()[0], levels))) << levels;
    }
    std::vector<float> unchanged(host.size());
    backend->copy_to_host(*w, unchanged.data());
    EXPECT_EQ(unchanged, host);
  }
}

TEST(QuantizeQat, FakeQuantizeActivationsRoundsAndClips) {
  std::unique_ptr<Backend> backend = test::cpu_backend();
  std::vector<float> host = random_values(4 * 50, 3, 2.0f);
  host[0] = 1e6f;
  host[1] = -1e6f;
  Tensor x, y;
  backend->shape_plain(x, Dims{4, 50}, DType::kF32);
  backend->copy_from_host(host.data(), x);
  const float scale = 0.02f;
  for (bool unsigned_levels : {false, true}) {
    const float lo = unsigned_levels ? 0.0f : -127.0f, hi = unsigned_levels ? 255.0f : 127.0f;
    backend->fake_quantize(x, y, scale, lo, hi);
    std::vector<float> got(host.size());
    backend->copy_to_host(y, got.data());
    for (std::size_t i = 0; i < host.size(); ++i) {
      const float q = std::clamp(std::nearbyint(host[i] / scale), lo, hi);
      EXPECT_EQ(got[i], q * scale) << i;
      // A value inside the range moves by at most half a step.
      if (host[i] / scale > lo && host[i] / scale < hi) {
        EXPECT_LE(std::fabs(got[i] - host[i]), 0.5f * scale * 1.0001f);
      }
    }
    EXPECT_EQ(got[0], hi * scale);
    EXPECT_EQ(got[1], lo * scale);
  }
}

class QuantizeQatStoreTest : public TrainedStoreTest {
 protected:
  void SetUp() override {
    train_on("digits", "name = digits-mlp\ndataset = digits\nlayers = dense(64) relu dense(32) relu dense(10)\n"
                       "epochs = 10\nbatch = 32\nlr = 0.003\nseed = 5\nthreads = 1\nbaseline = false\n");
  }
};

TEST_F(QuantizeQatStoreTest, QatFineTunesAndItsInt8ModelEvaluates) {
  Store store = Store::open(root());
  QuantizeRequest request;
  request.model = "digits-mlp@v1";
  request.calib = "digits";
  CompressResult ptq = quantize_model(store, request, reporter_);
  request.qat_epochs = 3;
  CompressResult qat = quantize_model(store, request, reporter_);
  EXPECT_EQ(ptq.lineage["qat_epochs"], 0);
  EXPECT_EQ(qat.model.ref(), "digits-mlp@v3");
  EXPECT_EQ(qat.lineage["parent"], "digits-mlp@v1");
  EXPECT_EQ(qat.lineage["qat_epochs"], 3);
  EXPECT_EQ(qat.lineage["precision"], "int8");
  EXPECT_NE(qat.run.config_text.find("qat_epochs = 3"), std::string::npos);

  // Fine-tuning moved the weights: the QAT model's s8 weights are not the
  // parent's quantized, yet they are the quantization of its own values.
  const runs::ModelFile parent =
      runs::decode_model(read_model(store, find_model(store, parse_model_ref("digits-mlp@v1"))), "parent");
  const runs::ModelFile child =
      runs::decode_model(read_model(store, find_model(store, parse_model_ref("digits-mlp@v3"))), "child");
  ASSERT_TRUE(child.int8);
  // The model records the weight levels it was quantized to: this CPU's.
  const int levels = child.compression.at("weight_levels").get<int>();
  EXPECT_EQ(levels, test::cpu_backend()->capabilities().int8_weight_levels);
  bool moved = false;
  for (std::size_t i = 0; i < child.tensors.size(); ++i) {
    const auto& t = child.tensors[i];
    if (!t.name.ends_with(".weight")) continue;
    ASSERT_EQ(t.encoding, runs::TensorEncoding::kS8);
    for (std::int8_t q : t.q) ASSERT_LE(std::abs(int(q)), levels);
    moved = moved || t.q != quantize_per_channel(parent.tensors[i].values, t.dims[0], levels).q;
    EXPECT_EQ(t.values, dequantize(quantize_per_channel(t.values, t.dims[0], levels)));
  }
  EXPECT_TRUE(moved);

  const auto test_split = EvalSplit::kTest;
  const double ptq_acc = evaluate_model(store, parse_model_ref("digits-mlp@v2"), parse_dataset_ref("digits"), test_split, BackendOptions{.device = Device::kCpu, .threads = 1})
                             .classification_metrics.accuracy;
  const double qat_acc = evaluate_model(store, parse_model_ref("digits-mlp@v3"), parse_dataset_ref("digits"), test_split, BackendOptions{.device = Device::kCpu, .threads = 1})
                             .classification_metrics.accuracy;
  const double fp32_acc = evaluate_model(store, parse_model_ref("digits-mlp@v1"), parse_dataset_ref("digits"), test_split, BackendOptions{.device = Device::kCpu, .threads = 1})
                              .classification_metrics.accuracy;
  EXPECT_GT(fp32_acc, 0.9);
  // Fine-tuning against the int8 rounding must not lose to plain PTQ by
  // more than a few of the 360 test rows.
  EXPECT_GE(qat_acc, ptq_acc - 0.01) << "ptq " << ptq_acc << " qat " << qat_acc;
  std::cout << "digits test accuracy: fp32 " << fp32_acc << ", ptq " << ptq_acc << ", qat " << qat_acc << "\n";
  EXPECT_NEAR(qat.metrics["test_accuracy"].get<double>(), qat_acc, 1e-12);

  request.qat_epochs = -1;
  EXPECT_THROW(quantize_model(store, request, reporter_), Error);
  EXPECT_EQ(list_models(store).size(), 3u);
}

// The masters survive fake quantization: a forward puts back what it set
// aside, so the weights a trainer reports are the fp32 ones it updates.
TEST(QuantizeQat, MasterWeightsRestoredAfterForward) {
  std::vector<float> x = random_values(64 * 10, 11);
  std::vector<float> y(64);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = float(i % 3);
  TrainerConfig tc;
  tc.layers = "dense(16) relu dense(3)";
  tc.classes = 3;
  tc.batch = 16;
  tc.epochs = 1;
  tc.optimizer.lr = 0.01f;
  NullReporter reporter;
  test::CpuTrainer trainer(tc, DataView{x, y, {10}}, std::nullopt, reporter);
  const std::vector<float> before = trainer.values("0.dense.weight");
  FakeQuantization fq;
  fq.input_scale = 3.0f / 127;
  fq.layers = {{"0.dense", 0.05f, true}, {"1.dense", 0.0f, false}};
  const Evaluation exact = trainer.evaluate(DataView{x, y, {10}});
  trainer.set_fake_quantization(fq);
  const Evaluation simulated = trainer.evaluate(DataView{x, y, {10}});
  EXPECT_NE(simulated.loss, exact.loss);  // the forward pass does see the rounding
  EXPECT_NEAR(simulated.loss, exact.loss, 0.1);
  EXPECT_EQ(trainer.values("0.dense.weight"), before);  // not the quantized copy
  trainer.train();
  const std::vector<float> after = trainer.values("0.dense.weight");
  EXPECT_NE(after, before);
  // Adam's small steps leave most weights off the s8 grid: these are masters.
  EXPECT_NE(after, dequantize(quantize_per_channel(after, 16)));
  fq.layers[0].prefix = "9.dense";
  EXPECT_THROW(trainer.set_fake_quantization(fq), Error);
}

// fp32 models keep format 1's tensor layout (header format 3); sparse ones
// take format 2's (format 4).
TEST(QuantizeModelFile, Fp32ModelsKeepTheFormat1Layout) {
  runs::ModelFile m;
  m.layers = "dense(2)";
  m.input_shape = {3};
  m.outputs = 2;
  runs::NamedTensor w, b;
  w.name = "0.dense.weight";
  w.dims = {2, 3};
  w.values = {1, 2, 3, 4, 5, 6};
  b.name = "0.dense.bias";
  b.dims = {2};
  b.values = {0.5f, -0.5f};
  m.tensors = {w, b};
  m.weights_hash = runs::model_weights_hash(m);  // decode_model() checks it
  const std::string bytes = runs::encode_model(m);
  EXPECT_NE(bytes.find("\"format\":3"), std::string::npos);
  EXPECT_NE(bytes.find("\"count\":6"), std::string::npos);  // offsets and counts in floats
  const runs::ModelFile back = runs::decode_model(bytes, "m");
  EXPECT_FALSE(back.int8);
  EXPECT_EQ(back.tensors[0].values, m.tensors[0].values);
  m.tensors[0].encoding = runs::TensorEncoding::kBitmask;
  m.tensors[0].values = {0, 2, 0, 0, 5, 0};
  m.weights_hash = runs::model_weights_hash(m);
  const std::string sparse = runs::encode_model(m);
  EXPECT_NE(sparse.find("\"format\":4"), std::string::npos);
  EXPECT_EQ(runs::decode_model(sparse, "m").tensors[0].values, m.tensors[0].values);
  std::string damaged = sparse.substr(0, sparse.size() - 3);
  EXPECT_THROW(runs::decode_model(damaged, "m"), Error);
}

}  // namespace
}  // namespace anneal
