// `anneal predict`: a registered model's predictions for the rows of a
// CSV/TSV file that has no label column.
#include <filesystem>
#include <string>
#include <string_view>

#include "anneal/device.h"
#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/fs.h"
#include "anneal/runs.h"
#include "anneal/model_inputs.h"
#include "runs/prediction_csv.h"

namespace anneal {
namespace {

// `text` with one more column, named `name`, holding 0 in every record: the
// parser needs a label column and predict input has none. Records end at a
// line break outside double quotes (RFC 4180).
std::string with_placeholder_label(std::string_view text, char delimiter, const std::string& name) {
  std::string out;
  out.reserve(text.size() + text.size() / 8 + name.size());
  bool quoted = false, header = true, empty_line = true;
  auto end_record = [&](std::size_t at_cr) {
    if (!empty_line) out += std::string(1, delimiter) + (header ? name : "0");
    header = header && empty_line;
    (void)at_cr;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') quoted = !quoted;
    if (!quoted && (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n'))) {
      end_record(i);
      empty_line = true;
      if (c == '\r') {
        out += "\r\n";
        ++i;
      } else {
        out += '\n';
      }
      continue;
    }
    if (c != '\r' && !(empty_line && c == '\xEF' && out.empty())) empty_line = false;
    out += c;
  }
  end_record(text.size());
  return out;
}

}  // namespace

PredictResult predict_file(Store& store, const ModelRef& ref, const std::filesystem::path& input,
                           const std::filesystem::path& out, bool force, const BackendOptions& compute) {
  PredictResult result;
  result.model = find_model(store, ref);
  runs::ModelFile model = runs::load_model(store, result.model);
  if (model.dataset_format != "csv" && model.dataset_format != "tsv")
    throw usage_error(Subject::kPredictInput, ": prediction reads CSV/TSV files; model " + result.model.ref() +
                                                 " was trained on " + model.dataset_format +
                                                 " data (evaluate it on an imported version instead)");
  if (!force && std::filesystem::exists(out))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
  std::string text;
  try {
    FileSnapshot contents(input);
    text = decompress_input(contents.bytes(), input.string());
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) throw usage_error(Subject::kPredictInput, input.string() + ": no such file");
    throw;
  }
  Format format = detect_format(input.filename().string(), text);
  char delimiter = format == Format::kTsv ? '\t' : ',';
  if (format != Format::kCsv && format != Format::kTsv) delimiter = model.dataset_format == "tsv" ? '\t' : ',';
  const std::string placeholder = "__anneal_placeholder_label__";
  ParseOptions options;
  options.display_name = input.string();
  options.label = placeholder;
  options.max_columns = kDefaultMaxColumns + 1;  // the placeholder label is one more
  // Only the columns the model reads as numbers or dates are typed; every
  // other column, one-hot ones and those it does not use, is text, so an
  // odd value in a column the model ignores cannot fail the prediction.
  // Date columns are read in the format the training data had, whatever
  // the first rows of this file look like (01/02/2024 needs it).
  std::vector<std::string> typed;
  for (const auto& c : model.features.columns())
    if (!c.one_hot) typed.push_back(c.column);
  options.typed_columns = typed;
  for (const auto& c : model.dataset_columns)
    if (c.type == ColumnType::kDatetime) options.date_formats.push_back({c.name, c.datetime_format, true});
  Table table;
  {
    std::string widened = with_placeholder_label(text, delimiter, placeholder);
    std::string().swap(text);  // one copy of the input at a time
    table = parse_delimited(widened, delimiter, options);
  }
  std::vector<float> raw = runs::aligned_features(table, model, input.string());
  TransformCounts counts;
  std::vector<float> x = model.features.apply(raw, counts);
  result.rows = table.rows;
  result.missing = counts.missing;
  result.unseen = counts.unseen;
  const std::unique_ptr<Backend> backend = make_backend(compute);
  runs::Predictor predictor(model, *backend);
  std::vector<float> predictions = predictor.predict(x);

  const std::string csv = runs::prediction_csv(model, predictions, table.rows);
  std::filesystem::path dir = out.parent_path().empty() ? std::filesystem::path(".") : out.parent_path();
  if (!write_file_atomic(out, csv, dir, force))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
  return result;
}

}  // namespace anneal
