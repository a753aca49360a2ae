// `anneal predict`: a registered model's predictions for the rows of a
// CSV/TSV file that has no label column.
//
// A plain file is read in windows (scan_delimited) and each batch of rows is
// aligned, transformed, predicted and appended to a temporary file beside
// OUT, so memory does not grow with the file's rows; OUT appears, whole, by
// a rename at the end. A compressed file is inflated into memory first
// (bounded by the decompression limits) and goes through the same steps as
// one batch.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "anneal/delimited_scan.h"
#include "anneal/device.h"
#include "anneal/error.h"
#include "anneal/formats.h"
#include "anneal/fs.h"
#include "anneal/input_stream.h"
#include "anneal/model_inputs.h"
#include "anneal/prediction.h"
#include "anneal/runs.h"
#include "runs/prediction_csv.h"

namespace anneal {
namespace {

// Rows per forward pass of the predictor.
constexpr std::size_t kPassRows = runs::kPredictPassRows;
// Transformed rows held at once, at least one pass: one-hot columns make a
// transformed row many times its raw size, so a batch is expanded a piece
// at a time. Passes of a piece run back to back: with forward passes and
// transforms taking turns pass by pass, the OpenMP team spins through every
// transform (measured 3x slower on 2 cores).
constexpr std::size_t kTransformedBytes = std::size_t{4} << 20;
// Prediction text gathered before it is written out.
constexpr std::size_t kOutputBufferBytes = std::size_t{1} << 20;

// The file's first bytes, enough to tell whether it is compressed and, for
// a name that says no format, what its first line that says something
// (detect_format's look) holds: at least 64 KiB, and more while that line
// has not ended.
std::string first_bytes(const FileReader& file) {
  auto holds_first_line = [](std::string_view text) {
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    for (;;) {
      const std::size_t newline = text.find('\n');
      if (newline == std::string_view::npos) return false;
      const std::string_view line = text.substr(0, newline);
      if (line.find_first_not_of(" \t\r") != std::string_view::npos && line.front() != '#') return true;
      text.remove_prefix(newline + 1);
    }
  };
  std::string head;
  std::size_t want = std::size_t{64} << 10;
  for (;;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(want, file.size()));
    head.resize(n);
    file.read_at(0, std::span<char>(head.data(), n));
    if (n == file.size() || is_compressed_input(head) || holds_first_line(head)) return head;
    want *= 2;
  }
}

// Predictions for a file's rows, batch by batch in file order, appended to
// `out` as they are made. Rows reach the predictor in passes of kPassRows
// counted from the file's first row, so every forward pass holds the rows
// a pass over the whole file would: the output does not depend on how the
// rows were cut into batches. Holds at most about kTransformedBytes of
// transformed rows (a pass, when a pass is more).
class BatchPredictor {
 public:
  BatchPredictor(const runs::ModelFile& model, Backend& backend, AtomicFileWriter& out, std::string where)
      : model_(model),
        predictor_(model, backend, static_cast<std::int64_t>(kPassRows)),
        out_(out),
        where_(std::move(where)),
        raw_width_(static_cast<std::size_t>(model.features.input_width())),
        width_(static_cast<std::size_t>(model.features.output_width())),
        piece_rows_(kPassRows * std::max<std::size_t>(1, kTransformedBytes / (std::max<std::size_t>(width_, 1) *
                                                                               sizeof(float) * kPassRows))) {
    for (const ColumnTransform& column : model.features.columns()) {
      if (!column.one_hot) continue;
      ModelDictionary& dictionary = one_hot_[column.column];
      dictionary.names = column.category_names;
      for (std::size_t code = 0; code < dictionary.names.size(); ++code)
        dictionary.codes.emplace(dictionary.names[code], static_cast<float>(code));
    }
    // A piece's room, once: growing by doubling could take twice that.
    pending_.reserve(piece_rows_ * width_);
    out_.append(runs::prediction_csv_header(model_));
  }

  // The values a categorical column gained (scan_delimited's
  // on_categories): when the model one-hot encodes the column, their codes
  // in the model's dictionary (its unseen code for a value it never saw),
  // 4 bytes a value rather than its text.
  void add_categories(const Table& batch, std::size_t column, std::span<const std::string> added) {
    auto found = one_hot_.find(batch.columns[column].name);
    if (found == one_hot_.end()) return;
    const ModelDictionary& dictionary = found->second;
    auto& [column_dictionary, model_codes] = code_maps_[column];
    column_dictionary = &found->second;
    for (const std::string& value : added) {
      auto code = dictionary.codes.find(value);
      const float unseen = static_cast<float>(dictionary.names.size());
      model_codes.push_back(code != dictionary.codes.end() ? code->second : unseen);
    }
  }

  // Predicts `batch`'s rows. A batch from scan_delimited holds its columns'
  // names and types only: its one-hot columns' codes become the model's
  // (add_categories), and the model's dictionary stands in for the column's
  // while the rows are aligned, so aligned_features maps them as it maps a
  // whole file's codes through the file's dictionary.
  void add(Table& batch) {
    std::vector<std::pair<std::vector<std::string>*, ModelDictionary*>> lent;
    const auto features = static_cast<std::size_t>(batch.sample_width());
    for (auto& [column, mapping] : code_maps_) {
      auto& [dictionary, model_codes] = mapping;
      // Another type here is aligned_features' to report.
      if (batch.columns[column].type != ColumnType::kCategorical) continue;
      const std::size_t feature = column - (column > batch.label_column ? 1 : 0);
      for (std::uint64_t row = 0; row < batch.rows; ++row) {
        float& cell = batch.features[row * features + feature];
        if (std::isnan(cell)) continue;
        const auto code = static_cast<std::size_t>(cell);
        // on_categories passes every value before the batch that holds it.
        if (code >= model_codes.size())
          throw failure(where_ + ": internal: code " + std::to_string(code) + " of column '" +
                        batch.columns[column].name + "' arrived before its value");
        cell = model_codes[code];
      }
      std::swap(batch.columns[column].categories, dictionary->names);
      lent.emplace_back(&batch.columns[column].categories, dictionary);
    }
    auto give_back = [&] {
      for (auto& [categories, dictionary] : lent) std::swap(*categories, dictionary->names);
    };
    std::vector<float> raw;
    try {
      raw = runs::aligned_features(batch, model_, where_);
    } catch (...) {
      give_back();
      throw;
    }
    give_back();
    for (std::size_t row = 0; row < batch.rows;) {
      const std::size_t take = std::min<std::size_t>(piece_rows_ - pending_rows_, batch.rows - row);
      const std::vector<float> x =
          model_.features.apply(std::span<const float>(raw).subspan(row * raw_width_, take * raw_width_), counts_);
      pending_.insert(pending_.end(), x.begin(), x.end());
      pending_rows_ += take;
      row += take;
      if (pending_rows_ == piece_rows_) predict_pending();
    }
    rows_ += batch.rows;
  }

  // Predicts the rows still waiting for a whole pass and writes out the rest
  // of the text.
  void finish() {
    predict_pending();
    out_.append(text_);
    text_.clear();
  }

  std::uint64_t rows() const { return rows_; }
  const TransformCounts& counts() const { return counts_; }

 private:
  void predict_pending() {
    if (pending_rows_ == 0) return;
    const std::vector<float> predictions = predictor_.predict(pending_);
    text_ += runs::prediction_csv_rows(model_, predictions, pending_rows_, predicted_);
    predicted_ += pending_rows_;
    pending_.clear();
    pending_rows_ = 0;
    if (text_.size() >= kOutputBufferBytes) {
      out_.append(text_);
      text_.clear();
    }
  }

  const runs::ModelFile& model_;
  runs::Predictor predictor_;
  AtomicFileWriter& out_;
  std::string where_;
  std::size_t raw_width_;                 // aligned values per row
  std::size_t width_;                     // transformed values per row
  std::size_t piece_rows_;                // rows transformed and predicted at once: whole passes
  // A one-hot column's dictionary in the model: code -> name, name -> code.
  struct ModelDictionary {
    std::vector<std::string> names;
    std::unordered_map<std::string, float> codes;
  };
  std::map<std::string, ModelDictionary> one_hot_;  // by column name
  // Per one-hot column of the file (by index): its model dictionary and
  // the model's code of each of the file's codes so far.
  std::map<std::size_t, std::pair<ModelDictionary*, std::vector<float>>> code_maps_;
  std::vector<float> pending_;            // transformed rows not yet predicted (less than a piece)
  std::size_t pending_rows_ = 0;
  std::string text_;                      // prediction lines not yet written
  std::uint64_t rows_ = 0, predicted_ = 0;
  TransformCounts counts_;
};

}  // namespace

namespace runs {

bool reads_delimited_rows(const ModelFile& model) {
  return model.dataset_format == "csv" || model.dataset_format == "tsv";
}

ParseOptions prediction_parse_options(const ModelFile& model, const std::string& display_name) {
  ParseOptions options;
  options.display_name = display_name;
  options.labelled = false;
  // Only the columns the model reads as numbers or dates are typed; every
  // other column, one-hot ones and those it does not use, is text, so an
  // odd value in a column the model ignores cannot fail the prediction.
  // Date columns are read in the format the training data had, whatever
  // the first rows of this file look like (01/02/2024 needs it).
  std::vector<std::string> typed, read;
  for (const auto& c : model.features.columns()) {
    if (!c.one_hot) typed.push_back(c.column);
    read.push_back(c.column);
  }
  options.typed_columns = typed;
  // The columns the model does not use are only read past: an identifier
  // unique per row would otherwise grow a dictionary with every row.
  options.read_columns = read;
  for (const auto& c : model.dataset_columns)
    if (c.type == ColumnType::kDatetime) options.date_formats.push_back({c.name, c.datetime_format, true});
  return options;
}

PreparedRows prepare_raw_rows(const ModelFile& model, std::span<const float> raw) {
  const auto raw_width = static_cast<std::size_t>(model.features.input_width());
  if (raw_width == 0 || raw.size() % raw_width != 0)
    throw data_error(std::to_string(raw.size()) + " values are not whole rows of " + std::to_string(raw_width));
  PreparedRows result;
  result.rows = raw.size() / raw_width;
  // The transform is row by row: one call over every row gives what
  // BatchPredictor's pieces give.
  result.x = model.features.apply(raw, result.counts);
  return result;
}

PreparedRows prepare_rows(const ModelFile& model, std::string_view text, char delimiter,
                          const std::string& display_name) {
  const Table table = parse_delimited(text, delimiter, prediction_parse_options(model, display_name));
  const std::vector<float> raw = aligned_features(table, model, display_name);
  return prepare_raw_rows(model, raw);
}

std::vector<float> predict_prepared(const ModelFile& model, Predictor& predictor, std::span<const float> x,
                                    std::uint64_t rows) {
  const auto width = static_cast<std::size_t>(model.features.output_width());
  if (x.size() != rows * width)
    throw data_error(std::to_string(x.size()) + " values are not " + std::to_string(rows) + " rows of " +
                     std::to_string(width));
  std::vector<float> predictions;
  // Passes of kPassRows counted from the first row, as BatchPredictor runs
  // them: a row's pass holds the rows predict_file's would.
  for (std::size_t row = 0; row < rows; row += kPassRows) {
    const std::size_t take = std::min<std::size_t>(kPassRows, rows - row);
    const std::vector<float> pass = predictor.predict(x.subspan(row * width, take * width));
    predictions.insert(predictions.end(), pass.begin(), pass.end());
  }
  return predictions;
}

}  // namespace runs

PredictResult predict_file(Store& store, const ModelRef& ref, const std::filesystem::path& input,
                           const std::filesystem::path& out, bool force, const BackendOptions& compute) {
  PredictResult result;
  result.model = find_model(store, ref);
  runs::ModelFile model = runs::load_model(store, result.model);
  if (!runs::reads_delimited_rows(model))
    throw usage_error(Subject::kPredictInput, ": prediction reads CSV/TSV files; model " + result.model.ref() +
                                                 " was trained on " + model.dataset_format +
                                                 " data (evaluate it on an imported version instead)");
  if (!force && std::filesystem::exists(out))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
  std::optional<FileReader> file;
  try {
    file.emplace(input);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) throw usage_error(Subject::kPredictInput, input.string() + ": no such file");
    throw;
  }
  // A compressed file is inflated, a piece at a time within the default
  // limits, into a scratch file beside OUT (disk, not memory), which is
  // then read like a plain one.
  const std::filesystem::path dir = out.parent_path().empty() ? std::filesystem::path(".") : out.parent_path();
  std::optional<ScratchFile> scratch;
  std::optional<FileReader> inflated;
  if (is_compressed_input(first_bytes(*file))) {
    scratch.emplace(dir);
    DecompressingReader reader(*file, input.string(), {});
    std::string piece(std::size_t{1} << 20, '\0');
    for (std::size_t n; (n = reader.read(piece)) > 0;) scratch->append(std::string_view(piece.data(), n));
    inflated.emplace(scratch->reader(input));
  }
  const FileReader& text = inflated ? *inflated : *file;
  const std::string head = first_bytes(text);
  Format format = detect_format(input.filename().string(), head);
  char delimiter = format == Format::kTsv ? '\t' : ',';
  if (format != Format::kCsv && format != Format::kTsv) delimiter = model.dataset_format == "tsv" ? '\t' : ',';
  const ParseOptions options = runs::prediction_parse_options(model, input.string());

  BackendOptions device = compute;
  device.int8 = model.int8;
  const std::unique_ptr<Backend> backend = make_backend(device);
  // Removed, with whatever was written, if anything below throws.
  AtomicFileWriter writer(out, dir);
  BatchPredictor predictor(model, *backend, writer, input.string());
  DelimitedScanCallbacks callbacks;
  callbacks.on_rows = [&](Table& batch) { predictor.add(batch); };
  callbacks.on_categories = [&](const Table& batch, std::size_t column, std::span<const std::string> added) {
    predictor.add_categories(batch, column, added);
  };
  scan_delimited(text, delimiter, options, callbacks);
  predictor.finish();
  if (!writer.commit(force))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
  result.rows = predictor.rows();
  result.missing = predictor.counts().missing;
  result.unseen = predictor.counts().unseen;
  return result;
}

}  // namespace anneal
