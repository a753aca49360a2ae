#include "anneal/model_inputs.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <type_traits>

#include "anneal/dataset_rows.h"
#include "anneal/error.h"

namespace anneal::runs {
namespace {

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
  // A code outside the dictionary (only a damaged stream holds one) is unseen.
  if (!(code >= 0 && code < static_cast<float>(map.size()))) return static_cast<float>(map.size());
  return map[static_cast<std::size_t>(code)];
}

}  // namespace

ModelFile load_model(Store& store, const ModelRecord& record) {
  return decode_model(read_model(store, record), "model " + record.ref());
}

InputAlignment::InputAlignment(const std::vector<ColumnSchema>& columns, std::size_t label_column,
                               const ModelFile& model, const std::string& where) {
  std::map<std::string, std::pair<std::size_t, std::size_t>> located;  // name -> (column, offset)
  std::size_t offset = 0;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (c == label_column) continue;
    located[columns[c].name] = {c, offset};
    offset += static_cast<std::size_t>(columns[c].width());
  }
  for (const ColumnTransform& ct : model.features.columns()) {
    auto it = located.find(ct.column);
    if (it == located.end()) {
      std::string needed;
      for (const auto& c : model.features.columns()) needed += (needed.empty() ? "" : ", ") + c.column;
      throw usage_error(where + ": missing column '" + ct.column + "' (the model needs: " + needed + ")");
    }
    const ColumnSchema& col = columns[it->second.first];
    if (col.width() != ct.width)
      throw usage_error(where + ": column '" + ct.column + "' holds " + std::to_string(col.width()) +
                        " values per row, the model expects " + std::to_string(ct.width));
    Column column{it->second.second, width_, static_cast<std::size_t>(ct.width), {}};
    if (ct.one_hot) {
      // A date column the model's version read as text, say, and this one as dates.
      if (col.type != ColumnType::kCategorical)
        throw usage_error(where + ": column '" + ct.column + "' is " + column_type_name(col.type) +
                          " here; the model was trained on it as categorical");
      column.code_map = code_map(col.categories, ct.category_names);
      column.unseen_code = static_cast<float>(ct.category_names.size());
    } else if (ct.datetime) {
      if (col.type != ColumnType::kDatetime)
        throw data_error(where + ": column '" + ct.column + "' holds " + column_type_name(col.type) +
                         " values; the model expects dates");
    } else if (col.type == ColumnType::kCategorical) {
      throw data_error(where + ": column '" + ct.column + "' holds text; the model expects numbers");
    } else if (col.type == ColumnType::kDatetime) {
      throw data_error(where + ": column '" + ct.column + "' holds dates; the model expects numbers");
    }
    width_ += column.width;
    columns_.push_back(std::move(column));
  }
}

void InputAlignment::apply(const float* row, float* out) const {
  for (const Column& c : columns_) {
    const float* src = row + c.from;
    float* dst = out + c.to;
    if (c.code_map.empty()) {
      std::copy_n(src, c.width, dst);
    } else {
      for (std::size_t k = 0; k < c.width; ++k) dst[k] = remap(src[k], c.code_map);
    }
  }
}

std::uint64_t InputAlignment::unseen_categories() const {
  std::uint64_t unseen = 0;
  for (const Column& c : columns_)
    unseen += static_cast<std::uint64_t>(std::count(c.code_map.begin(), c.code_map.end(), c.unseen_code));
  return unseen;
}

std::vector<float> aligned_features(const Table& table, const ModelFile& model, const std::string& where) {
  const InputAlignment alignment(table.columns, table.label_column, model, where);
  const auto in_w = static_cast<std::size_t>(table.sample_width());
  std::vector<float> out(table.rows * alignment.width());
  for (std::size_t r = 0; r < table.rows; ++r)
    alignment.apply(table.features.data() + r * in_w, out.data() + r * alignment.width());
  return out;
}

std::vector<float> labels_as_model_codes(const Table& table, const ModelFile& model) {
  std::vector<float> labels = table.labels;
  const ColumnSchema& label = table.columns[table.label_column];
  if (label.type != ColumnType::kCategorical || !model.labels.classification()) return labels;
  const std::vector<float> map = code_map(label.categories, model.labels.class_names());
  for (float& y : labels) y = remap(y, map);
  return labels;
}

namespace {

// The parts' rows, in order, as the model expects them; `label_name` is the
// parts' label column, checked against the model's.
ModelInputs inputs_of_parts(const ModelFile& model, const std::string& model_ref,
                            const std::vector<const Table*>& parts, const std::string& label_name,
                            const std::string& dataset, const std::string& split) {
  ModelInputs result;
  result.dataset = dataset;
  result.split = split;
  if (label_name != model.label_column)
    throw usage_error("dataset " + dataset + " has label '" + label_name + "', model " + model_ref + " predicts '" +
                      model.label_column + "'");
  std::vector<float> features, stored_labels;
  std::string where = "dataset " + dataset;
  for (const Table* part : parts) {
    if (part->rows == 0) continue;
    std::vector<float> f = aligned_features(*part, model, where);
    features.insert(features.end(), f.begin(), f.end());
    std::vector<float> labels = labels_as_model_codes(*part, model);
    stored_labels.insert(stored_labels.end(), labels.begin(), labels.end());
  }
  result.x = model.features.apply(features, result.counts);
  result.y = model.labels.encode_all(stored_labels, where + " " + result.split);
  return result;
}

}  // namespace

std::string for_each_input_piece(Store& store, const ModelFile& model, const std::string& model_ref,
                                 const DatasetRef& data, EvalSplit split, std::uint64_t piece_bytes,
                                 const std::function<void(ModelInputs&&)>& piece) {
  const DatasetVersion v = find_dataset(store, data);
  const std::string dataset = v.ref();
  if (v.label_column != model.label_column)
    throw usage_error("dataset " + dataset + " has label '" + v.label_column + "', model " + model_ref +
                      " predicts '" + model.label_column + "'");
  if (split == EvalSplit::kDefault) split = v.test_rows > 0 ? EvalSplit::kTest : EvalSplit::kTrain;
  if (split == EvalSplit::kTest && v.test_rows == 0)
    throw usage_error(Subject::kEvalSplit, "test: dataset " + dataset + " has no test split; use train or all");
  const std::string name = split == EvalSplit::kTrain ? "train" : split == EvalSplit::kTest ? "test" : "all";
  auto whole = [&](const std::string& role, std::size_t value_bytes, auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    TensorRowReader reader(store, v, role);
    if (reader.row_bytes() != value_bytes)
      throw corrupt("dataset " + dataset + ", " + role + ": expected one value a row").with(Remedy::kCheckStore);
    std::vector<T> out(reader.rows());
    reader.read(0, reader.rows(), std::as_writable_bytes(std::span<T>(out)));
    return out;
  };
  Table shell;
  shell.columns = v.columns;
  shell.sample_shape = v.sample_shape;
  for (std::size_t c = 0; c < v.columns.size(); ++c)
    if (v.columns[c].name == v.label_column) shell.label_column = c;
  // One stream of features, its labels, and which of its rows the split takes.
  auto pieces = [&](const std::string& features_role, const std::string& labels_role, const std::vector<std::uint8_t>& take) {
    TensorRowReader features(store, v, features_role);
    const std::vector<float> labels = whole(labels_role, sizeof(float), static_cast<float*>(nullptr));
    if (labels.size() != features.rows() || (!take.empty() && take.size() != labels.size()))
      throw corrupt("dataset " + dataset + ": " + features_role + " and " + labels_role + " hold different row counts")
          .with(Remedy::kCheckStore);
    const std::uint64_t rows_per_piece = std::max<std::uint64_t>(1, piece_bytes / std::max<std::size_t>(features.row_bytes(), 1));
    std::vector<std::byte> stored;
    for (std::uint64_t first = 0; first < features.rows(); first += rows_per_piece) {
      const std::uint64_t count = std::min(rows_per_piece, features.rows() - first);
      stored.resize(count * features.row_bytes());
      features.read(first, count, stored);
      Table part = shell;
      const auto width = static_cast<std::size_t>(features.row_width());
      for (std::uint64_t r = 0; r < count; ++r) {
        if (!take.empty() && !take[first + r]) continue;
        const std::byte* row = stored.data() + r * features.row_bytes();
        for (std::size_t k = 0; k < width; ++k)
          part.features.push_back(features.type() == StoredType::kU8
                                      ? static_cast<float>(std::to_integer<std::uint8_t>(row[k]))
                                      : reinterpret_cast<const float*>(row)[k]);
        part.labels.push_back(labels[first + r]);
        ++part.rows;
      }
      if (part.rows > 0) piece(inputs_of_parts(model, model_ref, {&part}, v.label_column, dataset, name));
    }
  };
  const bool separate_test = v.stream("test.features") != nullptr;
  if (separate_test) {
    if (split != EvalSplit::kTest) pieces("features", "labels", {});
    if (split != EvalSplit::kTrain) pieces("test.features", "test.labels", {});
    return name;
  }
  std::vector<std::uint8_t> in_test;
  if (v.stream("split")) in_test = whole("split", 1, static_cast<std::uint8_t*>(nullptr));
  if (in_test.empty()) {
    if (split != EvalSplit::kTest) pieces("features", "labels", {});
    return name;
  }
  // Train and test rows interleave in one stream: the train part first,
  // then the test part, as load_dataset splits them.
  std::vector<std::uint8_t> take(in_test.size());
  for (bool test_part : {false, true}) {
    if ((test_part ? EvalSplit::kTrain : EvalSplit::kTest) == split) continue;
    for (std::size_t r = 0; r < take.size(); ++r) take[r] = (in_test[r] != 0) == test_part;
    pieces("features", "labels", take);
  }
  return name;
}

ModelInputs model_inputs(Store& store, const ModelFile& model, const std::string& model_ref,
                         const DatasetRef& data, EvalSplit split) {
  LoadedDataset loaded = load_dataset(store, data);
  const std::string dataset = loaded.version.ref();
  if (loaded.version.label_column != model.label_column)
    throw usage_error("dataset " + dataset + " has label '" + loaded.version.label_column + "', model " +
                      model_ref + " predicts '" + model.label_column + "'");
  if (split == EvalSplit::kDefault) split = loaded.test.rows > 0 ? EvalSplit::kTest : EvalSplit::kTrain;
  if (split == EvalSplit::kTest && loaded.test.rows == 0)
    throw usage_error(Subject::kEvalSplit, "test: dataset " + dataset + " has no test split; use train or all");
  std::vector<const Table*> parts;
  if (split != EvalSplit::kTest) parts.push_back(&loaded.train);
  if (split != EvalSplit::kTrain) parts.push_back(&loaded.test);
  return inputs_of_parts(model, model_ref, parts, loaded.version.label_column, dataset,
                         split == EvalSplit::kTrain ? "train" : split == EvalSplit::kTest ? "test" : "all");
}

ModelInputs table_inputs(const ModelFile& model, const std::string& model_ref, const Table& table,
                         const std::string& dataset, const std::string& split) {
  return inputs_of_parts(model, model_ref, {&table}, table.columns.at(table.label_column).name, dataset, split);
}

}  // namespace anneal::runs
