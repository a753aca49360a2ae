#include "derived_model.h"

#include <unistd.h>
#include <zstd.h>

#include "anneal/chunker.h"
#include "anneal/error.h"
#include "anneal/version.h"
#include "anneal/scoring.h"
#include "anneal/model_inputs.h"
#include "anneal/model_kind.h"

namespace anneal::compress {
using nlohmann::json;

DatasetRef dataset_ref_of(std::string_view text, Subject subject) {
  try {
    return parse_dataset_ref(text, "");
  } catch (const Error& e) {
    // Unnamed, the message is " 'TEXT': expected ..."; the subject leads it.
    std::string detail = e.what();
    if (detail.starts_with(' ')) detail.erase(0, 1);
    throw Error(e.kind(), subject, detail);
  }
}

Parent load_parent(Store& store, const std::string& ref, Derivation derivation) {
  Parent p;
  p.record = find_model(store, parse_model_ref(ref, "MODEL"));
  p.model = runs::decode_model(read_model(store, p.record), "model " + p.record.ref());
  const runs::ModelKind& kind = runs::model_kind(p.model);
  const bool quantize = derivation == Derivation::kQuantize;
  const std::string why = quantize ? kind.why_not_quantizable(p.model) : kind.why_not_prunable(p.model);
  if (!why.empty()) throw usage_error((quantize ? "quantize " : "prune ") + p.record.ref() + ": " + why);
  return p;
}

std::uint64_t size_on_disk(std::string_view bytes) {
  std::uint64_t total = 0;
  std::size_t start = 0;
  std::string frame;
  for (std::size_t end : chunk_ends(bytes, kTensorChunking)) {
    const std::string_view chunk = bytes.substr(start, end - start);
    frame.resize(ZSTD_compressBound(chunk.size()));
    const std::size_t n = ZSTD_compress(frame.data(), frame.size(), chunk.data(), chunk.size(), 1);
    if (ZSTD_isError(n)) throw failure(std::string("zstd: ") + ZSTD_getErrorName(n));
    total += 16 + n;
    start = end;
  }
  return total;
}

double weight_sparsity(const runs::ModelFile& model) {
  std::uint64_t zeros = 0, count = 0;
  for (const auto& t : model.tensors) {
    if (!t.name.ends_with(".weight") || (t.name.find(".dense.") == std::string::npos &&
                                         t.name.find(".conv.") == std::string::npos))
      continue;
    for (float v : t.values) zeros += v == 0.0f;
    count += t.values.size();
  }
  return count ? double(zeros) / double(count) : 0.0;
}

json score_against_parent(Store& store, const Parent& parent, const runs::ModelFile& child,
                          const DatasetRef& data, Backend& backend, json* by_class) {
  runs::ModelInputs in = runs::model_inputs(store, parent.model, parent.record.ref(), data, EvalSplit::kDefault);
  runs::Predictor child_predictor(child, backend);
  runs::Predictor parent_predictor(parent.model, backend);
  const std::vector<float> child_p = child_predictor.predict(in.x), parent_p = parent_predictor.predict(in.x);
  json out = runs::score(in.split, child.loss, child.labels, child_p, in.y);
  json before = runs::score("parent_" + in.split, parent.model.loss, parent.model.labels, parent_p, in.y);
  if (by_class && child.labels.classification()) {
    (*by_class)["per_class"][in.split] = runs::score_per_class(child.loss, child.labels, child_p, in.y);
    (*by_class)["confusion"][in.split] = runs::score_confusion(child.loss, child.labels, child_p, in.y);
    (*by_class)["parent_per_class"][in.split] =
        runs::score_per_class(parent.model.loss, parent.model.labels, parent_p, in.y);
    (*by_class)["parent_confusion"][in.split] =
        runs::score_confusion(parent.model.loss, parent.model.labels, parent_p, in.y);
  }
  out.update(before);
  out["eval_dataset"] = in.dataset;
  out["eval_split"] = in.split;
  if (child.labels.classification()) {
    out["accuracy_change_points"] =
        100.0 * (out[in.split + "_accuracy"].get<double>() - before["parent_" + in.split + "_accuracy"].get<double>());
  }
  return out;
}

json base_lineage(const Parent& parent, const std::string& operation, const std::string& data,
                  const BackendCapabilities& backend) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return {{"parent", parent.record.ref()},
          {"operation", operation},
          {"data", data},
          {"dataset", parent.record.lineage.value("dataset", data)},
          {"anneal_version", version()},
          {"anneal_commit", git_commit()},
          {"host", host},
          {"device", backend.device},
          {"isa", backend.isa}};
}

CompressResult register_child(Store& store, const Parent& parent, const runs::ModelFile& child,
                              const DatasetRef& data, const std::string& config_text, json lineage,
                              const json& metrics, const json& by_class) {
  const std::string bytes = runs::encode_model(child);
  lineage["precision"] = child.int8 ? "int8" : precision_name(child.precision);
  lineage["sparsity"] = weight_sparsity(child);
  lineage["size_bytes"] = bytes.size();
  lineage["size_on_disk"] = size_on_disk(bytes);
  lineage["parent_size_bytes"] = parent.record.size;
  lineage["parent_size_on_disk"] = size_on_disk(read_model(store, parent.record));
  lineage["weights_hash"] = child.weights_hash;
  if (!child.layers.empty() && child.layers != parent.model.layers) lineage["layers"] = child.layers;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  CompressResult result;
  result.parent = parent.record.ref();
  result.run = create_run(store, parent.record.name, data, config_text, host);
  lineage["run"] = result.run.label();
  try {
    json summary = {{"operation", lineage["operation"]}, {"parent", result.parent}, {"metrics", metrics}};
    summary.update(by_class);
    result.model = register_model(store, result.run.id, parent.record.name, bytes, lineage, metrics, summary);
    result.run = find_run(store, result.run.id);
  } catch (const std::exception& e) {
    try {
      end_run(store, result.run.id, RunStatus::kFailed, e.what(), json::object());
    } catch (const std::exception&) {
    }
    throw;
  }
  result.lineage = lineage;
  result.metrics = metrics;
  return result;
}

}  // namespace anneal::compress
