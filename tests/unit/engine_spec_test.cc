// Layer specs: parsing, building, and the one-line usage errors for bad
// specs, all raised while building, before any training.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "test_util.h"
#include "anneal/network.h"
#include "anneal/optimizer.h"
#include "anneal/report.h"
#include "anneal/trainer.h"
#include "engine/layers_internal.h"

namespace anneal {
namespace {

// Builds `spec` and returns the kUsage message it fails with ("" if it builds).
std::string build_error(const std::string& spec, const Dims& input, std::int64_t outputs = 0,
                        std::uint64_t memory_limit = 0) {
  auto backend = test::cpu_backend();
  NetworkOptions options;
  options.input_shape = input;
  options.memory_limit = memory_limit;
  options.outputs = outputs;
  options.output_meaning = std::to_string(outputs) + " classes";
  try {
    Network net(spec, options, *backend);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    return message;
  }
  return "";
}

TEST(LayerSpec, ParsesPositionalAndKeywordArguments) {
  const auto layers = parse_layer_spec("conv(32, 3, stride=2, pad=1)  relu maxpool(2) dropout(0.25)");
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[0].name, "conv");
  EXPECT_EQ(layers[0].args, (std::vector<double>{32, 3}));
  ASSERT_EQ(layers[0].options.size(), 2u);
  EXPECT_EQ(layers[0].options[0].first, "stride");
  EXPECT_EQ(layers[0].options[1].second, 1);
  EXPECT_EQ(layers[1].name, "relu");
  EXPECT_TRUE(layers[1].args.empty());
  EXPECT_EQ(layers[3].args, (std::vector<double>{0.25}));
  EXPECT_EQ(layers[3].position, 4);
}

TEST(LayerSpec, BuildsTheReferenceNetworks) {
  auto backend = test::cpu_backend();
  NetworkOptions mlp;
  mlp.input_shape = Dims{784};
  mlp.outputs = 10;
  Network a("dense(256) relu dense(128) relu dense(10)", mlp, *backend);
  EXPECT_EQ(a.parameter_count(), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(a.describe(), "dense(256) relu dense(128) relu dense(10)");

  NetworkOptions cnn;
  cnn.input_shape = Dims{1, 28, 28};
  cnn.outputs = 10;
  Network b("conv(32,3,pad=1) relu maxpool(2) conv(64,3,pad=1) relu maxpool(2) flatten dense(128) relu dense(10)",
            cnn, *backend);
  EXPECT_EQ(b.parameter_count(),
            32 * 9 + 32 + 64 * 32 * 9 + 64 + 64 * 7 * 7 * 128 + 128 + 128 * 10 + 10);
  const auto summary = b.summary();
  ASSERT_FALSE(summary.empty());
  EXPECT_NE(summary[0].find("{1, 28, 28} -> {32, 28, 28}"), std::string::npos) << summary[0];

  // A dense layer on an image flattens implicitly.
  NetworkOptions image;
  image.input_shape = Dims{1, 8, 8};
  image.outputs = 3;
  Network c("conv(4,3,stride=2) dense(3)", image, *backend);
  EXPECT_EQ(c.output_shape(), Dims{3});
}

TEST(LayerSpec, PeriodicEmbedsEachFeatureInItsOwnFrequencies) {
  auto backend = test::cpu_backend();
  auto scope = backend->enter();
  NetworkOptions options;
  options.input_shape = Dims{10};
  options.outputs = 3;
  options.seed = 4;
  Network net("periodic(500,sigma=0.25) dense(8) relu dense(3)", options, *backend);
  EXPECT_EQ(net.describe(), "periodic(500,sigma=0.25) dense(8) relu dense(3)");
  ASSERT_FALSE(net.parameters().empty());
  const Parameter& c = *net.parameters()[0];
  EXPECT_EQ(c.name, "0.periodic.frequencies");
  EXPECT_EQ(c.value.dims(), (Dims{10, 500}));
  EXPECT_EQ(net.parameter_count(), 10 * 500 + 8 * 10000 + 8 + 3 * 8 + 3);
  EXPECT_EQ(net.summary()[0], "periodic(500,sigma=0.25)  {10} -> {10000}  5000 params");
  // N(0, sigma²): 5000 draws' mean and standard deviation.
  std::vector<float> v(5000);
  backend->copy_to_host(c.value, v.data());
  double sum = 0, squares = 0;
  for (float x : v) sum += x, squares += double(x) * x;
  const double mean = sum / 5000, sd = std::sqrt(squares / 5000 - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sd, 0.25, 0.01);
  // A pure function of the seed.
  Network again("periodic(500,sigma=0.25) dense(8) relu dense(3)", options, *backend);
  std::vector<float> w(5000);
  backend->copy_to_host(again.parameters()[0]->value, w.data());
  EXPECT_EQ(v, w);
  options.seed = 5;
  Network other("periodic(500,sigma=0.25) dense(8) relu dense(3)", options, *backend);
  backend->copy_to_host(other.parameters()[0]->value, w.data());
  EXPECT_NE(v, w);
  // The defaults, written bare; an inference-only network cannot hold it.
  Network bare("periodic dense(3)", options, *backend);
  EXPECT_EQ(bare.describe(), "periodic(16) dense(3)");
  EXPECT_EQ(bare.parameters()[0]->value.dims(), (Dims{10, 16}));
  EXPECT_EQ(bare.inference_blocker(),
            "layer 1 'periodic': int8 and sparse inference support dense, conv, pooling, flatten, dropout and "
            "activations, not periodic");
  EXPECT_EQ(build_error("flatten periodic(2) dense(3)", Dims{1, 4, 4}, 3), "") << "flat after flatten";
  EXPECT_EQ(build_error("periodic(2) dense(3)", Dims{1, 4, 4}, 3),
            "layer 1 'periodic(2)' needs a flat input {F} but gets the image {1, 4, 4}; put flatten before it");
}

TEST(LayerSpec, PleFitsItsEdgesOnItsInputs) {
  auto backend = test::cpu_backend();
  auto scope = backend->enter();
  NetworkOptions options;
  options.input_shape = Dims{3};
  options.outputs = 2;
  Network net("ple(4) dense(2)", options, *backend);
  EXPECT_EQ(net.describe(), "ple(4) dense(2)");
  EXPECT_EQ(net.summary()[0], "ple(4)  {3} -> {12}  0 params");
  EXPECT_TRUE(net.fits_inputs());
  ASSERT_EQ(net.buffers().size(), 1u);
  EXPECT_EQ(net.buffers()[0].name, "0.ple.edges");
  const Tensor& edges = *net.buffers()[0].tensor;
  EXPECT_EQ(edges.dims(), (Dims{3, 5}));
  auto edges_now = [&] {
    std::vector<float> v(15);
    backend->copy_to_host(edges, v.data());
    return v;
  };
  // Before fitting: four equal bins over [−2, 2].
  EXPECT_EQ(edges_now(), (std::vector<float>{-2, -1, 0, 1, 2, -2, -1, 0, 1, 2, -2, -1, 0, 1, 2}));

  // 100 rows: column 0 the values 99..0 (quantiles at ranks ⌊i·99/4⌋ of
  // the sorted: 0, 24, 49, 74, 99), column 1 a one-hot (30 ones: two
  // distinct edges, the last repeated), column 2 a constant with a NaN and
  // an infinity left out.
  std::vector<float> rows(300);
  for (int r = 0; r < 100; ++r) {
    rows[std::size_t(r * 3)] = float(99 - r);
    rows[std::size_t(r * 3 + 1)] = r % 10 < 3 ? 1.0f : 0.0f;
    rows[std::size_t(r * 3 + 2)] = r == 5 ? NAN : r == 6 ? INFINITY : 7.0f;
  }
  net.fit_inputs(rows, 100);
  EXPECT_EQ(edges_now(), (std::vector<float>{0, 24, 49, 74, 99, 0, 1, 1, 1, 1, 7, 7, 7, 7, 7}));
  EXPECT_EQ(engine::fit_piecewise_linear_edges(rows, 100, 3, 4), edges_now()) << "the documented fit";
  EXPECT_THROW(net.fit_inputs(std::span<const float>(rows).first(299), 100), Error);

  // A network without one fits nothing.
  Network plain("dense(2)", options, *backend);
  EXPECT_FALSE(plain.fits_inputs());
  plain.fit_inputs(rows, 100);
  EXPECT_TRUE(plain.buffers().empty());
}

// The Trainer fits the edges on its training rows before the first step:
// all of them up to 4096, else rows ⌊i·rows/4096⌋.
TEST(LayerSpec, TrainerFitsPleOnASampleOfItsTrainingRows) {
  auto backend = test::cpu_backend();
  for (const int rows : {300, 10000}) {
    SCOPED_TRACE(rows);
    std::vector<float> features(std::size_t(rows) * 2);
    std::vector<float> labels(std::size_t(rows), 0.0f);
    for (int r = 0; r < rows; ++r) {
      features[std::size_t(2 * r)] = float((r * 7919) % rows);  // a permutation of 0..rows−1
      features[std::size_t(2 * r + 1)] = float(r % 3);
      labels[std::size_t(r)] = float(r % 2);
    }
    const int take = std::min(rows, 4096);
    std::vector<float> sample;
    for (int i = 0; i < take; ++i) {
      const std::int64_t r = std::int64_t(i) * rows / take;
      sample.push_back(features[std::size_t(2 * r)]);
      sample.push_back(features[std::size_t(2 * r + 1)]);
    }
    TrainerConfig config;
    config.layers = "ple(5) dense(4) relu dense(2)";
    config.classes = 2;
    config.epochs = 1;
    NullReporter quiet;
    Trainer trainer(config, *backend, DataView{features, labels, {2}}, std::nullopt, quiet);
    EXPECT_EQ(trainer.values("0.ple.edges"), engine::fit_piecewise_linear_edges(sample, take, 2, 5));
    if (rows > 4096) {
      EXPECT_NE(trainer.values("0.ple.edges"), engine::fit_piecewise_linear_edges(features, rows, 2, 5))
          << "a sample, not every row";
    }
  }
}

TEST(LayerSpec, EnsembleTrainsEveryMemberAndPredictsTheirMean) {
  auto backend = test::cpu_backend();
  auto scope = backend->enter();
  NetworkOptions options;
  options.input_shape = Dims{6};
  options.outputs = 3;
  options.seed = 4;
  options.batch = 4;
  Network net("ensemble(5) dense(8) relu dense(3)", options, *backend);
  EXPECT_EQ(net.describe(), "ensemble(5) dense(8) relu dense(3)");
  EXPECT_EQ(net.members(), 5);
  const Parameter& r = *net.parameters()[0];
  EXPECT_EQ(r.name, "0.ensemble.scale");
  EXPECT_EQ(r.value.dims(), (Dims{5, 6}));
  // The last dense layer is the members' own: K = 5 heads of (3, 8) and 3.
  EXPECT_EQ(net.parameter_count(), 5 * 6 + 8 * 6 + 8 + 5 * (3 * 8 + 3));
  ASSERT_EQ(net.parameters().size(), 5u);
  EXPECT_EQ(net.parameters()[3]->name, "2.dense.weight");
  EXPECT_EQ(net.parameters()[3]->value.dims(), (Dims{5, 3, 8}));
  EXPECT_EQ(net.parameters()[4]->value.dims(), (Dims{5, 3}));
  EXPECT_EQ(net.weighted_layers().back().weight_dims, (std::vector<std::int64_t>{5, 3, 8}));
  EXPECT_EQ(net.weighted_layers().front().weight_dims, (std::vector<std::int64_t>{8, 6})) << "shared";
  EXPECT_EQ(net.summary()[0], "ensemble(5)  {6} -> {6}  30 params");
  // Random signs, a pure function of the seed, not all alike.
  std::vector<float> v(30);
  backend->copy_to_host(r.value, v.data());
  int positive = 0;
  for (float x : v) {
    EXPECT_TRUE(x == 1.0f || x == -1.0f) << x;
    positive += x > 0;
  }
  EXPECT_GT(positive, 5);
  EXPECT_LT(positive, 25);
  Network again("ensemble(5) dense(8) relu dense(3)", options, *backend);
  std::vector<float> w(30);
  backend->copy_to_host(again.parameters()[0]->value, w.data());
  EXPECT_EQ(v, w);

  // A training forward gives every member's row; any other, their mean.
  Tensor x;
  backend->shape_plain(x, Dims{4, 6}, DType::kF32);
  std::vector<float> xv(24);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = float(i % 7) - 3.0f;
  backend->copy_from_host(xv.data(), x);
  const Tensor& rows = net.forward(x, PassContext{true, false, 1, 0});
  ASSERT_EQ(rows.dims(), (Dims{20, 3}));
  std::vector<float> each(60);
  backend->copy_to_host(rows, each.data());
  const Tensor& mean = net.forward(x, PassContext{false, false, 1, 0});
  ASSERT_EQ(mean.dims(), (Dims{4, 3}));
  std::vector<float> got(12);
  backend->copy_to_host(mean, got.data());
  for (int n = 0; n < 4; ++n)
    for (int j = 0; j < 3; ++j) {
      float sum = 0;
      for (int i = 0; i < 5; ++i) sum += each[std::size_t((n * 5 + i) * 3 + j)];
      EXPECT_EQ(got[std::size_t(n * 3 + j)], sum / 5.0f) << n << "," << j;
    }
  // The members differ: their scales start at different signs.
  EXPECT_NE(each[0], each[3]);

  Network bare("ensemble dense(3)", options, *backend);
  EXPECT_EQ(bare.describe(), "ensemble(32) dense(3)");
  EXPECT_EQ(bare.members(), 32);
  EXPECT_EQ(bare.inference_blocker(),
            "layer 1 'ensemble': int8 and sparse inference support dense, conv, pooling, flatten, dropout and "
            "activations, not ensemble");
  EXPECT_EQ(build_error("ensemble(2) dense(3)", Dims{1, 4, 4}, 3),
            "layer 1 'ensemble(2)' needs a flat input {F} but gets the image {1, 4, 4}; put flatten before it");
}

TEST(LayerSpec, UnknownLayerSuggestsTheClosestName) {
  const std::string m = build_error("desne(10)", Dims{4});
  EXPECT_NE(m.find("unknown layer 'desne'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'dense'"), std::string::npos) << m;
  const std::string m2 = build_error("dense(8) rleu dense(2)", Dims{4});
  EXPECT_NE(m2.find("did you mean 'relu'"), std::string::npos) << m2;
  EXPECT_NE(m2.find("layer 2"), std::string::npos) << m2;
}

TEST(LayerSpec, ConvOnAFlatInputIsAShapeError) {
  const std::string m = build_error("conv(32,3) relu dense(10)", Dims{784}, 10);
  EXPECT_NE(m.find("needs an image input"), std::string::npos) << m;
  EXPECT_NE(m.find("{784}"), std::string::npos) << m;
  EXPECT_NE(build_error("maxpool(2)", Dims{16}).find("needs an image input"), std::string::npos);
}

TEST(LayerSpec, FinalWidthMustMatchTheClasses) {
  const std::string m = build_error("dense(64) relu dense(12)", Dims{20}, 10);
  EXPECT_NE(m.find("outputs 12"), std::string::npos) << m;
  EXPECT_NE(m.find("10 classes"), std::string::npos) << m;
  const std::string m2 = build_error("conv(4,3)", Dims{1, 8, 8}, 10);
  EXPECT_NE(m2.find("ends with an image"), std::string::npos) << m2;
}

// Issue 29: dense(1e9) passed the width check and the kernel killed the
// process allocating it. The limit is checked before each layer is made.
TEST(LayerSpec, ANetworkLargerThanTheMemoryLimitIsRefusedBeforeItIsAllocated) {
  const std::uint64_t gib = std::uint64_t{1} << 30;
  const std::string m = build_error("dense(1e9) dense(3)", Dims{4}, 3, 16 * gib);
  EXPECT_TRUE(m.starts_with("layer 1 'dense(1e9)': ")) << m;
  EXPECT_NE(m.find("more than the limit of " + std::to_string(16 * gib) + " bytes"), std::string::npos) << m;
  // Two layers each fine alone: their sum is over; 1e9 x 1e9 does not overflow.
  const std::string sum = build_error("dense(30000) dense(30000) dense(3)", Dims{4}, 3, gib * 10);
  EXPECT_TRUE(sum.starts_with("layer 2 'dense(30000)': ")) << sum;
  EXPECT_TRUE(build_error("dense(1e9) dense(1e9)", Dims{4}, 0, gib).starts_with("layer 1 "));
  // Conv: parameters and per-sample outputs (64 x 1000 x 1000 x 128 x 8 bytes).
  EXPECT_TRUE(build_error("conv(64,3,pad=1) flatten dense(2)", Dims{1, 1000, 1000}, 2, 4 * gib).starts_with("layer 1 "));
  // Exactly the formula: 16 bytes a parameter, 8 a value a sample (batch 128).
  const std::uint64_t needed = (10 * 5 + 3 * 11) * kTrainBytesPerParameter + (4 + 10 + 3) * 128 * kTrainBytesPerOutput;
  EXPECT_EQ(build_error("dense(10) relu dense(3)", Dims{4}, 3, needed), "");
  EXPECT_NE(build_error("dense(10) relu dense(3)", Dims{4}, 3, needed - 1), "");
}

TEST(LayerSpec, BadArgumentsAreUsageErrors) {
  EXPECT_NE(build_error("dense(0)", Dims{4}).find("WIDTH must be a positive integer"), std::string::npos);
  EXPECT_NE(build_error("dense(2.5)", Dims{4}).find("positive integer"), std::string::npos);
  EXPECT_NE(build_error("dense", Dims{4}).find("takes 1 positional argument"), std::string::npos);
  EXPECT_NE(build_error("dense(4", Dims{4}).find("never closed"), std::string::npos);
  EXPECT_NE(build_error("dense(x)", Dims{4}).find("not a number"), std::string::npos);
  EXPECT_NE(build_error("conv(4,3,pading=1)", Dims{1, 8, 8}).find("no option 'pading'"), std::string::npos);
  EXPECT_NE(build_error("maxpool(2,stride=0)", Dims{1, 8, 8}).find("stride must be"), std::string::npos);
  EXPECT_NE(build_error("dropout(1.5)", Dims{4}).find("[0, 1)"), std::string::npos);
  EXPECT_NE(build_error("relu(3)", Dims{4}).find("takes 0 positional"), std::string::npos);
  EXPECT_NE(build_error("conv(4,9)", Dims{1, 8, 8}).find("larger than its padded input"), std::string::npos);
  EXPECT_NE(build_error("maxpool(9)", Dims{1, 8, 8}).find("larger than its input"), std::string::npos);
  EXPECT_NE(build_error("layernorm", Dims{1, 8, 8}).find("needs a flat input"), std::string::npos);
  EXPECT_NE(build_error("   ", Dims{4}).find("empty"), std::string::npos);
  EXPECT_EQ(build_error("dense(4) relu dense(2)", Dims{4}), "");
}

TEST(Names, UnknownNamesSuggestTheClosest) {
  try {
    parse_optimizer_kind("adma");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("did you mean 'adam'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_loss_kind("softmax"), Error);
  EXPECT_EQ(parse_loss_kind("mae"), LossKind::kMeanAbsoluteError);
  EXPECT_EQ(parse_schedule_kind("cosine"), ScheduleKind::kCosine);
  EXPECT_EQ(parse_precision("fp16"), Precision::kFp16);
  EXPECT_THROW(parse_precision("fp8"), Error);
}

TEST(TrainerConfigErrors, RaisedBeforeTraining) {
  std::vector<float> x(8 * 4, 0.5f), y = {0, 1, 2, 0, 1, 2, 0, 1};
  DataView data{x, y, {4}};
  NullReporter reporter;
  auto expect_error = [&](TrainerConfig c, ErrorKind kind, const std::string& fragment,
                          std::optional<DataView> validation = std::nullopt) {
    try {
      test::CpuTrainer t(c, data, validation, reporter);
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  TrainerConfig base;
  base.layers = "dense(8) relu dense(3)";
  base.classes = 3;
  TrainerConfig c = base;
  c.layers = "dense(8) relu dense(4)";
  expect_error(c, ErrorKind::kUsage, "3 classes");
  c = base;
  c.classes = 2;  // label 2 is out of range
  c.layers = "dense(2)";
  expect_error(c, ErrorKind::kBadData, "not a class index");
  c = base;
  c.early_stop = EarlyStopMetric::kValLoss;
  c.patience = 2;
  expect_error(c, ErrorKind::kUsage, "needs validation data");
  c = base;
  c.optimizer.lr = -1;
  expect_error(c, ErrorKind::kUsage, "lr must be");
  c = base;
  c.batch = 0;
  expect_error(c, ErrorKind::kUsage, "batch");
  std::vector<float> bad_x = x;
  bad_x[5] = std::numeric_limits<float>::quiet_NaN();
  try {
    test::CpuTrainer t(base, DataView{bad_x, y, {4}}, std::nullopt, reporter);
    ADD_FAILURE() << "NaN accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadData);
    EXPECT_NE(std::string(e.what()).find("row 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anneal
