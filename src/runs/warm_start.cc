#include "runs/warm_start.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "anneal/catalog_jobs.h"
#include "anneal/error.h"
#include "anneal/model_inputs.h"
#include "anneal/model_kind.h"
#include "anneal/network.h"
#include "anneal/preprocess.h"

namespace anneal::runs {
using nlohmann::json;

namespace {

// Where warm_start was given, as config.sources names it: "r.ini:9: ", or
// an override's name ("--set warm_start: " from the CLI).
std::string source_of(const TrainConfig& config) {
  auto it = config.sources.find("warm_start");
  return it == config.sources.end() ? std::string() : it->second + ": ";
}

// The layers of a spec as the network reads them, so that spacing and
// number spelling ("dense(64)" and "dense( 64.0 )") do not count as a
// difference.
struct ParsedLayer {
  std::string name;
  std::vector<double> args;
  std::vector<std::pair<std::string, double>> options;
  bool operator==(const ParsedLayer&) const = default;
};

std::vector<ParsedLayer> parsed_layers(std::string_view spec) {
  std::vector<ParsedLayer> out;
  for (const LayerSpec& l : parse_layer_spec(spec)) out.push_back({l.name, l.args, l.options});
  return out;
}

// Why `parent` cannot start a run of `config`, judged without the data; ""
// when nothing is wrong so far.
std::string refusal_by_config(const ModelFile& parent, const TrainConfig& config) {
  if (std::string why = model_kind(parent).why_not_warm_start_parent(parent, config.kind); !why.empty()) return why;
  // A tree run continues its parent's boosting: no layers or loss to compare.
  if (config.kind == ModelKindId::kTrees) return "";
  std::vector<ParsedLayer> wanted;
  try {
    wanted = parsed_layers(config.trainer.layers);
  } catch (const Error& e) {
    // The same message the trainer gives for a bad spec, with its place.
    auto where = config.sources.find("layers");
    if (e.kind() != ErrorKind::kUsage || where == config.sources.end()) throw;
    throw usage_error(where->second + ": layers = " + config.trainer.layers + ": " + e.what());
  }
  if (parsed_layers(parent.layers) != wanted)
    return "layers differ (parent: " + parent.layers + "; config: " + config.trainer.layers + ")";
  if (config.loss && *config.loss != parent.loss)
    return "loss differs (parent: " + std::string(loss_name(parent.loss)) + "; config: " + loss_name(*config.loss) + ")";
  return "";
}

// "a,b" of a column list; what features= means when unset.
std::string column_keys_text(const std::optional<std::vector<std::string>>& names, const char* unset) {
  if (!names) return unset;
  std::string out;
  for (const std::string& n : *names) out += (out.empty() ? "" : ",") + n;
  return out.empty() ? std::string("none") : out;
}

// Why the keys that choose and encode the feature columns (features,
// exclude, category_min_count, max_categories, scaling, target_transform) keep the parent from
// starting this run: its transform was fitted under the values its run
// recorded, and keeping that transform would quietly ignore changed ones.
std::string refusal_by_feature_keys(const ModelRecord& parent, const TrainConfig& config) {
  const std::string text = parent.lineage.is_object() ? parent.lineage.value("config", "") : "";
  if (text.empty()) return "its lineage records no config to compare the feature keys with";
  TrainConfig theirs;
  try {
    theirs = parse_train_config(text, parent.ref() + " config", {});
  } catch (const Error& e) {
    return std::string("its recorded config does not parse: ") + e.what();
  }
  auto differ = [](const std::string& key, const std::string& a, const std::string& b) {
    return key + " differs (parent: " + a + "; config: " + b + ")";
  };
  if (theirs.features != config.features)
    return differ("features", column_keys_text(theirs.features, "all but identifiers"),
                  column_keys_text(config.features, "all but identifiers"));
  if (theirs.exclude != config.exclude)
    return differ("exclude", column_keys_text(theirs.exclude, "none"), column_keys_text(config.exclude, "none"));
  if (theirs.category_min_count != config.category_min_count)
    return differ("category_min_count", std::to_string(theirs.category_min_count),
                  std::to_string(config.category_min_count));
  if (theirs.max_categories != config.max_categories)
    return differ("max_categories", std::to_string(theirs.max_categories), std::to_string(config.max_categories));
  if (theirs.scaling != config.scaling)
    return differ("scaling", scaling_name(theirs.scaling), scaling_name(config.scaling));
  if (theirs.target_transform != config.target_transform)
    return differ("target_transform", target_transform_name(theirs.target_transform),
                  target_transform_name(config.target_transform));
  return "";
}

const ColumnSchema* column_named(const std::vector<ColumnSchema>& columns, const std::string& name) {
  auto it = std::find_if(columns.begin(), columns.end(), [&](const ColumnSchema& c) { return c.name == name; });
  return it == columns.end() ? nullptr : &*it;
}

std::string type_text(const ColumnSchema& c) {
  std::string text = column_type_name(c.type);
  if (c.width() != 1) text += " x" + std::to_string(c.width());
  return text;
}

// The text of a stored label value of `table`: its category, or the number.
std::string label_text(const Table& table, float y) {
  const ColumnSchema& label = table.columns[table.label_column];
  const auto code = static_cast<std::size_t>(y);
  if (label.type == ColumnType::kCategorical && y >= 0 && code < label.categories.size())
    return label.categories[code];
  std::ostringstream out;
  out << y;
  return out.str();
}

// Why the version's data cannot be read the way `parent` was trained; ""
// when it can.
std::string refusal_by_data(const ModelFile& parent, const LoadedDataset& loaded, const TrainConfig& config) {
  const DatasetVersion& v = loaded.version;
  if (v.label_column != parent.label_column)
    return "the label differs (parent: '" + parent.label_column + "'; " + v.ref() + ": '" + v.label_column + "')";
  const LossKind loss = config.loss ? *config.loss : LabelEncoding::infer_loss(loaded.train);
  if (loss != parent.loss)
    return "loss differs (parent: " + std::string(loss_name(parent.loss)) + "; " + v.ref() + " suggests " +
           loss_name(loss) + ")";
  const ColumnSchema* parent_label = column_named(parent.dataset_columns, parent.label_column);
  const ColumnSchema& label = loaded.train.columns[loaded.train.label_column];
  if (parent_label && parent_label->type != label.type)
    return "label '" + label.name + "' is " + column_type_name(label.type) + " in " + v.ref() + ", " +
           column_type_name(parent_label->type) + " for the parent";
  for (const ColumnTransform& used : parent.features.columns()) {
    const ColumnSchema* now = column_named(v.columns, used.column);
    if (!now || now->name == v.label_column) return "column '" + used.column + "' is missing from " + v.ref();
    const ColumnSchema* then = column_named(parent.dataset_columns, used.column);
    if (!then) return "the parent's model file does not describe its column '" + used.column + "'";
    if (now->type != then->type || now->width() != then->width())
      return "column '" + used.column + "' is " + type_text(*now) + " in " + v.ref() + ", " + type_text(*then) +
             " for the parent";
  }
  if (parent.labels.classification()) {
    for (const Table* part : {&loaded.train, &loaded.test}) {
      const std::vector<float> codes = labels_as_model_codes(*part, parent);
      std::set<float> checked;
      for (std::size_t i = 0; i < codes.size(); ++i) {
        // A missing label is no class; encoding rejects it as it would
        // from scratch.
        if (std::isnan(codes[i]) || !checked.insert(codes[i]).second) continue;
        try {
          parent.labels.encode(codes[i], "");
        } catch (const Error& e) {
          // encode's contract: kBadData is a class the encoding does not know.
          if (e.kind() != ErrorKind::kBadData) throw;
          return "class '" + label_text(*part, part->labels[i]) + "' of label '" + label.name + "' in " + v.ref() +
                 " is new to the parent (" + std::to_string(parent.labels.classes()) + " classes)";
        }
      }
    }
  }
  return "";
}

}  // namespace

WarmStart resolve_warm_start(Store& store, TrainConfig& config, Reporter& reporter) {
  WarmStart warm;
  if (!config.warm_start) return warm;
  const ModelRef ref = *config.warm_start;
  // A version, or the model that does not exist at all: a usage error
  // naming where the key was set.
  auto find = [&](const ModelRef& wanted) {
    try {
      return find_model(store, wanted);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kNotFound) throw;
      throw usage_error(source_of(config) + "warm_start = " + ref.to_string() + ": " + e.detail())
          .with(e.remedy(), e.remedy_argument());
    }
  };
  if (ref.alias) {
    // Another name's alias must at least name a model that exists; the
    // run's own name may have none yet (the first night).
    if (ref.name != config.name) find(ModelRef{ref.name, std::nullopt, std::nullopt});
    warm.parent = find_alias(store, ref.name, *ref.alias);
    if (!warm.parent) {
      warm.unset_alias = ref.to_string();
      reporter.note("warm start: " + warm.unset_alias + " is not set yet; training from scratch");
      config.warm_start.reset();
      return warm;
    }
  } else {
    warm.parent = find(ref);
  }
  config.warm_start = ModelRef{warm.parent->name, warm.parent->version, std::nullopt};
  warm.parent_model = load_model(store, *warm.parent);
  return warm;
}

PreparedData prepare_run_data(Store& store, const DatasetRef& ref, const TrainConfig& config, WarmStart& warm,
                              std::uint64_t memory_budget, Reporter& reporter) {
  LabelParts parts = read_label_parts(store, ref);
  if (!warm.parent) return prepare_data(store, std::move(parts), config, memory_budget);
  const std::string parent = warm.parent->ref();
  warm.refused = refusal_by_config(warm.parent_model, config);
  if (warm.refused.empty()) warm.refused = refusal_by_feature_keys(*warm.parent, config);
  if (warm.refused.empty()) {
    check_trainable(parts.parts, config);
    warm.refused = refusal_by_data(warm.parent_model, parts.parts, config);
  }
  if (!warm.refused.empty()) {
    reporter.note("warm start from " + parent + " refused: " + warm.refused + "; training from scratch");
    return prepare_data(store, std::move(parts), config, memory_budget);
  }
  PreparedData data = prepare_data(store, std::move(parts), config, memory_budget, &warm.parent_model);
  warm.used = true;
  const std::uint64_t unseen = data.rows->alignment->unseen_categories();
  reporter.note("warm start from " + parent + ": its " +
                (warm.parent_model.kind == ModelKindId::kTrees ? "trees" : "weights") + " and preprocessing" +
                (unseen ? " (" + std::to_string(unseen) + " categories it never saw are encoded as unseen)"
                        : std::string()));
  return data;
}

void load_parent_weights(Trainer& trainer, const WarmStart& warm) {
  std::vector<std::pair<std::string, std::vector<float>>> named;
  for (const NamedTensor& t : warm.parent_model.tensors) named.emplace_back(t.name, t.values);
  // load_weights keeps what is not named; a warm start must replace all.
  const Network& network = trainer.network();
  const std::size_t wanted = network.parameters().size() + network.buffers().size();
  if (named.size() != wanted)
    throw usage_error("warm start from " + warm.parent->ref() + ": it holds " + std::to_string(named.size()) +
                      " tensors, the network " + std::to_string(wanted));
  trainer.load_weights(named);
}

json warm_start_lineage(const WarmStart& warm) {
  if (warm.used) return {{"parent", warm.parent->ref()}, {"warm_start", true}};
  if (warm.parent)
    return {{"warm_start", false}, {"warm_start_from", warm.parent->ref()}, {"warm_start_refused", warm.refused}};
  if (!warm.unset_alias.empty()) return {{"warm_start", false}, {"warm_start_unset", warm.unset_alias}};
  return json::object();
}

}  // namespace anneal::runs
