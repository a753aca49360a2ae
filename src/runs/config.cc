// Training config: INI text through Boost.Program_options, then --set
// overrides, then one table (key_table) with a row per key that reads its
// value into the typed field, checked so each error can say where the bad
// value came from, and writes the field back for to_text().
#include "anneal/config.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <charconv>
#include <functional>
#include <limits>
#include <type_traits>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include "anneal/catalog_jobs.h"
#include "anneal/error.h"
#include "anneal/spelling.h"

namespace anneal {
namespace po = boost::program_options;

namespace {

std::string trim(std::string_view s) {
  std::size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  std::size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

// A value and where it came from ("fmnist.ini:7" or an override, "--set lr"
// as the CLI names it).
struct Setting {
  std::string value;
  std::string where;
};

class Values {
 public:
  explicit Values(std::map<std::string, Setting> settings) : settings_(std::move(settings)) {}

  bool has(const std::string& key) const { return settings_.count(key) > 0; }
  const std::string& where(const std::string& key) const { return settings_.at(key).where; }

  std::string text(const std::string& key) const {
    if (auto it = settings_.find(key); it != settings_.end()) return it->second.value;
    for (const auto& k : known_config_keys())
      if (key == k.name) return k.default_value;
    throw std::logic_error("config key not in known_config_keys(): " + key);
  }

  [[noreturn]] void bad(const std::string& key, const std::string& expected) const {
    std::string where = has(key) ? settings_.at(key).where + ": " : "";
    throw usage_error(where + key + " = '" + text(key) + "': expected " + expected);
  }

  double real(const std::string& key, double lo, double hi, const std::string& range) const {
    std::string s = text(key);
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < lo ||
        v > hi)
      bad(key, "a number " + range);
    return v;
  }

  std::int64_t integer(const std::string& key, std::int64_t lo, std::int64_t hi) const {
    std::string s = text(key);
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
      bad(key, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
    return v;
  }

  bool boolean(const std::string& key) const {
    std::string s = text(key);
    if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
    if (s == "false" || s == "no" || s == "off" || s == "0") return false;
    bad(key, "true or false");
  }

  // Runs an engine parser (which throws kUsage naming the closest name) and
  // prefixes its message with where the value came from.
  template <typename Fn>
  auto named(const std::string& key, Fn parse) const {
    try {
      return parse(text(key));
    } catch (const Error& e) {
      std::string where = has(key) ? settings_.at(key).where + ": " : "";
      throw usage_error(where + key + ": " + e.what());
    }
  }

 private:
  std::map<std::string, Setting> settings_;
};

std::string format_real(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  // Shortest text that reads back to the same double, for readable configs.
  for (int p = 1; p <= 17; ++p) {
    std::ostringstream s;
    s.precision(p);
    s << v;
    if (std::stod(s.str()) == v) return s.str();
  }
  return out.str();
}

// The shortest text that reads back (through double, then float, as
// parse_train_config does) to the same float.
std::string format_real(float v) {
  for (int p = 1; p <= 9; ++p) {
    std::ostringstream s;
    s.precision(p);
    s << v;
    if (static_cast<float>(std::stod(s.str())) == v) return s.str();
  }
  return format_real(static_cast<double>(v));
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// early_stop = auto with a validation split: epochs without a better
// validation loss before training stops (and restore_best takes the best).
constexpr int kAutoPatience = 10;

// Column names separated by commas, each once, for `key`.
std::vector<std::string> column_names(const Values& v, const std::string& key) {
  std::vector<std::string> out;
  const std::string s = v.text(key);
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t comma = std::min(s.find(',', pos), s.size());
    std::string name = trim(std::string_view(s).substr(pos, comma - pos));
    if (name.empty()) v.bad(key, "column names separated by commas");
    if (std::find(out.begin(), out.end(), name) != out.end()) v.bad(key, "each column once; '" + name + "' is named twice");
    out.push_back(std::move(name));
    pos = comma + 1;
  }
  return out;
}

std::string class_weight_text(const ClassWeightSpec& spec) {
  if (spec.balanced) return "balanced";
  std::string out;
  for (const auto& [name, weight] : spec.weights) out += (out.empty() ? "" : ",") + name + ":" + format_real(weight);
  return out;
}

// One key of the config: its name, default and help (known_config_keys),
// how its value (as set, else the default) is read into its typed field,
// and how that field is written back as config text (to_text; "" leaves the
// key out). Rows of pass 1 read after every row of pass 0 (they look at
// fields other rows read).
struct KeyRow {
  ConfigKey key;
  std::function<void(const Values&, TrainConfig&)> read;
  std::function<std::string(const TrainConfig&)> write;
  int pass = 0;
};

// Row makers for the common field types. `field` is a generic lambda
// giving the field of a TrainConfig, const or not:
//   [](auto& c) -> auto& { return c.trainer.optimizer.lr; }
template <class Field>
using FieldType = std::remove_cvref_t<decltype(std::declval<Field>()(std::declval<TrainConfig&>()))>;

template <class Field>
KeyRow real_row(ConfigKey key, double lo, double hi, const char* range, Field field) {
  return {key,
          [=](const Values& v, TrainConfig& c) { field(c) = static_cast<FieldType<Field>>(v.real(key.name, lo, hi, range)); },
          [=](const TrainConfig& c) { return format_real(field(c)); }};
}

template <class Field>
KeyRow integer_row(ConfigKey key, std::int64_t lo, std::int64_t hi, Field field) {
  return {key,
          [=](const Values& v, TrainConfig& c) { field(c) = static_cast<FieldType<Field>>(v.integer(key.name, lo, hi)); },
          [=](const TrainConfig& c) { return std::to_string(field(c)); }};
}

template <class Field>
KeyRow boolean_row(ConfigKey key, Field field) {
  return {key, [=](const Values& v, TrainConfig& c) { field(c) = v.boolean(key.name); },
          [=](const TrainConfig& c) { return std::string(field(c) ? "true" : "false"); }};
}

// A name the engine parses (optimizer, device, ...), written back by `name`.
template <class Field, class Parse, class Name>
KeyRow named_row(ConfigKey key, Parse parse, Name name, Field field) {
  return {key, [=](const Values& v, TrainConfig& c) { field(c) = v.named(key.name, parse); },
          [=](const TrainConfig& c) { return std::string(name(field(c))); }};
}

#define ANNEAL_FIELD(path) [](auto& c) -> auto& { return c.path; }

const std::vector<KeyRow>& key_table() {
  static const std::vector<KeyRow> kRows = {
      {{"name", "", "model name; a finished run registers NAME@vN (required)"},
       [](const Values& v, TrainConfig& c) {
         c.name = v.text("name");
         try {
           validate_model_name(c.name);
         } catch (const Error&) {
           v.bad("name", "a model name: 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit");
         }
       },
       [](const TrainConfig& c) { return c.name; }},
      {{"dataset", "", "dataset version to train on: NAME, NAME@latest or NAME@vN (required)"},
       [](const Values& v, TrainConfig& c) { c.dataset = v.text("dataset"); },
       [](const TrainConfig& c) { return c.dataset; }},
      {{"layers", "auto",
        "layer spec, e.g. 'dense(128) relu dense(10)'; 'linear' or 'trees' for those models; 'auto': search linear, "
        "trees and networks on tabular data and train the best"},
       [](const Values& v, TrainConfig& c) {
         const std::string layers = v.text("layers");
         c.auto_search = layers == "auto" || layers.empty();
         c.kind = layers == "linear"  ? runs::ModelKindId::kLinear
                  : layers == "trees" ? runs::ModelKindId::kTrees
                                      : runs::ModelKindId::kNetwork;
         c.trainer.layers = c.kind == runs::ModelKindId::kNetwork && !c.auto_search ? layers : "";
       },
       [](const TrainConfig& c) {
         if (c.auto_search) return std::string("auto");
         return c.kind == runs::ModelKindId::kNetwork ? c.trainer.layers : std::string(runs::model_kind(c.kind).name());
       }},
      {{"time_budget", "2m",
        "layers = auto: no trial starts after this duration (120s, 5m, 1h) or none; unset with max_trials: none. "
        "A search cut by time is not reproducible"},
       [](const Values& v, TrainConfig& c) {
         const std::string text = v.text("time_budget");
         c.time_budget_text = text;
         if (text == "none" || (!v.has("time_budget") && c.max_trials)) {
           c.time_budget.reset();
           c.time_budget_text = "none";
           return;
         }
         CheckpointEvery d;
         try {
           d = parse_checkpoint_every(text, "time_budget");
         } catch (const Error&) {
           v.bad("time_budget", "a duration such as 120s, 5m or 1h, or none");
         }
         if (d.seconds <= 0) v.bad("time_budget", "a duration such as 120s, 5m or 1h, or none");
         c.time_budget = d.seconds;
       },
       [](const TrainConfig& c) { return c.time_budget_text; },
       /*pass=*/1},
      {{"max_trials", "", "layers = auto: the most trials (with a seed, the search repeats bit for bit); default: no limit"},
       [](const Values& v, TrainConfig& c) {
         if (!v.text("max_trials").empty()) c.max_trials = v.integer("max_trials", 1, 1000000);
       },
       [](const TrainConfig& c) { return c.max_trials ? std::to_string(*c.max_trials) : std::string(); }},
      named_row({"threshold_metric", "auto",
                 "binary classifiers: the metric the decision threshold is chosen for on the validation rows: auto "
                 "(balanced_accuracy when the majority class exceeds 80%, else accuracy), accuracy, "
                 "balanced_accuracy, f1 or none (the more probable class)"},
                [](const std::string& s) { return parse_threshold_metric(s); }, threshold_metric_name,
                ANNEAL_FIELD(threshold_metric)),
      named_row({"calibrate", "auto",
                 "classifiers: how the class probabilities are calibrated on the validation rows: auto (temperature "
                 "for networks with validation rows, else none), none or temperature (a fitted T: softmax(z/T))"},
                [](const std::string& s) { return runs::parse_calibrate_mode(s); }, runs::calibrate_mode_name,
                ANNEAL_FIELD(calibrate)),
      integer_row({"folds", "5", "layers = auto: folds of the cross-validation that scores trials on small tables"}, 2, 20,
                  ANNEAL_FIELD(folds)),
      integer_row({"bags", "5",
                   "layers = auto: each network of the chosen model is refit with this many seeds and their "
                   "predictions averaged, as many as the time budget leaves room for (1: once)"},
                  1, 32, ANNEAL_FIELD(bags)),
      boolean_row({"ensemble", "true",
                   "layers = auto: register a weighted ensemble of the best trials when it validates better than the "
                   "best one (false: always the single best)"},
                  ANNEAL_FIELD(ensemble)),
      {{"label", "", "the label column; must be the one the dataset was imported with"},
       [](const Values& v, TrainConfig& c) { c.label = v.text("label"); },
       [](const TrainConfig& c) { return c.label; }},
      {{"loss", "", "softmax_ce | bce | mse | mae (default: from the label column)"},
       [](const Values& v, TrainConfig& c) {
         if (!v.text("loss").empty()) c.loss = v.named("loss", [](const std::string& s) { return parse_loss_kind(s); });
       },
       [](const TrainConfig& c) { return c.loss ? std::string(loss_name(*c.loss)) : std::string(); }},
      named_row({"optimizer", "adam", "sgd | adam | adamw"}, [](const std::string& s) { return parse_optimizer_kind(s); },
                optimizer_name, ANNEAL_FIELD(trainer.optimizer.kind)),
      real_row({"lr", "0.001", "learning rate"}, 1e-12, 1e6, "> 0", ANNEAL_FIELD(trainer.optimizer.lr)),
      real_row({"momentum", "0", "sgd momentum"}, 0, 0.999999, "in [0, 1)", ANNEAL_FIELD(trainer.optimizer.momentum)),
      boolean_row({"nesterov", "false", "sgd: Nesterov momentum"}, ANNEAL_FIELD(trainer.optimizer.nesterov)),
      real_row({"weight_decay", "0", "L2 (sgd, adam) or decoupled (adamw) weight decay"}, 0, 1e6, ">= 0",
               ANNEAL_FIELD(trainer.optimizer.weight_decay)),
      named_row({"lr_schedule", "constant", "constant | step | cosine"},
                [](const std::string& s) { return parse_schedule_kind(s); }, schedule_name,
                ANNEAL_FIELD(trainer.optimizer.schedule)),
      integer_row({"warmup_steps", "0", "linear warmup steps"}, 0, std::int64_t{1} << 40,
                  ANNEAL_FIELD(trainer.optimizer.warmup_steps)),
      integer_row({"lr_step_size", "1000", "step schedule: steps between decays"}, 1, std::int64_t{1} << 40,
                  ANNEAL_FIELD(trainer.optimizer.step_size)),
      real_row({"lr_gamma", "0.1", "step schedule: decay factor"}, 0, 1, "in [0, 1]", ANNEAL_FIELD(trainer.optimizer.gamma)),
      real_row({"min_lr", "0", "cosine schedule: final learning rate"}, 0, 1e6, ">= 0", ANNEAL_FIELD(trainer.optimizer.min_lr)),
      real_row({"grad_clip", "0", "clip gradients to this global L2 norm (0: off)"}, 0, 1e12, ">= 0",
               ANNEAL_FIELD(trainer.optimizer.grad_clip)),
      integer_row({"grad_accum", "1", "micro-batches per optimizer step"}, 1, 1 << 20, ANNEAL_FIELD(trainer.grad_accum)),
      integer_row({"batch", "128", "batch size"}, 1, 1 << 24, ANNEAL_FIELD(trainer.batch)),
      integer_row({"epochs", "10", "epochs"}, 1, 1 << 24, ANNEAL_FIELD(trainer.epochs)),
      integer_row({"seed", "0", "seed of initialisation, shuffling, dropout and the validation split"}, 0,
                  std::numeric_limits<std::int64_t>::max(), ANNEAL_FIELD(trainer.seed)),
      {{"threads", "", "compute threads (default: the CPU count); part of determinism"},
       [](const Values& v, TrainConfig& c) {
         c.threads = v.has("threads") && !v.text("threads").empty()
                         ? static_cast<int>(v.integer("threads", 1, 1024))
                         : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
       },
       [](const TrainConfig& c) { return std::to_string(c.threads); }},
      named_row({"device", "auto", "auto | cpu | cuda: auto takes a usable GPU, else the CPU"},
                [](const std::string& s) { return parse_device(s); }, device_name, ANNEAL_FIELD(device)),
      named_row({"precision", "fp32", "fp32 | bf16 | fp16 (fp16: GPU only, with dynamic loss scaling)"},
                [](const std::string& s) { return parse_precision(s); }, precision_name, ANNEAL_FIELD(trainer.precision)),
      boolean_row({"deterministic", "true",
                   "false lets a GPU pick faster algorithms whose weights vary run to run (recorded)"},
                  ANNEAL_FIELD(deterministic)),
      boolean_row({"tf32", "false", "true lets a GPU run fp32 products and convolutions on TF32 tensor cores"},
                  ANNEAL_FIELD(tf32)),
      {{"early_stop", "auto",
        "METRIC:PATIENCE (METRIC = val_loss | val_accuracy | train_loss), none, or auto: val_loss:10 with a "
        "validation split, else none"},
       [](const Values& v, TrainConfig& c) {
         TrainerConfig& t = c.trainer;
         std::string early = v.text("early_stop");
         // auto: a network that holds rows out for validation stops when
         // they stop improving, as a user who set validation expects;
         // recorded resolved (to_text), so a rerun of the run's config does
         // what the run did.
         if (early == "auto") early = c.validation > 0 ? "val_loss:" + std::to_string(kAutoPatience) : "none";
         if (early != "none" && !early.empty()) {
           std::size_t colon = early.find(':');
           if (colon == std::string::npos) v.bad("early_stop", "METRIC:PATIENCE such as val_loss:3");
           try {
             t.early_stop = parse_early_stop_metric(early.substr(0, colon));
           } catch (const Error& e) {
             v.bad("early_stop", std::string("METRIC:PATIENCE; ") + e.what());
           }
           std::int64_t patience = 0;
           std::string p = early.substr(colon + 1);
           auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), patience);
           if (p.empty() || ec != std::errc() || end != p.data() + p.size() || patience < 1 || patience > 1000000)
             v.bad("early_stop", "METRIC:PATIENCE with PATIENCE >= 1 epochs");
           t.patience = static_cast<int>(patience);
         }
         if (t.early_stop != EarlyStopMetric::kNone && t.early_stop != EarlyStopMetric::kTrainLoss && c.validation <= 0)
           v.bad("early_stop", "a training metric (train_loss:N), or set validation = FRACTION to stop on " +
                                   std::string(early_stop_metric_name(t.early_stop)));
       },
       [](const TrainConfig& c) {
         const TrainerConfig& t = c.trainer;
         return t.early_stop == EarlyStopMetric::kNone
                    ? std::string("none")
                    : std::string(early_stop_metric_name(t.early_stop)) + ":" + std::to_string(t.patience);
       },
       /*pass=*/1},
      boolean_row({"restore_best", "true", "with early stopping: the model keeps the weights of its best epoch, not its last"},
                  ANNEAL_FIELD(trainer.restore_best)),
      real_row({"validation", "0", "fraction of the train split held out for validation"}, 0, 0.95, "in [0, 0.95]",
               ANNEAL_FIELD(validation)),
      {{"checkpoint_every", "60s", "N steps or a duration (30s, 5m, 1h); 0: only at the end"},
       [](const Values& v, TrainConfig& c) {
         try {
           c.checkpoint_every = parse_checkpoint_every(v.text("checkpoint_every"), "checkpoint_every");
         } catch (const Error& e) {
           std::string where = v.has("checkpoint_every") ? v.where("checkpoint_every") + ": " : "";
           throw usage_error(where + e.what());
         }
       },
       [](const TrainConfig& c) { return c.checkpoint_every.text; }},
      integer_row({"keep_checkpoints", "3", "checkpoints kept per run besides the best one"}, 1, 1000000,
                  ANNEAL_FIELD(keep_checkpoints)),
      boolean_row({"baseline", "true", "tabular data: also fit the regularized linear baseline"}, ANNEAL_FIELD(baseline)),
      real_row({"linear_l2", "1", "L2 strength of the linear model"}, 0, 1e12, ">= 0", ANNEAL_FIELD(linear_l2)),
      integer_row({"tree_rounds", "300", "layers = trees: boosting rounds, at most"}, 1, 100000,
                  ANNEAL_FIELD(trees.max_rounds)),
      integer_row({"tree_early_stop", "50",
                   "layers = trees, with a validation split: stop after N rounds without a better validation loss "
                   "(0: off)"},
                  0, 100000, ANNEAL_FIELD(trees.early_stopping_rounds)),
      integer_row({"tree_depth", "6", "layers = trees: the deepest a tree grows"}, 1, 20, ANNEAL_FIELD(trees.max_depth)),
      real_row({"tree_lr", "0.1", "layers = trees: the learning rate (XGBoost's eta)"}, 1e-6, 1, "in (0, 1]",
               ANNEAL_FIELD(trees.learning_rate)),
      real_row({"tree_min_child_weight", "1", "layers = trees: the least hessian weight a leaf holds"}, 0, 1e9, ">= 0",
               ANNEAL_FIELD(trees.min_child_weight)),
      real_row({"tree_subsample", "1", "layers = trees: the fraction of rows each tree samples"}, 1e-6, 1, "in (0, 1]",
               ANNEAL_FIELD(trees.subsample)),
      real_row({"tree_colsample", "1", "layers = trees: the fraction of columns each tree samples"}, 1e-6, 1, "in (0, 1]",
               ANNEAL_FIELD(trees.colsample_bytree)),
      real_row({"tree_l2", "1", "layers = trees: L2 penalty on leaf values (XGBoost's lambda)"}, 0, 1e12, ">= 0",
               ANNEAL_FIELD(trees.l2)),
      {{"warm_start", "", "start from a model's weights and preprocessing: an ALIAS of name (production) or NAME@vN"},
       [](const Values& v, TrainConfig& c) {
         const std::string text = v.text("warm_start");
         if (text.empty()) return;
         try {
           // Syntax only (parsing is pure): the run looks the model up.
           c.warm_start = parse_warm_start(text, c.name);
         } catch (const Error& e) {
           if (e.kind() != ErrorKind::kUsage) throw;
           v.bad("warm_start", "an alias of '" + c.name + "' such as production (letters, digits, '.', '_', '-'; "
                               "not latest or vN), NAME@ALIAS or NAME@vN");
         }
       },
       [](const TrainConfig& c) {
         if (!c.warm_start) return std::string();
         // An alias of the config's own model reads back from its bare name.
         if (c.warm_start->alias && c.warm_start->name == c.name) return *c.warm_start->alias;
         return c.warm_start->to_string();
       },
       /*pass=*/1},
      {{"features", "", "exactly these feature columns, comma-separated (default: all but identifiers)"},
       [](const Values& v, TrainConfig& c) {
         if (v.has("features")) c.features = column_names(v, "features");
       },
       [](const TrainConfig& c) { return c.features ? join_names(*c.features) : std::string(); }},
      {{"exclude", "", "feature columns to leave out, comma-separated"},
       [](const Values& v, TrainConfig& c) {
         if (v.has("exclude") && !v.text("exclude").empty()) c.exclude = column_names(v, "exclude");
       },
       [](const TrainConfig& c) { return join_names(c.exclude); }},
      integer_row({"category_min_count", "5", "training rows a categorical level needs for its own one-hot slot"}, 1,
                  std::int64_t{1} << 40, ANNEAL_FIELD(category_min_count)),
      integer_row({"max_categories", "50", "most one-hot slots of a categorical column besides 'other'"}, 1, 1000000,
                  ANNEAL_FIELD(max_categories)),
      // Opt-in: standard unless set, so every config's weights stay what
      // they were (under layers = auto too: bench/RESULTS.md, issue 31, has
      // the measurement that kept auto from being its default).
      named_row({"scaling", "standard",
                 "numeric columns: standard | robust (median, quartile range, smooth clip) | auto (robust for skewed "
                 "columns)"},
                [](const std::string& s) { return parse_scaling(s); }, scaling_name, ANNEAL_FIELD(scaling)),
      named_row({"target_transform", "standard",
                 "regression: standard | log (train on standardized log1p(y - shift), predict expm1) | auto (log for "
                 "a non-negative target skewed right)"},
                [](const std::string& s) { return parse_target_transform(s); }, target_transform_name,
                ANNEAL_FIELD(target_transform)),
      {{"class_weight", "", "softmax_ce/bce: balanced, or CLASS:W,CLASS:W (default: all 1)"},
       [](const Values& v, TrainConfig& c) {
         if (!v.text("class_weight").empty())
           c.class_weight = v.named("class_weight", [](const std::string& s) { return parse_class_weight(s); });
       },
       [](const TrainConfig& c) { return class_weight_text(c.class_weight); }},
      {{"memory_budget", "", "bytes of dataset rows held in memory, e.g. 2G (default: half the RAM); more streams"},
       [](const Values& v, TrainConfig& c) {
         if (!v.text("memory_budget").empty())
           c.memory_budget = v.named("memory_budget", [](const std::string& s) { return parse_memory_budget(s); });
       },
       [](const TrainConfig& c) { return c.memory_budget ? memory_budget_text(*c.memory_budget) : std::string(); }},
  };
  return kRows;
}

#undef ANNEAL_FIELD

}  // namespace

const std::vector<ConfigKey>& known_config_keys() {
  static const std::vector<ConfigKey> kKeys = [] {
    std::vector<ConfigKey> keys;
    for (const KeyRow& row : key_table()) keys.push_back(row.key);
    return keys;
  }();
  return kKeys;
}

namespace {

// "; did you mean 'K'?" for an unknown config key, or "".
std::string suggest_key(std::string_view key) {
  // Names other tools use for the same setting, so 'learning_rate' points
  // at 'lr' rather than at whatever key happens to be spelled alike.
  static const Spelling kAliases[] = {
      {"learning_rate", "lr"},     {"batch_size", "batch"},  {"num_epochs", "epochs"},
      {"max_epochs", "epochs"},    {"n_epochs", "epochs"},   {"num_threads", "threads"},
      {"schedule", "lr_schedule"}, {"warmup", "warmup_steps"}, {"patience", "early_stop"},
      {"val_split", "validation"}, {"validation_split", "validation"}, {"model", "layers"},
      {"data", "dataset"},         {"optim", "optimizer"},   {"l2", "weight_decay"}};
  std::vector<Spelling> known;
  for (const auto& k : known_config_keys()) known.push_back({k.name, k.name});
  known.insert(known.end(), std::begin(kAliases), std::end(kAliases));
  return did_you_mean(key, known);
}

bool is_known(std::string_view key) {
  return std::any_of(known_config_keys().begin(), known_config_keys().end(),
                     [&](const ConfigKey& k) { return key == k.name; });
}

// The values of an error's placeholders, which Boost keeps protected: a
// pointer to the member, formed in a derived class, reads them from the
// base.
struct PlaceholderValues : po::error_with_option_name {
  static std::map<std::string, std::string> of(const po::error_with_option_name& e) {
    return e.*(&PlaceholderValues::m_substitutions);
  }
};

// ":N", the 1-based line of `text` that is `line` once trimmed as Boost
// trims it (spaces and tabs, after a '#' comment is cut), or "" if none is.
std::string line_suffix(std::string_view text, std::string_view line) {
  int number = 1;
  for (std::size_t pos = 0; pos <= text.size(); ++number) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    l = l.substr(0, l.find('#'));
    const std::size_t first = l.find_first_not_of(" \t\r");
    const std::size_t last = l.find_last_not_of(" \t\r");
    if (first != std::string_view::npos && l.substr(first, last - first + 1) == line)
      return ":" + std::to_string(number);
    pos = end + 1;
  }
  return "";
}

// A config line for a one-line message: control bytes as \xNN, at most
// 80 bytes of it.
std::string shown_line(std::string_view line) {
  std::string out;
  for (const char c : line.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static constexpr char kHexDigits[] = "0123456789abcdef";
      out += "\\x";
      out += kHexDigits[u >> 4];
      out += kHexDigits[u & 15];
    } else {
      out += c;
    }
  }
  if (line.size() > 80) out += "...";
  return out;
}

// The 1-based line of `text` where `key` is first assigned, for messages.
int line_of(std::string_view text, std::string_view key) {
  int line = 1;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    std::size_t first = l.find_first_not_of(" \t");
    if (first != std::string_view::npos && l.substr(first).starts_with(key)) {
      std::string_view rest = l.substr(first + key.size());
      std::size_t next = rest.find_first_not_of(" \t");
      if (next != std::string_view::npos && rest[next] == '=') return line;
    }
    ++line;
    pos = end + 1;
  }
  return 0;
}

}  // namespace

ModelRef parse_warm_start(std::string_view text, const std::string& model_name) {
  if (text.find('@') != std::string_view::npos) return parse_model_ref(text, "warm_start");
  validate_alias_name(text);
  return ModelRef{model_name, std::nullopt, std::string(text)};
}

ClassWeightSpec parse_class_weight(std::string_view text) {
  ClassWeightSpec spec;
  const std::string s = trim(text);
  if (s == "balanced") {
    spec.balanced = true;
    return spec;
  }
  const std::string expected = "'balanced' or CLASS:WEIGHT pairs separated by commas (yes:5,no:1)";
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t comma = std::min(s.find(',', pos), s.size());
    std::string item = trim(std::string_view(s).substr(pos, comma - pos));
    std::size_t colon = item.rfind(':');
    if (item.empty() || colon == std::string::npos || colon == 0)
      throw usage_error("'" + s + "': expected " + expected);
    std::string name = trim(std::string_view(item).substr(0, colon));
    std::string number = trim(std::string_view(item).substr(colon + 1));
    double w = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), w);
    if (number.empty() || ec != std::errc() || end != number.data() + number.size() || !std::isfinite(w) || w <= 0)
      throw usage_error("'" + s + "': the weight of class '" + name + "' is '" + number + "', expected a number > 0");
    for (const auto& [seen, unused] : spec.weights)
      if (seen == name) throw usage_error("'" + s + "': class '" + name + "' is given twice");
    spec.weights.emplace_back(std::move(name), w);
    pos = comma + 1;
  }
  return spec;
}

CheckpointEvery parse_checkpoint_every(std::string_view text, std::string_view key) {
  CheckpointEvery every;
  every.text = std::string(text);
  std::string s(text);
  double scale = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 's': scale = 1; break;
      case 'm': scale = 60; break;
      case 'h': scale = 3600; break;
      default: break;
    }
  }
  if (scale > 0) s.pop_back();
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  bool ok = !s.empty() && ec == std::errc() && end == s.data() + s.size() && std::isfinite(v) && v >= 0;
  if (ok && scale == 0) ok = std::floor(v) == v;
  if (!ok)
    throw usage_error(std::string(key) + " = '" + std::string(text) +
                      "': expected a step count (500) or a duration (30s, 5m, 1h)");
  if (scale > 0) every.seconds = v * scale;
  else every.steps = static_cast<std::int64_t>(v);
  return every;
}

std::string option_error_text(po::error& e) {
  auto* named = dynamic_cast<po::error_with_option_name*>(&e);
  if (named == nullptr) return e.what();
  constexpr char kStandIn = '\x1a';  // SUB: no config or argument holds it in a message
  for (auto [key, value] : PlaceholderValues::of(*named)) {
    std::replace(value.begin(), value.end(), '%', kStandIn);
    named->set_substitute(key, value);
  }
  std::string text = e.what();
  std::replace(text.begin(), text.end(), kStandIn, '%');
  return text;
}

TrainConfig parse_train_config(std::string_view text, std::string_view source,
                               const std::vector<std::string>& overrides, const SettingSources& named) {
  po::options_description description;
  for (const auto& k : known_config_keys())
    description.add_options()(k.name, po::value<std::string>());
  po::parsed_options parsed(&description);
  try {
    std::istringstream in{std::string(text)};
    parsed = po::parse_config_file(in, description, /*allow_unregistered=*/true);
  } catch (const po::invalid_config_file_syntax& e) {
    // Not e.what(): Boost substitutes the line into its message until no
    // placeholder is left, which never ends for a line that holds
    // "%invalid_line%" (tests/fuzz/regressions/config/boost_placeholder_loop).
    throw usage_error(std::string(source) + line_suffix(text, e.tokens()) + ": '" +
                      shown_line(e.tokens()) + "': expected key = value, a [section] or a # comment");
  } catch (po::error& e) {
    throw usage_error(std::string(source) + ": " + option_error_text(e));
  }
  std::map<std::string, Setting> settings;
  for (const auto& option : parsed.options) {
    int line = line_of(text, option.string_key);
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive)
    // on "literal" + std::string temporaries here.
    std::string where(source);
    if (line > 0) where.append(":").append(std::to_string(line));
    if (option.unregistered || !is_known(option.string_key))
      throw usage_error(where + ": unknown key '" + option.string_key + "'" +
                        suggest_key(option.string_key));
    if (settings.count(option.string_key))
      throw usage_error(where + ": key '" + option.string_key + "' is set twice");
    settings[option.string_key] = {trim(option.value.empty() ? "" : option.value[0]), where};
  }
  for (const auto& o : overrides) {
    std::size_t eq = o.find('=');
    if (eq == std::string::npos)
      throw usage_error(named.overrides + " " + o + ": expected key=value");
    std::string key = trim(o.substr(0, eq));
    if (!is_known(key))
      throw usage_error(named.overrides + " " + o + ": unknown key '" + key + "'" + suggest_key(key));
    std::string value = trim(o.substr(eq + 1));
    // The resolved config is written back as INI text (to_text(), frozen
    // in a job or a run) and must parse back to exactly this value: in that
    // text '#' starts a comment and a line break starts a new key, and INI
    // has no escape for either.
    for (char ch : value)
      if (ch == '#' || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
        throw usage_error(named.overrides + " " + key + ": the value may not contain " +
                          (ch == '#' ? std::string("'#' (it starts a comment in a config file)")
                                     : std::string("a line break or control character")) +
                          (key == "label" ? "; name the label column by its 0-based index instead" : ""));
    settings[key] = {value, named.overrides + " " + key};
  }

  TrainConfig c;
  for (const auto& [key, setting] : settings) c.sources[key] = setting.where;
  Values v(std::move(settings));
  for (const char* required : {"name", "dataset"})
    if (!v.has(required) || v.text(required).empty())
      throw usage_error(std::string(source) + ": missing key '" + required + "'");
  // Each row reads its key into its field; a row that reads other fields
  // (early_stop reads validation) comes in the second pass.
  for (int pass : {0, 1})
    for (const KeyRow& row : key_table())
      if (row.pass == pass) row.read(v, c);
  try {
    validate(c.trainer.optimizer);
  } catch (const Error& e) {
    throw usage_error(std::string(source) + ": " + e.what());
  }
  return c;
}

std::uint64_t parse_memory_budget(std::string_view text) {
  const std::string s = trim(text);
  const std::string expected = "bytes with an optional suffix K, M, G or T (512M, 2G), at least 64K";
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  const std::string_view suffix(end, static_cast<std::size_t>(s.data() + s.size() - end));
  int shift = -1;
  if (suffix.empty()) shift = 0;
  else if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (suffix == "T" || suffix == "t") shift = 40;
  if (s.empty() || ec != std::errc() || end == s.data() || shift < 0 || value > (~std::uint64_t{0} >> (shift + 1)))
    throw usage_error("'" + s + "': expected " + expected);
  const std::uint64_t bytes = value << shift;
  if (bytes < (std::uint64_t{1} << 16)) throw usage_error("'" + s + "': expected " + expected);
  return bytes;
}

std::string memory_budget_text(std::uint64_t bytes) {
  for (auto [shift, suffix] : {std::pair{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}})
    if (bytes % (std::uint64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + suffix;
  return std::to_string(bytes);
}

std::string TrainConfig::to_text() const {
  std::map<std::string, std::string> kv;  // sorted by key
  for (const KeyRow& row : key_table())
    if (std::string value = row.write(*this); !value.empty()) kv[row.key.name] = std::move(value);
  std::string out;
  for (const auto& [k, value] : kv) out += k + " = " + value + "\n";
  return out;
}

}  // namespace anneal
