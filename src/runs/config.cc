// Training config: INI text through Boost.Program_options, then --set
// overrides, then typed values checked one key at a time so each error can
// say where the bad value came from.
#include "anneal/config.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include "anneal/catalog_jobs.h"
#include "anneal/error.h"
#include "anneal/spelling.h"

namespace anneal {
namespace po = boost::program_options;

const std::vector<ConfigKey>& known_config_keys() {
  static const std::vector<ConfigKey> kKeys = {
      {"name", "", "model name; a finished run registers NAME@vN (required)"},
      {"dataset", "", "dataset version to train on: NAME, NAME@latest or NAME@vN (required)"},
      {"layers", "", "layer spec, e.g. 'dense(128) relu dense(10)'; 'linear' or 'trees' for those models (required)"},
      {"label", "", "the label column; must be the one the dataset was imported with"},
      {"loss", "", "softmax_ce | bce | mse | mae (default: from the label column)"},
      {"optimizer", "adam", "sgd | adam | adamw"},
      {"lr", "0.001", "learning rate"},
      {"momentum", "0", "sgd momentum"},
      {"nesterov", "false", "sgd: Nesterov momentum"},
      {"weight_decay", "0", "L2 (sgd, adam) or decoupled (adamw) weight decay"},
      {"lr_schedule", "constant", "constant | step | cosine"},
      {"warmup_steps", "0", "linear warmup steps"},
      {"lr_step_size", "1000", "step schedule: steps between decays"},
      {"lr_gamma", "0.1", "step schedule: decay factor"},
      {"min_lr", "0", "cosine schedule: final learning rate"},
      {"grad_clip", "0", "clip gradients to this global L2 norm (0: off)"},
      {"grad_accum", "1", "micro-batches per optimizer step"},
      {"batch", "128", "batch size"},
      {"epochs", "10", "epochs"},
      {"seed", "0", "seed of initialisation, shuffling, dropout and the validation split"},
      {"threads", "", "compute threads (default: the CPU count); part of determinism"},
      {"device", "auto", "auto | cpu | cuda: auto takes a usable GPU, else the CPU"},
      {"precision", "fp32", "fp32 | bf16 | fp16 (fp16: GPU only, with dynamic loss scaling)"},
      {"deterministic", "true", "false lets a GPU pick faster algorithms whose weights vary run to run (recorded)"},
      {"tf32", "false", "true lets a GPU run fp32 products and convolutions on TF32 tensor cores"},
      {"early_stop", "auto", "METRIC:PATIENCE (METRIC = val_loss | val_accuracy | train_loss), none, or auto: val_loss:10 with a validation split, else none"},
      {"restore_best", "true", "with early stopping: the model keeps the weights of its best epoch, not its last"},
      {"validation", "0", "fraction of the train split held out for validation"},
      {"checkpoint_every", "60s", "N steps or a duration (30s, 5m, 1h); 0: only at the end"},
      {"keep_checkpoints", "3", "checkpoints kept per run besides the best one"},
      {"baseline", "true", "tabular data: also fit the regularized linear baseline"},
      {"linear_l2", "1", "L2 strength of the linear model"},
      {"tree_rounds", "300", "layers = trees: boosting rounds, at most"},
      {"tree_early_stop", "50", "layers = trees, with a validation split: stop after N rounds without a better validation loss (0: off)"},
      {"tree_depth", "6", "layers = trees: the deepest a tree grows"},
      {"tree_lr", "0.1", "layers = trees: the learning rate (XGBoost's eta)"},
      {"tree_min_child_weight", "1", "layers = trees: the least hessian weight a leaf holds"},
      {"tree_subsample", "1", "layers = trees: the fraction of rows each tree samples"},
      {"tree_colsample", "1", "layers = trees: the fraction of columns each tree samples"},
      {"tree_l2", "1", "layers = trees: L2 penalty on leaf values (XGBoost's lambda)"},
      {"warm_start", "", "start from a model's weights and preprocessing: an ALIAS of name (production) or NAME@vN"},
      {"features", "", "exactly these feature columns, comma-separated (default: all but identifiers)"},
      {"exclude", "", "feature columns to leave out, comma-separated"},
      {"category_min_count", "5", "training rows a categorical level needs for its own one-hot slot"},
      {"max_categories", "50", "most one-hot slots of a categorical column besides 'other'"},
      {"class_weight", "", "softmax_ce/bce: balanced, or CLASS:W,CLASS:W (default: all 1)"},
      {"memory_budget", "", "bytes of dataset rows held in memory, e.g. 2G (default: half the RAM); more streams"},
  };
  return kKeys;
}

namespace {

// early_stop = auto with a validation split: epochs without a better
// validation loss before training stops (and restore_best takes the best).
constexpr int kAutoPatience = 10;

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

std::string trim(std::string_view s) {
  std::size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  std::size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

// A value and where it came from ("fmnist.ini:7" or "--set lr").
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

}  // namespace

ModelRef warm_start_ref(const TrainConfig& config) {
  const std::string& text = config.warm_start;
  if (text.find('@') != std::string::npos) return parse_model_ref(text, "warm_start");
  validate_alias_name(text);
  return ModelRef{config.name, std::nullopt, text};
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

TrainConfig parse_train_config(std::string_view text, std::string_view source,
                               const std::vector<std::string>& overrides) {
  po::options_description description;
  for (const auto& k : known_config_keys())
    description.add_options()(k.name, po::value<std::string>());
  po::parsed_options parsed(&description);
  try {
    std::istringstream in{std::string(text)};
    parsed = po::parse_config_file(in, description, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    throw usage_error(std::string(source) + ": " + e.what());
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
      throw usage_error("--set " + o + ": expected key=value");
    std::string key = trim(o.substr(0, eq));
    if (!is_known(key))
      throw usage_error("--set " + o + ": unknown key '" + key + "'" + suggest_key(key));
    std::string value = trim(o.substr(eq + 1));
    // The resolved config is written back as INI text (to_text(), frozen
    // in a job or a run) and must parse back to exactly this value: in that
    // text '#' starts a comment and a line break starts a new key, and INI
    // has no escape for either.
    for (char ch : value)
      if (ch == '#' || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
        throw usage_error("--set " + key + ": the value may not contain " +
                          (ch == '#' ? std::string("'#' (it starts a comment in a config file)")
                                     : std::string("a line break or control character")) +
                          (key == "label" ? "; name the label column by its 0-based index instead" : ""));
    settings[key] = {value, "--set " + key};
  }

  TrainConfig c;
  for (const auto& [key, setting] : settings) c.sources[key] = setting.where;
  Values v(std::move(settings));
  for (const char* required : {"name", "dataset", "layers"})
    if (!v.has(required) || v.text(required).empty())
      throw usage_error(std::string(source) + ": missing key '" + required + "'");
  c.name = v.text("name");
  try {
    validate_model_name(c.name);
  } catch (const Error&) {
    v.bad("name", "a model name: 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit");
  }
  c.dataset = v.text("dataset");
  c.label = v.text("label");
  std::string layers = v.text("layers");
  c.kind = layers == "linear" ? runs::ModelKindId::kLinear
           : layers == "trees"  ? runs::ModelKindId::kTrees
                                : runs::ModelKindId::kNetwork;
  c.trainer.layers = c.kind == runs::ModelKindId::kNetwork ? layers : "";
  if (!v.text("loss").empty()) {
    v.named("loss", [](const std::string& s) { return parse_loss_kind(s); });
    c.loss = v.text("loss");
  }
  TrainerConfig& t = c.trainer;
  OptimizerConfig& o = t.optimizer;
  o.kind = v.named("optimizer", [](const std::string& s) { return parse_optimizer_kind(s); });
  o.lr = static_cast<float>(v.real("lr", 1e-12, 1e6, "> 0"));
  o.momentum = static_cast<float>(v.real("momentum", 0, 0.999999, "in [0, 1)"));
  o.nesterov = v.boolean("nesterov");
  o.weight_decay = static_cast<float>(v.real("weight_decay", 0, 1e6, ">= 0"));
  o.schedule = v.named("lr_schedule", [](const std::string& s) { return parse_schedule_kind(s); });
  o.warmup_steps = v.integer("warmup_steps", 0, std::int64_t{1} << 40);
  o.step_size = v.integer("lr_step_size", 1, std::int64_t{1} << 40);
  o.gamma = static_cast<float>(v.real("lr_gamma", 0, 1, "in [0, 1]"));
  o.min_lr = static_cast<float>(v.real("min_lr", 0, 1e6, ">= 0"));
  o.grad_clip = static_cast<float>(v.real("grad_clip", 0, 1e12, ">= 0"));
  try {
    validate(o);
  } catch (const Error& e) {
    throw usage_error(std::string(source) + ": " + e.what());
  }
  t.grad_accum = v.integer("grad_accum", 1, 1 << 20);
  t.batch = v.integer("batch", 1, 1 << 24);
  t.epochs = v.integer("epochs", 1, 1 << 24);
  t.seed = static_cast<std::uint64_t>(v.integer("seed", 0, std::numeric_limits<std::int64_t>::max()));
  if (v.has("threads") && !v.text("threads").empty()) {
    c.threads = static_cast<int>(v.integer("threads", 1, 1024));
  } else {
    c.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  c.device = v.named("device", [](const std::string& s) { return parse_device(s); });
  c.deterministic = v.boolean("deterministic");
  c.tf32 = v.boolean("tf32");
  t.precision = v.named("precision", [](const std::string& s) { return parse_precision(s); });
  c.validation = v.real("validation", 0, 0.95, "in [0, 0.95]");
  std::string early = v.text("early_stop");
  // auto: a network that holds rows out for validation stops when they stop
  // improving, as a user who set validation expects; recorded resolved
  // (to_text), so a rerun of the run's config does what the run did.
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
  t.restore_best = v.boolean("restore_best");
  if (t.early_stop != EarlyStopMetric::kNone && t.early_stop != EarlyStopMetric::kTrainLoss &&
      c.validation <= 0)
    v.bad("early_stop", "a training metric (train_loss:N), or set validation = FRACTION to stop on " +
                            std::string(early_stop_metric_name(t.early_stop)));
  try {
    c.checkpoint_every = parse_checkpoint_every(v.text("checkpoint_every"), "checkpoint_every");
  } catch (const Error& e) {
    std::string where = v.has("checkpoint_every") ? v.where("checkpoint_every") + ": " : "";
    throw usage_error(where + e.what());
  }
  c.keep_checkpoints = v.integer("keep_checkpoints", 1, 1000000);
  c.baseline = v.boolean("baseline");
  c.linear_l2 = v.real("linear_l2", 0, 1e12, ">= 0");
  c.trees.max_rounds = static_cast<int>(v.integer("tree_rounds", 1, 100000));
  c.trees.early_stopping_rounds = static_cast<int>(v.integer("tree_early_stop", 0, 100000));
  c.trees.max_depth = static_cast<int>(v.integer("tree_depth", 1, 20));
  c.trees.learning_rate = v.real("tree_lr", 1e-6, 1, "in (0, 1]");
  c.trees.min_child_weight = v.real("tree_min_child_weight", 0, 1e9, ">= 0");
  c.trees.subsample = v.real("tree_subsample", 1e-6, 1, "in (0, 1]");
  c.trees.colsample_bytree = v.real("tree_colsample", 1e-6, 1, "in (0, 1]");
  c.trees.l2 = v.real("tree_l2", 0, 1e12, ">= 0");
  c.warm_start = v.text("warm_start");
  if (!c.warm_start.empty()) {
    try {
      // Syntax only (parsing is pure): the run looks the model up.
      warm_start_ref(c);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUsage) throw;
      v.bad("warm_start", "an alias of '" + c.name + "' such as production (letters, digits, '.', '_', '-'; "
                          "not latest or vN), NAME@ALIAS or NAME@vN");
    }
  }
  auto names = [&](const std::string& key) {
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
  };
  if (v.has("features")) c.features = names("features");
  if (v.has("exclude") && !v.text("exclude").empty()) c.exclude = names("exclude");
  c.category_min_count = v.integer("category_min_count", 1, std::int64_t{1} << 40);
  c.max_categories = v.integer("max_categories", 1, 1000000);
  c.class_weight = v.text("class_weight");
  if (!c.class_weight.empty()) v.named("class_weight", [](const std::string& s) { return parse_class_weight(s); });
  if (!v.text("memory_budget").empty())
    c.memory_budget = v.named("memory_budget", [](const std::string& s) { return parse_memory_budget(s); });
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
  const TrainerConfig& t = trainer;
  const OptimizerConfig& o = t.optimizer;
  std::map<std::string, std::string> kv = {
      {"name", name},
      {"dataset", dataset},
      {"layers", kind == runs::ModelKindId::kLinear ? "linear" : kind == runs::ModelKindId::kTrees ? "trees" : t.layers},
      {"label", label},
      {"loss", loss},
      {"optimizer", optimizer_name(o.kind)},
      {"lr", format_real(o.lr)},
      {"momentum", format_real(o.momentum)},
      {"nesterov", o.nesterov ? "true" : "false"},
      {"weight_decay", format_real(o.weight_decay)},
      {"lr_schedule", schedule_name(o.schedule)},
      {"warmup_steps", std::to_string(o.warmup_steps)},
      {"lr_step_size", std::to_string(o.step_size)},
      {"lr_gamma", format_real(o.gamma)},
      {"min_lr", format_real(o.min_lr)},
      {"grad_clip", format_real(o.grad_clip)},
      {"grad_accum", std::to_string(t.grad_accum)},
      {"batch", std::to_string(t.batch)},
      {"epochs", std::to_string(t.epochs)},
      {"seed", std::to_string(t.seed)},
      {"threads", std::to_string(threads)},
      {"device", device_name(device)},
      {"deterministic", deterministic ? "true" : "false"},
      {"tf32", tf32 ? "true" : "false"},
      {"precision", precision_name(t.precision)},
      {"early_stop", t.early_stop == EarlyStopMetric::kNone
                         ? std::string("none")
                         : std::string(early_stop_metric_name(t.early_stop)) + ":" + std::to_string(t.patience)},
      {"restore_best", t.restore_best ? "true" : "false"},
      {"validation", format_real(validation)},
      {"checkpoint_every", checkpoint_every.text},
      {"keep_checkpoints", std::to_string(keep_checkpoints)},
      {"baseline", baseline ? "true" : "false"},
      {"linear_l2", format_real(linear_l2)},
      {"tree_rounds", std::to_string(trees.max_rounds)},
      {"tree_early_stop", std::to_string(trees.early_stopping_rounds)},
      {"tree_depth", std::to_string(trees.max_depth)},
      {"tree_lr", format_real(trees.learning_rate)},
      {"tree_min_child_weight", format_real(trees.min_child_weight)},
      {"tree_subsample", format_real(trees.subsample)},
      {"tree_colsample", format_real(trees.colsample_bytree)},
      {"tree_l2", format_real(trees.l2)},
      {"warm_start", warm_start},
      {"exclude", join_names(exclude)},
      {"category_min_count", std::to_string(category_min_count)},
      {"max_categories", std::to_string(max_categories)},
      {"class_weight", class_weight},
      {"memory_budget", memory_budget ? memory_budget_text(*memory_budget) : std::string()},
  };
  if (features) kv["features"] = join_names(*features);
  std::string out;
  for (const auto& [k, value] : kv)
    if (!value.empty()) out += k + " = " + value + "\n";
  return out;
}

}  // namespace anneal
