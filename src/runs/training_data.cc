#include "runs/training_data.h"

#include "anneal/error.h"

namespace anneal::runs {

namespace {

std::string column_list(const DatasetVersion& v) {
  std::string out;
  for (std::size_t i = 0; i < v.columns.size() && i < 12; ++i) out += (i ? ", " : "") + v.columns[i].name;
  if (v.columns.size() > 12) out += ", ...";
  return out;
}

std::vector<float> gather(const Table& t, const std::vector<std::uint32_t>& rows) {
  const auto w = static_cast<std::size_t>(t.sample_width());
  std::vector<float> out(rows.size() * w);
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::copy_n(t.features.data() + rows[i] * w, w, out.data() + i * w);
  return out;
}

}  // namespace

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
  d.labels = LabelEncoding::fit(d.loss, loaded.train, loaded.test);
  d.tabular = v.format == "csv" || v.format == "tsv";

  std::vector<float> encoded = d.labels.encode_all(loaded.train.labels, "dataset " + v.ref() + " train");
  std::vector<std::uint32_t> train_rows, val_rows;
  validation_split(encoded, d.labels.classification(), config.validation, config.trainer.seed, train_rows,
                   val_rows);
  if (train_rows.empty()) throw usage_error("validation = " + std::to_string(config.validation) +
                                            " leaves no training rows");
  d.features = FeatureTransform::fit(loaded.train, train_rows);
  d.input_shape = d.features.output_shape();
  TransformCounts counts;
  d.x_train = d.features.apply(gather(loaded.train, train_rows), counts);
  d.y_train.reserve(train_rows.size());
  for (auto r : train_rows) d.y_train.push_back(encoded[r]);
  if (!val_rows.empty()) {
    d.x_val = d.features.apply(gather(loaded.train, val_rows), counts);
    for (auto r : val_rows) d.y_val.push_back(encoded[r]);
  }
  if (loaded.test.rows > 0) {
    d.x_test = d.features.apply(loaded.test.features, counts);
    d.y_test = d.labels.encode_all(loaded.test.labels, "dataset " + v.ref() + " test");
  }
  return d;
}

}  // namespace anneal::runs
