// A registered model's inputs: rows of a dataset version (or of a file's
// table) laid out and preprocessed as the model expects, with its labels
// encoded. What eval and predict do before predicting, and what quantize
// and prune use to score a derived model. Defined in src/runs/; public for the
// libraries built on it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "anneal/runs.h"
#include "anneal/model_file.h"

namespace anneal::runs {

struct ModelInputs {
  std::string dataset;       // NAME@vN
  std::string split;         // "train", "test" or "all"
  std::vector<float> x;      // rows x the model's input width, preprocessed
  std::vector<float> y;      // rows: encoded labels
  TransformCounts counts;
};

// The model `record` names, read from the store and decoded. kCorrupt for a
// damaged blob.
ModelFile load_model(Store& store, const ModelRecord& record);

// The rows of `table` laid out as the model's feature columns expect: found
// by name, categorical codes translated into the model's dictionary (a code
// the model never saw becomes its unseen code). Raw values: the model's
// feature transform is not applied. kUsage naming `where` for a column the
// model needs and `table` lacks or holds at another width; kBadData for
// text where the model expects numbers.
std::vector<float> aligned_features(const Table& table, const ModelFile& model, const std::string& where);

// The rows of `split` of `data` through the model's own preprocessing, with
// encoded labels. kUsage when the version's label or columns do not match
// the model (named `model_ref`) or the split is absent.
ModelInputs model_inputs(Store& store, const ModelFile& model, const std::string& model_ref,
                         const DatasetRef& data, EvalSplit split);

// model_inputs a piece at a time: calls `piece` with the inputs of
// consecutive rows of the split, in order, each piece holding about
// `piece_bytes` of the version's stored rows, so the whole split's features
// never exist at once (what `eval` holds: a piece, plus what `piece` keeps).
// The pieces' rows, in order, are model_inputs' rows; the same errors.
// Returns the split's name ("train", "test", "all").
std::string for_each_input_piece(Store& store, const ModelFile& model, const std::string& model_ref,
                                 const DatasetRef& data, EvalSplit split, std::uint64_t piece_bytes,
                                 const std::function<void(ModelInputs&&)>& piece);

// The rows of `table` (a part of dataset version `dataset`, e.g. the rows a
// promotion gate scores on; `split` names them) through the model's own
// preprocessing, with encoded labels: what model_inputs does for one split,
// with the same errors.
ModelInputs table_inputs(const ModelFile& model, const std::string& model_ref, const Table& table,
                         const std::string& dataset, const std::string& split);

// Scores registered model `record` (decoded as `model`) on the rows of
// `table` as evaluate_model scores a split (runs.h): the same
// preprocessing, prediction and metrics, the same errors. `dataset` and
// `split` name the rows in the result (a promotion gate's held-out rows).
EvalResult evaluate_model_on(const ModelRecord& record, const ModelFile& model, const Table& table,
                             const std::string& dataset, const std::string& split, const BackendOptions& compute);

}  // namespace anneal::runs
