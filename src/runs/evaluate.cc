// `anneal eval`: a registered model scored on a split of a dataset version.
#include "anneal/device.h"
#include "anneal/error.h"
#include "anneal/model_metrics.h"
#include "anneal/runs.h"
#include "anneal/model_inputs.h"
#include "anneal/model_kind.h"
#include "anneal/scoring.h"
#include "runs/permutation_importance.h"

namespace anneal {

EvalSplit parse_eval_split(std::string_view text) {
  if (text == "train") return EvalSplit::kTrain;
  if (text == "test") return EvalSplit::kTest;
  if (text == "all") return EvalSplit::kAll;
  throw usage_error(Subject::kEvalSplit, std::string(text) + ": expected train, test or all");
}

namespace {

// Scores `predictions` of `model` (rows x outputs) against the encoded
// labels `y` into `result`.
void score_predictions(const runs::ModelFile& model, const std::vector<float>& predictions, const std::vector<float>& y,
                       EvalResult& result) {
  result.classification = model.labels.classification();
  if (result.classification) {
    result.class_names = model.labels.class_names();
    const LossKind head = runs::model_kind(model).prediction_loss(model);
    result.classification_metrics =
        classification_metrics(runs::class_probabilities(head, predictions), y, model.labels.classes(), model.threshold);
  } else {
    std::vector<double> p(predictions.size()), t(y.size());
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = model.labels.decode_value(predictions[i]);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = model.labels.decode_value(y[i]);
    result.regression_metrics = regression_metrics(p, t);
  }
}

// Predicts `inputs` with `model` and scores the predictions into `result`.
void score_inputs(const runs::ModelFile& model, const runs::ModelInputs& inputs, const BackendOptions& compute,
                  EvalResult& result) {
  result.dataset = inputs.dataset;
  result.split = inputs.split;
  result.missing = inputs.counts.missing;
  result.unseen = inputs.counts.unseen;
  BackendOptions options = compute;
  options.int8 = model.int8;
  const std::unique_ptr<Backend> backend = make_backend(options);
  runs::Predictor predictor(model, *backend);
  score_predictions(model, predictor.predict(inputs.x), inputs.y, result);
}

// Rows of a version `eval` reads at once (their stored bytes): a piece
// passes through about four arrays of its size (read, widened, laid out as
// the model expects, transformed), besides the predictions and labels kept
// for the metrics.
constexpr std::uint64_t kEvalPieceBytes = std::uint64_t{4} << 20;

}  // namespace

EvalResult evaluate_model(Store& store, const ModelRef& ref, const DatasetRef& data, EvalSplit split,
                          const BackendOptions& compute, const std::optional<ImportanceOptions>& importance) {
  EvalResult result;
  result.model = find_model(store, ref);
  runs::ModelFile model = runs::load_model(store, result.model);
  if (importance && model.dataset_format != "csv" && model.dataset_format != "tsv")
    throw usage_error(result.model.ref() + " was trained on " + model.dataset_format +
                      " images: permutation importance is per table column, and images have none");
  std::optional<runs::RowSample> sample;
  if (importance)
    sample.emplace(importance->rows, static_cast<std::size_t>(model.features.output_width()), importance->seed);
  // A piece of the version at a time: the predictions and labels grow with
  // the rows, the features do not.
  BackendOptions options = compute;
  options.int8 = model.int8;
  const std::unique_ptr<Backend> backend = make_backend(options);
  runs::Predictor predictor(model, *backend);
  std::vector<float> predictions, y;
  result.split = runs::for_each_input_piece(store, model, result.model.ref(), data, split, kEvalPieceBytes,
                                            [&](runs::ModelInputs&& piece) {
                                              result.dataset = piece.dataset;
                                              result.missing += piece.counts.missing;
                                              result.unseen += piece.counts.unseen;
                                              const std::vector<float> p = predictor.predict(piece.x);
                                              predictions.insert(predictions.end(), p.begin(), p.end());
                                              y.insert(y.end(), piece.y.begin(), piece.y.end());
                                              if (sample) sample->offer(piece.x, piece.y);
                                            });
  result.dataset = find_dataset(store, data).ref();
  score_predictions(model, predictions, y, result);
  if (sample && sample->rows() > 0) {
    result.importance_rows = sample->rows();
    result.importance = runs::permutation_importance(
        model.features, model.labels, runs::model_kind(model).prediction_loss(model), sample->x(), sample->y(),
        [&](const std::vector<float>& x) { return predictor.predict(x); }, *importance, &result.importance_baseline);
    runs::sort_by_drop(result.importance);
  }
  return result;
}

namespace runs {

EvalResult evaluate_model_on(const ModelRecord& record, const ModelFile& model, const Table& table,
                             const std::string& dataset, const std::string& split, const BackendOptions& compute) {
  EvalResult result;
  result.model = record;
  score_inputs(model, table_inputs(model, record.ref(), table, dataset, split), compute, result);
  return result;
}

}  // namespace runs
}  // namespace anneal
