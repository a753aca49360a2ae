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

// Rows laid out as a table's or stored version's `columns` (label left
// out) turned into rows laid out as the model's feature columns expect:
// each found by name, categorical codes translated into the model's
// dictionary (a code the model never saw becomes its unseen code). Raw
// values: the model's feature transform is not applied. Immutable once
// built; apply may be called from any thread.
class InputAlignment {
 public:
  // kUsage naming `where` for a column the model needs and `columns` lacks
  // or holds at another width (or as other than categorical where the
  // model one-hot encodes it); kBadData for text or dates where the model
  // expects numbers, or numbers where it expects dates.
  InputAlignment(const std::vector<ColumnSchema>& columns, std::size_t label_column, const ModelFile& model,
                 const std::string& where);
  // Writes the model's input row (width() floats) for `row`, one row in
  // the `columns` layout.
  void apply(const float* row, float* out) const;
  std::size_t width() const { return width_; }
  // Categories in `columns`' dictionaries that the model's one-hot
  // columns never saw (each is read as the model's unseen code).
  std::uint64_t unseen_categories() const;

 private:
  struct Column {
    std::size_t from = 0, to = 0, width = 0;  // offsets in the source row and the model's row
    std::vector<float> code_map;             // one-hot: source code -> model code; else empty
    float unseen_code = 0;                   // one-hot: the model's code for a category it never saw
  };
  std::vector<Column> columns_;
  std::size_t width_ = 0;
};

// Every row of `table` through InputAlignment (same errors).
std::vector<float> aligned_features(const Table& table, const ModelFile& model, const std::string& where);

// The stored label values of `table` as the model's: a categorical label's
// codes translated by class name into the model's classes (a class the
// model does not know becomes a code past its last, which encoding
// rejects); numbers, missing labels and the labels of a model without
// classes as they are.
std::vector<float> labels_as_model_codes(const Table& table, const ModelFile& model);

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
