#include "runs/training_data.h"

#include <algorithm>

#include "anneal/error.h"
#include "anneal/spelling.h"

namespace anneal::runs {

namespace {

std::string column_list(const DatasetVersion& v) {
  std::string out;
  for (std::size_t i = 0; i < v.columns.size() && i < 12; ++i) out += (i ? ", " : "") + v.columns[i].name;
  if (v.columns.size() > 12) out += ", ...";
  return out;
}

// "fm.ini:5: " or "--set features: " for a config key, "" when it was not set.
std::string where(const TrainConfig& config, const std::string& key) {
  auto it = config.sources.find(key);
  return it == config.sources.end() ? std::string() : it->second + ": ";
}

}  // namespace

void check_class_weight_loss(const TrainConfig& config, LossKind loss) {
  if (!config.class_weight.empty() && !is_classification(loss))
    throw usage_error(where(config, "class_weight") + "class_weight: loss = " + loss_name(loss) +
                      " has no classes; class weights need softmax_ce or bce");
}

std::vector<float> resolve_class_weights(const TrainConfig& config, const LabelEncoding& labels,
                                         std::span<const float> encoded, std::span<const std::uint32_t> rows) {
  if (config.class_weight.empty()) return {};
  const std::string at = where(config, "class_weight");
  ClassWeightSpec spec;
  try {
    spec = parse_class_weight(config.class_weight);
  } catch (const Error& e) {
    throw usage_error(at + "class_weight = " + e.what());
  }
  const auto k = static_cast<std::size_t>(labels.classes());
  std::vector<float> w(k, 1.0f);
  if (spec.balanced) {
    std::vector<std::uint64_t> counts(k, 0);
    for (auto r : rows) ++counts[static_cast<std::size_t>(encoded[r])];
    for (std::size_t c = 0; c < k; ++c)
      if (counts[c] > 0)
        w[c] = static_cast<float>(static_cast<double>(rows.size()) / (static_cast<double>(k) * static_cast<double>(counts[c])));
    return w;
  }
  std::vector<std::string_view> names(labels.class_names().begin(), labels.class_names().end());
  for (const auto& [name, weight] : spec.weights) {
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end())
      throw usage_error(at + "class_weight: label '" + labels.column() + "' has no class '" + name + "'" +
                        did_you_mean(name, names) + " (classes: " +
                        [&] {
                          std::string all;
                          for (auto n : names) all += (all.empty() ? "" : ", ") + std::string(n);
                          return all;
                        }() + ")");
    w[static_cast<std::size_t>(it - names.begin())] = static_cast<float>(weight);
  }
  return w;
}


void check_trainable(const LoadedDataset& loaded, const TrainConfig& config) {
  const DatasetVersion& v = loaded.version;
  if (!config.label.empty() && config.label != v.label_column) {
    bool exists = false;
    for (const auto& c : v.columns) exists = exists || c.name == config.label;
    if (!exists)
      throw usage_error("label = '" + config.label + "': dataset " + v.ref() + " has no such column (columns: " +
                        column_list(v) + ")");
    throw usage_error("label = '" + config.label + "': dataset " + v.ref() + " was imported with label '" +
                      v.label_column + "'")
        .with(Remedy::kReimportWithLabel, config.label);
  }
  if (loaded.train.rows == 0) throw usage_error("dataset " + v.ref() + " has no training rows");
}

PreparedData prepare_data(Store& store, const DatasetRef& ref, const TrainConfig& config) {
  PreparedData d;
  LoadedDataset loaded = load_dataset(store, ref);
  d.version = loaded.version;
  const DatasetVersion& v = d.version;
  check_trainable(loaded, config);
  d.loss = config.loss.empty() ? LabelEncoding::infer_loss(loaded.train) : parse_loss_kind(config.loss);
  check_class_weight_loss(config, d.loss);
  d.labels = LabelEncoding::fit(d.loss, loaded.train, loaded.test);
  d.tabular = v.format == "csv" || v.format == "tsv";

  std::vector<float> encoded = d.labels.encode_all(loaded.train.labels, "dataset " + v.ref() + " train");
  std::vector<std::uint32_t> train_rows, val_rows;
  validation_split(encoded, d.labels.classification(), config.validation, config.trainer.seed, train_rows,
                   val_rows);
  if (train_rows.empty()) throw usage_error("validation = " + std::to_string(config.validation) +
                                            " leaves no training rows");
  FeatureOptions options;
  options.features = config.features;
  options.exclude = config.exclude;
  options.category_min_count = config.category_min_count;
  options.max_categories = config.max_categories;
  for (const char* key : {"features", "exclude"}) {
    const auto& names = std::string_view(key) == "features" ? config.features.value_or(std::vector<std::string>{})
                                                             : config.exclude;
    if (auto problem = check_feature_columns(loaded.train, names))
      throw usage_error(where(config, key) + key + ": " + *problem);
  }
  d.class_weights = resolve_class_weights(config, d.labels, encoded, train_rows);
  try {
    d.features = FeatureTransform::fit(loaded.train, train_rows, options);
  } catch (const Error& e) {
    // "no feature column is left": say which keys chose the columns.
    if (e.kind() != ErrorKind::kUsage) throw;
    std::string at = where(config, config.features ? "features" : "exclude");
    throw usage_error(at + e.what());
  }
  d.input_shape = d.features.output_shape();
  // Gathered and transformed in one pass, the training rows (last, once the
  // validation rows are out) and the test rows inside the table's own
  // buffers where they fit: the store's arrays are not copied whole again.
  TransformCounts counts;
  if (!val_rows.empty()) {
    d.x_val = d.features.gather_apply(loaded.train, val_rows, counts);
    for (auto r : val_rows) d.y_val.push_back(encoded[r]);
  }
  d.x_train = d.features.gather_apply_in_place(loaded.train, train_rows, counts);
  d.y_train.reserve(train_rows.size());
  for (auto r : train_rows) d.y_train.push_back(encoded[r]);
  if (loaded.test.rows > 0) {
    std::vector<std::uint32_t> test_rows(loaded.test.rows);
    for (std::uint32_t i = 0; i < test_rows.size(); ++i) test_rows[i] = i;
    d.x_test = d.features.gather_apply_in_place(loaded.test, test_rows, counts);
    d.y_test = d.labels.encode_all(loaded.test.labels, "dataset " + v.ref() + " test");
  }
  return d;
}

}  // namespace anneal::runs
