// Warm start: a run that begins from a registered model's weights and its
// fitted preprocessing instead of from random weights and freshly fitted
// statistics (config key warm_start, `anneal retrain --warm-start`;
// docs/TRAINING.md, "Warm start"). The weights only mean something with the
// transform they were trained with, so a warm-started run keeps the
// parent's FeatureTransform and LabelEncoding as they are and refits
// nothing. The optimizer's state starts fresh. A parent that does not fit
// the config or the data is refused with one line saying why, and the run
// trains from scratch. Internal to src/runs/.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "anneal/catalog_runs.h"
#include "anneal/config.h"
#include "anneal/model_file.h"
#include "anneal/report.h"
#include "anneal/store.h"
#include "anneal/trainer.h"
#include "runs/training_data.h"

namespace anneal::runs {

// What a run's warm_start came to.
struct WarmStart {
  std::optional<ModelRecord> parent;  // the model warm_start names, looked up
  ModelFile parent_model;             // its file, when `parent` is set
  bool used = false;                  // the run starts from the parent
  std::string refused;                // why the parent is not used ("layers differ (...)")
  std::string unset_alias;            // NAME@ALIAS that was not set when the run started
};

// Looks up config.warm_start (when set) at the start of a run. A new run's
// alias or NAME@latest is resolved to the exact NAME@vN it points at now and
// written back into config.warm_start, so the config the run records (and
// a resume parses back) names that version whatever the alias does later;
// an alias that is not set yet (the first night) empties config.warm_start
// and notes one line. A resumed run's config already names the version.
// Throws kUsage, one line naming the key's source (config.sources), for a
// version or model that does not exist, and kCorrupt for a damaged model.
WarmStart resolve_warm_start(Store& store, TrainConfig& config, Reporter& reporter);

// The run's data: through the parent's preprocessing when `warm` has a
// parent that fits the config and the version (then warm.used, and one note
// saying so), otherwise as prepare_data() fits it (with warm.refused and one
// note, "warm start from NAME@vN refused: REASON; training from scratch").
// The parent fits when it is a trainable fp32/bf16 network (not linear,
// int8 or pruned), has the config's layer spec and loss, every feature
// column it uses is in the version with the same type and width, the label
// column is the same, and it knows every class of the version's labels.
// Deterministic in (parent, version, config). Either way the rows are read
// from the store per batch and streamed beyond `memory_budget`
// (prepare_data); the note counts the categories of the version's
// dictionaries that the parent's one-hot columns never saw.
PreparedData prepare_run_data(Store& store, const DatasetRef& ref, const TrainConfig& config, WarmStart& warm,
                              std::uint64_t memory_budget, Reporter& reporter);

// Sets every parameter and state buffer of `trainer`'s network to the
// parent's values (warm.used only). kUsage when the parent's tensors do not
// match the network (prepare_run_data has checked the spec and shapes).
void load_parent_weights(Trainer& trainer, const WarmStart& warm);

// The warm start's lineage fields: {"parent": "NAME@vN", "warm_start": true}
// when used; {"warm_start": false, "warm_start_from": "NAME@vN",
// "warm_start_refused": REASON} when refused; {"warm_start": false,
// "warm_start_unset": "NAME@ALIAS"} when the alias was not set; {} when the
// config has no warm_start.
nlohmann::json warm_start_lineage(const WarmStart& warm);

}  // namespace anneal::runs
