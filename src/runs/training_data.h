// A dataset version turned into training arrays under a config: the label
// encoding, the validation split and the feature transform, all fitted
// deterministically, so a resumed run rebuilds exactly the same arrays.
// Internal to src/runs/.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "anneal/config.h"
#include "anneal/datasets.h"
#include "anneal/preprocess.h"
#include "anneal/store.h"

namespace anneal::runs {

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
  std::vector<float> x_train, y_train, x_val, y_val, x_test, y_test;
  std::uint64_t train_rows() const { return y_train.size(); }
};

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
PreparedData prepare_data(Store& store, const DatasetRef& ref, const TrainConfig& config);

}  // namespace anneal::runs
