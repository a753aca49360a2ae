// The model and checkpoint test vectors of docs/STORE.md ("Test vectors")
// against the code: each documented blob must be byte for byte what
// encode_model / encode_checkpoint (and Trainer::save_state) write for the
// same tiny model, and must decode to it. A change to the format or to the
// document without the other fails here.
//
// ANNEAL_WRITE_VECTORS=DIR writes the blobs the code produces to DIR/NAME.bin
// (to regenerate the document's vectors with tests/format/read_model.py
// --annotate).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/hash.h"
#include "anneal/preprocess.h"
#include "anneal/trainer.h"
#include "anneal/model_file.h"
#include "anneal/model_kind.h"
#include "anneal/scoring.h"
#include "test_util.h"

namespace anneal {
namespace {
using nlohmann::json;

// The vectors' shared pieces: a numeric column "x" and a two-category
// column "color" into a dense(2) over the transformed [3] input, labels
// "no"/"yes".
const char* kFeatures =
    R"({"input_shape":[2],"columns":[{"column":"x","width":1,"mean":1.5,"scale":0.5},)"
    R"({"column":"color","width":1,"one_hot":["red","blue"]}]})";
const char* kLabels = R"({"column":"label","classification":true,"categorical":true,"classes":["no","yes"]})";
const char* kColumns =
    R"([{"name":"x","type":"numeric","missing":0,"count":4,"min":1,"max":2,"mean":1.5,"std":0.5},)"
    R"({"name":"color","type":"categorical","missing":0,"count":4,"min":0,"max":1,"mean":0.5,"std":0.5,"categories":["red","blue"]},)"
    R"({"name":"label","type":"categorical","missing":0,"count":4,"min":0,"max":1,"mean":0.5,"std":0.5,"categories":["no","yes"]}])";
const std::vector<float> kWeight = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f, -0.5f};
const std::vector<float> kBias = {0.125f, -0.25f};

// The document's vectors: NAME -> bytes. A vector is a fenced block whose
// first line is "vector NAME"; then "magic HEX...", "length HEX...",
// "header JSON" and payload lines "OFFSET HEX...". '#' starts a comment.
std::map<std::string, std::string> document_vectors() {
  const auto path = std::filesystem::path(ANNEAL_TEST_DATA_DIR) / ".." / ".." / "docs" / "STORE.md";
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::map<std::string, std::string> out;
  std::string line, name;
  bool fenced = false;
  auto hex_bytes = [](std::istringstream& words, std::string& into) {
    std::string w;
    while (words >> w) {
      if (w.size() != 2 || !std::isxdigit(static_cast<unsigned char>(w[0])) ||
          !std::isxdigit(static_cast<unsigned char>(w[1])))
        break;
      into += char(std::stoi(w, nullptr, 16));
    }
  };
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      name.clear();
      continue;
    }
    if (!fenced) continue;
    if (line.rfind("vector ", 0) == 0) {
      name = line.substr(7);
      out[name];
      continue;
    }
    if (name.empty()) continue;
    if (line.rfind("header ", 0) == 0) {  // the header's bytes, verbatim, over one or more lines
      out[name] += line.substr(7);
      continue;
    }
    const std::string code = line.substr(0, line.find('#'));
    std::istringstream words(code);
    std::string first;
    if (!(words >> first)) continue;
    if (first == "magic" || first == "length" || first.size() == 4) hex_bytes(words, out[name]);
  }
  return out;
}

std::string hex(std::string_view bytes) {
  std::string s;
  char buf[4];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    s += buf;
  }
  return s;
}

// A first difference, readable.
std::string first_difference(const std::string& want, const std::string& got) {
  std::size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  return "sizes " + std::to_string(want.size()) + " / " + std::to_string(got.size()) + ", first difference at byte " +
         std::to_string(i) + ": document " + hex(std::string_view(want).substr(i, 16)) + " code " +
         hex(std::string_view(got).substr(i, 16));
}

void maybe_write(const std::string& name, const std::string& bytes) {
  const char* dir = std::getenv("ANNEAL_WRITE_VECTORS");
  if (dir == nullptr) return;
  std::ofstream(std::filesystem::path(dir) / (name + ".bin"), std::ios::binary) << bytes;
}

runs::ModelFile shell() {
  runs::ModelFile m;
  m.features = FeatureTransform::from_json(json::parse(kFeatures));
  m.labels = LabelEncoding::from_json(json::parse(kLabels));
  m.loss = LossKind::kSoftmaxCrossEntropy;
  m.layers = "dense(2)";
  m.input_shape = {3};
  m.outputs = 2;
  m.dataset_columns = columns_from_json(json::parse(kColumns));
  m.label_column = "label";
  m.dataset_format = "csv";
  return m;
}

// The tiny network as a Trainer (adam: moments in the state), weights set
// to the vectors' values; two training rows.
struct TinyTrainer {
  std::vector<float> x = {1, 0, 1, 2, 1, 0}, y = {0, 1};
  NullReporter reporter;
  std::unique_ptr<Backend> backend = test::cpu_backend();
  std::unique_ptr<Trainer> trainer;
  TinyTrainer() {
    TrainerConfig c;
    c.layers = "dense(2)";
    c.classes = 2;
    c.batch = 2;
    c.epochs = 1;
    c.seed = 7;
    trainer = std::make_unique<Trainer>(c, *backend, DataView{x, y, {3}}, std::nullopt, reporter);
    trainer->load_weights({{"0.dense.weight", kWeight}, {"0.dense.bias", kBias}});
  }
};

runs::ModelFile fp32_model(TinyTrainer& t) {
  runs::ModelFile m = shell();
  m.tensors = runs::export_weights(*t.trainer);
  m.weights_hash = t.trainer->weights_hash();
  return m;
}

runs::NamedTensor tensor(std::string name, std::vector<std::int64_t> dims, std::vector<float> values,
                         runs::TensorEncoding encoding = runs::TensorEncoding::kF32) {
  runs::NamedTensor t;
  t.name = std::move(name);
  t.dims = std::move(dims);
  t.values = std::move(values);
  t.encoding = encoding;
  return t;
}

runs::ModelFile int8_model() {
  runs::ModelFile m = shell();
  runs::NamedTensor w = tensor("0.dense.weight", {2, 3}, {}, runs::TensorEncoding::kS8);
  w.q = {32, -64, 127, 32, 127, -64};
  w.scales = {0.015625f, 0.0078125f};
  for (std::size_t i = 0; i < w.q.size(); ++i) w.values.push_back(float(w.q[i]) * w.scales[i / 3]);
  m.tensors = {w, tensor("0.dense.bias", {2}, kBias)};
  m.int8 = true;
  m.activation_scales["0.dense"] = {0.03125f, 0.0625f};
  m.compression = {{"operation", "quantize"}, {"method", "minmax"}, {"calibration_data", "tiny@v1"},
                   {"calibration_samples", 4}, {"qat_epochs", 0}};
  m.weights_hash = runs::model_weights_hash(m);
  return m;
}

runs::ModelFile pruned_model() {
  runs::ModelFile m = shell();
  m.tensors = {tensor("0.dense.weight", {2, 3}, {0.5f, 0.0f, 2.0f, 0.0f, 1.0f, 0.0f}, runs::TensorEncoding::kBitmask),
               tensor("0.dense.bias", {2}, kBias)};
  m.compression = {{"operation", "prune"}, {"structured", false}, {"target_sparsity", 0.5},
                   {"schedule", "oneshot"}, {"scope", "layer"}, {"finetune_epochs", 0}};
  m.weights_hash = runs::model_weights_hash(m);
  return m;
}

runs::Checkpoint checkpoint(TinyTrainer& t) {
  runs::Checkpoint c;
  c.header = {{"features", json::parse(kFeatures)}, {"labels", json::parse(kLabels)}};
  c.header["run"] = 1;
  c.header["step"] = t.trainer->step();
  c.state = t.trainer->save_state();
  return c;
}

void expect_document_has(const std::string& name, const std::string& bytes) {
  maybe_write(name, bytes);
  const auto vectors = document_vectors();
  auto it = vectors.find(name);
  ASSERT_NE(it, vectors.end()) << "docs/STORE.md has no vector " << name;
  EXPECT_TRUE(it->second == bytes) << "docs/STORE.md vector " << name << " differs from the code's bytes: "
                                   << first_difference(it->second, bytes);
}

TEST(ModelFormat, Fp32VectorIsWhatTheCodeWrites) {
  TinyTrainer t;
  expect_document_has("model-fp32", runs::encode_model(fp32_model(t)));
}

TEST(ModelFormat, Int8VectorIsWhatTheCodeWrites) { expect_document_has("model-int8", runs::encode_model(int8_model())); }

TEST(ModelFormat, BitmaskVectorIsWhatTheCodeWrites) {
  expect_document_has("model-bitmask", runs::encode_model(pruned_model()));
}

TEST(ModelFormat, CheckpointVectorIsWhatTheCodeWrites) {
  TinyTrainer t;
  expect_document_has("checkpoint", runs::encode_checkpoint(checkpoint(t)));
}

// The documented bytes decode to the documented meaning.
TEST(ModelFormat, DocumentVectorsDecode) {
  const auto vectors = document_vectors();
  ASSERT_TRUE(vectors.count("model-fp32") && vectors.count("model-int8") && vectors.count("model-bitmask") &&
              vectors.count("checkpoint"));
  const runs::ModelFile f1 = runs::decode_model(vectors.at("model-fp32"), "doc");
  ASSERT_EQ(f1.tensors.size(), 2u);
  EXPECT_EQ(f1.tensors[0].name, "0.dense.weight");
  EXPECT_EQ(f1.tensors[0].dims, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(f1.tensors[0].values, kWeight);
  EXPECT_EQ(f1.tensors[1].name, "0.dense.bias");
  EXPECT_EQ(f1.tensors[1].values, kBias);
  EXPECT_EQ(f1.layers, "dense(2)");
  EXPECT_EQ(f1.features.output_width(), 3);
  TinyTrainer t;
  EXPECT_EQ(f1.weights_hash, t.trainer->weights_hash());

  // The example row of the document: x = 2, color = blue -> [1, 0, 1].
  TransformCounts counts;
  const std::vector<float> input = f1.features.apply(std::vector<float>{2.0f, 1.0f}, counts);
  EXPECT_EQ(input, (std::vector<float>{1.0f, 0.0f, 1.0f}));
  // The document's logits for that row, through softmax. anneal's softmax
  // (exp of oneDNN's log-softmax) is a few 1e-6 off the exact value.
  auto softmax0 = [](double a, double b) { return 1.0 / (1.0 + std::exp(b - a)); };
  const std::unique_ptr<Backend> backend = test::cpu_backend();
  runs::Predictor predictor(f1, *backend);
  std::vector<float> p = predictor.predict(input);
  EXPECT_NEAR(p[0], softmax0(2.625, -0.5), 1e-5);
  EXPECT_NEAR(p[0] + p[1], 1.0, 1e-5);

  const runs::ModelFile q = runs::decode_model(vectors.at("model-int8"), "doc");
  EXPECT_TRUE(q.int8);
  EXPECT_EQ(q.tensors[0].encoding, runs::TensorEncoding::kS8);
  EXPECT_EQ(q.tensors[0].values, (std::vector<float>{0.5f, -1.0f, 1.984375f, 0.25f, 0.9921875f, -0.5f}));
  EXPECT_EQ(q.activation_scales.at("0.dense").input, 0.03125f);
  runs::Predictor int8_predictor(q, *backend);
  ASSERT_TRUE(int8_predictor.inference_only());
  p = int8_predictor.predict(input);
  EXPECT_NEAR(p[0], softmax0(2.609375, -0.5), 1e-5);  // the document's int8 arithmetic

  const runs::ModelFile b = runs::decode_model(vectors.at("model-bitmask"), "doc");
  EXPECT_EQ(b.tensors[0].encoding, runs::TensorEncoding::kBitmask);
  EXPECT_EQ(b.tensors[0].values, (std::vector<float>{0.5f, 0.0f, 2.0f, 0.0f, 1.0f, 0.0f}));
  runs::Predictor sparse_predictor(b, *backend);
  p = sparse_predictor.predict(input);
  EXPECT_NEAR(p[0], softmax0(2.625, -0.25), 1e-5);

  const runs::Checkpoint c = runs::decode_checkpoint(vectors.at("checkpoint"), "doc");
  EXPECT_EQ(c.header.at("run"), 1);
  TinyTrainer resumed;
  resumed.trainer->load_state(c.state);  // the documented state is one this trainer accepts
  EXPECT_EQ(resumed.trainer->values("0.dense.weight"), kWeight);
}

// Regressions: a crafted blob must be refused by decode_model, never read
// past a vector's end or allocate what its dims claim.
TEST(ModelFormat, Format1TensorWithFewerValuesThanItsDimsIsCorrupt) {
  TinyTrainer t;
  runs::ModelFile m = fp32_model(t);
  m.tensors[0].values.pop_back();  // encode_model writes count = values.size()
  try {
    runs::decode_model(runs::encode_model(m), "crafted");
    FAIL() << "decoded a tensor with fewer values than its dims";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << e.what();
  }
}

TEST(ModelFormat, Format2DimsLargerThanTheBytesAreCorruptBeforeAllocating) {
  // The documented bitmask model with its weight's dims edited to claim
  // 2^40 elements in a few bytes: refused before its values are allocated
  // (4 TiB). "ANMODEL1" | u64 LE header length | header JSON | tensors.
  std::string bytes = runs::encode_model(pruned_model());
  const std::string from = "\"dims\":[2,3]", to = "\"dims\":[1048576,1048576]";
  const std::size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data() + 8, 8);
  header += to.size() - from.size();
  bytes.replace(at, from.size(), to);
  std::memcpy(bytes.data() + 8, &header, 8);
  try {
    runs::decode_model(bytes, "crafted");
    FAIL() << "decoded a tensor whose dims exceed its bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << e.what();
  }
}

// The model kinds (anneal/model_kind.h): each kind's stored name finds
// it, a linear model keeps its bytes, and a kind this anneal does not know
// is refused as damaged.
TEST(ModelKinds, StoredNamesFindTheirKinds) {
  EXPECT_EQ(runs::model_kind(runs::ModelKindId::kNetwork).name(), "network");
  EXPECT_EQ(runs::model_kind(runs::ModelKindId::kLinear).name(), "linear");
  EXPECT_EQ(runs::model_kind(runs::ModelKindId::kTrees).name(), "trees");
  EXPECT_EQ(runs::model_kind(runs::ModelKindId::kEnsemble).name(), "ensemble");
  for (runs::ModelKindId id : {runs::ModelKindId::kNetwork, runs::ModelKindId::kLinear, runs::ModelKindId::kTrees,
                               runs::ModelKindId::kEnsemble})
    EXPECT_EQ(runs::model_kind_named(runs::model_kind(id).name()), id);
  EXPECT_FALSE(runs::model_kind_named("forest"));
  EXPECT_EQ(runs::model_kind_names(), "network, linear, trees, ensemble");
}

// The tiny model's features through a logistic regression: one row of
// inputs + 1 weights (the intercept last) for two classes.
runs::ModelFile linear_model() {
  runs::ModelFile m = shell();
  m.kind = runs::ModelKindId::kLinear;
  m.layers.clear();
  m.linear_model.classification = true;
  m.linear_model.inputs = m.features.output_width();
  m.linear_model.classes = 2;
  for (std::int64_t c = 0; c <= m.linear_model.inputs; ++c) m.linear_model.weights.push_back(0.25 * double(c) - 0.5);
  m.linear_model.l2 = 1;
  m.linear_model.iterations = 4;
  m.weights_hash = runs::model_weights_hash(m);
  return m;
}

TEST(ModelKinds, LinearModelKeepsItsBytesAndPredictsAsLinearModel) {
  const runs::ModelFile m = linear_model();
  const std::string bytes = runs::encode_model(m);
  EXPECT_NE(bytes.find(R"("kind":"linear")"), std::string::npos);
  EXPECT_NE(bytes.find(R"("format":3)"), std::string::npos);
  EXPECT_EQ(bytes.find(R"("tensors")"), std::string::npos);  // no tensors, no payload
  const runs::ModelFile back = runs::decode_model(bytes, "linear");
  EXPECT_EQ(back.kind, runs::ModelKindId::kLinear);
  EXPECT_EQ(back.linear_model.weights, m.linear_model.weights);
  EXPECT_TRUE(runs::encode_model(back) == bytes) << first_difference(runs::encode_model(back), bytes);

  const runs::ModelKind& kind = runs::model_kind(back);
  EXPECT_EQ(kind.input_shape(back), std::vector<std::int64_t>{back.features.output_width()});
  EXPECT_EQ(kind.prediction_loss(back), LossKind::kSoftmaxCrossEntropy);  // already probabilities
  EXPECT_EQ(kind.precision(back), "fp64 (linear)");
  const std::unique_ptr<Backend> backend = test::cpu_backend();
  runs::Predictor predictor(back, *backend);
  const std::vector<float> rows = {1, 0, 1, 2, 1, 0};
  EXPECT_EQ(predictor.predict(rows), m.linear_model.predict(rows));
  EXPECT_EQ(predictor.engine(), "linear");
  EXPECT_FALSE(predictor.inference_only());
}

TEST(ModelKinds, UnknownKindIsCorrupt) {
  std::string bytes = runs::encode_model(linear_model());
  const std::string from = R"("kind":"linear")", to = R"("kind":"forest")";  // same length: the header's stays right
  const std::size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, from.size(), to);
  try {
    runs::decode_model(bytes, "model m@v1");
    FAIL() << "decoded a model of an unknown kind";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << e.what();
    EXPECT_STREQ(e.what(), "model m@v1: model kind 'forest' is not one this anneal reads (network, linear, trees, ensemble)");
  }
}

// The tiny model's features through boosted trees on a few made-up rows
// (binary: P(class 1)).
runs::ModelFile tree_model() {
  runs::ModelFile m = shell();
  m.kind = runs::ModelKindId::kTrees;
  m.layers.clear();
  const std::int64_t width = m.features.output_width();
  std::vector<float> x, y;
  for (int r = 0; r < 40; ++r) {
    for (std::int64_t c = 0; c < width; ++c) x.push_back(static_cast<float>((r * 7 + c * 3) % 5) - 2.0f);
    y.push_back(x[static_cast<std::size_t>(r * width)] > 0 ? 1.0f : 0.0f);
  }
  TreeParams params;
  params.max_rounds = 8;
  params.max_depth = 2;
  const TreeRows rows{x, y, {}, 40, width};
  const BoostedTrees trees = BoostedTrees::train(TreeObjective::kBinaryLogistic, 2, rows, nullptr, params);
  const std::vector<std::uint8_t> bytes = trees.save();
  m.trees.objective = TreeObjective::kBinaryLogistic;
  m.trees.classes = 2;
  m.trees.booster.assign(bytes.begin(), bytes.end());
  m.trees.rounds = trees.rounds();
  m.trees.importance = trees.importance();
  m.outputs = 1;
  m.weights_hash = runs::model_weights_hash(m);
  return m;
}

TEST(ModelKinds, TreeModelKeepsXGBoostsBytesAndPredictsAsTheBooster) {
  const runs::ModelFile m = tree_model();
  const std::string bytes = runs::encode_model(m);
  EXPECT_NE(bytes.find(R"("kind":"trees")"), std::string::npos);
  // The payload is XGBoost's model, whole, at the end of the file.
  ASSERT_GE(bytes.size(), m.trees.booster.size());
  EXPECT_EQ(bytes.substr(bytes.size() - m.trees.booster.size()), m.trees.booster);
  const runs::ModelFile back = runs::decode_model(bytes, "trees");
  EXPECT_EQ(back.kind, runs::ModelKindId::kTrees);
  EXPECT_EQ(back.trees.booster, m.trees.booster);
  EXPECT_EQ(back.trees.importance, m.trees.importance);
  EXPECT_TRUE(runs::encode_model(back) == bytes) << first_difference(runs::encode_model(back), bytes);
  const runs::ModelKind& kind = runs::model_kind(back);
  EXPECT_EQ(kind.prediction_loss(back), LossKind::kBinaryCrossEntropy);  // P(class 1)
  const std::unique_ptr<Backend> backend = test::cpu_backend();
  runs::Predictor predictor(back, *backend);
  const std::vector<float> rows = {1, 0, 1, -2, 1, 0};
  const std::span<const std::uint8_t> booster(reinterpret_cast<const std::uint8_t*>(m.trees.booster.data()),
                                              m.trees.booster.size());
  const BoostedTrees direct = BoostedTrees::load(booster, TreeObjective::kBinaryLogistic, 2, 3, "direct");
  EXPECT_EQ(predictor.predict(rows), direct.predict(rows, 2));
  EXPECT_EQ(predictor.engine(), "trees");
}

TEST(ModelKinds, DamagedTreeBytesAreCorruptWhenTheModelIsRead) {
  const std::string bytes = runs::encode_model(tree_model());
  auto expect_corrupt = [](const std::string& damaged, const char* what) {
    try {
      runs::decode_model(damaged, "model t@v1");
      ADD_FAILURE() << what << ": decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << what << ": " << e.what();
    }
  };
  expect_corrupt(bytes.substr(0, bytes.size() - 10), "truncated payload");
  std::string scrambled = bytes;
  for (std::size_t i = scrambled.size() - 200; i < scrambled.size() - 100; ++i) scrambled[i] = static_cast<char>(i * 31);
  expect_corrupt(scrambled, "scrambled payload");
  // Any changed byte of the booster is caught by the weights hash before
  // XGBoost reads it: its UBJSON reader reads past its buffer on damaged
  // lengths (the fuzzer's tests/fuzz/regressions/model/trees_booster_damaged).
  for (const std::size_t from_end : {std::size_t{1}, std::size_t{57}, std::size_t{300}}) {
    std::string changed = bytes;
    changed[changed.size() - from_end] ^= 0x11;
    try {
      runs::decode_model(changed, "model t@v1");
      ADD_FAILURE() << "byte " << from_end << " from the end changed: decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << e.what();
      EXPECT_NE(std::string(e.what()).find("do not match its weights_hash"), std::string::npos) << e.what();
    }
  }
}


// The one-line reasons quantize, prune and warm start give (the commands
// add the operation and the model).
TEST(ModelKinds, WhatEachKindCanBeDerivedFrom) {
  const runs::ModelFile linear = linear_model();
  const runs::ModelKind& l = runs::model_kind(linear);
  EXPECT_EQ(l.why_not_quantizable(linear), "a linear model has no network to quantize");
  EXPECT_EQ(l.why_not_prunable(linear), "a linear model has no network to prune");
  EXPECT_EQ(l.why_not_warm_start_parent(linear, runs::ModelKindId::kNetwork), "it is a linear model, without network weights to start from");
  const runs::ModelFile trees = tree_model();
  const runs::ModelKind& tk = runs::model_kind(trees);
  EXPECT_EQ(tk.why_not_quantizable(trees), "a tree model has no network weights to quantize");
  EXPECT_EQ(tk.why_not_prunable(trees), "a tree model has no network weights to prune");
  EXPECT_EQ(tk.why_not_warm_start_parent(trees, runs::ModelKindId::kNetwork),
            "it is a tree model; a network cannot start from its trees");
  EXPECT_EQ(tk.why_not_warm_start_parent(trees, runs::ModelKindId::kTrees), "");  // continued boosting

  TinyTrainer t;
  const runs::ModelFile fp32 = fp32_model(t), int8 = int8_model(), pruned = pruned_model();
  const runs::ModelKind& n = runs::model_kind(fp32);
  EXPECT_EQ(n.name(), "network");
  for (const runs::ModelFile* m : {&fp32, &pruned}) {
    EXPECT_EQ(n.why_not_quantizable(*m), "");
    EXPECT_EQ(n.why_not_prunable(*m), "");
  }
  EXPECT_EQ(n.why_not_warm_start_parent(fp32, runs::ModelKindId::kNetwork), "");
  EXPECT_EQ(n.why_not_warm_start_parent(fp32, runs::ModelKindId::kTrees), "layers = trees trains no network");
  EXPECT_EQ(n.why_not_quantizable(int8), "the model is already int8");
  EXPECT_EQ(n.why_not_prunable(int8), "the model is int8; prune its fp32 parent, then quantize");
  EXPECT_EQ(n.why_not_warm_start_parent(int8, runs::ModelKindId::kNetwork), "it is an int8 model; warm-start from its fp32 parent");
  EXPECT_EQ(n.why_not_warm_start_parent(pruned, runs::ModelKindId::kNetwork), "it was made by prune; warm-start from the model it was made from");
}

// The weights hash (docs/STORE.md "Weights hash"): a model file's hash is
// recomputed from what it decodes to, under its format's rule.
runs::ModelFile round_trip(const runs::ModelFile& m) { return runs::decode_model(runs::encode_model(m), "trip"); }

TEST(WeightsHash, TheTrainersHashIsTheStoredModelsHash) {
  TinyTrainer t;
  const runs::ModelFile back = round_trip(fp32_model(t));
  EXPECT_EQ(back.format, 3);
  EXPECT_EQ(back.weights_hash, t.trainer->weights_hash());
  EXPECT_EQ(runs::model_weights_hash(back), t.trainer->weights_hash());
  EXPECT_EQ(runs::expected_weights_hash(back), back.weights_hash);
}

TEST(WeightsHash, TheTrainersHashIsTheStoredModelsHashInBf16) {
  if (!test::cpu_backend()->capabilities().bf16)
    GTEST_SKIP() << "the CPU lacks avx512_core_bf16 (oneDNN isa " << test::cpu_backend()->capabilities().isa << ")";
  std::vector<float> x = {1, 0, 1, 2, 1, 0, 0, 1, 1, 1, 1, 0}, y = {0, 1, 1, 0};
  NullReporter reporter;
  const std::unique_ptr<Backend> backend = test::cpu_backend();
  TrainerConfig c;
  c.layers = "dense(4) relu dense(2)";
  c.classes = 2;
  c.batch = 2;
  c.epochs = 2;
  c.seed = 7;
  c.precision = Precision::kBf16;
  Trainer trainer(c, *backend, DataView{x, y, {3}}, std::nullopt, reporter);
  trainer.train();
  runs::ModelFile m = shell();
  m.layers = c.layers;
  m.precision = Precision::kBf16;
  m.tensors = runs::export_weights(trainer);
  m.weights_hash = trainer.weights_hash();
  const runs::ModelFile back = round_trip(m);
  EXPECT_EQ(back.precision, Precision::kBf16);
  EXPECT_EQ(runs::expected_weights_hash(back), trainer.weights_hash());
}

TEST(WeightsHash, EveryKindRecomputesFromItsBlob) {
  TinyTrainer t;
  // Pruning multiplies by a 0 mask, so a pruned negative weight is -0.0
  // before encoding; its bitmask decodes +0.0, and the hash is of that.
  runs::ModelFile pruned = pruned_model();
  pruned.tensors[0].values[1] = -0.0f;
  pruned.tensors[0].values[5] = -0.0f;
  pruned.weights_hash = runs::model_weights_hash(pruned);
  EXPECT_EQ(pruned.weights_hash, pruned_model().weights_hash) << "-0.0 and +0.0 are the same decoded weights";
  const std::vector<std::pair<std::string, runs::ModelFile>> models = {
      {"fp32", fp32_model(t)}, {"int8", int8_model()},     {"bitmask", pruned},
      {"linear", linear_model()}, {"trees", tree_model()}};
  std::set<std::string> hashes;
  for (const auto& [label, m] : models) {
    const runs::ModelFile back = round_trip(m);
    EXPECT_EQ(back.format, label == "int8" || label == "bitmask" ? 4 : 3) << label;
    EXPECT_TRUE(is_hex_digest(back.weights_hash)) << label;
    EXPECT_EQ(runs::expected_weights_hash(back), back.weights_hash) << label;
    EXPECT_EQ(runs::model_weights_hash(back), back.weights_hash) << label;
    hashes.insert(back.weights_hash);
  }
  EXPECT_EQ(hashes.size(), models.size()) << "different weights, different hashes";
}

// Models written before format 3 (formats 1 and 2, with the rules of
// src/runs/legacy_weights_hash.h): tests/data/legacy_models holds blobs
// that anneal wrote then (the document's former test vectors and a linear
// and a tree model trained on iris), which must still decode and verify.
TEST(WeightsHash, ModelsOfFormats1And2StillVerify) {
  const auto dir = std::filesystem::path(ANNEAL_TEST_DATA_DIR) / "legacy_models";
  const std::map<std::string, int> blobs = {{"fp32.bin", 1},   {"int8.bin", 2},  {"bitmask.bin", 2},
                                            {"linear.bin", 1}, {"trees.bin", 1}};
  for (const auto& [name, format] : blobs) {
    std::ifstream in(dir / name, std::ios::binary);
    ASSERT_TRUE(in) << dir / name;
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const runs::ModelFile m = runs::decode_model(bytes, name);
    EXPECT_EQ(m.format, format) << name;
    EXPECT_EQ(runs::expected_weights_hash(m), m.weights_hash) << name;
    EXPECT_NE(runs::model_weights_hash(m), m.weights_hash) << name << ": the rule did change";
  }
  // The legacy fp32 model is the tiny network: its old hash and the
  // trainer's new one are of the same weights.
  std::ifstream in(dir / "fp32.bin", std::ios::binary);
  const runs::ModelFile old = runs::decode_model(
      std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "fp32.bin");
  TinyTrainer t;
  EXPECT_EQ(runs::model_weights_hash(old), t.trainer->weights_hash());
}

TEST(WeightsHash, AChangedWeightNoLongerVerifies) {
  TinyTrainer t;
  runs::ModelFile m = round_trip(fp32_model(t));
  m.tensors[1].values[0] = std::nextafter(m.tensors[1].values[0], 1.0f);
  EXPECT_NE(runs::expected_weights_hash(m), m.weights_hash);
  m.format = 1;  // the legacy rule sees it too
  EXPECT_NE(runs::expected_weights_hash(m), m.weights_hash);
}

}  // namespace
}  // namespace anneal

namespace anneal {
namespace {

// A calibrated model's header holds "temperature" (absent: 1, so an
// uncalibrated model's bytes are as before); a value that is not a usable
// temperature, or one on a regression model, is corrupt.
TEST(ModelFormat, TemperatureRoundTripsAndHostileValuesAreCorrupt) {
  TinyTrainer t;
  runs::ModelFile m = fp32_model(t);
  const std::string plain = runs::encode_model(m);
  EXPECT_EQ(plain.find("temperature"), std::string::npos);
  EXPECT_EQ(runs::decode_model(plain, "plain").temperature, 1.0);
  m.temperature = 1.75;
  const std::string calibrated = runs::encode_model(m);
  const runs::ModelFile back = runs::decode_model(calibrated, "calibrated");
  EXPECT_EQ(back.temperature, 1.75);
  EXPECT_TRUE(runs::encode_model(back) == calibrated);
  auto with = [&](const std::string& value) {
    std::string bytes = calibrated;
    const std::string key = "\"temperature\":1.75";
    const auto at = bytes.find(key);
    EXPECT_NE(at, std::string::npos);
    bytes.replace(at, key.size(), "\"temperature\":" + value);
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data() + 8, 8);
    n = n - key.size() + 14 + value.size();
    std::memcpy(bytes.data() + 8, &n, 8);
    return bytes;
  };
  EXPECT_EQ(runs::decode_model(with("2.5"), "ok").temperature, 2.5);
  for (const std::string bad : {"-1", "0", "NaN", "1e999", "\"2\"", "null", "1000", "0.001"}) {
    try {
      runs::decode_model(with(bad), "hostile");
      ADD_FAILURE() << bad << " decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << bad << ": " << e.what();
    }
  }
  // A regression model has no class probabilities to calibrate.
  runs::ModelFile r = fp32_model(t);
  r.labels = LabelEncoding::from_json(json::parse(R"({"column":"label","classification":false,"categorical":false,"mean":0,"scale":1})"));
  r.loss = LossKind::kMeanSquaredError;
  r.temperature = 2;
  EXPECT_THROW(runs::decode_model(runs::encode_model(r), "regression"), Error);
}

}  // namespace
}  // namespace anneal

namespace anneal {
namespace {

// An ensemble of the tiny network, linear and tree models (kind
// "ensemble", docs/STORE.md "Ensemble models").
runs::ModelFile ensemble_model(TinyTrainer& t) {
  runs::ModelFile m = shell();
  m.kind = runs::ModelKindId::kEnsemble;
  m.layers.clear();
  m.members = {fp32_model(t), linear_model(), tree_model()};
  for (runs::ModelFile& member : m.members) member.weights_hash.clear();
  m.member_weights = {0.5, 0.25, 0.25};
  m.weights_hash = runs::model_weights_hash(m);
  return m;
}

// `bytes` with its header JSON changed by `change` (the payload as it was).
std::string with_header(const std::string& bytes, const std::function<void(json&)>& change) {
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data() + 8, 8);
  json header = json::parse(bytes.substr(16, n));
  change(header);
  const std::string text = header.dump();
  std::string out = bytes.substr(0, 8);
  const std::uint64_t size = text.size();
  out.append(reinterpret_cast<const char*>(&size), 8);
  return out + text + bytes.substr(16 + n);
}

TEST(ModelKinds, EnsembleKeepsItsMembersAndPredictsTheirWeightedProbabilities) {
  TinyTrainer t;
  const runs::ModelFile m = ensemble_model(t);
  const std::string bytes = runs::encode_model(m);
  EXPECT_NE(bytes.find(R"("kind":"ensemble")"), std::string::npos);
  const runs::ModelFile back = runs::decode_model(bytes, "ensemble");
  ASSERT_EQ(back.kind, runs::ModelKindId::kEnsemble);
  ASSERT_EQ(back.members.size(), 3u);
  EXPECT_EQ(back.members[0].kind, runs::ModelKindId::kNetwork);
  EXPECT_EQ(back.members[1].kind, runs::ModelKindId::kLinear);
  EXPECT_EQ(back.members[2].kind, runs::ModelKindId::kTrees);
  EXPECT_EQ(back.member_weights, m.member_weights);
  EXPECT_TRUE(runs::encode_model(back) == bytes) << first_difference(runs::encode_model(back), bytes);
  EXPECT_EQ(runs::expected_weights_hash(back), m.weights_hash);

  // Each member's class probabilities (the trees' P(1) made two columns),
  // summed by weight.
  const std::unique_ptr<Backend> backend = test::cpu_backend();
  const std::vector<float> rows = {1, 0, 1, -2, 1, 0};
  std::vector<float> want(4, 0.0f);
  for (std::size_t i = 0; i < 3; ++i) {
    runs::Predictor member(m.members[i], *backend);
    const std::vector<float> p = runs::class_probabilities(
        runs::model_kind(m.members[i]).prediction_loss(m.members[i]), member.predict(rows));
    ASSERT_EQ(p.size(), 4u);
    for (std::size_t k = 0; k < 4; ++k) want[k] += static_cast<float>(m.member_weights[i]) * p[k];
  }
  runs::Predictor predictor(back, *backend);
  EXPECT_EQ(predictor.predict(rows), want);
  EXPECT_EQ(predictor.engine(), "ensemble (network, linear, trees)");
  const runs::ModelKind& kind = runs::model_kind(back);
  EXPECT_EQ(kind.prediction_loss(back), LossKind::kSoftmaxCrossEntropy);
  EXPECT_EQ(kind.precision(back), "ensemble of fp32, fp64 (linear), fp32 (trees)");
  EXPECT_EQ(kind.why_not_quantizable(back), "it is an ensemble of 3 models, not one network to quantize");
  EXPECT_EQ(kind.why_not_prunable(back), "it is an ensemble of 3 models, not one network to prune");
  EXPECT_NE(kind.why_not_warm_start_parent(back, runs::ModelKindId::kNetwork), "");
  EXPECT_NE(kind.why_not_warm_start_parent(back, runs::ModelKindId::kTrees), "");

  // The weights and every member's weights are in the hash.
  runs::ModelFile reweighed = back;
  reweighed.member_weights = {0.25, 0.5, 0.25};
  EXPECT_NE(runs::model_weights_hash(reweighed), m.weights_hash);
  runs::ModelFile retrained = back;
  retrained.members[1].linear_model.weights[0] += 1;
  EXPECT_NE(runs::model_weights_hash(retrained), m.weights_hash);
}

TEST(ModelKinds, DamagedEnsemblesAreCorrupt) {
  TinyTrainer t;
  const std::string bytes = runs::encode_model(ensemble_model(t));
  auto expect_corrupt = [](const std::string& damaged, const char* what) {
    try {
      runs::decode_model(damaged, "model e@v1");
      ADD_FAILURE() << what << ": decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << what << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("model e@v1", 0), 0u) << e.what();
    }
  };
  expect_corrupt(bytes.substr(0, bytes.size() - 10), "truncated payload");
  expect_corrupt(bytes + "x", "bytes past the last member");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"][1]["offset"] = 1u << 30; }), "offset past the end");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"][2]["bytes"] = 3; }), "member size changed");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"][0]["weight"] = 0.75; }), "weights not summing to 1");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"][0]["weight"] = -0.5; h["members"][1]["weight"] = 1.25; }),
                 "a negative weight");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"].erase(1); h["members"].erase(1); }), "one member");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"] = json::object(); }), "members not a list");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"][1]["kind"] = "ensemble"; }), "a nested ensemble");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"][1]["kind"] = "forest"; }), "an unknown member kind");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"][1]["fields"]["features"] = 1; }), "a common field");
  expect_corrupt(with_header(bytes, [](json& h) { h["members"][0].erase("loss"); }), "a member without its loss");
  expect_corrupt(with_header(bytes, [](json& h) { h["format"] = 4; }), "layout 2");
}

// A pruned network of format 2 fine-tuned after pruning was hashed from
// values its file does not hold, so decode does not hold a format 1 or 2
// network to its hash (it stays readable); a format 1 tree model, whose
// rule is its booster's bytes, is held to it.
TEST(WeightsHash, LegacyNetworksAreNotHeldToTheirHashButLegacyTreesAre) {
  const auto dir = std::filesystem::path(ANNEAL_TEST_DATA_DIR) / "legacy_models";
  auto read = [&](const char* name) {
    std::ifstream in(dir / name, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const auto other_hash = [](json& h) { h["weights_hash"] = std::string(64, '0'); };
  EXPECT_NO_THROW(runs::decode_model(with_header(read("bitmask.bin"), other_hash), "bitmask.bin"));
  EXPECT_NO_THROW(runs::decode_model(with_header(read("fp32.bin"), other_hash), "fp32.bin"));
  try {
    runs::decode_model(with_header(read("trees.bin"), other_hash), "trees.bin");
    ADD_FAILURE() << "a legacy tree model with another hash decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << e.what();
  }
}

// Every kind's weights are held to weights_hash when the file is read, so
// a model changed after it was written is never served.
TEST(WeightsHash, DecodeRefusesWeightsThatDoNotMatch) {
  TinyTrainer t;
  const runs::ModelFile m = fp32_model(t);
  const runs::ModelFile ensemble = ensemble_model(t);
  for (const runs::ModelFile* model : {&m, &ensemble}) {
    const std::string bytes = runs::encode_model(*model);
    EXPECT_NO_THROW(runs::decode_model(bytes, "model m@v1"));
    std::string changed = bytes;
    changed[changed.size() - 2] ^= 0x40;  // a float of the last tensor
    try {
      runs::decode_model(changed, "model m@v1");
      ADD_FAILURE() << "a changed weight decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("model m@v1: its weights do not match its weights_hash", 0), 0u)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace anneal
