// The kind of a model: what its file holds beyond the common header and how
// it scores rows. A model is a network (layers and tensors, trained by SGD)
// or a linear model (the linear baseline registered alone, `layers =
// linear`); its header's "kind" stores the kind's name (docs/STORE.md,
// "Models and checkpoints").
//
// Everything that differs between kinds is answered by the kind's
// ModelKind: its part of the model file, predicting a batch, the shape of
// its input, the ONNX graph of its scores, and whether it can be quantized,
// pruned or warm-started from. Eval, predict, bench, the ONNX export,
// quantize, prune and warm start ask the model's kind instead of testing
// which kind it is, so a new kind of model is one new implementation
// (src/runs/KIND_kind.cc) and one row of the table in src/runs/model_kind.cc
// (besides its fields in ModelFile).
//
// Public for the libraries built on src/runs (quantize/) and the tests. The
// kinds are immutable and live as long as the program: thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/backend.h"
#include "anneal/loss.h"
#include "anneal/network.h"
#include "anneal/weights_hash.h"

namespace anneal::runs {

struct ModelFile;
namespace onnx_graph {
class Graph;  // src/runs/onnx_graph.h: an ONNX graph under construction
}

// The kinds of model, as ModelFile::kind holds them. Files store the
// kind's name (ModelKind::name()), never this number.
enum class ModelKindId : std::uint8_t { kNetwork, kLinear, kTrees, kEnsemble };

// One model scoring preprocessed rows on a backend; what a Predictor
// (model_file.h) runs. One thread at a time.
class KindPredictor {
 public:
  virtual ~KindPredictor() = default;
  // rows x outputs for `features`, whole rows of the kind's input_shape():
  // class probabilities (bce: P(1)), or the standardized value. kBadData
  // when `features` is not a whole number of rows.
  virtual std::vector<float> predict(std::span<const float> features) = 0;
  // What runs the predictions, as `anneal bench` reports it: "network",
  // "network (int8)", "network (sparse)", "linear".
  virtual std::string engine() const = 0;
  // True when the model runs as an inference-only network (int8, sparse
  // weights): see NetworkOptions::inference.
  virtual bool inference_only() const = 0;
  // Inference-only: the kernel each layer ran on last; else empty.
  virtual std::vector<LayerKernel> kernels() const = 0;
};

// What one kind of model does. Each function's model is of this kind.
class ModelKind {
 public:
  virtual ~ModelKind() = default;

  // The name the model header's "kind" stores: "network", "linear". Fixed
  // for good once models of the kind exist.
  virtual std::string_view name() const = 0;

  // Adds the kind's own fields to `header`, which holds the common ones
  // ("features" to "weights_hash", not yet "format"), and appends its
  // bytes to `payload`. Returns the tensor layout those need: 1, or 2
  // (docs/STORE.md; encode_model() writes them as header "format" 3 and
  // 4). Writing a model's file must keep its bytes as they were: old
  // readers depend on them.
  virtual int encode(const ModelFile& model, nlohmann::json& header, std::string& payload) const = 0;

  // Reads back what encode() wrote into `model` (whose common fields are
  // set): `header` with its tensors in layout `layout` (1 or 2: header
  // "format" 1 or 3, 2 or 4) and `payload`, the bytes after it. kCorrupt
  // naming `owner` for bytes that make no model; a missing or mistyped
  // header field may throw nlohmann::json::exception, which
  // decode_model() reports as kCorrupt.
  virtual void decode(const nlohmann::json& header, int layout, std::string_view payload, const std::string& owner,
                      ModelFile& model) const = 0;

  // Reads the bytes decode() kept with the library that runs them, where
  // that library trusts its input (XGBoost's model reader crashes on
  // damaged bytes): decode_model() calls it only once the model's weights
  // matched its weights_hash, so it sees only bytes anneal wrote. kCorrupt
  // naming `owner` when the library refuses them. The default reads none.
  virtual void check_payload(const ModelFile& model, const std::string& owner) const {
    (void)model;
    (void)owner;
  }

  // Adds the model's weights to `hasher` as the model's file decodes to
  // them (docs/STORE.md, "Weights hash"): what model_weights_hash()
  // (model_file.h) hashes. std::invalid_argument for weights that do not
  // fit their dims.
  virtual void hash_weights(const ModelFile& model, WeightsHasher& hasher) const = 0;

  // The shape of one preprocessed row as the kind's predictor takes it
  // (the row-major values of FeatureTransform's output): {F}, or
  // {C, H, W} for an image network.
  virtual std::vector<std::int64_t> input_shape(const ModelFile& model) const = 0;

  // A predictor of `model` on `backend`, both of which must outlive it:
  // `batch` rows per pass where the kind batches. kCorrupt when the
  // model's weights do not fit it.
  virtual std::unique_ptr<KindPredictor> predictor(const ModelFile& model, Backend& backend,
                                                   std::int64_t batch) const = 0;

  // The loss whose head made a classifier's predictions: scoring.h's
  // class_probabilities() reads them as that loss's output (eval, predict's
  // CSV). The network's loss; softmax_ce for a linear model, whose
  // predictions are already the class probabilities.
  virtual LossKind prediction_loss(const ModelFile& model) const = 0;

  // The arithmetic predictions run in, as `anneal bench` reports it:
  // "fp32", "bf16", "fp16", "int8", "fp64 (linear)".
  virtual std::string precision(const ModelFile& model) const = 0;

  // Appends to `graph` the nodes from `features`, the name of the
  // preprocessed rows ((N, F) float, F the width of FeatureTransform's
  // output), to the model's scores, and returns their name: the class
  // probabilities (N, K) of a classifier, the standardized value (N, 1)
  // of a regression model, as predict() gives them (docs/STORE.md, "ONNX
  // export"). kUsage naming the layer for a layer the export has no
  // operator for; kCorrupt for weights that are missing or do not fit.
  virtual std::string write_onnx(onnx_graph::Graph& graph, const ModelFile& model,
                                 const std::string& features) const = 0;

  // Why `model` cannot be the parent of `anneal quantize`, of `anneal
  // prune`, of a warm-started run training a model of kind `child`: one
  // line, "" when it can. The callers add the operation and the model's
  // name; tests match the wording.
  virtual std::string why_not_quantizable(const ModelFile& model) const = 0;
  virtual std::string why_not_prunable(const ModelFile& model) const = 0;
  virtual std::string why_not_warm_start_parent(const ModelFile& model, ModelKindId child) const = 0;
};

// The implementation of kind `id`.
const ModelKind& model_kind(ModelKindId id);
// The kind of `model` (model.kind).
const ModelKind& model_kind(const ModelFile& model);

// The kind whose name() is `name`; nullopt when no kind has that name.
std::optional<ModelKindId> model_kind_named(std::string_view name);

// Every kind's name, in table order, comma separated: "network, linear"
// (for the message that refuses a name).
std::string model_kind_names();

}  // namespace anneal::runs
