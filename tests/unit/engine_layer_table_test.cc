// The layer table (src/engine/layer_table.h): a spec parsed once into typed
// layer descriptions, its shapes checked, and the fusion pass's plan; with
// the exact one-line errors hostile specs get.
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "anneal/error.h"
#include "anneal/network.h"
#include "engine/layer_table.h"

namespace anneal::engine {
namespace {

// The kUsage message parsing `spec` fails with ("" if it parses).
std::string parse_error(const std::string& spec) {
  try {
    (void)parse_layers(spec);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    return e.what();
  }
  return "";
}

// The kUsage message checking the shapes of `spec` fails with ("" if none).
std::string shape_error(const std::string& spec, const Dims& input, std::uint64_t memory_limit = 0) {
  const std::vector<LayerDesc> layers = parse_layers(spec);
  try {
    (void)check_layer_shapes(layers, input, {memory_limit, 128});
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    return e.what();
  }
  return "";
}

std::vector<LayerPlan> plan(const std::string& spec, const Dims& input, BuildMode mode) {
  const std::vector<LayerDesc> layers = parse_layers(spec);
  return plan_fusion(layers, check_layer_shapes(layers, input, {}), mode);
}

TEST(LayerTable, KnownNamesAreTheTableRowsInOrder) {
  std::vector<std::string> rows;
  for (const LayerKind& k : layer_table()) rows.emplace_back(k.name);
  EXPECT_EQ(rows, known_layer_names());
  EXPECT_EQ(rows, (std::vector<std::string>{"dense", "conv", "maxpool", "avgpool", "flatten", "relu", "gelu", "tanh",
                                            "sigmoid", "dropout", "batchnorm", "layernorm", "periodic",
                                            "ple", "ensemble"}));
  for (const LayerKind& k : layer_table()) {
    EXPECT_NE(k.parse, nullptr) << k.name;
    EXPECT_NE(k.shape, nullptr) << k.name;
    EXPECT_NE(k.train, nullptr) << k.name;
    // Weighted kinds, the periodic embedding (which widens its input
    // 2K-fold) and the ensemble (k rows a sample from it on), and only they,
    // count towards the memory limit.
    EXPECT_EQ(k.weighted || k.name == "periodic" || k.name == "ple" || k.name == "ensemble", k.cost != nullptr)
        << k.name;
    EXPECT_EQ(k.weighted, k.name == "dense" || k.name == "conv") << k.name;
    // Inference-only networks run every kind but the norms, the periodic
    // and piecewise-linear embeddings and the ensemble, fp32 and int8 alike.
    const bool norm = k.name == "batchnorm" || k.name == "layernorm" || k.name == "periodic" || k.name == "ple" ||
                      k.name == "ensemble";
    EXPECT_EQ(k.inference == nullptr, norm) << k.name;
    EXPECT_EQ(k.int8 == nullptr, norm) << k.name;
  }
}

TEST(LayerTable, ParsesEveryKindIntoItsTypedArguments) {
  const std::vector<LayerDesc> l = parse_layers(
      "dense(128) relu dropout(0.1) conv(16, 3, stride=2, pad=1) maxpool(2) avgpool(3,stride=1) "
      "batchnorm layernorm flatten gelu tanh sigmoid dense(10)");
  ASSERT_EQ(l.size(), 13u);
  for (std::size_t i = 0; i < l.size(); ++i) {
    EXPECT_EQ(l[i].spec.position, int(i) + 1);
    EXPECT_EQ(l[i].kind->name, l[i].spec.name);
  }
  EXPECT_EQ(std::get<DenseArgs>(l[0].args).width, 128);
  EXPECT_EQ(std::get<ActivationArgs>(l[1].args).kind, Activation::kRelu);
  EXPECT_DOUBLE_EQ(std::get<DropoutArgs>(l[2].args).p, 0.1);
  const ConvArgs& conv = std::get<ConvArgs>(l[3].args);
  EXPECT_EQ(conv.channels, 16);
  EXPECT_EQ(conv.kernel, 3);
  EXPECT_EQ(conv.stride, 2);
  EXPECT_EQ(conv.pad, 1);
  EXPECT_EQ(l[3].spec.text, "conv(16, 3, stride=2, pad=1)");
  const PoolArgs& max = std::get<PoolArgs>(l[4].args);
  EXPECT_TRUE(max.max);
  EXPECT_EQ(max.kernel, 2);
  EXPECT_EQ(max.stride, 2) << "a pool's stride defaults to its window";
  const PoolArgs& avg = std::get<PoolArgs>(l[5].args);
  EXPECT_FALSE(avg.max);
  EXPECT_EQ(avg.kernel, 3);
  EXPECT_EQ(avg.stride, 1);
  EXPECT_FALSE(std::get<NormArgs>(l[6].args).layer_norm);
  EXPECT_TRUE(std::get<NormArgs>(l[7].args).layer_norm);
  EXPECT_TRUE(std::holds_alternative<FlattenArgs>(l[8].args));
  EXPECT_EQ(std::get<ActivationArgs>(l[9].args).kind, Activation::kGelu);
  EXPECT_EQ(std::get<ActivationArgs>(l[10].args).kind, Activation::kTanh);
  EXPECT_EQ(std::get<ActivationArgs>(l[11].args).kind, Activation::kSigmoid);
  EXPECT_EQ(std::get<DenseArgs>(l[12].args).width, 10);
  // Conv defaults; the largest width accepted.
  const std::vector<LayerDesc> d = parse_layers("conv(1,1) dense(1e9) relu()");
  EXPECT_EQ(std::get<ConvArgs>(d[0].args).stride, 1);
  EXPECT_EQ(std::get<ConvArgs>(d[0].args).pad, 0);
  EXPECT_EQ(std::get<DenseArgs>(d[1].args).width, 1000000000);
  EXPECT_EQ(std::get<ActivationArgs>(d[2].args).kind, Activation::kRelu);
}

TEST(LayerTable, HostileSpecsGetTheirExactErrors) {
  EXPECT_EQ(parse_error(""), "layer spec is empty: give layers such as 'dense(128) relu dense(10)'");
  EXPECT_EQ(parse_error(" \t "), "layer spec is empty: give layers such as 'dense(128) relu dense(10)'");
  EXPECT_EQ(parse_error("dense(8) rleu dense(2)"), "layer spec: unknown layer 'rleu' (layer 2); did you mean 'relu'?");
  EXPECT_EQ(parse_error("transformer(8)"), "layer spec: unknown layer 'transformer' (layer 1)");
  EXPECT_EQ(parse_error("dense(10"), "layer spec: '(' after 'dense' is never closed");
  EXPECT_EQ(parse_error("dense(2) )"), "layer spec: unexpected ')' at character 10 of 'dense(2) )'");
  EXPECT_EQ(parse_error("dense 10)"), "layer spec: expected a space after '10', found ')'");
  EXPECT_EQ(parse_error("(3) dense(2)"), "layer spec: unexpected '(' at character 1 of '(3) dense(2)'");
  EXPECT_EQ(parse_error("dense(10)relu"), "layer spec: expected a space after 'dense(10)', found 'r'");
  EXPECT_EQ(parse_error("dense(abc)"), "layer spec: 'abc' in 'dense(abc)' is not a number");
  EXPECT_EQ(parse_error("dense(1e400)"), "layer spec: '1e400' in 'dense(1e400)' is not a number");
  EXPECT_EQ(parse_error("dense(nan)"), "layer spec: 'nan' in 'dense(nan)' is not a number");
  EXPECT_EQ(parse_error("dense(1,,2)"), "layer spec: empty argument in 'dense(1,,2)'");
  EXPECT_EQ(parse_error("conv(stride=2,4,3)"), "layer spec: positional argument after key=value in 'conv(stride=2,4,3)'");
  EXPECT_EQ(parse_error("dense(0)"), "layer 1 'dense(0)': WIDTH must be a positive integer (usage: dense(WIDTH))");
  EXPECT_EQ(parse_error("dense(8) dense(1e10)"),
            "layer 2 'dense(1e10)': WIDTH must be a positive integer (usage: dense(WIDTH))");
  EXPECT_EQ(parse_error("dense(-3)"), "layer 1 'dense(-3)': WIDTH must be a positive integer (usage: dense(WIDTH))");
  EXPECT_EQ(parse_error("dense(2.5)"), "layer 1 'dense(2.5)': WIDTH must be a positive integer (usage: dense(WIDTH))");
  EXPECT_EQ(parse_error("dense"), "layer 1 'dense': takes 1 positional argument (usage: dense(WIDTH))");
  EXPECT_EQ(parse_error("dense(4,2)"), "layer 1 'dense(4,2)': takes 1 positional argument (usage: dense(WIDTH))");
  EXPECT_EQ(parse_error("dense(4,stride=2)"),
            "layer 1 'dense(4,stride=2)': has no option 'stride' (usage: dense(WIDTH))");
  EXPECT_EQ(parse_error("conv(4)"),
            "layer 1 'conv(4)': takes 2 positional arguments (usage: conv(CHANNELS,KERNEL[,stride=S][,pad=P]))");
  EXPECT_EQ(parse_error("conv(4,3,pading=1)"),
            "layer 1 'conv(4,3,pading=1)': has no option 'pading' (usage: conv(CHANNELS,KERNEL[,stride=S][,pad=P]))");
  EXPECT_EQ(parse_error("conv(4,0)"),
            "layer 1 'conv(4,0)': KERNEL must be a positive integer (usage: conv(CHANNELS,KERNEL[,stride=S][,pad=P]))");
  EXPECT_EQ(parse_error("conv(4,3,stride=0)"),
            "layer 1 'conv(4,3,stride=0)': stride must be an integer >= 1 "
            "(usage: conv(CHANNELS,KERNEL[,stride=S][,pad=P]))");
  EXPECT_EQ(parse_error("conv(4,3,pad=-1)"),
            "layer 1 'conv(4,3,pad=-1)': pad must be an integer >= 0 (usage: conv(CHANNELS,KERNEL[,stride=S][,pad=P]))");
  EXPECT_EQ(parse_error("conv(4,3,pad=3)"),
            "layer 1 'conv(4,3,pad=3)': pad must be smaller than the kernel "
            "(usage: conv(CHANNELS,KERNEL[,stride=S][,pad=P]))");
  EXPECT_EQ(parse_error("maxpool(2,stride=1e12)"),
            "layer 1 'maxpool(2,stride=1e12)': stride must be an integer >= 1 (usage: maxpool(KERNEL[,stride=S]))");
  EXPECT_EQ(parse_error("avgpool(0.5)"),
            "layer 1 'avgpool(0.5)': KERNEL must be a positive integer (usage: avgpool(KERNEL[,stride=S]))");
  EXPECT_EQ(parse_error("relu(2)"), "layer 1 'relu(2)': takes 0 positional arguments (usage: relu)");
  EXPECT_EQ(parse_error("dense(4) tanh(alpha=1)"), "layer 2 'tanh(alpha=1)': has no option 'alpha' (usage: tanh)");
  EXPECT_EQ(parse_error("flatten(1)"), "layer 1 'flatten(1)': takes 0 positional arguments (usage: flatten)");
  EXPECT_EQ(parse_error("batchnorm(1)"), "layer 1 'batchnorm(1)': takes 0 positional arguments (usage: batchnorm)");
  EXPECT_EQ(parse_error("dropout(1)"),
            "layer 1 'dropout(1)': P must be in [0, 1) (usage: dropout(P) with 0 <= P < 1)");
  EXPECT_EQ(parse_error("dropout(-0.1)"),
            "layer 1 'dropout(-0.1)': P must be in [0, 1) (usage: dropout(P) with 0 <= P < 1)");
  EXPECT_EQ(parse_error("dropout"),
            "layer 1 'dropout': takes 1 positional argument (usage: dropout(P) with 0 <= P < 1)");
  // Arguments are checked before any shape: the first bad argument wins.
  EXPECT_EQ(parse_error("conv(4,3) dense(0)"),
            "layer 2 'dense(0)': WIDTH must be a positive integer (usage: dense(WIDTH))");
}

TEST(LayerTable, EnsembleTakesAnOptionalMemberCountOnceOnAFlatInput) {
  const std::vector<LayerDesc> l = parse_layers("ensemble ensemble(4) ensemble(256)");
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(std::get<EnsembleArgs>(l[0].args).members, 32);
  EXPECT_EQ(std::get<EnsembleArgs>(l[1].args).members, 4);
  EXPECT_EQ(std::get<EnsembleArgs>(l[2].args).members, 256);

  const std::string usage = " (usage: ensemble(K) with 1 <= K <= 256 (default 32))";
  EXPECT_EQ(parse_error("ensemble(0)"), "layer 1 'ensemble(0)': K must be a positive integer" + usage);
  EXPECT_EQ(parse_error("ensemble(1.5)"), "layer 1 'ensemble(1.5)': K must be a positive integer" + usage);
  EXPECT_EQ(parse_error("ensemble(257)"), "layer 1 'ensemble(257)': K must be at most 256" + usage);
  EXPECT_EQ(parse_error("ensemble(4,2)"), "layer 1 'ensemble(4,2)': takes 0 to 1 positional arguments" + usage);
  EXPECT_EQ(parse_error("ensemble(4,k=2)"), "layer 1 'ensemble(4,k=2)': has no option 'k'" + usage);

  const std::vector<LayerDesc> net = parse_layers("ensemble(8) dense(32) relu dense(3)");
  const std::vector<LayerShape> shapes = check_layer_shapes(net, Dims{5}, {});
  EXPECT_EQ(shapes[0].output, Dims{5}) << "a sample's rows keep its width";
  EXPECT_EQ(shapes[1].input, Dims{5});
  EXPECT_EQ(shape_error("ensemble(4)", Dims{1, 8, 8}),
            "layer 1 'ensemble(4)' needs a flat input {F} but gets the image {1, 8, 8}; put flatten before it");
  EXPECT_EQ(shape_error("ensemble(4) dense(8) ensemble(2) dense(2)", Dims{3}),
            "layer 3 'ensemble(2)': a network takes one ensemble layer, and layer 1 'ensemble(4)' is one");
  // Every layer after it runs on k rows a sample: dense(4096) on 100
  // features fits 64 MiB alone (6.6 MB for its weights' training state,
  // 4.3 MB of values in batches of 128), not 32 members' rows of it (138 MB).
  const std::uint64_t limit = std::uint64_t{64} << 20;
  EXPECT_EQ(shape_error("dense(4096) dense(2)", Dims{100}, limit), "");
  EXPECT_EQ(shape_error("ensemble(32) dense(4096) dense(2)", Dims{100}, limit)
                .rfind("layer 2 'dense(4096)': training the network up to here needs at least", 0),
            0u);
  // The last dense after it is the members' own, K sets of weights: two
  // members' dense(20000) on 64 inputs need 41.6 MB of weights' training
  // state and 41.4 MB of values (83 MB > 64 MiB); one shared would fit.
  EXPECT_EQ(shape_error("ensemble(2) dense(64) dense(20000)", Dims{100}, limit)
                .rfind("layer 3 'dense(20000)': training the network up to here needs at least", 0),
            0u);
  EXPECT_EQ(shape_error("ensemble(1) dense(64) dense(20000)", Dims{100}, limit), "");
  const std::vector<LayerPlan> heads = plan("ensemble(4) dense(8) relu dense(3) sigmoid", Dims{5}, BuildMode::kTraining);
  EXPECT_EQ(heads[1].member_heads, 0) << "a shared layer";
  EXPECT_EQ(heads[3].member_heads, 4) << "the last dense: the members' own";
  EXPECT_EQ(heads[3].fused, Activation::kSigmoid);
  EXPECT_EQ(plan("dense(8) relu dense(3)", Dims{5}, BuildMode::kTraining)[2].member_heads, 0);
  EXPECT_EQ(inference_blocker(net[0]),
            "layer 1 'ensemble(8)': int8 and sparse inference support dense, conv, pooling, flatten, dropout and "
            "activations, not ensemble");
}

TEST(LayerTable, PeriodicTakesAnOptionalFrequencyCountAndSigma) {
  const std::vector<LayerDesc> l = parse_layers("periodic periodic(8) periodic(4,sigma=0.5) periodic()");
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(std::get<PeriodicArgs>(l[0].args).frequencies, 16);
  EXPECT_DOUBLE_EQ(std::get<PeriodicArgs>(l[0].args).sigma, 0.1);
  EXPECT_EQ(std::get<PeriodicArgs>(l[1].args).frequencies, 8);
  EXPECT_DOUBLE_EQ(std::get<PeriodicArgs>(l[1].args).sigma, 0.1);
  EXPECT_EQ(std::get<PeriodicArgs>(l[2].args).frequencies, 4);
  EXPECT_DOUBLE_EQ(std::get<PeriodicArgs>(l[2].args).sigma, 0.5);
  EXPECT_EQ(std::get<PeriodicArgs>(l[3].args).frequencies, 16);

  const std::string usage = " (usage: periodic(K[,sigma=S]) with K >= 1 (default 16) and S > 0 (default 0.1))";
  EXPECT_EQ(parse_error("periodic(0)"), "layer 1 'periodic(0)': K must be a positive integer" + usage);
  EXPECT_EQ(parse_error("periodic(2.5)"), "layer 1 'periodic(2.5)': K must be a positive integer" + usage);
  EXPECT_EQ(parse_error("periodic(x)"), "layer spec: 'x' in 'periodic(x)' is not a number");
  EXPECT_EQ(parse_error("periodic(4,-1)"), "layer 1 'periodic(4,-1)': takes 0 to 1 positional arguments" + usage);
  EXPECT_EQ(parse_error("periodic(4,sigma=-1)"), "layer 1 'periodic(4,sigma=-1)': sigma must be a number > 0" + usage);
  EXPECT_EQ(parse_error("periodic(4,sigma=0)"), "layer 1 'periodic(4,sigma=0)': sigma must be a number > 0" + usage);
  EXPECT_EQ(parse_error("periodic(4,scale=1)"), "layer 1 'periodic(4,scale=1)': has no option 'scale'" + usage);

  const std::vector<LayerDesc> net = parse_layers("periodic(8) dense(32) relu dense(3)");
  const std::vector<LayerShape> shapes = check_layer_shapes(net, Dims{5}, {});
  EXPECT_EQ(shapes[0].output, Dims{80});
  EXPECT_EQ(shapes[1].input, Dims{80});
  EXPECT_EQ(shape_error("periodic(4)", Dims{1, 8, 8}),
            "layer 1 'periodic(4)' needs a flat input {F} but gets the image {1, 8, 8}; put flatten before it");
  // Its 2K-fold widening counts towards the memory limit.
  EXPECT_EQ(shape_error("periodic(1e6) dense(2)", Dims{1000}, std::uint64_t{1} << 30).rfind("layer 1 'periodic(1e6)': training the network up to here needs at least", 0), 0u);
  // Nothing fuses into it, and an inference-only network cannot build it.
  const std::vector<LayerPlan> p = plan("periodic(4) relu dense(2)", Dims{3}, BuildMode::kTraining);
  EXPECT_FALSE(p[1].absorbed);
  EXPECT_EQ(inference_blocker(net[0]),
            "layer 1 'periodic(8)': int8 and sparse inference support dense, conv, pooling, flatten, dropout and "
            "activations, not periodic");
}

TEST(LayerTable, PleTakesAnOptionalBinCountAndComesFirst) {
  const std::vector<LayerDesc> l = parse_layers("ple ple(8) ple() ple(256)");
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(std::get<PiecewiseLinearArgs>(l[0].args).bins, 16);
  EXPECT_EQ(std::get<PiecewiseLinearArgs>(l[1].args).bins, 8);
  EXPECT_EQ(std::get<PiecewiseLinearArgs>(l[2].args).bins, 16);
  EXPECT_EQ(std::get<PiecewiseLinearArgs>(l[3].args).bins, 256);

  const std::string usage = " (usage: ple(T) with 1 <= T <= 256 (default 16), the network's first layer)";
  EXPECT_EQ(parse_error("ple(0)"), "layer 1 'ple(0)': T must be a positive integer" + usage);
  EXPECT_EQ(parse_error("ple(2.5)"), "layer 1 'ple(2.5)': T must be a positive integer" + usage);
  EXPECT_EQ(parse_error("ple(257)"), "layer 1 'ple(257)': T must be at most 256" + usage);
  EXPECT_EQ(parse_error("ple(x)"), "layer spec: 'x' in 'ple(x)' is not a number");
  EXPECT_EQ(parse_error("ple(4,2)"), "layer 1 'ple(4,2)': takes 0 to 1 positional arguments" + usage);
  EXPECT_EQ(parse_error("ple(4,bins=2)"), "layer 1 'ple(4,bins=2)': has no option 'bins'" + usage);

  const std::vector<LayerDesc> net = parse_layers("ple(8) dense(32) relu dense(3)");
  const std::vector<LayerShape> shapes = check_layer_shapes(net, Dims{5}, {});
  EXPECT_EQ(shapes[0].output, Dims{40});
  EXPECT_EQ(shapes[1].input, Dims{40});
  EXPECT_EQ(shape_error("ple(4)", Dims{1, 8, 8}), "layer 1 'ple(4)' needs a flat input {F} but gets the image {1, 8, 8}");
  // Its edges are fitted on the network's input: nowhere but first.
  EXPECT_EQ(shape_error("dense(4) ple(4) dense(2)", Dims{3}),
            "layer 2 'ple(4)' must be the network's first layer: its bins are fitted on the network's input");
  EXPECT_EQ(shape_error("flatten ple(4) dense(2)", Dims{3}),
            "layer 2 'ple(4)' must be the network's first layer: its bins are fitted on the network's input");
  // Its T-fold widening counts towards the memory limit.
  EXPECT_EQ(shape_error("ple(256) dense(2)", Dims{100000}, std::uint64_t{1} << 30)
                .rfind("layer 1 'ple(256)': training the network up to here needs at least", 0),
            0u);
  EXPECT_EQ(inference_blocker(net[0]),
            "layer 1 'ple(8)': int8 and sparse inference support dense, conv, pooling, flatten, dropout and "
            "activations, not ple");
}

TEST(LayerTable, ShapesAreCheckedLayerByLayer) {
  const std::vector<LayerDesc> l = parse_layers("conv(4,3,pad=1) relu maxpool(2) conv(6,2,stride=2) avgpool(2,stride=1) dense(10)");
  const std::vector<LayerShape> s = check_layer_shapes(l, Dims{1, 8, 8}, {});
  ASSERT_EQ(s.size(), l.size());
  EXPECT_EQ(s[0].output, (Dims{4, 8, 8}));
  EXPECT_EQ(s[1].output, (Dims{4, 8, 8}));
  EXPECT_EQ(s[2].output, (Dims{4, 4, 4}));
  EXPECT_EQ(s[3].output, (Dims{6, 2, 2}));
  EXPECT_EQ(s[4].output, (Dims{6, 1, 1}));
  EXPECT_EQ(s[5].input, (Dims{6, 1, 1}));
  EXPECT_EQ(s[5].output, Dims{10});

  EXPECT_EQ(shape_error("conv(4,3) dense(2)", Dims{64}),
            "layer 1 'conv(4,3)' needs an image input {C, H, W} but gets {64} (a flat input)");
  EXPECT_EQ(shape_error("dense(8) maxpool(2)", Dims{1, 8, 8}),
            "layer 2 'maxpool(2)' needs an image input {C, H, W} but gets {8} (a flat input)");
  EXPECT_EQ(shape_error("conv(4,9)", Dims{1, 8, 8}), "layer 1 'conv(4,9)': kernel 9 is larger than its padded input 8x8");
  EXPECT_EQ(shape_error("conv(4,3,stride=99) avgpool(2)", Dims{1, 8, 8}),
            "layer 2 'avgpool(2)': window 2 is larger than its input 1x1");
  EXPECT_EQ(shape_error("layernorm", Dims{1, 8, 8}),
            "layer 1 'layernorm' needs a flat input {F} but gets the image {1, 8, 8}; put flatten before it");
  EXPECT_EQ(shape_error("dense(1e9) dense(3)", Dims{4}, std::uint64_t{1} << 30),
            "layer 1 'dense(1e9)': training the network up to here needs at least 1.104e+12 bytes "
            "(5e+09 parameters and 1e+09 values a sample in batches of 128), more than the limit of "
            "1073741824 bytes");
  EXPECT_EQ(shape_error("dense(1e9) dense(3)", Dims{4}), "") << "no limit: unchecked";
}

// What the search weighs a network candidate's time by: each layer's
// products for one sample, counted by hand here.
TEST(LayerTable, MultiplyAddsCountEachLayersProductsForOneSample) {
  EXPECT_DOUBLE_EQ(network_multiply_adds("dense(64) relu dense(64) relu dense(3)", Dims{10}),
                   10 * 64 + 64 * 64 + 64 * 3);
  EXPECT_DOUBLE_EQ(network_multiply_adds("dense(8) dropout(0.5) layernorm tanh dense(2)", Dims{5}), 5 * 8 + 8 * 2)
      << "activations, dropout and norms are not counted";
  // The ensemble's scales (32 x 10), then every layer on 32 rows a sample.
  EXPECT_DOUBLE_EQ(network_multiply_adds("ensemble(32) dense(256) relu dense(256) relu dense(3)", Dims{10}),
                   32 * 10 + 32.0 * (10 * 256 + 256 * 256 + 256 * 3));
  EXPECT_DOUBLE_EQ(network_multiply_adds("dense(16) ensemble(4) dense(2)", Dims{10}), 10 * 16 + 4 * 16 + 4 * 16 * 2)
      << "the layers before the ensemble run once a sample";
  // conv(4,3,pad=1) on 1x8x8: 4x8x8 outputs, each a 1x3x3 window; maxpool
  // halves it to 4x4x4 = 64 values for the dense layer.
  EXPECT_DOUBLE_EQ(network_multiply_adds("conv(4,3,pad=1) relu maxpool(2) flatten dense(3)", Dims{1, 8, 8}),
                   4 * 8 * 8 * 9 + 64 * 3);
  EXPECT_DOUBLE_EQ(network_multiply_adds("periodic(16) dense(4)", Dims{3}), 3 * 16 + 3 * 32 * 4);
  EXPECT_DOUBLE_EQ(network_multiply_adds("ple(8) dense(4)", Dims{3}), 3 * 8 + 3 * 8 * 4);
  try {
    (void)network_multiply_adds("conv(4,3) dense(2)", Dims{10});
    ADD_FAILURE() << "a conv on a flat input has no count";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
  }
}

TEST(LayerFusion, TrainingFusesActivationsAndLetsTheMaxpoolMaskRelu) {
  const std::vector<LayerPlan> p =
      plan("conv(4,3) relu maxpool(2) conv(4,1) gelu dense(8) tanh dense(8) relu relu dense(3)", Dims{1, 8, 8},
           BuildMode::kTraining);
  ASSERT_EQ(p.size(), 11u);
  EXPECT_EQ(p[0].fused, Activation::kRelu);
  EXPECT_TRUE(p[0].relu_masked_by_pool);
  EXPECT_TRUE(p[1].absorbed);
  EXPECT_TRUE(p[2].pool_masks_relu);
  EXPECT_EQ(p[2].offered_pool, 0) << "pools are offered to int8 convs only";
  EXPECT_EQ(p[3].fused, Activation::kNone) << "gelu has no fused form";
  EXPECT_FALSE(p[4].absorbed);
  EXPECT_TRUE(p[5].flatten_first) << "a dense on an image flattens it first";
  EXPECT_EQ(p[5].fused, Activation::kTanh);
  EXPECT_TRUE(p[6].absorbed);
  EXPECT_FALSE(p[7].flatten_first);
  EXPECT_EQ(p[7].fused, Activation::kRelu);
  EXPECT_TRUE(p[8].absorbed);
  EXPECT_FALSE(p[9].absorbed) << "a second relu is a layer of its own";
  EXPECT_TRUE(p[10].last_weighted);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_FALSE(p[i].last_weighted) << i;
  // A maxpool after conv relu with something in between masks nothing.
  const std::vector<LayerPlan> q = plan("conv(4,3) relu dropout(0.1) maxpool(2) conv(2,1) tanh maxpool(2)",
                                        Dims{1, 8, 8}, BuildMode::kTraining);
  EXPECT_FALSE(q[0].relu_masked_by_pool);
  EXPECT_FALSE(q[3].pool_masks_relu);
  EXPECT_FALSE(q[4].relu_masked_by_pool) << "tanh: the pool does not apply its gradient";
  EXPECT_FALSE(q[6].pool_masks_relu);
}

TEST(LayerFusion, Int8OffersPoolingsWhoseWindowIsTheirStride) {
  const std::vector<LayerPlan> p =
      plan("conv(4,3,pad=1) relu maxpool(2) conv(4,3) avgpool(2,stride=1) conv(2,1) tanh avgpool(1) flatten dense(3)",
           Dims{1, 8, 8}, BuildMode::kInt8);
  EXPECT_EQ(p[0].offered_pool, 2);
  EXPECT_TRUE(p[0].offered_pool_max);
  EXPECT_FALSE(p[0].relu_masked_by_pool) << "int8 has no backward";
  EXPECT_FALSE(p[2].pool_masks_relu);
  EXPECT_EQ(p[3].offered_pool, 0) << "stride 1 is not the window 2";
  EXPECT_FALSE(p[3].offered_pool_max);
  EXPECT_EQ(p[5].fused, Activation::kTanh);
  EXPECT_EQ(p[5].offered_pool, 1) << "past the fused activation";
  EXPECT_FALSE(p[5].offered_pool_max);
  EXPECT_TRUE(p[8].deferred_flatten) << "an int8 dense reads the image itself";
  EXPECT_FALSE(p[8].absorbed);
  EXPECT_TRUE(p[9].last_weighted);
  // Fp32 inference offers nothing and flattens for real.
  const std::vector<LayerPlan> f =
      plan("conv(4,3,pad=1) relu maxpool(2) flatten dense(3)", Dims{1, 8, 8}, BuildMode::kInference);
  EXPECT_EQ(f[0].offered_pool, 0);
  EXPECT_FALSE(f[0].relu_masked_by_pool);
  EXPECT_FALSE(f[3].deferred_flatten);
}

TEST(LayerFusion, AFlattenOfAFlatInputBuildsNothing) {
  const std::vector<LayerPlan> p = plan("flatten dense(4) flatten relu flatten dense(2)", Dims{6}, BuildMode::kInt8);
  EXPECT_TRUE(p[0].absorbed);
  EXPECT_FALSE(p[1].flatten_first);
  EXPECT_EQ(p[1].fused, Activation::kNone) << "a flatten stands between dense and relu";
  EXPECT_TRUE(p[2].absorbed);
  EXPECT_FALSE(p[3].absorbed);
  EXPECT_TRUE(p[4].absorbed);
  EXPECT_TRUE(p[5].last_weighted);
}

}  // namespace
}  // namespace anneal::engine
