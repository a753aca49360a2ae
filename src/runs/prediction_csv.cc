#include "runs/prediction_csv.h"

#include <algorithm>
#include <charconv>

#include "anneal/model_kind.h"
#include "anneal/prediction.h"
#include "anneal/scoring.h"

namespace anneal::runs {
namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string prediction_number_text(double v) {
  // printf's %.7g, which is what an ostream with precision 7 wrote before:
  // to_chars with a precision is specified as that conversion, without a
  // stream (and its locale) per number. Serve writes every probability of
  // every answer through here.
  // 32 bytes hold any double's %.7g (at most 14 characters), so it cannot
  // run out of room.
  char text[32];
  const char* end = std::to_chars(text, text + sizeof text, v, std::chars_format::general, 7).ptr;
  return std::string(text, static_cast<std::size_t>(end - text));
}

PredictionAnswers prediction_answers(const ModelFile& model, std::span<const float> predictions,
                                     std::uint64_t rows) {
  PredictionAnswers answers;
  answers.classification = model.labels.classification();
  if (answers.classification) {
    const LossKind head = model_kind(model).prediction_loss(model);
    answers.probabilities = class_probabilities(head, predictions);
    const auto k = static_cast<std::size_t>(model.labels.classes());
    answers.best_class.reserve(rows);
    for (std::uint64_t r = 0; r < rows; ++r) {
      const float* p = answers.probabilities.data() + r * k;
      // A binary model's decision threshold, else the most probable class.
      answers.best_class.push_back(k == 2 && model.threshold
                                       ? static_cast<std::size_t>(p[1] > *model.threshold)
                                       : static_cast<std::size_t>(std::max_element(p, p + k) - p));
    }
  } else {
    answers.values.reserve(rows);
    for (std::uint64_t r = 0; r < rows; ++r) answers.values.push_back(model.labels.decode_value(predictions[r]));
  }
  return answers;
}

std::string prediction_csv_header(const ModelFile& model) {
  std::string csv = "row,prediction";
  if (model.labels.classification())
    for (const auto& name : model.labels.class_names()) csv.append(",").append(csv_field("p_" + name));
  csv += "\n";
  return csv;
}

std::string prediction_csv_rows(const ModelFile& model, std::span<const float> predictions, std::uint64_t rows,
                                std::uint64_t first_row) {
  std::string csv;
  const PredictionAnswers answers = prediction_answers(model, predictions, rows);
  const auto k = static_cast<std::size_t>(answers.classification ? model.labels.classes() : 1);
  for (std::uint64_t r = 0; r < rows; ++r) {
    csv += std::to_string(first_row + r + 1) + ",";
    if (answers.classification) {
      const float* p = answers.probabilities.data() + r * k;
      csv += csv_field(model.labels.class_names()[answers.best_class[r]]);
      for (std::size_t j = 0; j < k; ++j) {
        csv += ',';
        csv += prediction_number_text(p[j]);
      }
    } else {
      csv += prediction_number_text(answers.values[r]);
    }
    csv += "\n";
  }
  return csv;
}

std::string prediction_csv(const ModelFile& model, std::span<const float> predictions, std::uint64_t rows) {
  return prediction_csv_header(model) + prediction_csv_rows(model, predictions, rows, 0);
}

}  // namespace anneal::runs
