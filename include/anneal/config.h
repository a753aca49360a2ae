// Training configuration: the INI file `anneal train CONFIG` reads, with
// `--set key=value` overrides.
//
//   name      = fmnist-mlp
//   dataset   = fmnist@latest
//   layers    = dense(256) relu dense(128) relu dense(10)
//   loss      = softmax_ce
//   optimizer = adam
//   lr        = 0.001
//
// The file is read with Boost.Program_options (key = value lines, '#'
// comments). Every key is optional except name and dataset (no layers:
// layers = auto, the search of src/runs/auto_search.h); the defaults are
// listed by known_config_keys(). Parsing is pure: it reads no
// store and touches no file system. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/boosted_trees.h"
#include "anneal/calibration.h"
#include "anneal/catalog_runs.h"
#include "anneal/device.h"
#include "anneal/loss.h"
#include "anneal/model_kind.h"
#include "anneal/model_metrics.h"
#include "anneal/preprocess.h"
#include "anneal/trainer.h"

namespace boost::program_options {
class error;
}

namespace anneal {

// How often a run writes a checkpoint besides the end: every `steps`
// optimizer steps, or every `seconds` of wall time; both 0: only at the end.
struct CheckpointEvery {
  std::int64_t steps = 0;
  double seconds = 0;
  std::string text;  // as written: "500" or "30s"
};

// class_weight parsed: balanced, or explicit weights by class name (in the
// order written). Parsing checks the form and that each weight is a finite
// number > 0; the run checks the names against the label's classes.
struct ClassWeightSpec {
  bool balanced = false;
  std::vector<std::pair<std::string, double>> weights;
  bool empty() const { return !balanced && weights.empty(); }  // unweighted
};

struct TrainConfig {
  std::string name;            // the model name the run registers: NAME@vN
  std::string dataset;         // a dataset reference: NAME, NAME@latest, NAME@vN
  std::string label;           // optional: must name the dataset's label column
  std::optional<LossKind> loss;  // unset: inferred from the label column
  double validation = 0;       // fraction of the train split held out, [0, 1)
  CheckpointEvery checkpoint_every;
  std::int64_t keep_checkpoints = 3;
  bool baseline = true;        // also fit the linear baseline on tabular data
  double linear_l2 = 1.0;      // L2 strength of the linear baseline
  // The kind of model the run trains: a network (a layer spec), the linear
  // model (layers = linear) or boosted trees (layers = trees); an ensemble
  // only as a search's choice (the run's own copy).
  runs::ModelKindId kind = runs::ModelKindId::kNetwork;
  // layers = auto (or no layers key): the run searches a portfolio of
  // linear, tree and network models (docs/TRAINING.md, "layers = auto") and
  // trains the winner; `kind` and the winner's settings are then set by the
  // run, on its own copy.
  bool auto_search = false;
  // layers = auto: seconds after which no new trial starts (nullopt: no
  // limit; the default is 2m, or no limit when max_trials is set), the most
  // trials (nullopt: no limit) and the folds of the cross-validation.
  std::optional<double> time_budget = 120;
  std::string time_budget_text = "2m";
  std::optional<std::int64_t> max_trials;
  std::int64_t folds = 5;
  // layers = auto: whether the search may register a weighted ensemble of
  // its best trials when the ensemble validates better than the best one.
  bool ensemble = true;
  // layers = auto: each network of the registered model is refit this many
  // times, each with its own seed, and their predictions averaged (bagging;
  // docs/TRAINING.md, "Bagging"), as many as the time budget leaves room
  // for; 1: each once.
  std::int64_t bags = 5;
  // A binary classifier's decision threshold is chosen on the validation
  // rows for this metric (auto: balanced accuracy when the majority class
  // holds more than 80% of the training rows, else accuracy; none: the most
  // probable class).
  ThresholdMetric threshold_metric = ThresholdMetric::kAuto;
  // A classifier's probabilities are calibrated on the validation rows
  // (anneal/calibration.h): auto (temperature for a network classifier with
  // validation rows, else none), none, or temperature (any classifier;
  // the run refuses it without validation rows or for regression).
  runs::CalibrateMode calibrate = runs::CalibrateMode::kAuto;
  TreeParams trees;            // layers = trees: the booster's settings (tree_* keys)
  Device device = Device::kAuto;  // which backend trains (anneal/device.h)
  bool deterministic = true;   // BackendOptions::deterministic
  bool tf32 = false;           // BackendOptions::tf32
  int threads = 1;             // the backend's compute threads; part of determinism
  // The model whose weights and fitted preprocessing the run starts from,
  // unset for none: an alias of `name` (written as the bare ALIAS, e.g.
  // production), NAME@ALIAS, or an exact NAME@vN. A new run resolves it to
  // the exact NAME@vN (or unsets it when the alias is not set yet) before it
  // records its config, so a resume starts from the same parent wherever
  // the alias has moved since.
  std::optional<ModelRef> warm_start;
  // Feature columns (FeatureOptions in anneal/preprocess.h): exactly these
  // when set; never those in `exclude`; a categorical level needs
  // category_min_count training rows for its own one-hot slot, at most
  // max_categories levels keep one.
  std::optional<std::vector<std::string>> features;
  std::vector<std::string> exclude;
  std::int64_t category_min_count = 5;
  std::int64_t max_categories = 50;
  // How one-value numeric columns are scaled (FeatureOptions::scaling).
  Scaling scaling = Scaling::kStandard;
  // How a regression target is encoded (LabelEncoding::fit): the key's
  // value, or standard when unset.
  TargetTransform target_transform = TargetTransform::kStandard;
  // Class weights of softmax_ce / bce: none (empty), balanced, or a weight
  // per class name (the names are checked against the data by the run).
  ClassWeightSpec class_weight;
  // Bytes of dataset rows a run may hold in memory (memory_budget, e.g.
  // "2G"); nullopt: the default, half the machine's physical memory. A
  // version that does not fit is streamed from the store (docs/TRAINING.md,
  // "Memory budget").
  std::optional<std::uint64_t> memory_budget;
  // Everything the engine needs except classes and loss, which come from
  // the data (set by the run).
  TrainerConfig trainer;
  // Where each key that was set came from: "fmnist.ini:3", or an override
  // as SettingSources names it ("--set lr" from the CLI).
  std::map<std::string, std::string> sources;

  // The resolved configuration as "key = value" lines, every key present
  // and sorted: what the run records and --resume parses back.
  std::string to_text() const;
};

struct ConfigKey {
  const char* name;
  const char* default_value;  // "" = no default (required or inferred)
  const char* help;
};
// Every key a config may set, in documentation order: the rows of the one
// table (config.cc) that also reads each key into its typed TrainConfig
// field and writes it back (to_text), so --help, the man page, parsing and
// the recorded text cannot disagree.
const std::vector<ConfigKey>& known_config_keys();

// How messages (and TrainConfig::sources) name the settings a caller gives
// beside a config file: cli/ gives its flags ("--set", "--device", ...), so
// that the words the user typed come back; the defaults are words, for
// callers that are not the CLI.
struct SettingSources {
  std::string overrides = "override";  // followed by the key: "override lr"
  std::string device = "device override";
  std::string warm_start = "warm-start override";
  std::string memory_budget = "memory-budget override";
};

// Parses `text` (an INI file; `source` names it in errors, e.g. the path)
// and then applies each "key=value" of `overrides`, which win over the
// file. Throws anneal::Error kUsage, one line naming SOURCE:LINE or the
// override ("OVERRIDES key", OVERRIDES from `named`) and what was expected:
// an unknown key (with the closest known one), a malformed value, a missing
// required key.
TrainConfig parse_train_config(std::string_view text, std::string_view source,
                               const std::vector<std::string>& overrides, const SettingSources& named = {});

// The message of a Boost.Program_options error (command line or config
// file). Not e.what() alone: Boost substitutes each value into its message
// template until no placeholder is left, which never ends for a value that
// holds its own placeholder (an argument "--%canonical_option%"). The
// values' '%' stand aside while Boost builds the message (`e`'s values are
// changed for that) and are put back in the text.
std::string option_error_text(boost::program_options::error& e);

// A memory_budget value: bytes with an optional binary suffix K, M, G or T
// (KiB..TiB), e.g. "512M", "2G", "1048576"; at least 64K. Throws kUsage
// saying what was expected (the caller adds where it was set).
std::uint64_t parse_memory_budget(std::string_view text);
// Bytes as memory_budget text: the largest suffix that divides them ("2G").
std::string memory_budget_text(std::uint64_t bytes);

// A warm_start value for a config whose model is `model_name`: a bare word
// is an alias of that name, anything with '@' a model reference
// (NAME@ALIAS, NAME@vN, NAME@latest). Syntax only; throws kUsage for a
// malformed one (the caller adds where it was set).
ModelRef parse_warm_start(std::string_view text, const std::string& model_name);

// class_weight's text parsed. Throws kUsage "class_weight = '...': expected ..." (the caller adds where
// it was set).
ClassWeightSpec parse_class_weight(std::string_view text);

// "30s", "5m", "2h" (a duration) or "500" (steps); throws kUsage naming `key`.
CheckpointEvery parse_checkpoint_every(std::string_view text, std::string_view key);

}  // namespace anneal
