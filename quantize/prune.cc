// Magnitude pruning: unstructured (one-shot or the gradual cubic schedule,
// per layer or global, masks held by the optimizer while fine-tuning) and
// structured (whole neurons/channels removed, smaller layers rebuilt).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "anneal/backend.h"
#include "anneal/error.h"
#include "anneal/network.h"
#include "anneal/quantize.h"
#include "anneal/trainer.h"
#include "derived_model.h"
#include "anneal/model_inputs.h"

namespace anneal {
using nlohmann::json;

std::vector<float> magnitude_mask(std::span<const float> w, double sparsity) {
  const auto n = w.size();
  const auto zeros = std::size_t(std::llround(std::clamp(sparsity, 0.0, 1.0) * double(n)));
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Smallest |w| first; ties by position, so the zero count is exact.
  std::nth_element(order.begin(), order.begin() + std::ptrdiff_t(std::min(zeros, n)), order.end(),
                   [&](std::size_t a, std::size_t b) {
                     const float fa = std::fabs(w[a]), fb = std::fabs(w[b]);
                     return fa < fb || (fa == fb && a < b);
                   });
  std::vector<float> mask(n, 1.0f);
  for (std::size_t i = 0; i < zeros && i < n; ++i) mask[order[i]] = 0.0f;
  return mask;
}

double cubic_sparsity(double final_sparsity, std::int64_t step, std::int64_t end_step) {
  if (end_step <= 0 || step >= end_step) return final_sparsity;
  const double left = 1.0 - double(std::max<std::int64_t>(step, 0)) / double(end_step);
  return final_sparsity * (1.0 - left * left * left);
}

PruneSchedule parse_prune_schedule(std::string_view name) {
  if (name == "oneshot") return PruneSchedule::kOneShot;
  if (name == "gradual") return PruneSchedule::kGradual;
  throw usage_error(Subject::kPruneSchedule, std::string(name) + ": expected oneshot or gradual");
}

namespace {

using runs::NamedTensor;

NamedTensor& tensor_named(runs::ModelFile& m, const std::string& name) {
  for (auto& t : m.tensors)
    if (t.name == name) return t;
  throw corrupt("model: no tensor " + name);
}

// Masks for every weight at `sparsity`: per layer, or one threshold over all.
std::vector<std::vector<float>> masks_for(const std::vector<std::vector<float>>& weights, double sparsity,
                                          bool global) {
  std::vector<std::vector<float>> out;
  if (!global) {
    for (const auto& w : weights) out.push_back(magnitude_mask(w, sparsity));
    return out;
  }
  std::vector<float> all;
  for (const auto& w : weights) all.insert(all.end(), w.begin(), w.end());
  std::vector<float> mask = magnitude_mask(all, sparsity);
  std::size_t at = 0;
  for (const auto& w : weights) {
    out.emplace_back(mask.begin() + std::ptrdiff_t(at), mask.begin() + std::ptrdiff_t(at + w.size()));
    at += w.size();
  }
  return out;
}

// The spec with each dense/conv layer's width replaced (widths in spec order).
std::string resized_spec(const std::string& spec, const std::vector<std::int64_t>& widths) {
  std::string out;
  std::size_t k = 0;
  for (const LayerSpec& s : parse_layer_spec(spec)) {
    std::string text = s.text;
    if (s.name == "dense") {
      text = "dense(" + std::to_string(widths.at(k++)) + ")";
    } else if (s.name == "conv") {
      text = "conv(" + std::to_string(widths.at(k++)) + "," + std::to_string(std::int64_t(s.args.at(1)));
      for (const auto& [key, v] : s.options) text += "," + key + "=" + std::to_string(std::int64_t(v));
      text += ")";
    }
    out += (out.empty() ? "" : " ") + text;
  }
  return out;
}

// Removes the lowest-L1 fraction of each hidden layer's neurons/channels and
// the matching inputs of the layer after it. Returns the new spec.
std::string prune_structured(runs::ModelFile& m, const std::vector<WeightedLayer>& layers, double sparsity,
                             json& kept_json) {
  for (const LayerSpec& s : parse_layer_spec(m.layers))
    if (s.name == "batchnorm" || s.name == "layernorm")
      throw usage_error(Subject::kPruneStructured, ": " + s.name + " layers are not supported");
  std::vector<std::int64_t> widths;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const WeightedLayer& L = layers[k];
    NamedTensor& w = tensor_named(m, L.prefix + ".weight");
    NamedTensor& b = tensor_named(m, L.prefix + ".bias");
    if (L.last) {
      widths.push_back(L.out);
      break;
    }
    const std::int64_t per = std::int64_t(w.values.size()) / L.out;
    const std::int64_t keep = std::max<std::int64_t>(1, std::llround(double(L.out) * (1.0 - sparsity)));
    std::vector<double> norm(std::size_t(L.out), 0.0);
    for (std::int64_t o = 0; o < L.out; ++o)
      for (std::int64_t i = 0; i < per; ++i) norm[std::size_t(o)] += std::fabs(w.values[std::size_t(o * per + i)]);
    std::vector<std::int64_t> order(std::size_t(L.out));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto c) { return norm[std::size_t(a)] > norm[std::size_t(c)]; });
    std::vector<std::int64_t> kept(order.begin(), order.begin() + keep);
    std::sort(kept.begin(), kept.end());
    kept_json.push_back({{"layer", L.text}, {"kept", keep}, {"of", L.out}});
    std::vector<float> nw, nb;
    for (auto o : kept) {
      nw.insert(nw.end(), w.values.begin() + o * per, w.values.begin() + (o + 1) * per);
      nb.push_back(b.values[std::size_t(o)]);
    }
    w.values = std::move(nw);
    w.dims[0] = keep;
    b.values = std::move(nb);
    b.dims[0] = keep;
    // The next layer's inputs: channel c of a conv feeds a conv's input
    // channel c, or a dense layer's block of H·W features (flatten order).
    NamedTensor& next = tensor_named(m, layers[k + 1].prefix + ".weight");
    const std::int64_t next_out = next.dims[0];
    const std::int64_t next_in = std::int64_t(next.values.size()) / next_out;
    const std::int64_t block = layers[k + 1].conv ? next_in / L.out : next_in / L.out;
    std::vector<float> nn;
    nn.reserve(std::size_t(next_out * keep * block));
    for (std::int64_t o = 0; o < next_out; ++o)
      for (auto c : kept)
        nn.insert(nn.end(), next.values.begin() + o * next_in + c * block,
                  next.values.begin() + o * next_in + (c + 1) * block);
    next.values = std::move(nn);
    if (layers[k + 1].conv) next.dims[1] = keep;
    else next.dims[1] = keep * block;
    widths.push_back(keep);
  }
  return resized_spec(m.layers, widths);
}

}  // namespace

CompressResult prune_model(Store& store, const PruneRequest& request, Reporter& reporter) {
  compress::Parent parent = compress::load_parent(store, request.model, compress::Derivation::kPrune);
  if (!(request.sparsity > 0 && request.sparsity < 1))
    throw usage_error(Subject::kPruneSparsity, "must be in (0, 1), not " + std::to_string(request.sparsity));
  if (request.finetune_epochs < 0) throw usage_error(Subject::kFinetuneEpochs, "must be >= 0");
  if (request.schedule == PruneSchedule::kGradual && request.finetune_epochs < 1)
    throw usage_error(Subject::kFinetuneEpochs, "must be 1 or more with the gradual schedule, which prunes while fine-tuning");
  if (request.structured && request.global) throw usage_error(Subject::kPruneGlobal, "applies to unstructured pruning only");
  if (!(request.lr > 0)) throw usage_error(Subject::kFinetuneLearningRate, "must be > 0");
  const std::string data_text = request.data.empty() ? parent.record.lineage.value("dataset", "") : request.data;
  if (data_text.empty()) throw usage_error(Subject::kFinetuneData, "must be given: the parent names no dataset");
  DatasetRef data = compress::dataset_ref_of(data_text, Subject::kFinetuneData);
  const std::unique_ptr<Backend> backend = make_backend({.device = request.device, .threads = request.threads});
  const Dims input(parent.model.input_shape);
  const std::vector<WeightedLayer> layers = weighted_layers(parent.model.layers, input, *backend);
  if (request.structured && layers.size() < 2)
    throw usage_error(Subject::kPruneStructured, ": the network has no hidden dense or conv layer to shrink");
  runs::ModelInputs in = runs::model_inputs(store, parent.model, parent.record.ref(), data, EvalSplit::kTrain);
  data.version = parse_dataset_ref(in.dataset).version;

  runs::ModelFile child = parent.model;
  json kept = json::array();
  if (request.structured) child.layers = prune_structured(child, layers, request.sparsity, kept);

  TrainerConfig tc;
  tc.layers = child.layers;
  tc.loss = child.loss;
  tc.classes = child.labels.classification() && child.loss == LossKind::kSoftmaxCrossEntropy ? child.labels.classes() : 0;
  tc.optimizer.kind = OptimizerKind::kAdam;
  tc.optimizer.lr = request.lr;
  tc.batch = request.batch;
  tc.epochs = std::max<std::int64_t>(request.finetune_epochs, 1);
  tc.seed = request.seed;
  // An fp16 parent fine-tunes in fp32 where fp16 cannot train (a CPU): its
  // weights are fp32 masters, and the pruned model is then an fp32 one.
  if (child.precision == Precision::kFp16 && !backend->capabilities().fp16) child.precision = Precision::kFp32;
  tc.precision = child.precision;
  const DataView view{in.x, in.y, child.input_shape};
  Trainer trainer(tc, *backend, view, std::nullopt, reporter);
  std::vector<std::pair<std::string, std::vector<float>>> weights;
  for (const auto& t : child.tensors) weights.emplace_back(t.name, t.values);
  trainer.load_weights(weights);

  const std::vector<WeightedLayer> child_layers = weighted_layers(child.layers, input, *backend);
  auto apply_masks = [&](double sparsity) {
    std::vector<std::vector<float>> current;
    for (const auto& L : child_layers) current.push_back(trainer.values(L.prefix + ".weight"));
    auto masks = masks_for(current, sparsity, request.global);
    for (std::size_t k = 0; k < child_layers.size(); ++k) trainer.set_mask(child_layers[k].prefix + ".weight", masks[k]);
  };
  const std::int64_t total = request.finetune_epochs > 0 ? trainer.total_steps() : 0;
  reporter.note("pruning " + parent.record.ref() + " to " + std::to_string(int(std::lround(request.sparsity * 100))) +
                "% " + (request.structured ? "of its neurons/channels" : "sparsity") + ", fine-tuning " +
                std::to_string(request.finetune_epochs) + " epoch(s) on " + in.dataset);
  if (!request.structured) {
    if (request.schedule == PruneSchedule::kOneShot) {
      apply_masks(request.sparsity);
    } else {
      // Zhu & Gupta: prune every dt steps over the first 3/4 of fine-tuning,
      // then train on with the final mask.
      const std::int64_t end = std::max<std::int64_t>(1, total * 3 / 4);
      const std::int64_t dt = std::max<std::int64_t>(1, end / 20);
      for (std::int64_t step = 0; step < end; step += dt) {
        apply_masks(cubic_sparsity(request.sparsity, step, end));
        trainer.train(std::uint64_t(std::min(dt, end - step)));
      }
      apply_masks(request.sparsity);
    }
  }
  if (total > 0) trainer.train();

  for (auto& t : child.tensors) t.values = trainer.values(t.name);
  for (const auto& L : child_layers) {
    NamedTensor& w = tensor_named(child, L.prefix + ".weight");
    if (!request.structured) w.encoding = runs::TensorEncoding::kBitmask;
  }
  child.weights_hash = runs::model_weights_hash(child);
  const double sparsity = compress::weight_sparsity(child);
  child.compression = {{"operation", "prune"},
                       {"structured", request.structured},
                       {"target_sparsity", request.sparsity},
                       {"schedule", request.schedule == PruneSchedule::kOneShot ? "oneshot" : "gradual"},
                       {"scope", request.global ? "global" : "layer"},
                       {"finetune_epochs", request.finetune_epochs}};
  if (request.structured) child.compression["kept"] = kept;

  reporter.note("scoring " + parent.record.ref() + " and its pruned version");
  json by_class = json::object();
  const json metrics = compress::score_against_parent(store, parent, child, data, *backend, &by_class);
  json lineage = compress::base_lineage(parent, "prune", in.dataset, backend->capabilities());
  lineage["method"] = request.structured ? "structured L1 (neurons/channels)" : "magnitude";
  lineage["target_sparsity"] = request.sparsity;
  lineage["schedule"] = request.schedule == PruneSchedule::kOneShot ? "oneshot" : "gradual";
  lineage["scope"] = request.structured ? "layer" : request.global ? "global" : "layer";
  lineage["finetune_data"] = in.dataset;
  lineage["finetune_epochs"] = request.finetune_epochs;
  if (request.structured) lineage["kept"] = kept;
  (void)sparsity;
  const std::string config =
      "operation = prune\nmodel = " + parent.record.ref() + "\nsparsity = " + std::to_string(request.sparsity) +
      "\nstructured = " + (request.structured ? "true" : "false") + "\nschedule = " +
      std::string(request.schedule == PruneSchedule::kOneShot ? "oneshot" : "gradual") + "\nscope = " +
      (request.global ? "global" : "layer") + "\nfinetune_epochs = " + std::to_string(request.finetune_epochs) +
      "\ndata = " + in.dataset + "\nlr = " + std::to_string(request.lr) + "\nbatch = " +
      std::to_string(request.batch) + "\nseed = " + std::to_string(request.seed) + "\nthreads = " +
      std::to_string(request.threads) + "\n";
  return compress::register_child(store, parent, child, data, config, lineage, metrics, by_class);
}

}  // namespace anneal
