// quantize/: INT8 quantization math and calibration, int8 layers against
// their fp32 reference, the sparse kernel against dense, pruning masks held
// through fine-tuning, and quantized/pruned models round-tripping through
// the store.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>

#include "anneal/backend.h"
#include "anneal/error.h"
#include "anneal/inference.h"
#include "anneal/network.h"
#include "anneal/quantize.h"
#include "anneal/runs.h"
#include "anneal/trainer.h"
#include "runs/model_file.h"
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

// The spec's outputs for x through the engine's fp32 Network: the reference.
std::vector<float> network_forward(const InferenceSpec& spec, const std::vector<float>& x, std::int64_t rows) {
  std::unique_ptr<Backend> backend = test::cpu_backend();
  NetworkOptions options;
  options.input_shape = spec.input_shape;
  options.batch = rows;
  Network net(spec.layers, options, *backend);
  for (Parameter* p : net.parameters()) {
    const auto dot = p->name.rfind('.');
    const InferenceWeights& w = spec.weights.at(p->name.substr(0, dot));
    backend->copy_from_host(p->name.ends_with("weight") ? w.weight.data() : w.bias.data(), p->value);
  }
  Tensor t;
  backend->shape_plain(t, spec.input_shape.with_batch(rows), DType::kF32);
  backend->copy_from_host(x.data(), t);
  PassContext ctx;
  ctx.training = false;
  const Tensor& y = net.forward(t, ctx);
  std::vector<float> out(std::size_t(y.elements()));
  backend->copy_to_host(y, out.data());
  return out;
}

// An fp32 spec with random weights for `layers` on `input`.
InferenceSpec random_spec(const std::string& layers, const Dims& input, std::int64_t outputs, std::uint32_t seed) {
  InferenceSpec spec;
  spec.layers = layers;
  spec.input_shape = input;
  spec.outputs = outputs;
  for (const WeightedLayer& l : weighted_layers(layers, input)) {
    std::int64_t n = 1;
    for (auto d : l.weight_dims) n *= d;
    InferenceWeights& w = spec.weights[l.prefix];
    w.weight = random_values(std::size_t(n), seed++, 1.0f / std::sqrt(float(n / l.out)));
    w.bias = random_values(std::size_t(l.out), seed++, 0.1f);
  }
  return spec;
}

// The int8 version of an fp32 spec, with activation scales from the fp32
// chain's ranges on x (minmax).
InferenceSpec int8_of(const InferenceSpec& f32, const std::vector<float>& x, std::int64_t rows) {
  const auto layers = weighted_layers(f32.layers, f32.input_shape);
  std::vector<ActivationRange> ranges(layers.size() + 1);
  ranges[0].add_max(x);
  InferenceSpec probe = f32;
  InferenceNetwork net(probe);
  std::vector<float> y(std::size_t(rows * f32.outputs));
  net.forward(x.data(), rows, y.data(),
              [&](std::size_t k, const float* v, std::size_t n) { ranges[k + 1].add_max({v, n}); });
  InferenceSpec q = f32;
  q.int8 = true;
  float in = ranges[0].max() / 127.0f;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    InferenceWeights& w = q.weights[layers[k].prefix];
    QuantizedWeights qw = quantize_per_channel(w.weight, layers[k].out);
    w.q = qw.q;
    w.scales = qw.scales;
    w.input_scale = in;
    w.output_scale = layers[k].last ? 0.0f : ranges[k + 1].max() / (layers[k].relu ? 255.0f : 127.0f);
    in = w.output_scale;
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

// Also checks that the int8 chain's kernels, in order, are `kernels` when given.
void check_int8_against_fp32(const std::string& layers, const Dims& input, std::int64_t outputs,
                             const std::vector<std::string>& kernels = {}) {
  const std::int64_t rows = 37;
  const InferenceSpec f32 = random_spec(layers, input, outputs, 11);
  const std::vector<float> x = random_values(std::size_t(rows * input.product()), 3);
  const std::vector<float> reference = network_forward(f32, x, rows);
  InferenceNetwork fp32_chain(f32);
  std::vector<float> y32(reference.size());
  fp32_chain.forward(x.data(), rows, y32.data());
  expect_close(y32, reference, 1e-4);
  InferenceNetwork int8_chain(int8_of(f32, x, rows));
  std::vector<float> y8(reference.size());
  int8_chain.forward(x.data(), rows, y8.data());
  expect_close(y8, reference, 0.04);
  if (!kernels.empty()) {
    std::vector<std::string> got;
    for (const auto& info : int8_chain.describe()) got.push_back(info.kernel);
    EXPECT_EQ(got, kernels);
  }
  for (const auto& info : int8_chain.describe()) {
    if (info.layer.starts_with("dense") || info.layer.starts_with("conv")) {
      EXPECT_TRUE(info.kernel.starts_with("int8")) << info.layer << ": " << info.kernel;
    }
    // The int8 conv/pool output (N, H, W, C) feeds the dense layer as it is
    // (weights permuted to H, W, C order), with no reorder per batch; the
    // comparison above is what shows the permutation right.
    if (info.layer == "flatten") {
      EXPECT_EQ(info.kernel, "view (H, W, C order)");
    }
  }
}

TEST(QuantizeInt8Layer, DenseMatchesFp32) { check_int8_against_fp32("dense(24)", Dims{40}, 24); }
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
                          {"int8 matmul (im2col)", "int8 convolution", "view (H, W, C order)", "int8 inner product"});
}

TEST(QuantizeInt8Layer, FewChannelConvAvgpoolMatchesFp32) {
  check_int8_against_fp32("conv(8,3) relu avgpool(2) flatten dense(4)", Dims{2, 10, 10}, 4,
                          {"int8 matmul (im2col)", "int8 pooling (of the matmul's rows)", "view (H, W, C order)",
                           "int8 inner product"});
}

TEST(QuantizeInt8Layer, FewChannelConvUntiledPoolMatchesFp32) {
  check_int8_against_fp32("conv(4,3,pad=1) relu maxpool(2) flatten dense(3)", Dims{1, 9, 9}, 3,
                          {"int8 matmul (im2col)", "int8 pooling", "view (H, W, C order)", "int8 inner product"});
}

// ---- the sparse kernel --------------------------------------------------------

TEST(PruneSparseKernel, CsrEqualsDense) {
  const std::int64_t out = 33, in = 70, n = 130;  // n not a multiple of the 64-sample block
  std::vector<float> w = random_values(std::size_t(out * in), 5);
  const std::vector<float> mask = magnitude_mask(w, 0.9);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] *= mask[i];
  const std::vector<float> b = random_values(std::size_t(out), 6);
  const std::vector<float> x = random_values(std::size_t(n * in), 7);
  const CsrMatrix csr = CsrMatrix::from_dense(w.data(), out, in);
  EXPECT_EQ(csr.values.size(), std::size_t(std::llround(0.1 * double(out * in))));
  std::vector<float> y(std::size_t(n * out)), scratch;
  for (bool relu : {false, true}) {
    sparse_dense_forward(csr, b.data(), relu, x.data(), n, y.data(), scratch);
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t o = 0; o < out; ++o) {
        double ref = b[std::size_t(o)];
        for (std::int64_t i = 0; i < in; ++i) ref += double(w[std::size_t(o * in + i)]) * x[std::size_t(s * in + i)];
        if (relu) ref = std::max(ref, 0.0);
        EXPECT_NEAR(y[std::size_t(s * out + o)], ref, 1e-4) << s << "," << o;
      }
  }
}

TEST(PruneSparseKernel, NetworkSparseEqualsDense) {
  InferenceSpec spec = random_spec("dense(48) relu dense(7)", Dims{30}, 7, 21);
  for (auto& [prefix, w] : spec.weights) {
    const std::vector<float> mask = magnitude_mask(w.weight, 0.85);
    for (std::size_t i = 0; i < mask.size(); ++i) w.weight[i] *= mask[i];
  }
  const std::int64_t rows = 100;
  const std::vector<float> x = random_values(std::size_t(rows * 30), 9);
  InferenceSpec sparse = spec, dense = spec;
  sparse.sparse = SparseKernel::kSparse;
  dense.sparse = SparseKernel::kDense;
  InferenceNetwork a(sparse), b(dense);
  std::vector<float> ya(std::size_t(rows * 7)), yb(ya.size());
  a.forward(x.data(), rows, ya.data());
  b.forward(x.data(), rows, yb.data());
  expect_close(ya, yb, 1e-5);
  EXPECT_EQ(a.describe()[0].kernel, "sparse csr");
  EXPECT_EQ(b.describe()[0].kernel, "fp32 inner product");
  expect_close(ya, network_forward(spec, x, rows), 1e-4);
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
  for (std::size_t i = 0; i < child.tensors.size(); ++i) {
    const auto& t = child.tensors[i];
    if (!t.name.ends_with(".weight")) {
      EXPECT_EQ(t.values, parent.tensors[i].values);
      continue;
    }
    EXPECT_EQ(t.encoding, runs::TensorEncoding::kS8);
    const QuantizedWeights again = quantize_per_channel(parent.tensors[i].values, t.dims[0]);
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
    Tensor fq;
    backend->fake_quantize_channels(*w, fq);
    EXPECT_EQ(fq.dims(), w->dims());
    std::vector<float> got(host.size());
    backend->copy_to_host(fq, got.data());
    EXPECT_EQ(got, dequantize(quantize_per_channel(host, w->dims()[0])));
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
  bool moved = false;
  for (std::size_t i = 0; i < child.tensors.size(); ++i) {
    const auto& t = child.tensors[i];
    if (!t.name.ends_with(".weight")) continue;
    ASSERT_EQ(t.encoding, runs::TensorEncoding::kS8);
    moved = moved || t.q != quantize_per_channel(parent.tensors[i].values, t.dims[0]).q;
    EXPECT_EQ(t.values, dequantize(quantize_per_channel(t.values, t.dims[0])));
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

TEST(QuantizeModelFile, Fp32ModelsKeepFormat1) {
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
  const std::string bytes = runs::encode_model(m);
  EXPECT_NE(bytes.find("\"format\":1"), std::string::npos);
  const runs::ModelFile back = runs::decode_model(bytes, "m");
  EXPECT_FALSE(back.int8);
  EXPECT_EQ(back.tensors[0].values, m.tensors[0].values);
  m.tensors[0].encoding = runs::TensorEncoding::kBitmask;
  m.tensors[0].values = {0, 2, 0, 0, 5, 0};
  const std::string sparse = runs::encode_model(m);
  EXPECT_NE(sparse.find("\"format\":2"), std::string::npos);
  EXPECT_EQ(runs::decode_model(sparse, "m").tensors[0].values, m.tensors[0].values);
  std::string damaged = sparse.substr(0, sparse.size() - 3);
  EXPECT_THROW(runs::decode_model(damaged, "m"), Error);
}

}  // namespace
}  // namespace anneal
