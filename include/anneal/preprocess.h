// Preprocessing: how a dataset's stored rows become the network's inputs
// and labels, fitted on the training rows and saved with the model so that
// eval and predict apply exactly the same transform.
//
// Features: every feature column in source order. A numeric column (or an
// image column, as one block) is standardized, (x - mean) / std with the
// training rows' statistics; a missing value (NaN) becomes the training
// mean, i.e. 0. A categorical column (the store keeps its codes) is one-hot
// encoded over the version's dictionary; missing or unseen codes give an
// all-zero block and are counted.
//
// Labels: classification maps a categorical label to its codes, and numeric
// integer labels to 0..K-1 in sorted order (the values are kept to name the
// classes in output); regression standardizes the target.
//
// All types are values; const methods are thread-safe. Errors are
// anneal::Error: kBadData for data that cannot be encoded (a class value the
// encoding does not know, a non-integer class label), kCorrupt for bad JSON.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/loss.h"
#include "anneal/table.h"

namespace anneal {

struct ColumnTransform {
  std::string column;
  bool one_hot = false;
  std::int64_t width = 1;        // input scalars per row (an image column: C*H*W)
  double mean = 0, scale = 1;    // standardize: (x - mean) / scale
  std::int64_t categories = 0;   // one-hot: output width
  std::vector<std::string> category_names;  // one-hot: code -> name
};

struct TransformCounts {
  std::uint64_t missing = 0;  // NaN cells imputed
  std::uint64_t unseen = 0;   // categorical codes outside the fitted dictionary
};

class FeatureTransform {
 public:
  FeatureTransform() = default;
  // Fits on the rows `rows` (indices into table) of `table`.
  static FeatureTransform fit(const Table& table, std::span<const std::uint32_t> rows);

  // Transforms `features` (rows x input_width(), the store's layout) into
  // rows x output_width() floats; adds what it imputed to `counts`.
  std::vector<float> apply(std::span<const float> features, TransformCounts& counts) const;

  std::int64_t input_width() const;
  std::int64_t output_width() const;
  // The network's per-sample input shape: the input shape when nothing is
  // one-hot encoded (so images keep {C, H, W}), else {output_width()}.
  std::vector<std::int64_t> output_shape() const;
  const std::vector<std::int64_t>& input_shape() const { return input_shape_; }
  const std::vector<ColumnTransform>& columns() const { return columns_; }

  nlohmann::json to_json() const;
  static FeatureTransform from_json(const nlohmann::json& json);  // kCorrupt on bad JSON

 private:
  std::vector<ColumnTransform> columns_;
  std::vector<std::int64_t> input_shape_;
};

class LabelEncoding {
 public:
  LabelEncoding() = default;
  // Fits the encoding for `loss` from the label column of `train` (all of
  // its rows) and, for classes, `test`. Throws kUsage when the loss does not
  // suit the label (bce on more than two classes; a classification loss on
  // a non-integer numeric label), naming the column.
  static LabelEncoding fit(LossKind loss, const Table& train, const Table& test);
  // The loss a label column suggests when the config names none: softmax_ce
  // when labels_are_classes(train), mse otherwise.
  static LossKind infer_loss(const Table& train);

  bool classification() const { return classification_; }
  std::int64_t classes() const { return static_cast<std::int64_t>(class_names_.size()); }
  const std::vector<std::string>& class_names() const { return class_names_; }
  const std::string& column() const { return column_; }

  // Stored label value (a code or a number) -> training label: the class
  // index, or the standardized target. Throws kBadData naming `where` and
  // the value for a class it does not know.
  float encode(float stored, const std::string& where) const;
  std::vector<float> encode_all(std::span<const float> stored, const std::string& where) const;
  // Training-scale regression output -> the target's own units.
  double decode_value(double standardized) const { return standardized * scale_ + mean_; }

  nlohmann::json to_json() const;
  static LabelEncoding from_json(const nlohmann::json& json);

 private:
  bool classification_ = true;
  std::string column_;
  bool categorical_ = false;
  std::vector<double> class_values_;     // numeric labels: sorted distinct values
  std::vector<std::string> class_names_;
  double mean_ = 0, scale_ = 1;          // regression
};

// The most distinct integer label values that still read as classes.
inline constexpr std::size_t kMaxGuessedClasses = 100;

// Training policy, the one guess of what a class is: whether the label
// column of `table` holds classes (a categorical label, or only integers
// with at most kMaxGuessedClasses distinct values) rather than a numeric
// target. It picks the loss of a config that names none. It lives here,
// with the label encoding. Pure.
bool labels_are_classes(const Table& table);

// Splits indices 0..rows-1 into (train, validation): within each group of
// equal `groups[i]` (the encoded class, or all one group), rows are ordered by
// a hash of (seed, i) and the first round(fraction * n) are held out. Both
// outputs are in ascending row order. Deterministic for any thread count.
void validation_split(std::span<const float> groups, bool stratify, double fraction,
                      std::uint64_t seed, std::vector<std::uint32_t>& train,
                      std::vector<std::uint32_t>& validation);

}  // namespace anneal
