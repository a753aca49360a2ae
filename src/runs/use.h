// What eval does before scoring, for other users of models (quantize,
// prune): a dataset version's rows as a model's inputs. Internal to src/runs/
// and the libraries built on it.
#pragma once

#include <string>
#include <vector>

#include "anneal/runs.h"
#include "runs/model_file.h"

namespace anneal::runs {

struct ModelInputs {
  std::string dataset;       // NAME@vN
  std::string split;         // "train", "test" or "all"
  std::vector<float> x;      // rows x the model's input width, preprocessed
  std::vector<float> y;      // rows: encoded labels
  TransformCounts counts;
};

// The rows of `split` of `data` through the model's own preprocessing, with
// encoded labels. kUsage when the version's label or columns do not match
// the model (named `model_ref`) or the split is absent.
ModelInputs model_inputs(Store& store, const ModelFile& model, const std::string& model_ref,
                         const DatasetRef& data, EvalSplit split);

}  // namespace anneal::runs
