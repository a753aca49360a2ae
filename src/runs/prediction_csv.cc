#include "runs/prediction_csv.h"

#include <algorithm>
#include <sstream>

#include "anneal/model_kind.h"
#include "anneal/scoring.h"

namespace anneal::runs {
namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string number_text(double v) {
  std::ostringstream out;
  out.precision(7);
  out << v;
  return out.str();
}

}  // namespace

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
  const bool classification = model.labels.classification();
  const LossKind head = model_kind(model).prediction_loss(model);
  std::vector<float> probs = classification ? class_probabilities(head, predictions) : std::vector<float>();
  const auto k = static_cast<std::size_t>(classification ? model.labels.classes() : 1);
  for (std::uint64_t r = 0; r < rows; ++r) {
    csv += std::to_string(first_row + r + 1) + ",";
    if (classification) {
      const float* p = probs.data() + r * k;
      // A binary model's decision threshold, else the most probable class.
      auto best = k == 2 && model.threshold ? static_cast<std::size_t>(p[1] > *model.threshold)
                                            : static_cast<std::size_t>(std::max_element(p, p + k) - p);
      csv += csv_field(model.labels.class_names()[best]);
      for (std::size_t j = 0; j < k; ++j) {
        csv += ',';
        csv += number_text(p[j]);
      }
    } else {
      csv += number_text(model.labels.decode_value(predictions[r]));
    }
    csv += "\n";
  }
  return csv;
}

}  // namespace anneal::runs
