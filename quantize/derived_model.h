// A derived model: one made from a registered parent model (quantize,
// prune), as opposed to one trained from data. Loading the parent, scoring
// the child against it on the same rows, sizes, and registering the child
// with its run and lineage.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "anneal/datasets.h"
#include "anneal/error.h"
#include "anneal/quantize.h"
#include "anneal/model_file.h"

namespace anneal::compress {

struct Parent {
  ModelRecord record;
  runs::ModelFile model;
};
// What a derived model is made by.
enum class Derivation : std::uint8_t { kQuantize, kPrune };

// The parent model; kUsage with its kind's reason when it cannot be the
// parent of `derivation` (a linear model, an int8 one: ModelKind's
// why_not_quantizable, why_not_prunable).
Parent load_parent(Store& store, const std::string& ref, Derivation derivation);

// `text` as a dataset reference (NAME, NAME@latest, NAME@vN); a malformed
// one is kUsage about `subject` (the calibration or fine-tuning data), so
// that cli/ names the flag that gave it.
DatasetRef dataset_ref_of(std::string_view text, Subject subject);

// Bytes the model blob takes in the store: each chunk as the object store
// writes it (16-byte header + zstd level 1 frame).
std::uint64_t size_on_disk(std::string_view bytes);

// Fraction of zero weights over every dense/conv weight tensor.
double weight_sparsity(const runs::ModelFile& model);

// The child's and the parent's scores on the test split of `data` (its train
// split when it has none): "<split>_accuracy", "parent_<split>_accuracy",
// "accuracy_change_points" (or rmse for regression). With `by_class`, for
// classification, the same predictions' per-class scores and confusion
// matrices go there for the run's summary (and its HTML report):
// {"per_class": {SPLIT: ...}, "confusion": {SPLIT: ...}, and the parent's as
// "parent_per_class", "parent_confusion"}.
nlohmann::json score_against_parent(Store& store, const Parent& parent, const runs::ModelFile& child,
                                    const DatasetRef& data, Backend& backend, nlohmann::json* by_class = nullptr);

// Lineage fields every compressed model carries; `backend` is what computed it.
nlohmann::json base_lineage(const Parent& parent, const std::string& operation, const std::string& data,
                            const BackendCapabilities& backend);

// Records the run (config_text describes the operation, dataset = data) and
// registers the child as the next version of the parent's name. `by_class`
// (score_against_parent's) joins the run's summary.
CompressResult register_child(Store& store, const Parent& parent, const runs::ModelFile& child,
                              const DatasetRef& data, const std::string& config_text,
                              nlohmann::json lineage, const nlohmann::json& metrics,
                              const nlohmann::json& by_class = nlohmann::json::object());

}  // namespace anneal::compress
