// Using registered models: eval on a dataset version, predict on a file.
#include <cmath>
#include <map>
#include <sstream>

#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/fs.h"
#include "anneal/runs.h"
#include "anneal/device.h"
#include "runs/model_file.h"
#include "runs/prepare.h"
#include "runs/use.h"

namespace anneal {
using runs::ModelFile;

namespace {

ModelFile load_model(Store& store, const ModelRecord& record) {
  return runs::decode_model(read_model(store, record), "model " + record.ref());
}

// The model's code of each code of a column dictionary (by category name);
// codes the model never saw map to `categories` (an unseen code).
std::vector<float> code_map(const std::vector<std::string>& from, const std::vector<std::string>& to) {
  std::map<std::string, float> index;
  for (std::size_t i = 0; i < to.size(); ++i) index.emplace(to[i], static_cast<float>(i));
  std::vector<float> out(from.size(), static_cast<float>(to.size()));
  for (std::size_t i = 0; i < from.size(); ++i)
    if (auto it = index.find(from[i]); it != index.end()) out[i] = it->second;
  return out;
}

float remap(float code, const std::vector<float>& map) {
  if (std::isnan(code)) return code;
  auto i = static_cast<std::size_t>(code);
  return code >= 0 && i < map.size() ? map[i] : static_cast<float>(map.size());
}

// Rows of `table` laid out as the model's feature columns expect (found by
// name, categorical codes translated into the model's dictionary).
std::vector<float> aligned_features(const Table& table, const ModelFile& model, const std::string& where) {
  std::map<std::string, std::pair<std::size_t, std::size_t>> located;  // name -> (column, offset)
  std::size_t offset = 0;
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    if (c == table.label_column) continue;
    located[table.columns[c].name] = {c, offset};
    offset += static_cast<std::size_t>(table.columns[c].width());
  }
  const auto in_w = static_cast<std::size_t>(table.sample_width());
  const auto out_w = static_cast<std::size_t>(model.features.input_width());
  std::vector<float> out(table.rows * out_w);
  std::size_t out_offset = 0;
  for (const ColumnTransform& ct : model.features.columns()) {
    auto it = located.find(ct.column);
    if (it == located.end()) {
      std::string needed;
      for (const auto& c : model.features.columns()) needed += (needed.empty() ? "" : ", ") + c.column;
      throw usage_error(where + ": missing column '" + ct.column + "' (the model needs: " + needed + ")");
    }
    const ColumnSchema& col = table.columns[it->second.first];
    if (col.width() != ct.width)
      throw usage_error(where + ": column '" + ct.column + "' holds " + std::to_string(col.width()) +
                        " values per row, the model expects " + std::to_string(ct.width));
    std::vector<float> map;
    if (ct.one_hot) {
      if (col.type != ColumnType::kCategorical) throw failure("column '" + ct.column + "' was not read as categorical");
      map = code_map(col.categories, ct.category_names);
    } else if (col.type == ColumnType::kCategorical) {
      throw data_error(where + ": column '" + ct.column + "' holds text; the model expects numbers");
    }
    for (std::uint64_t r = 0; r < table.rows; ++r) {
      const float* src = table.features.data() + r * in_w + it->second.second;
      float* dst = out.data() + r * out_w + out_offset;
      for (std::int64_t k = 0; k < ct.width; ++k) dst[k] = ct.one_hot ? remap(src[k], map) : src[k];
    }
    out_offset += static_cast<std::size_t>(ct.width);
  }
  return out;
}

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

EvalSplit parse_eval_split(std::string_view text) {
  if (text == "train") return EvalSplit::kTrain;
  if (text == "test") return EvalSplit::kTest;
  if (text == "all") return EvalSplit::kAll;
  throw usage_error("--split " + std::string(text) + ": expected train, test or all");
}

namespace runs {

ModelInputs model_inputs(Store& store, const ModelFile& model, const std::string& model_ref,
                         const DatasetRef& data, EvalSplit split) {
  ModelInputs result;
  LoadedDataset loaded = load_dataset(store, data);
  result.dataset = loaded.version.ref();
  if (loaded.version.label_column != model.label_column)
    throw usage_error("dataset " + result.dataset + " has label '" + loaded.version.label_column + "', model " +
                      model_ref + " predicts '" + model.label_column + "'");
  if (split == EvalSplit::kDefault) split = loaded.test.rows > 0 ? EvalSplit::kTest : EvalSplit::kTrain;
  if (split == EvalSplit::kTest && loaded.test.rows == 0)
    throw usage_error("--split test: dataset " + result.dataset + " has no test split; use --split train or all");
  result.split = split == EvalSplit::kTrain ? "train" : split == EvalSplit::kTest ? "test" : "all";

  std::vector<float> features, stored_labels;
  std::string where = "dataset " + result.dataset;
  for (const Table* part : {&loaded.train, &loaded.test}) {
    bool wanted = split == EvalSplit::kAll || (part == &loaded.train) == (split == EvalSplit::kTrain);
    if (!wanted || part->rows == 0) continue;
    std::vector<float> f = aligned_features(*part, model, where);
    features.insert(features.end(), f.begin(), f.end());
    std::vector<float> labels = part->labels;
    const ColumnSchema& label = part->columns[part->label_column];
    if (label.type == ColumnType::kCategorical) {
      std::vector<float> map = code_map(label.categories, model.labels.class_names());
      for (float& y : labels) y = remap(y, map);
    }
    stored_labels.insert(stored_labels.end(), labels.begin(), labels.end());
  }
  result.x = model.features.apply(features, result.counts);
  result.y = model.labels.encode_all(stored_labels, where + " " + result.split);
  return result;
}

}  // namespace runs

EvalResult evaluate_model(Store& store, const ModelRef& ref, const DatasetRef& data, EvalSplit split,
                          const BackendOptions& compute) {
  EvalResult result;
  result.model = find_model(store, ref);
  ModelFile model = load_model(store, result.model);
  runs::ModelInputs inputs = runs::model_inputs(store, model, result.model.ref(), data, split);
  result.dataset = inputs.dataset;
  result.split = inputs.split;
  result.missing = inputs.counts.missing;
  result.unseen = inputs.counts.unseen;
  const std::vector<float>& x = inputs.x;
  const std::vector<float>& y = inputs.y;
  const std::unique_ptr<Backend> backend = make_backend(compute);
  runs::Predictor predictor(model, *backend);
  std::vector<float> predictions = predictor.predict(x);
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
  return result;
}

PredictResult predict_file(Store& store, const ModelRef& ref, const std::filesystem::path& input,
                           const std::filesystem::path& out, bool force, const BackendOptions& compute) {
  PredictResult result;
  result.model = find_model(store, ref);
  ModelFile model = load_model(store, result.model);
  if (model.dataset_format != "csv" && model.dataset_format != "tsv")
    throw usage_error("--input: predict reads CSV/TSV files; model " + result.model.ref() + " was trained on " +
                      model.dataset_format + " data (use 'anneal eval' on an imported version)");
  if (!force && std::filesystem::exists(out))
    throw usage_error("-o " + out.string() + ": file exists (pass --force to replace it)");
  std::string text;
  try {
    FileSnapshot contents(input);
    text = decompress_input(contents.bytes(), input.string());
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) throw usage_error("--input " + input.string() + ": no such file");
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
  for (const auto& c : model.features.columns())
    if (c.one_hot) options.categorical.push_back(c.column);
  Table table;
  {
    std::string widened = with_placeholder_label(text, delimiter, placeholder);
    text.clear();
    // Categorical columns the file lacks are reported below as missing
    // columns, not as a bad --categorical name.
    std::vector<std::string> present;
    {
      ParseOptions probe = options;
      probe.categorical.clear();
      Table header_only = parse_delimited(widened, delimiter, probe);
      for (const auto& c : header_only.columns)
        for (const auto& want : options.categorical)
          if (c.name == want) present.push_back(want);
    }
    options.categorical = present;
    table = parse_delimited(widened, delimiter, options);
  }
  std::vector<float> raw = aligned_features(table, model, "--input " + input.string());
  TransformCounts counts;
  std::vector<float> x = model.features.apply(raw, counts);
  result.rows = table.rows;
  result.missing = counts.missing;
  result.unseen = counts.unseen;
  const std::unique_ptr<Backend> backend = make_backend(compute);
  runs::Predictor predictor(model, *backend);
  std::vector<float> predictions = predictor.predict(x);

  std::string csv = "row,prediction";
  const bool classification = model.labels.classification();
  if (classification)
    for (const auto& name : model.labels.class_names()) csv += "," + csv_field("p_" + name);
  csv += "\n";
  LossKind as = model.linear ? LossKind::kSoftmaxCrossEntropy : model.loss;
  std::vector<float> probs = classification ? runs::class_probabilities(as, predictions) : std::vector<float>();
  const auto k = static_cast<std::size_t>(classification ? model.labels.classes() : 1);
  for (std::uint64_t r = 0; r < table.rows; ++r) {
    csv += std::to_string(r + 1) + ",";
    if (classification) {
      const float* p = probs.data() + r * k;
      auto best = static_cast<std::size_t>(std::max_element(p, p + k) - p);
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
  std::filesystem::path dir = out.parent_path().empty() ? std::filesystem::path(".") : out.parent_path();
  if (!write_file_atomic(out, csv, dir, force))
    throw usage_error("-o " + out.string() + ": file exists (pass --force to replace it)");
  return result;
}

}  // namespace anneal
