// The bytes of a model and of a checkpoint, as src/runs/ stores them in
// blobs (the store keeps them opaque), and the network rebuilt from a model
// for inference.
//
// Model:      "ANMODEL1" | u64 LE header length | header JSON | tensors
//   header "format" 3: f32 LE tensors, offsets in floats (every fp32/bf16
//                      network; linear and tree models)
//   header "format" 4: each tensor f32, s8 (with per-output-channel scales) or
//                      bitmask (mostly-zero: a bit per element, then the
//                      nonzero f32 values), offsets in bytes; written only for
//                      int8 and pruned models
//   header "format" 1 and 2: as 3 and 4, written before the weights hash
//                      of anneal/weights_hash.h; still read and verified
// Checkpoint: "ANCKPT01" | u64 LE header length | header JSON | trainer state
//
// The model header holds everything predict and eval need: the feature
// transform, the label encoding, the loss, the layer spec (or the linear
// model), the input shape, the dataset's columns and each tensor's name,
// dims and offset. docs/STORE.md ("Models and checkpoints") specifies the
// bytes. What differs between a network and a linear model is the model's
// kind's (anneal/model_kind.h). Public for the libraries built on src/runs
// (quantize/) and the tests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <map>
#include <optional>

#include "anneal/backend.h"
#include "anneal/boosted_trees.h"
#include "anneal/linear.h"
#include "anneal/model_kind.h"
#include "anneal/network.h"
#include "anneal/preprocess.h"
#include "anneal/table.h"
#include "anneal/trainer.h"

namespace anneal::runs {

enum class TensorEncoding : std::uint8_t { kF32, kS8, kBitmask };

struct NamedTensor {
  std::string name;
  std::vector<std::int64_t> dims;
  std::vector<float> values;  // always the real values (s8: dequantized q · scale)
  TensorEncoding encoding = TensorEncoding::kF32;
  std::vector<std::int8_t> q;  // s8: values ≈ q · scales[o], o = first dim
  std::vector<float> scales;
};

// The activation scales of one int8 dense/conv layer (real ≈ q · scale).
struct LayerScales {
  float input = 0, output = 0;
};

// A model's fields: the common ones, then each kind's own (model_kind.h).
// A tree model's part of the file (the tree kind, src/runs/tree_kind.cc).
struct TreeModel {
  TreeObjective objective = TreeObjective::kBinaryLogistic;
  std::int64_t classes = 0;       // classification: K; regression: 0
  std::string booster;            // XGBoost's model bytes (BoostedTrees::save)
  int rounds = 0;                 // boosting rounds kept
  nlohmann::json params = nlohmann::json::object();  // what trained it (TreeParams, as the run's config says)
  std::vector<double> importance; // per preprocessed input: its share of the total split gain
};

struct ModelFile {
  ModelKindId kind = ModelKindId::kNetwork;
  FeatureTransform features;
  LabelEncoding labels;
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  std::string layers;                     // network: the spec
  Precision precision = Precision::kFp32;
  std::vector<std::int64_t> input_shape;  // the network's per-sample input
  std::int64_t outputs = 0;
  std::vector<NamedTensor> tensors;       // network: parameters, then state buffers
  LinearModel linear_model;               // linear
  TreeModel trees;                        // trees
  // ensemble: its models and their weights (summing to 1). Each member is
  // a model of another kind with this model's common fields (features,
  // labels, loss, input shape); the ensemble's predictions are the
  // weighted sum of the members' class probabilities (or standardized
  // values). Members hold no members, threshold or temperature of their own.
  std::vector<ModelFile> members;
  std::vector<double> member_weights;
  std::vector<ColumnSchema> dataset_columns;  // for parsing predict input
  std::string label_column;
  std::string dataset_format;
  std::string weights_hash;  // model_weights_hash() of a new model
  // decode_model(): the header's "format", 1 to 4, which says the rule
  // weights_hash follows (expected_weights_hash()); 0 in a model not read
  // from a file. encode_model() ignores it: it always writes 3 or 4.
  int format = 0;
  // int8: dense and conv run on int8 weights and activations; scales by
  // layer prefix ("0.dense"). Stored as precision "int8".
  bool int8 = false;
  std::map<std::string, LayerScales> activation_scales;
  nlohmann::json compression = nlohmann::json::object();  // how it was made: method, sparsity, ...
  // A binary classifier's decision threshold: class 1 when P(class 1) >
  // threshold (chosen on validation rows, threshold_metric); unset: the
  // most probable class. Header "threshold", present only when set.
  std::optional<double> threshold;
  // A classifier's calibration temperature T (anneal/calibration.h): its
  // predictor's class probabilities are softmax(log p / T) of the kind's
  // (softmax(z / T) of a network's logits z), fitted on validation rows
  // (config `calibrate`). 1: uncalibrated. Header "temperature", present
  // only when not 1; a reader without it reads 1.
  double temperature = 1;
};

// True when the model runs as an inference-only Network (int8, or
// sparse-stored weights): see NetworkOptions::inference.
bool inference_only(const ModelFile& model);
// The model's dense/conv weights (and int8 scales) by layer prefix, as an
// inference-only Network takes them (int8 when the model is).
InferenceOptions inference_options(const ModelFile& model);

// The model's file: format 3 or 4 (docs/STORE.md), with model.weights_hash
// as it is (the caller sets it to model_weights_hash()).
std::string encode_model(const ModelFile& model);
// Throws kCorrupt naming `owner` for bytes that are not a model, or whose
// weights do not match their weights_hash (expected_weights_hash(); not
// checked for a network of formats 1 and 2, whose hash may not be
// recomputable: legacy_weights_hash.h).
ModelFile decode_model(std::string_view bytes, const std::string& owner);

// The weights hash of `model`'s weights, as its file decodes to them
// (docs/STORE.md, "Weights hash"): what a new model stores as
// weights_hash. For a network exported from a Trainer it equals
// Trainer::weights_hash(). std::invalid_argument for tensors whose values
// do not fit their dims.
std::string model_weights_hash(const ModelFile& model);

// The weights_hash that `model`, as decode_model() read it, must hold
// under the rule of its format: model_weights_hash() for formats 3 and 4
// (and a model not read from a file); for 1 and 2 the rules they were
// written with (src/runs/
// legacy_weights_hash.h), which cannot reproduce the hash of a format 2
// model fine-tuned after pruning. Equal to model.weights_hash when the
// weights are the ones the hash was made of.
std::string expected_weights_hash(const ModelFile& model);

// Copies every parameter and state buffer of the trainer's network to the
// host, reading them through the trainer's own backend.
std::vector<NamedTensor> export_weights(const Trainer& trainer);

struct Checkpoint {
  nlohmann::json header;              // run, step, features, labels
  std::vector<std::uint8_t> state;    // Trainer::save_state()
};
std::string encode_checkpoint(const Checkpoint& checkpoint);
Checkpoint decode_checkpoint(std::string_view bytes, const std::string& owner);

// A saved model ready to score preprocessed rows on `backend`: the model's
// kind's predictor. `model` and `backend` must outlive it. One thread at a
// time.
class Predictor {
 public:
  // `batch`: rows per forward pass. kCorrupt when the model's weights do
  // not fit it.
  Predictor(const ModelFile& model, Backend& backend, std::int64_t batch = 256);
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;
  // rows x outputs: class probabilities (bce: P(1)), or the standardized
  // value. A calibrated model's (temperature not 1) probabilities are the
  // kind's rescaled by apply_temperature() (anneal/calibration.h): the one
  // place predict, eval, serve and derived models get them from.
  std::vector<float> predict(std::span<const float> features);
  // What runs the predictions ("network", "network (int8)", "linear", ...).
  std::string engine() const { return kind_predictor_->engine(); }
  // True when the model runs as an inference-only network (int8, sparse weights).
  bool inference_only() const { return kind_predictor_->inference_only(); }
  // Inference-only: the kernel each layer ran on last; else empty.
  std::vector<LayerKernel> kernels() const { return kind_predictor_->kernels(); }

 private:
  std::unique_ptr<KindPredictor> kind_predictor_;
  LossKind loss_;           // the kind's prediction_loss()
  std::int64_t classes_;    // the model's classes (0: regression)
  double temperature_;      // the model's temperature
};

}  // namespace anneal::runs
