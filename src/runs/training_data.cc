#include "runs/training_data.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <thread>

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

// Where a config key was set, as config.sources names it ("fm.ini:5: ", or
// "--set features: " from the CLI); "" when it was not set.
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
  const ClassWeightSpec& spec = config.class_weight;
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

std::vector<float> row_weights(std::span<const float> class_weights, std::span<const float> labels) {
  std::vector<float> w;
  if (class_weights.empty()) return w;
  w.reserve(labels.size());
  for (float label : labels) w.push_back(class_weights[static_cast<std::size_t>(label)]);
  return w;
}

std::uint64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t{1} << 30;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

std::uint64_t default_memory_budget() { return physical_memory() / 2; }

namespace {

// A whole small stream (labels, the split mask) of `version`, as `T`s.
template <typename T>
std::vector<T> read_whole(Store& store, const DatasetVersion& version, const std::string& role) {
  TensorRowReader reader(store, version, role);
  if (reader.row_bytes() != sizeof(T))
    throw corrupt("dataset " + version.ref() + ", " + role + ": expected " + std::to_string(sizeof(T)) +
                  "-byte values, found " + std::to_string(reader.row_bytes()))
        .with(Remedy::kCheckStore);
  std::vector<T> out(reader.rows());
  reader.read(0, reader.rows(), std::as_writable_bytes(std::span<T>(out)));
  return out;
}

// Rows per block: about 1 MiB of stored rows, smaller when the budget is
// so small that two windows of a few blocks would not fit.
std::uint64_t block_rows_for(std::uint64_t row_bytes, std::uint64_t data_budget) {
  const std::uint64_t block_bytes = std::min<std::uint64_t>(std::uint64_t{1} << 20, data_budget / 16);
  return std::max<std::uint64_t>(1, block_bytes / std::max<std::uint64_t>(row_bytes, 1));
}

// How many of a source's rows (part_rows[i] for i in picked, ascending in
// the stream) one block of `block_rows` stored rows holds: the most, and the
// fewest of any block but the last (all of them when there is one block),
// as StoredSource::max_block_rows and min_block_rows count them.
struct BlockSpread {
  std::uint64_t most = 0;
  std::uint64_t fewest = 0;
};
BlockSpread block_spread(const std::vector<std::uint32_t>& part_rows, std::span<const std::uint32_t> picked,
                         std::uint64_t block_rows) {
  std::vector<std::uint64_t> counts;
  std::uint64_t block = ~std::uint64_t{0};
  for (std::uint32_t i : picked) {
    const std::uint64_t b = part_rows[i] / block_rows;
    if (counts.empty() || b != block) counts.push_back(0);
    block = b;
    ++counts.back();
  }
  BlockSpread spread;
  if (counts.empty()) return spread;
  spread.most = *std::max_element(counts.begin(), counts.end());
  spread.fewest = counts.size() == 1 ? counts[0] : *std::min_element(counts.begin(), counts.end() - 1);
  return spread;
}

}  // namespace

LabelParts read_label_parts(Store& store, const DatasetRef& ref) {
  LabelParts l;
  LoadedDataset& parts = l.parts;
  parts.version = find_dataset(store, ref);
  const DatasetVersion& v = parts.version;
  // The labels and the split: small (4 and 1 bytes a row), held whole.
  l.separate_test = v.stream("test.features") != nullptr;
  std::vector<float> stream_labels = read_whole<float>(store, v, "labels");
  l.split.assign(stream_labels.size(), 0);
  if (!l.separate_test && v.stream("split")) {
    l.split = read_whole<std::uint8_t>(store, v, "split");
    if (l.split.size() != stream_labels.size()) throw corrupt("dataset " + v.ref() + ": split mask has the wrong length");
  }
  // The label column and schema as Tables without feature values.
  for (Table* t : {&parts.train, &parts.test}) {
    t->columns = v.columns;
    t->sample_shape = v.sample_shape;
    for (std::size_t c = 0; c < v.columns.size(); ++c)
      if (v.columns[c].name == v.label_column) t->label_column = c;
  }
  for (std::uint32_t r = 0; r < stream_labels.size(); ++r) {
    (l.split[r] ? l.test_part : l.train_part).push_back(r);
    (l.split[r] ? parts.test : parts.train).labels.push_back(stream_labels[r]);
  }
  if (l.separate_test) {
    parts.test.labels = read_whole<float>(store, v, "test.labels");
    l.test_part.resize(parts.test.labels.size());
    std::iota(l.test_part.begin(), l.test_part.end(), 0u);
  }
  parts.train.rows = parts.train.labels.size();
  parts.test.rows = parts.test.labels.size();
  return l;
}

PreparedData prepare_data(Store& store, LabelParts label_parts, const TrainConfig& config,
                          std::uint64_t memory_budget, const ModelFile* parent) {
  PreparedData d;
  const LoadedDataset& parts = label_parts.parts;
  d.version = parts.version;
  const DatasetVersion& v = d.version;
  d.rows = std::make_unique<RunRows>();
  RunRows& rows = *d.rows;
  const bool separate_test = label_parts.separate_test;
  const std::vector<std::uint8_t>& split = label_parts.split;
  const std::vector<std::uint32_t>& train_part = label_parts.train_part;
  const std::vector<std::uint32_t>& test_part = label_parts.test_part;
  const std::string where_data = "dataset " + v.ref();

  check_trainable(parts, config);
  if (parent) {
    d.loss = parent->loss;
    d.labels = parent->labels;
  } else {
    d.loss = config.loss ? *config.loss : LabelEncoding::infer_loss(parts.train);
  }
  check_class_weight_loss(config, d.loss);
  if (!parent) d.labels = LabelEncoding::fit(d.loss, parts.train, parts.test, config.target_transform);
  d.tabular = v.format == "csv" || v.format == "tsv";
  // A parent's classes are its own: the stored codes are translated by name.
  auto stored_labels = [&](const Table& part) { return parent ? labels_as_model_codes(part, *parent) : part.labels; };

  std::vector<float> encoded = d.labels.encode_all(stored_labels(parts.train), where_data + " train");
  std::vector<std::uint32_t> train_rows, val_rows;
  validation_split(encoded, d.labels.classification(), config.validation, config.trainer.seed, train_rows,
                   val_rows);
  if (train_rows.empty()) throw usage_error("validation = " + std::to_string(config.validation) +
                                            " leaves no training rows");
  // A warm start's columns are the parent's (its refusals checked the keys).
  for (const char* key : {"features", "exclude"}) {
    if (parent) break;
    const auto& names = std::string_view(key) == "features" ? config.features.value_or(std::vector<std::string>{})
                                                             : config.exclude;
    if (auto problem = check_feature_columns(parts.train, names))
      throw usage_error(where(config, key) + key + ": " + *problem);
  }
  d.class_weights = resolve_class_weights(config, d.labels, encoded, train_rows);

  // The plan: what stays in memory throughout (labels and stream row of
  // each source row, the predictions scored at the end), and the rest of
  // the budget for blocks of stored rows.
  TensorRowReader& features = *rows.readers.emplace_back(std::make_unique<TensorRowReader>(store, v, "features"));
  TensorRowReader* test_features =
      separate_test ? rows.readers.emplace_back(std::make_unique<TensorRowReader>(store, v, "test.features")).get()
                    : nullptr;
  if (features.rows() != split.size() || (test_features && test_features->rows() != test_part.size()))
    throw corrupt("dataset " + v.ref() + ": the features and labels streams hold different numbers of rows")
        .with(Remedy::kCheckStore);
  const std::uint64_t all_rows = split.size() + test_part.size();
  const std::uint64_t outputs = static_cast<std::uint64_t>(std::max<std::int64_t>(d.labels.classes(), 1));
  // Per row: its label and stream row in a source, the split mask; per
  // scored row: the label kept for scoring and the predicted outputs.
  rows.fixed_bytes = all_rows * (sizeof(float) + sizeof(std::uint32_t) + 1) +
                     (val_rows.size() + test_part.size()) * (outputs + 1) * sizeof(float);
  const std::uint64_t stored_bytes =
      features.rows() * features.row_bytes() + (test_features ? test_features->rows() * test_features->row_bytes() : 0);
  const std::uint64_t row_bytes = std::max(features.row_bytes(), test_features ? test_features->row_bytes() : 0);
  // Besides the rows sources keep, whole blocks pass through memory as
  // they are read: one per loading thread and one for the prefetch.
  const std::uint64_t loaders = std::max(1u, std::thread::hardware_concurrency()) + 1;
  const std::uint64_t batch = static_cast<std::uint64_t>(config.trainer.batch);
  // What streaming in blocks of `r` stored rows needs (the checks below, on
  // windows, solved for the budget): the fixed bytes, a block per loader,
  // and the larger of two training windows of the blocks a batch spans plus
  // a validation pass's blocks (two batches), and a test pass's.
  auto stream_need = [&](std::uint64_t r) {
    const BlockSpread train = block_spread(train_part, train_rows, r);
    const BlockSpread val = block_spread(train_part, val_rows, r);
    std::vector<std::uint32_t> all_test(test_part.size());
    std::iota(all_test.begin(), all_test.end(), 0u);
    const BlockSpread test = block_spread(test_part, all_test, r);
    const std::uint64_t least_window = (batch + std::max<std::uint64_t>(train.fewest, 1) - 1) /
                                           std::max<std::uint64_t>(train.fewest, 1) + 1;
    const std::uint64_t val_bytes = val_rows.empty() ? 0 : 2 * (batch + 2 * val.most) * row_bytes;
    const std::uint64_t test_bytes = test_part.empty() ? 0 : 2 * (batch + 2 * test.most) * row_bytes;
    return rows.fixed_bytes + loaders * r * row_bytes +
           std::max(2 * least_window * train.most * row_bytes + val_bytes, test_bytes);
  };
  // The least budget, one figure whatever budget was given: every row in
  // memory, or streamed in blocks of one row (which needs less than blocks
  // of more: docs/TRAINING.md, "Memory budget"). At or above it the run
  // fits: in memory, or streamed in the largest blocks that fit.
  const std::uint64_t in_memory_need =
      rows.fixed_bytes + stored_bytes + loaders * block_rows_for(row_bytes, ~std::uint64_t{0}) * row_bytes;
  const std::uint64_t least_budget = std::min(in_memory_need, stream_need(1));
  if (memory_budget < least_budget)
    throw usage_error(where(config, "memory_budget") + "memory_budget = " + memory_budget_text(memory_budget) +
                      ": too small for dataset " + v.ref() + " in batches of " + std::to_string(batch) +
                      "; it needs at least " + std::to_string(least_budget) + " bytes");
  std::uint64_t data_budget = memory_budget - rows.fixed_bytes;
  rows.streamed = stored_bytes + loaders * block_rows_for(row_bytes, ~std::uint64_t{0}) * row_bytes > data_budget;
  rows.block_rows = block_rows_for(row_bytes, rows.streamed ? data_budget : ~std::uint64_t{0});
  if (rows.streamed && stream_need(rows.block_rows) > memory_budget) {
    // Blocks of the usual size (a sixteenth of the budget) leave too little
    // for the windows: the largest smaller blocks that fit. Blocks of one
    // row fit (the budget is at least least_budget), so `fits` stays true.
    std::uint64_t fits = 1, too_large = rows.block_rows;
    while (too_large - fits > 1) {
      const std::uint64_t mid = fits + (too_large - fits) / 2;
      (stream_need(mid) <= memory_budget ? fits : too_large) = mid;
    }
    rows.block_rows = fits;
  }
  data_budget -= std::min(data_budget, loaders * rows.block_rows * row_bytes);
  const std::int64_t all_blocks = std::numeric_limits<std::int32_t>::max();
  rows.window = all_blocks;  // the streaming windows are set below, once the sources' blocks are known
  const std::int64_t eval_window = rows.streamed ? 1 : all_blocks;

  StoredBlocks& blocks = *rows.blocks.emplace_back(std::make_unique<StoredBlocks>(features, rows.block_rows, rows.memory));
  StoredBlocks& test_blocks =
      test_features ? *rows.blocks.emplace_back(std::make_unique<StoredBlocks>(*test_features, rows.block_rows, rows.memory))
                    : blocks;
  // A prefetch thread only where training leaves a core to it.
  const bool background_prefetch = config.threads < static_cast<int>(std::thread::hardware_concurrency());
  auto source = [&](const StoredBlocks& from, const std::vector<std::uint32_t>& part_rows, std::span<const std::uint32_t> picked,
                    std::vector<float> labels, std::int64_t window) {
    std::vector<std::uint32_t> stream_rows;
    stream_rows.reserve(picked.size());
    for (std::uint32_t i : picked) stream_rows.push_back(part_rows[i]);
    return std::make_unique<StoredSource>(from, std::move(stream_rows), std::move(labels), window, background_prefetch);
  };
  auto labels_of = [&](std::span<const std::uint32_t> picked) {
    std::vector<float> out;
    out.reserve(picked.size());
    for (std::uint32_t i : picked) out.push_back(encoded[i]);
    return out;
  };
  auto train = source(blocks, train_part, train_rows, labels_of(train_rows), rows.window);
  std::unique_ptr<StoredSource> validation, test;
  // The labels scored at the end are kept beside their sources' own.
  if (!val_rows.empty()) {
    d.y_val = labels_of(val_rows);
    validation = source(blocks, train_part, val_rows, d.y_val, eval_window);
  }
  if (!test_part.empty()) {
    std::vector<std::uint32_t> all(test_part.size());
    std::iota(all.begin(), all.end(), 0u);
    d.y_test = d.labels.encode_all(stored_labels(parts.test), where_data + " test");
    test = source(test_blocks, test_part, all, d.y_test, eval_window);
  }
  if (rows.streamed) {
    // Training holds two windows of blocks while a validation pass holds
    // the blocks of two batches (an evaluation announces at least the
    // blocks a batch spans, see Trainer); the test pass comes after
    // training has let its blocks go. A window needs a batch's rows.
    // (stream_need above is this, solved for the budget.)
    auto pass_bytes = [&](const StoredSource* s) {
      return s ? 2 * (batch + 2 * static_cast<std::uint64_t>(s->max_block_rows())) * row_bytes : 0;
    };
    const std::uint64_t val_bytes = pass_bytes(validation.get()), test_bytes = pass_bytes(test.get());
    const std::uint64_t train_block_bytes = static_cast<std::uint64_t>(train->max_block_rows()) * row_bytes;
    const std::uint64_t least_window =
        (batch + static_cast<std::uint64_t>(train->min_block_rows()) - 1) / static_cast<std::uint64_t>(train->min_block_rows()) + 1;
    const std::uint64_t window =
        data_budget > val_bytes ? (data_budget - val_bytes) / (2 * train_block_bytes) : 0;
    // The block size was chosen so that this holds: a miss is anneal's bug.
    if (window < least_window || test_bytes > data_budget)
      throw failure("memory_budget = " + memory_budget_text(memory_budget) + ": blocks of " +
                    std::to_string(rows.block_rows) + " rows leave windows of " + std::to_string(window) +
                    " blocks for batches of " + std::to_string(batch) + ", which need " + std::to_string(least_window) +
                    " (internal error: the block size should fit)");
    rows.window = static_cast<std::int64_t>(window);
    train->set_window(rows.window);
  }
  rows.memory.add(rows.fixed_bytes);

  std::vector<std::size_t> offsets;
  if (parent) {
    d.features = parent->features;
    rows.alignment = std::make_unique<InputAlignment>(v.columns, parts.train.label_column, *parent, where_data);
    offsets = d.features.gathered_offsets();
  } else {
    FeatureOptions options;
    options.features = config.features;
    options.exclude = config.exclude;
    options.category_min_count = config.category_min_count;
    options.max_categories = config.max_categories;
    options.scaling = config.scaling;
    try {
      d.features = FeatureTransform::fit(
          parts.train, train_rows.size(),
          [&](const std::function<void(const float*)>& visit) { train->for_each_stored_row(visit); }, options);
    } catch (const Error& e) {
      // "no feature column is left": say which keys chose the columns.
      if (e.kind() != ErrorKind::kUsage) throw;
      std::string at = where(config, config.features ? "features" : "exclude");
      throw usage_error(at + e.what());
    }
    offsets = d.features.stored_offsets(v.columns, parts.train.label_column);
  }
  d.input_shape = d.features.output_shape();
  // The sources' own copy: d moves, and d.features with it.
  const auto transform = std::make_shared<const FeatureTransform>(d.features);
  for (StoredSource* s : {train.get(), validation.get(), test.get()})
    if (s) s->set_transform(transform, offsets, d.input_shape, rows.alignment.get());
  rows.train = std::move(train);
  rows.validation = std::move(validation);
  rows.test = std::move(test);
  return d;
}

// Bytes of d's arrays.
std::uint64_t array_bytes(const PreparedData& d) {
  std::uint64_t n = 0;
  for (const auto* a : {&d.x_train, &d.y_train, &d.x_val, &d.y_val, &d.x_test, &d.y_test}) n += a->size() * sizeof(float);
  return n;
}

void materialize(PreparedData& d) {
  const auto width = static_cast<std::size_t>(d.features.output_width());
  auto fill = [&](SampleSource* source, std::vector<float>& x, std::vector<float>& y) {
    if (!source || !x.empty()) return;
    const auto n = static_cast<std::size_t>(source->rows());
    x.resize(n * width);
    y.resize(n);
    std::vector<std::uint32_t> all(n);
    std::iota(all.begin(), all.end(), 0u);
    source->read(all, x.data(), y.data());
  };
  const std::uint64_t before = array_bytes(d);
  fill(d.rows->train.get(), d.x_train, d.y_train);
  fill(d.rows->validation.get(), d.x_val, d.y_val);
  fill(d.rows->test.get(), d.x_test, d.y_test);
  d.rows->memory.add(array_bytes(d) - before);  // held until the run ends
}

}  // namespace anneal::runs
