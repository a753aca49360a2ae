// What `anneal predict` does to rows, for the other programs that answer
// with a model's predictions (`anneal serve`, src/serve/): the same parse of
// delimited text, the same alignment and preprocessing, the same forward
// passes and the same rendering of the answers, so that a row gets the same
// answer, byte for byte, whichever way it arrives. Defined in
// src/runs/predict.cc and src/runs/prediction_csv.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/formats.h"
#include "anneal/model_file.h"
#include "anneal/preprocess.h"

namespace anneal::runs {

// Rows per forward pass of a prediction: predict_file and predict_prepared
// both run passes of this many rows, counted from the first row.
inline constexpr std::size_t kPredictPassRows = 256;

// Whether `model` predicts from CSV/TSV rows (it was trained on CSV or TSV
// data); image and LIBSVM models take their raw feature values instead.
bool reads_delimited_rows(const ModelFile& model);

// How prediction parses CSV/TSV text for `model`, naming the text
// `display_name` in errors: no label; only the columns the model reads are
// read, those it reads as numbers or dates typed, the rest (one-hot
// columns) text; dates in the formats the training data had.
ParseOptions prediction_parse_options(const ModelFile& model, const std::string& display_name);

// Rows ready for the model's predictor: rows x features.output_width()
// floats, and what preprocessing imputed.
struct PreparedRows {
  std::uint64_t rows = 0;
  std::vector<float> x;
  TransformCounts counts;
};

// The rows of `text`, CSV (`delimiter` ',') or TSV ('\t') with a header line
// naming the model's feature columns, read and preprocessed as
// predict_file reads a file's rows: prediction_parse_options, then
// aligned_features, then the model's feature transform. Errors as
// predict_file's: kUsage for a missing feature column, kBadData naming
// `display_name` for bad input. Thread-safe (reads `model` only).
PreparedRows prepare_rows(const ModelFile& model, std::string_view text, char delimiter,
                          const std::string& display_name);

// Rows given as the model's raw feature values, rows x
// features.input_width() floats in the model's column order (NaN for a
// missing value), through the model's feature transform: for models whose
// rows are not delimited text (reads_delimited_rows false), as eval feeds
// them. kBadData when `raw` is not a whole number of rows. Thread-safe.
PreparedRows prepare_raw_rows(const ModelFile& model, std::span<const float> raw);

// The raw predictions (rows x outputs, as Predictor::predict gives them)
// of `rows` prepared rows `x`, in passes of at most kPredictPassRows
// counted from the first, as predict_file runs them. `predictor` must be
// a Predictor of `model`, used by this thread alone for the call.
std::vector<float> predict_prepared(const ModelFile& model, Predictor& predictor, std::span<const float> x,
                                    std::uint64_t rows);

// The answers for `rows` rows of `model`'s raw predictions, as predict's
// CSV writes them: for a classifier, each row's predicted class (index
// into model.labels.class_names(); a binary model with a decision
// threshold answers its second class when that class's probability is
// above it) and its class probabilities (rows x
// classes); for a regression model, each row's value in the target's
// units. Numbers as text with 7 significant digits, the text predict's CSV
// holds (number_text below).
struct PredictionAnswers {
  bool classification = false;
  std::vector<std::size_t> best_class;  // rows (classifier)
  std::vector<float> probabilities;     // rows x classes (classifier)
  std::vector<double> values;           // rows (regression)
};
PredictionAnswers prediction_answers(const ModelFile& model, std::span<const float> predictions,
                                     std::uint64_t rows);

// `value` as predict's CSV writes a number: 7 significant digits.
std::string prediction_number_text(double value);

// The whole CSV predict writes for `rows` rows of `model`'s raw
// predictions: its header line, then the rows numbered from 1.
std::string prediction_csv(const ModelFile& model, std::span<const float> predictions, std::uint64_t rows);

}  // namespace anneal::runs
