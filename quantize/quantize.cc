// INT8 post-training quantization: per-channel weight quantization,
// activation calibration (minmax, percentile, entropy) and quantize_model.

#include <algorithm>
#include <cmath>
#include <limits>

#include "anneal/backend.h"
#include "anneal/error.h"
#include "anneal/network.h"
#include "anneal/quantize.h"
#include "anneal/trainer.h"
#include "derived_model.h"
#include "anneal/model_inputs.h"

namespace anneal {
using nlohmann::json;

QuantizedWeights quantize_per_channel(std::span<const float> w, std::int64_t channels, int levels) {
  if (levels < 1 || levels > 127)
    throw usage_error("quantize: weight levels must be 1..127, not " + std::to_string(levels));
  if (channels < 1 || w.size() % std::size_t(channels) != 0)
    throw usage_error("quantize: " + std::to_string(w.size()) + " weights are not " + std::to_string(channels) +
                      " equal channels");
  const std::size_t per = w.size() / std::size_t(channels);
  QuantizedWeights out;
  out.q.resize(w.size());
  out.scales.resize(std::size_t(channels));
  for (std::size_t o = 0; o < std::size_t(channels); ++o) {
    float max = 0;
    for (std::size_t i = 0; i < per; ++i) max = std::max(max, std::fabs(w[o * per + i]));
    // An all-zero row (a pruned neuron) quantizes exactly with any scale.
    const float l = float(levels);
    const float scale = max > 0 ? max / l : 1.0f;
    out.scales[o] = scale;
    for (std::size_t i = 0; i < per; ++i) {
      const float q = std::nearbyint(w[o * per + i] / scale);
      out.q[o * per + i] = std::int8_t(std::clamp(q, -l, l));
    }
  }
  return out;
}

std::vector<float> dequantize(const QuantizedWeights& w) {
  std::vector<float> out(w.q.size());
  if (w.scales.empty()) return out;
  const std::size_t per = w.q.size() / w.scales.size();
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = float(w.q[i]) * w.scales[i / per];
  return out;
}

CalibrationMethod parse_calibration_method(std::string_view name) {
  if (name == "minmax") return CalibrationMethod::kMinMax;
  if (name == "percentile") return CalibrationMethod::kPercentile;
  if (name == "entropy") return CalibrationMethod::kEntropy;
  throw usage_error(Subject::kCalibrationMethod, std::string(name) + ": expected minmax, percentile or entropy");
}

const char* calibration_method_name(CalibrationMethod method) {
  switch (method) {
    case CalibrationMethod::kMinMax: return "minmax";
    case CalibrationMethod::kPercentile: return "percentile";
    case CalibrationMethod::kEntropy: return "entropy";
  }
  return "minmax";
}

void ActivationRange::add_max(std::span<const float> values) {
  for (float v : values)
    if (std::isfinite(v)) max_ = std::max(max_, std::fabs(v));
}

void ActivationRange::add_histogram(std::span<const float> values) {
  if (histogram_.empty()) histogram_.assign(kBins, 0.0);
  if (!(max_ > 0)) return;
  const float per_bin = float(kBins) / max_;
  for (float v : values) {
    if (!std::isfinite(v)) continue;
    const int b = std::min(kBins - 1, int(std::fabs(v) * per_bin));
    histogram_[std::size_t(b)] += 1.0;
  }
}

namespace {

// KL(P || Q) of two unnormalized distributions over the same bins.
double kl_divergence(const std::vector<double>& p, const std::vector<double>& q) {
  double ps = 0, qs = 0;
  for (double v : p) ps += v;
  for (double v : q) qs += v;
  if (ps <= 0 || qs <= 0) return std::numeric_limits<double>::infinity();
  // Smoothing as MXNet/TensorRT do: a bin Q leaves empty where P has mass
  // (the outliers folded into P's last bin) costs a large but finite
  // amount instead of ruling the candidate out.
  constexpr double kEpsilon = 1e-4;
  double kl = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    const double qi = std::max(q[i] / qs, kEpsilon / double(q.size()));
    kl += (p[i] / ps) * std::log((p[i] / ps) / qi);
  }
  return kl;
}

}  // namespace

float ActivationRange::threshold(CalibrationMethod method, int levels) const {
  if (!(max_ > 0)) return 0.0f;
  if (method == CalibrationMethod::kMinMax || histogram_.empty()) return max_;
  const double width = double(max_) / kBins;
  double total = 0;
  for (double v : histogram_) total += v;
  if (total <= 0) return max_;
  if (method == CalibrationMethod::kPercentile) {
    double seen = 0;
    for (int b = 0; b < kBins; ++b) {
      seen += histogram_[std::size_t(b)];
      if (seen >= 0.9999 * total) return float((b + 1) * width);
    }
    return max_;
  }
  // Entropy: for each candidate i, P = the first i bins with everything
  // beyond folded into the last; Q = P merged into `levels` bins and spread
  // back over the bins that were nonzero. Keep the i with the least KL(P||Q).
  double best = std::numeric_limits<double>::infinity();
  int best_i = kBins;
  for (int i = levels; i <= kBins; ++i) {
    std::vector<double> p(histogram_.begin(), histogram_.begin() + i);
    for (int b = i; b < kBins; ++b) p[std::size_t(i - 1)] += histogram_[std::size_t(b)];
    std::vector<double> q(std::size_t(i), 0.0);
    const double per = double(i) / levels;
    for (int j = 0; j < levels; ++j) {
      const int begin = int(std::floor(j * per)), end = std::max(begin + 1, int(std::floor((j + 1) * per)));
      double sum = 0;
      int nonzero = 0;
      for (int b = begin; b < end && b < i; ++b) {
        sum += histogram_[std::size_t(b)];
        nonzero += histogram_[std::size_t(b)] > 0;
      }
      for (int b = begin; b < end && b < i; ++b)
        if (histogram_[std::size_t(b)] > 0) q[std::size_t(b)] = sum / nonzero;
    }
    const double kl = kl_divergence(p, q);
    if (kl < best) {
      best = kl;
      best_i = i;
    }
  }
  return float((best_i + 0.5) * width);
}

namespace {

// Scale per calibration point: 0 the network input, k + 1 weighted layer k's
// output (fused activation included), observed on `x` (samples rows) through
// the fp32 network of `model`, built inference-only (oneDNN's fp32 inference
// primitives, every dense layer dense, whatever its sparsity).
std::vector<float> calibrate(const runs::ModelFile& model, const std::vector<WeightedLayer>& layers,
                             const std::vector<float>& x, std::int64_t samples, std::int64_t width,
                             CalibrationMethod method, Backend& backend) {
  std::vector<ActivationRange> ranges(layers.size() + 1);
  {
    const auto scope = backend.enter();
    NetworkOptions options;
    options.input_shape = Dims(model.input_shape);
    options.outputs = model.outputs;
    options.inference = runs::inference_options(model);
    options.inference->int8 = false;
    options.inference->sparse = SparseKernel::kDense;
    Network net(model.layers, options, backend);
    constexpr std::int64_t kBatch = 256;
    PassContext ctx;
    ctx.training = false;
    Tensor batch;
    std::vector<float> values;  // one layer's output on the host
    const bool histogram = method != CalibrationMethod::kMinMax;
    for (int pass = 0; pass < (histogram ? 2 : 1); ++pass) {
      const Network::LayerObserver observe = [&](std::size_t k, const Tensor& y) {
        values.resize(std::size_t(y.elements()));
        backend.copy_to_host(y, values.data());
        if (pass == 0) ranges[k + 1].add_max(values);
        else ranges[k + 1].add_histogram(values);
      };
      for (std::int64_t start = 0; start < samples; start += kBatch) {
        const std::int64_t n = std::min(kBatch, samples - start);
        const std::span<const float> rows(x.data() + start * width, std::size_t(n * width));
        if (pass == 0) ranges[0].add_max(rows);
        else ranges[0].add_histogram(rows);
        backend.shape_plain(batch, options.input_shape.with_batch(n), DType::kF32);
        backend.copy_from_host(rows.data(), batch);
        net.forward(batch, ctx, observe);
      }
    }
  }
  std::vector<float> scales(ranges.size(), 0.0f);
  for (std::size_t point = 0; point < ranges.size(); ++point) {
    // The last layer's output stays fp32: no scale.
    if (point > 0 && layers[point - 1].last) continue;
    const int levels = point > 0 && layers[point - 1].relu ? 255 : 127;
    const float t = ranges[point].threshold(method, levels);
    // A tensor that is zero on every calibration row: any scale is exact.
    scales[point] = t > 0 ? t / float(levels) : 1.0f;
  }
  return scales;
}

// Fine-tunes `model`'s weights in place for request.qat_epochs epochs on
// `in` with fake quantization at the given scales (see calibrate()).
void fine_tune_quantized(runs::ModelFile& model, const std::vector<WeightedLayer>& layers,
                         const std::vector<float>& scales, const runs::ModelInputs& in,
                         const QuantizeRequest& request, Backend& backend, Reporter& reporter) {
  TrainerConfig tc;
  tc.layers = model.layers;
  tc.loss = model.loss;
  tc.classes = model.labels.classification() && model.loss == LossKind::kSoftmaxCrossEntropy ? model.labels.classes() : 0;
  tc.optimizer.kind = OptimizerKind::kAdam;
  tc.optimizer.lr = request.qat_lr;
  tc.batch = request.qat_batch;
  tc.epochs = request.qat_epochs;
  tc.seed = request.qat_seed;
  // The int8 model is made from fp32 weights, whatever the parent trained in.
  tc.precision = Precision::kFp32;
  const DataView view{in.x, in.y, model.input_shape};
  Trainer trainer(tc, backend, view, std::nullopt, reporter);
  std::vector<std::pair<std::string, std::vector<float>>> weights;
  for (const auto& t : model.tensors) weights.emplace_back(t.name, t.values);
  trainer.load_weights(weights);
  FakeQuantization fq;
  fq.input_scale = scales[0];
  fq.weight_levels = backend.capabilities().int8_weight_levels;
  for (std::size_t k = 0; k < layers.size(); ++k)
    fq.layers.push_back({layers[k].prefix, scales[k + 1], layers[k].relu});
  trainer.set_fake_quantization(fq);
  trainer.train();
  for (auto& t : model.tensors) t.values = trainer.values(t.name);
}

}  // namespace

CompressResult quantize_model(Store& store, const QuantizeRequest& request, Reporter& reporter) {
  compress::Parent parent = compress::load_parent(store, request.model, compress::Derivation::kQuantize);
  if (request.calib_samples < 1)
    throw usage_error(Subject::kCalibrationSamples, "must be >= 1, not " + std::to_string(request.calib_samples));
  if (request.qat_epochs < 0)
    throw usage_error(Subject::kQatEpochs, "must be >= 0, not " + std::to_string(request.qat_epochs));
  if (!(request.qat_lr > 0)) throw usage_error(Subject::kQatLearningRate, "must be > 0");
  if (request.qat_batch < 1) throw usage_error(Subject::kQatBatch, "must be >= 1");
  DatasetRef calib = compress::dataset_ref_of(request.calib, Subject::kCalibrationData);
  // It also scores the int8 child (derived_model.cc).
  const std::unique_ptr<Backend> backend =
      make_backend({.device = request.device, .threads = request.threads, .int8 = true});
  // Unsupported layers (batchnorm, layernorm) fail here, before any run.
  const std::vector<WeightedLayer> layers =
      weighted_layers(parent.model.layers, Dims(parent.model.input_shape), *backend);
  runs::ModelInputs in = runs::model_inputs(store, parent.model, parent.record.ref(), calib, EvalSplit::kTrain);
  calib.version = parse_dataset_ref(in.dataset).version;
  std::int64_t width = 1;
  for (auto d : parent.model.input_shape) width *= d;
  const auto rows = std::int64_t(in.y.size());
  if (rows == 0) throw usage_error(Subject::kCalibrationData, in.dataset + ": the train split has no rows");
  // Evenly spaced rows of the train split, so a small sample still spans
  // every part of the file.
  const std::int64_t samples = std::min(request.calib_samples, rows);
  std::vector<float> x(std::size_t(samples * width));
  for (std::int64_t i = 0; i < samples; ++i) {
    const std::int64_t r = i * rows / samples;
    std::copy_n(in.x.data() + r * width, width, x.data() + i * width);
  }
  reporter.note("calibrating " + parent.record.ref() + " on " + std::to_string(samples) + " rows of " + in.dataset +
                " (" + calibration_method_name(request.method) + ")");
  std::vector<float> scales =
      calibrate(parent.model, layers, x, samples, width, request.method, *backend);

  runs::ModelFile child = parent.model;
  if (request.qat_epochs > 0) {
    reporter.note("quantization-aware fine-tuning of " + parent.record.ref() + ": " +
                  std::to_string(request.qat_epochs) + " epoch(s) on " + in.dataset);
    fine_tune_quantized(child, layers, scales, in, request, *backend, reporter);
    // The usual conversion from here on, on the fine-tuned weights: their
    // activations are calibrated afresh (fine-tuning moves the ranges).
    scales = calibrate(child, layers, x, samples, width, request.method, *backend);
  }
  child.int8 = true;
  // 8-bit weights where this CPU's int8 products are exact at full speed,
  // else 7-bit (±64): such a model runs exactly on every CPU, and fast on
  // the kind it was made on (backend.h, int8_weight_levels).
  const int weight_levels = backend->capabilities().int8_weight_levels;
  json scales_json = json::array();
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const WeightedLayer& layer = layers[k];
    const float input_scale = scales[k], output_scale = scales[k + 1];
    child.activation_scales[layer.prefix] = {input_scale, output_scale};
    scales_json.push_back({{"layer", layer.text}, {"input_scale", input_scale}, {"output_scale", output_scale}});
    for (auto& t : child.tensors) {
      if (t.name != layer.prefix + ".weight") continue;
      QuantizedWeights q = quantize_per_channel(t.values, layer.out, weight_levels);
      t.encoding = runs::TensorEncoding::kS8;
      t.values = dequantize(q);
      t.q = std::move(q.q);
      t.scales = std::move(q.scales);
    }
  }
  child.compression = {{"operation", "quantize"},
                       {"method", calibration_method_name(request.method)},
                       {"calibration_data", in.dataset},
                       {"calibration_samples", samples},
                       {"qat_epochs", request.qat_epochs},
                       {"weight_levels", weight_levels}};
  child.weights_hash = runs::model_weights_hash(child);

  reporter.note("scoring " + parent.record.ref() + " and its int8 version");
  json by_class = json::object();
  const json metrics = compress::score_against_parent(store, parent, child, calib, *backend, &by_class);
  json lineage = compress::base_lineage(parent, "quantize", in.dataset, backend->capabilities());
  lineage["method"] = calibration_method_name(request.method);
  lineage["calibration_data"] = in.dataset;
  lineage["calibration_samples"] = samples;
  lineage["activation_scales"] = scales_json;
  lineage["qat_epochs"] = request.qat_epochs;
  lineage["weight_levels"] = weight_levels;
  std::string config = "operation = quantize\nmodel = " + parent.record.ref() + "\nprecision = int8\ncalib = " +
                       in.dataset + "\ncalib_samples = " + std::to_string(samples) + "\nmethod = " +
                       calibration_method_name(request.method) + "\nqat_epochs = " +
                       std::to_string(request.qat_epochs) + "\nweight_levels = " +
                       std::to_string(weight_levels) + "\n";
  if (request.qat_epochs > 0) {
    lineage["qat_data"] = in.dataset;
    lineage["qat_lr"] = request.qat_lr;
    lineage["qat_batch"] = request.qat_batch;
    lineage["qat_seed"] = request.qat_seed;
    config += "qat_lr = " + std::to_string(request.qat_lr) + "\nqat_batch = " + std::to_string(request.qat_batch) +
              "\nqat_seed = " + std::to_string(request.qat_seed) + "\n";
  }
  config += "threads = " + std::to_string(request.threads) + "\n";
  return compress::register_child(store, parent, child, calib, config, lineage, metrics, by_class);
}

}  // namespace anneal
