// A dataset version turned into training arrays under a config: the label
// encoding, the validation split and the feature transform, all fitted
// deterministically, so a resumed run rebuilds exactly the same arrays.
// Internal to src/runs/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "anneal/config.h"
#include "anneal/datasets.h"
#include "anneal/preprocess.h"
#include "anneal/dataset_rows.h"
#include "anneal/store.h"
#include "runs/stored_source.h"

namespace anneal::runs {

// The sources a run reads its rows through, and what they hold.
struct RunRows {
  DataMemory memory;             // dataset rows held by the sources
  std::uint64_t fixed_bytes = 0; // labels and row lists, held throughout
  bool streamed = false;         // the rows do not all fit: windows of blocks
  std::uint64_t block_rows = 0;  // stream rows per block
  std::int64_t window = 0;       // training blocks per window
  std::vector<std::unique_ptr<TensorRowReader>> readers;
  std::vector<std::unique_ptr<StoredBlocks>> blocks;
  std::unique_ptr<SampleSource> train, validation, test;  // validation, test: null when none
};

struct PreparedData {
  DatasetVersion version;
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  LabelEncoding labels;
  FeatureTransform features;
  std::vector<std::int64_t> input_shape;  // the network's per-sample input
  bool tabular = false;                   // CSV/TSV: gets the linear baseline
  // class_weight resolved per class index (empty: unweighted), and how it
  // was asked for ("balanced" or the config text), for the lineage.
  std::vector<float> class_weights;
  // The rows as sources (prepare_data: read from the store per batch).
  std::unique_ptr<RunRows> rows;
  // The rows as arrays: prepare_as_parent's, or materialize()'s for the
  // linear baseline; the sources then read them (make_array_sources).
  std::vector<float> x_train, y_train, x_val, y_val, x_test, y_test;
  std::uint64_t train_rows() const { return static_cast<std::uint64_t>(rows->train->rows()); }
};

// Sources over d's arrays (x_train... held whole): for data prepared in memory.
void make_array_sources(PreparedData& d);

// Fills d's arrays from its sources, every row transformed (the linear
// baseline needs the whole matrix). Only for rows that fit the budget.
void materialize(PreparedData& d);

// Checks that `config` can train on the version: kUsage for a label the
// version does not have, or a version without training rows.
void check_trainable(const LoadedDataset& loaded, const TrainConfig& config);

// kUsage naming where class_weight was set when it is set for a loss
// without classes (mse, mae). Checked before the label encoding, which
// would otherwise complain about the label instead of the key.
void check_class_weight_loss(const TrainConfig& config, LossKind loss);

// config.class_weight per class index of `labels` (empty when unset):
// balanced is w_k = n / (K * n_k) over `rows` of `encoded` (the encoded
// training labels; a class without a row gets 1), explicit weights by
// class name, 1 for a class not named. kUsage naming where the key was set
// for a class the labels do not have.
std::vector<float> resolve_class_weights(const TrainConfig& config, const LabelEncoding& labels,
                                         std::span<const float> encoded, std::span<const std::uint32_t> rows);

// Checks the config against the version (the label, features=, exclude=,
// class_weight) and builds the arrays. kUsage for a label the version does
// not have, a loss that does not fit, a column or class the data does not
// have (naming the config key and where it was set).
// The rows are read from the store a block at a time in their stored type
// and transformed per batch (StoredSource); when the version does not fit
// `memory_budget` bytes, training streams windows of blocks (RunRows).
// kUsage naming memory_budget when even the labels and row lists do not fit.
PreparedData prepare_data(Store& store, const DatasetRef& ref, const TrainConfig& config,
                          std::uint64_t memory_budget);

// The default memory_budget: half the machine's physical memory.
std::uint64_t default_memory_budget();

}  // namespace anneal::runs
