// Preprocessing: how a dataset's stored rows become the network's inputs
// and labels, fitted on the training rows and saved with the model so that
// eval and predict apply exactly the same transform.
//
// Features: every feature column in source order, less the columns left
// out (FeatureOptions: features=, exclude=, identifiers). A numeric column
// (or an image column, as one block) is standardized, (x - mean) / std with
// the training rows' statistics; a missing value (NaN) becomes the training
// mean, i.e. 0. A categorical column (the store keeps its codes) is one-hot
// encoded over its frequent levels (at least category_min_count training
// rows, at most max_categories of them, the most frequent first, ties by
// code); the other levels share one "other" slot, which an unseen code also
// takes; a missing code gives an all-zero block, and missing and unseen
// codes are counted. A datetime column (days since 1970, the time of day as
// the fraction) becomes year (standardized), month, day of week and day of
// year as sin/cos pairs, the time of day as a sin/cos pair when the column
// has times, and the elapsed days (standardized); missing: all zeros,
// counted as missing. docs/STORE.md gives the exact formulas.
//
// Robust scaling (FeatureOptions::scaling, off by default): a one-value
// numeric column is centred on its training median, divided by its
// interquartile range (half its range when that is 0, 1 when the column is
// constant) and smoothly clipped, z / sqrt(1 + (z/3)^2), into (-3, 3) (as
// RealMLP, Holzmueller et al. 2024): a skewed column or one with far
// outliers no longer squeezes its typical rows into a sliver around 0.
// Scaling::kAuto chooses it per column by robust_scaling_wanted.
//
// Labels: classification maps a categorical label to its codes, and numeric
// integer labels to 0..K-1 in sorted order (the values are kept to name the
// classes in output); regression standardizes the target, or with a log
// target (TargetTransform) standardizes log1p(y - shift) and decodes a
// prediction p as expm1(p * scale + mean) + shift.
//
// All types are values; const methods are thread-safe. Errors are
// anneal::Error: kBadData for data that cannot be encoded (a class value the
// encoding does not know, a non-integer class label), kCorrupt for bad JSON.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
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
  double mean = 0, scale = 1;    // standardize: (x - mean) / scale; datetime: the elapsed days'
  std::int64_t categories = 0;   // one-hot: output width (kept levels, plus the other slot)
  std::vector<std::string> category_names;  // one-hot: code -> name (the whole dictionary)
  // One-hot: code -> output slot (a rare level: the other slot). Empty: the
  // identity (every level its own slot, no other slot; models before the
  // frequent-levels rule).
  std::vector<std::int64_t> slots;
  bool other = false;            // one-hot: the last slot is "other"
  bool datetime = false;         // a datetime expansion (see the file comment)
  bool hour = false;             // datetime: the time-of-day pair is present
  double year_mean = 0, year_scale = 1;  // datetime: standardize the calendar year
  // Robust scaling: mean is the training median, scale the spread, and the
  // standardized value is smoothly clipped (see the file comment).
  bool robust = false;

  std::int64_t output_width() const;  // scalars this column becomes
};

// How many outputs a datetime column expands to: year, month, day of week
// and day of year (sin/cos each), the time of day (sin/cos) when
// `has_time`, and the elapsed days.
inline constexpr std::int64_t datetime_output_width(bool has_time) { return has_time ? 10 : 8; }

struct TransformCounts {
  std::uint64_t missing = 0;  // NaN cells imputed
  std::uint64_t unseen = 0;   // categorical codes outside the fitted dictionary
};

// How one-value numeric columns are scaled: standardized (the default),
// robust-scaled (the file comment), or each column as robust_scaling_wanted
// says.
enum class Scaling { kStandard, kRobust, kAuto };
const char* scaling_name(Scaling s);    // "standard", "robust", "auto"
Scaling parse_scaling(const std::string& text);  // kUsage naming the choices

// The rule of Scaling::kAuto, on a column's training values (no NaN):
// robust scaling when their skewness is at least kRobustSkewness in
// magnitude, or when more than kRobustOutlierFraction of them lie more
// than kRobustOutlierIqr interquartile ranges beyond the quartiles. Pure.
inline constexpr double kRobustSkewness = 1.0;
inline constexpr double kRobustOutlierIqr = 3.0;
inline constexpr double kRobustOutlierFraction = 0.01;
bool robust_scaling_wanted(std::span<const double> values);

// The q-quantile (0 <= q <= 1) of sorted values, interpolated linearly
// between the two nearest (numpy's default); 0 when there are none.
double sorted_quantile(std::span<const double> sorted, double q);

// Which columns become features and how categorical columns are cut down.
// Defaults are the documented ones (docs/TRAINING.md).
struct FeatureOptions {
  // Exactly these columns (in source order), when set; a column named here
  // is used even when it looks like an identifier.
  std::optional<std::vector<std::string>> features;
  std::vector<std::string> exclude;  // never these
  // A categorical level needs this many training rows for its own slot.
  std::int64_t category_min_count = 5;
  // At most this many levels keep their own slot (the most frequent).
  std::int64_t max_categories = 50;
  // How one-value numeric columns are scaled.
  Scaling scaling = Scaling::kStandard;
};

// A column that is not among the features, and why (for the run's note,
// its lineage and the model file).
struct ExcludedColumn {
  std::string column;
  std::string reason;  // "identifier: 3200 distinct values in 3200 training rows", "exclude=", "not in features="
  bool identifier = false;  // left out by the identifier rule, not by the user
};

// The identifier rule: a categorical column whose training rows number at
// least kIdentifierMinRows and hold at least kIdentifierDistinctFraction x
// rows distinct values reads as an id or a name, unique per row, and is
// left out unless features= names it.
inline constexpr std::uint64_t kIdentifierMinRows = 20;
inline constexpr double kIdentifierDistinctFraction = 0.9;

class FeatureTransform {
 public:
  FeatureTransform() = default;
  // Fits on the rows `rows` (indices into table) of `table`. Throws kUsage
  // when `options` name a column the table does not have as a feature
  // (callers that know where the names came from check first, see
  // check_feature_columns) or leave no feature column.
  static FeatureTransform fit(const Table& table, std::span<const std::uint32_t> rows,
                              const FeatureOptions& options = {});
  // Calls its argument once per training row, in the same order every time,
  // with the row in the store's layout (fp32, the feature columns of the
  // schema back to back).
  using RowScan = std::function<void(const std::function<void(const float*)>&)>;
  // fit over `rows` training rows that `scan` produces (it is called twice:
  // means, then spreads), `schema` giving the columns, label and sample
  // shape (its feature buffer is not read). The same transform as fit()
  // over the same rows in the same order, so a version streamed from the
  // store block by block fits as one held in memory. The same errors.
  static FeatureTransform fit(const Table& schema, std::uint64_t rows, const RowScan& scan,
                              const FeatureOptions& options = {});

  // The transform's input for rows `rows` of `table` (the table it was
  // fitted on, or one with the same columns and dictionaries): the columns
  // it uses, in its order, rows x input_width() floats.
  std::vector<float> gather(const Table& table, std::span<const std::uint32_t> rows) const;
  std::vector<float> gather(const Table& table) const;  // every row

  // Transforms `features` (rows x input_width(), the store's layout) into
  // rows x output_width() floats; adds what it imputed to `counts`.
  std::vector<float> apply(std::span<const float> features, TransformCounts& counts) const;

  // Where each of the transform's columns starts in a stored row of a
  // version with `columns` (its label at `label_column`): what
  // apply_stored reads. kUsage naming a column the version lacks.
  std::vector<std::size_t> stored_offsets(const std::vector<ColumnSchema>& columns, std::size_t label_column) const;
  // Where each of the transform's columns starts in a row of its input
  // layout (the columns back to back, as apply reads them).
  std::vector<std::size_t> gathered_offsets() const;
  // Transforms one stored row (fp32, the layout `offsets` came from) into
  // `out` (output_width() floats, zeroed by the caller); adds what it
  // imputed to `counts`. How a batch is expanded as it is read, with no
  // transformed copy of the whole table.
  void apply_stored(const float* row, std::span<const std::size_t> offsets, float* out, TransformCounts& counts) const;

  std::int64_t input_width() const;
  std::int64_t output_width() const;
  // The network's per-sample input shape: the input shape when nothing is
  // one-hot encoded (so images keep {C, H, W}), else {output_width()}.
  std::vector<std::int64_t> output_shape() const;
  const std::vector<std::int64_t>& input_shape() const { return input_shape_; }
  const std::vector<ColumnTransform>& columns() const { return columns_; }
  const std::vector<ExcludedColumn>& excluded() const { return excluded_; }

  nlohmann::json to_json() const;
  static FeatureTransform from_json(const nlohmann::json& json);  // kCorrupt on bad JSON

 private:
  // apply's work: transforms whole rows of `features` into `out` (rows x
  // output_width() floats, zeroed by the caller).
  void apply_into(std::span<const float> features, float* out, TransformCounts& counts) const;
  // One row: column i of the transform starts at row + offsets[i].
  void transform_row(const float* row, std::span<const std::size_t> offsets, float* out, TransformCounts& counts) const;

  std::vector<ColumnTransform> columns_;
  std::vector<std::int64_t> input_shape_;
  std::vector<ExcludedColumn> excluded_;
};

// The message for a name in features= / exclude= that is not a feature
// column of `table`: "no column 'ordr_id'; did you mean 'order_id'?", or
// "'returned' is the label column, not a feature" for the label; nullopt
// when every name is a feature column. The caller adds where the names
// came from (the config key and its source).
std::optional<std::string> check_feature_columns(const Table& table, const std::vector<std::string>& names);

// How a regression target is encoded for training: standardized (the
// default), log1p(y - shift) standardized, or log when log_target_wanted.
enum class TargetTransform { kStandard, kLog, kAuto };
const char* target_transform_name(TargetTransform t);  // "standard", "log", "auto"
TargetTransform parse_target_transform(const std::string& text);  // kUsage naming the choices

// The rule of TargetTransform::kAuto on the training targets: a log target
// when every target is at least 0 and their skewness is at least
// kLogTargetSkewness (a long right tail, where a squared error on the raw
// values is ruled by the few largest). Pure.
inline constexpr double kLogTargetSkewness = 0.75;
bool log_target_wanted(std::span<const float> targets);

class LabelEncoding {
 public:
  LabelEncoding() = default;
  // Fits the encoding for `loss` from the label column of `train` (all of
  // its rows) and, for classes, `test`. Throws kUsage when the loss does not
  // suit the label (bce on more than two classes; a classification loss on
  // a non-integer numeric label), naming the column.
  // A regression target is encoded as `target` says; the log target's
  // shift is min(0, the least training target), so log1p sees values >= 0.
  static LabelEncoding fit(LossKind loss, const Table& train, const Table& test,
                           TargetTransform target = TargetTransform::kStandard);
  // The loss a label column suggests when the config names none: softmax_ce
  // when labels_are_classes(train), mse otherwise.
  static LossKind infer_loss(const Table& train);

  bool classification() const { return classification_; }
  std::int64_t classes() const { return static_cast<std::int64_t>(class_names_.size()); }
  const std::vector<std::string>& class_names() const { return class_names_; }
  const std::string& column() const { return column_; }

  // Stored label value (a code or a number) -> training label: the class
  // index, or the standardized target. Throws kBadData naming `where` and
  // the value for a class it does not know, or for a log target's value at
  // or below shift - 1 (log1p has no value there).
  float encode(float stored, const std::string& where) const;
  std::vector<float> encode_all(std::span<const float> stored, const std::string& where) const;
  // Training-scale regression output -> the target's own units.
  double decode_value(double standardized) const {
    const double v = standardized * scale_ + mean_;
    return log_ ? std::expm1(v) + shift_ : v;
  }
  // Regression: the standardization of the (log) target, decode_value's
  // steps for the ONNX export and the format's reader.
  double target_mean() const { return mean_; }
  double target_scale() const { return scale_; }
  bool log_target() const { return log_; }
  double log_shift() const { return shift_; }

  nlohmann::json to_json() const;
  static LabelEncoding from_json(const nlohmann::json& json);

 private:
  // fit's log target: shift, mean and scale from the training targets.
  static LabelEncoding fit_log_target(LabelEncoding e, std::span<const float> targets);

  bool classification_ = true;
  std::string column_;
  bool categorical_ = false;
  std::vector<double> class_values_;     // numeric labels: sorted distinct values
  std::vector<std::string> class_names_;
  double mean_ = 0, scale_ = 1;          // regression
  bool log_ = false;                     // regression: a log target
  double shift_ = 0;                     // log target: log1p(y - shift_)
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
