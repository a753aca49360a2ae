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
#include "anneal/model_file.h"
#include "anneal/model_inputs.h"
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
  // A warm start's: the version's rows laid out as the parent's columns.
  std::unique_ptr<InputAlignment> alignment;
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
  // The rows as arrays: materialize()'s, for the linear baseline.
  std::vector<float> x_train, y_train, x_val, y_val, x_test, y_test;
  std::uint64_t train_rows() const { return static_cast<std::uint64_t>(rows->train->rows()); }
};

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

// A version's schema and labels, read before any feature value: what the
// label encoding, the column checks and a warm start's refusals read.
struct LabelParts {
  LoadedDataset parts;                    // columns and labels only: no features
  bool separate_test = false;             // the test part has streams of its own
  std::vector<std::uint8_t> split;        // per stream row: 1 when in the test part
  std::vector<std::uint32_t> train_part;  // stream row of each train-part row
  std::vector<std::uint32_t> test_part;   // stream row of each test-part row
};
// kCorrupt when the version's streams disagree on their lengths.
LabelParts read_label_parts(Store& store, const DatasetRef& ref);

// Checks the config against the version (the label, features=, exclude=,
// class_weight) and builds the sources. kUsage for a label the version does
// not have, a loss that does not fit, a column or class the data does not
// have (naming the config key and where it was set).
// The rows are read from the store a block at a time in their stored type
// and transformed per batch (StoredSource); when the version does not fit
// `memory_budget` bytes, training streams windows of blocks (RunRows).
// kUsage naming memory_budget when even the labels and row lists do not fit.
// With `parent` (a warm start whose refusals passed) the loss, label
// encoding and feature transform are the parent's rather than fitted, and
// rows are laid out as its columns (InputAlignment) as they are read.
PreparedData prepare_data(Store& store, LabelParts label_parts, const TrainConfig& config,
                          std::uint64_t memory_budget, const ModelFile* parent = nullptr);

// The machine's physical memory in bytes (1 GiB when the system does not
// say): the most a run's network may need while training
// (TrainerConfig::memory_limit).
// Each row's weight by its class (`labels`: class indices), from the
// per-class `class_weights`; empty when there are none (every row 1).
std::vector<float> row_weights(std::span<const float> class_weights, std::span<const float> labels);

std::uint64_t physical_memory();
// The default memory_budget: half the machine's physical memory.
std::uint64_t default_memory_budget();

}  // namespace anneal::runs
