// `anneal eval`: a registered model scored on a split of a dataset version.
#include "anneal/device.h"
#include "anneal/error.h"
#include "anneal/model_metrics.h"
#include "anneal/runs.h"
#include "anneal/model_inputs.h"
#include "anneal/scoring.h"

namespace anneal {

EvalSplit parse_eval_split(std::string_view text) {
  if (text == "train") return EvalSplit::kTrain;
  if (text == "test") return EvalSplit::kTest;
  if (text == "all") return EvalSplit::kAll;
  throw usage_error(Subject::kEvalSplit, std::string(text) + ": expected train, test or all");
}

namespace {

// Predicts `inputs` with `model` and scores the predictions into `result`.
void score_inputs(const runs::ModelFile& model, const runs::ModelInputs& inputs, const BackendOptions& compute,
                  EvalResult& result) {
  result.dataset = inputs.dataset;
  result.split = inputs.split;
  result.missing = inputs.counts.missing;
  result.unseen = inputs.counts.unseen;
  const std::unique_ptr<Backend> backend = make_backend(compute);
  runs::Predictor predictor(model, *backend);
  std::vector<float> predictions = predictor.predict(inputs.x);
  const std::vector<float>& y = inputs.y;
  result.classification = model.labels.classification();
  if (result.classification) {
    result.class_names = model.labels.class_names();
    LossKind as = model.linear ? LossKind::kSoftmaxCrossEntropy : model.loss;
    result.classification_metrics =
        classification_metrics(runs::class_probabilities(as, predictions), y, model.labels.classes());
  } else {
    std::vector<double> p(predictions.size()), t(y.size());
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = model.labels.decode_value(predictions[i]);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = model.labels.decode_value(y[i]);
    result.regression_metrics = regression_metrics(p, t);
  }
}

}  // namespace

EvalResult evaluate_model(Store& store, const ModelRef& ref, const DatasetRef& data, EvalSplit split,
                          const BackendOptions& compute) {
  EvalResult result;
  result.model = find_model(store, ref);
  runs::ModelFile model = runs::load_model(store, result.model);
  runs::ModelInputs inputs = runs::model_inputs(store, model, result.model.ref(), data, split);
  score_inputs(model, inputs, compute, result);
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
