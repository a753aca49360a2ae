// INT8 post-training quantization, magnitude pruning and inference
// benchmarks of registered models (quantize/, library anneal_quantize).
//
//   quantize_model: static PTQ. Weights of every dense and conv layer become
//     s8 with one scale per output channel (max |w| / 127; / 64 on a CPU
//     without VNNI, see quantize_per_channel); activations get
//     one scale each from calibration rows run through the fp32 network
//     (minmax, percentile or entropy), u8 after a relu and s8 otherwise.
//     eval/predict then run the model as an inference-only int8 Network
//     (oneDNN int8 primitives, see network.h).
//     With qat_epochs, quantization-aware fine-tuning comes first (fake
//     quantization in the training forward pass, straight-through backward).
//   prune_model: magnitude pruning, one-shot or on the gradual cubic schedule
//     of Zhu & Gupta (2017), per layer or global, fine-tuned with the masks
//     held by the optimizer; or --structured: whole neurons/channels with the
//     smallest L1 norm removed and smaller dense layers rebuilt.
//   bench_model: batch inference throughput on the path eval uses.
//
// Each new model is NAME@v(N+1) of the parent's name, registered by a run
// whose config text describes the operation and whose dataset is the
// calibration or fine-tuning data; its lineage names the parent, the data,
// the method, the precision, the sparsity and the sizes, its metrics the
// accuracy beside the parent's on the same rows. Every check that can fail
// without computing (model kind, layers, data, arguments) runs before the
// run is recorded, so bad input leaves the store unchanged.
//
// Functions take a Store used by one thread, report through the Reporter
// only and throw anneal::Error (kUsage for bad requests).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/catalog_runs.h"
#include "anneal/device.h"
#include "anneal/layers.h"
#include "anneal/report.h"
#include "anneal/store.h"

namespace anneal {

// ---- quantization math (pure, thread-safe) --------------------------------

// s8 values with a scale per output channel: w[o, i] ≈ q[o, i] · scales[o].
struct QuantizedWeights {
  std::vector<std::int8_t> q;
  std::vector<float> scales;
};
// Symmetric per-channel quantization of w (channels rows, row-major) to
// L = `levels` steps each side of zero (1..127): scale = max|w[o, :]| / L
// (1 for an all-zero row), q = round(w / scale) clamped to [-L, L].
// |q·scale − w| <= scale/2 for every element. quantize_model takes L from
// BackendCapabilities::int8_weight_levels: 127 (8-bit weights) where int8
// products are summed in 32 bits (VNNI), 64 elsewhere.
QuantizedWeights quantize_per_channel(std::span<const float> w, std::int64_t channels, int levels = 127);
std::vector<float> dequantize(const QuantizedWeights& w);

enum class CalibrationMethod : std::uint8_t { kMinMax, kPercentile, kEntropy };
// "minmax" | "percentile" | "entropy"; kUsage otherwise.
CalibrationMethod parse_calibration_method(std::string_view name);
const char* calibration_method_name(CalibrationMethod method);

// The range of one activation tensor over calibration batches: observe
// every batch once with add_max (pass 1), then again with add_histogram
// (pass 2, only needed for percentile and entropy).
class ActivationRange {
 public:
  static constexpr int kBins = 2048;
  void add_max(std::span<const float> values);
  void add_histogram(std::span<const float> values);
  float max() const { return max_; }
  // The clipping threshold T (scale = T / levels): the max (minmax); the
  // 99.99th percentile of |x| (percentile); or the threshold minimizing the
  // KL divergence between the clipped and the `levels`-level quantized
  // distribution (entropy, as TensorRT calibrates).
  float threshold(CalibrationMethod method, int levels) const;

 private:
  float max_ = 0;
  std::vector<double> histogram_;
};

// ---- pruning math (pure) -----------------------------------------------------

// 0/1 mask keeping the largest-|w| elements: round(sparsity · n) zeros
// (ties broken by position, so the count is exact).
std::vector<float> magnitude_mask(std::span<const float> w, double sparsity);
// The Zhu & Gupta schedule: s_t = s_f · (1 − (1 − t/T)^3) for 0 <= t <= T
// (s_i = 0), s_f after T.
double cubic_sparsity(double final_sparsity, std::int64_t step, std::int64_t end_step);

// ---- operations on registered models -------------------------------------

struct QuantizeRequest {
  std::string model;                    // MODEL ref
  std::string calib;                    // DATA ref: calibration rows (train split)
  std::int64_t calib_samples = 1000;
  CalibrationMethod method = CalibrationMethod::kMinMax;
  // Quantization-aware fine-tuning before the conversion: this many epochs
  // (0: none) with Adam on the calibration data's train split, the forward
  // pass fake-quantizing weights per channel and activations with the scales
  // calibrated on the parent; then the fine-tuned weights are calibrated and
  // converted as in PTQ.
  std::int64_t qat_epochs = 0;
  float qat_lr = 1e-4f;
  std::int64_t qat_batch = 128;
  std::uint64_t qat_seed = 1;
  Device device = Device::kAuto;
  int threads = 1;
};

enum class PruneSchedule : std::uint8_t { kOneShot, kGradual };
PruneSchedule parse_prune_schedule(std::string_view name);  // "oneshot" | "gradual"

struct PruneRequest {
  std::string model;
  double sparsity = 0.5;               // fraction of weights (or neurons/channels) removed
  PruneSchedule schedule = PruneSchedule::kOneShot;
  std::int64_t finetune_epochs = 1;
  bool structured = false;
  bool global = false;                 // unstructured: one threshold over all layers
  std::string data;                    // fine-tuning data; empty: the parent's dataset
  float lr = 5e-4f;
  std::int64_t batch = 128;
  std::uint64_t seed = 1;
  Device device = Device::kAuto;
  int threads = 1;
};

struct CompressResult {
  RunRecord run;
  ModelRecord model;
  std::string parent;                  // NAME@vN
  nlohmann::json lineage, metrics;
};

CompressResult quantize_model(Store& store, const QuantizeRequest& request, Reporter& reporter);
CompressResult prune_model(Store& store, const PruneRequest& request, Reporter& reporter);

struct BenchRequest {
  std::string model;
  std::int64_t batch = 256;
  Device device = Device::kAuto;
  int threads = 1;
  int repeats = 7;
  double seconds = 3;                  // about this long in all
};

struct BenchResult {
  ModelRecord model;
  std::string precision;               // fp32, bf16, int8
  double sparsity = 0;                 // zero fraction of dense/conv weights
  std::int64_t batch = 0;
  std::int64_t rows_per_repeat = 0;
  double samples_per_s = 0;            // median over repeats
  std::vector<double> repeat_samples_per_s;
  std::string engine;                  // "network" (int8 and pruned: "network (int8)", "network (sparse)") or "linear"
  std::vector<LayerKernel> layers;     // int8 and pruned models: the kernel each layer ran on
};
// Batch inference on deterministic pseudo-random standardized inputs
// through the Predictor eval uses (preprocessing excluded).
BenchResult bench_model(Store& store, const BenchRequest& request);

}  // namespace anneal
