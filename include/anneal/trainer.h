// Trainer: trains a network built from a layer spec on in-memory data.
//
//   anneal::TrainerConfig config;
//   config.layers = "dense(256) relu dense(128) relu dense(10)";
//   config.classes = 10;
//   anneal::DataView train{features, labels, {784}};
//   auto backend = anneal::make_backend({.device = anneal::Device::kAuto, .threads = 2});
//   anneal::Trainer trainer(config, *backend, train, validation, reporter);
//   trainer.train();                       // all epochs (or early stop)
//   for (const auto& m : trainer.history()) ... m.train_loss, m.val_accuracy
//   std::string hash = trainer.weights_hash();
//
// Determinism: on a deterministic backend (BackendCapabilities), the same
// config, data, seed and backend thread count give bitwise identical
// weights. Training N steps, save_state(), load_state() into a new Trainer
// and training on gives the same bits as never stopping.
//
// Threads: every call runs the backend's ops inside Backend::enter() on the
// calling thread; the trainer itself starts no threads. Host values (loss
// and accuracy totals) are read back once per epoch and at save_state().
//
// Thread-safety: one thread at a time may call a Trainer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "anneal/loss.h"
#include "anneal/network.h"
#include "anneal/optimizer.h"
#include "anneal/report.h"
#include "anneal/sample_source.h"

namespace anneal {

class Communicator;

enum class Precision : std::uint8_t {
  kFp32,  // fp32 everywhere
  kBf16,  // bf16 activations and working weights; fp32 master weights, gradients, optimizer
  kFp16,  // fp16 activations and working weights, as kBf16, with dynamic loss scaling (GPU only)
};
// "fp32" | "bf16" | "fp16"; throws kUsage otherwise.
Precision parse_precision(std::string_view name);
const char* precision_name(Precision precision);
// The activations' dtype of a precision.
DType compute_dtype(Precision precision);

enum class EarlyStopMetric : std::uint8_t { kNone, kValLoss, kValAccuracy, kTrainLoss };
// "none" | "val_loss" | "val_accuracy" | "train_loss"; throws kUsage otherwise.
EarlyStopMetric parse_early_stop_metric(std::string_view name);
const char* early_stop_metric_name(EarlyStopMetric metric);

struct TrainerConfig {
  std::string layers;                 // layer spec, see network.h
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  std::int64_t classes = 0;           // softmax_ce: number of classes (>= 2)
  OptimizerConfig optimizer;
  std::int64_t batch = 128;
  std::int64_t epochs = 10;
  std::int64_t grad_accum = 1;        // micro-batches per optimizer step
  std::uint64_t seed = 0;             // init, shuffling and dropout
  Precision precision = Precision::kFp32;
  EarlyStopMetric early_stop = EarlyStopMetric::kNone;
  int patience = 0;                   // epochs without improvement before stopping
  // With early stopping: when training finishes (stopped early or out of
  // epochs), the parameters and state buffers of the epoch with the best
  // early-stopping metric replace the last epoch's, so the model is the one
  // that validated best and not the one that overfit for `patience` more
  // epochs. The best epoch's values are kept on the host and checkpointed.
  bool restore_best = false;
  // softmax_ce / bce: a weight per class (bce: labels 0 and 1), empty for
  // none. Training and validation losses are then the mean over samples of
  // w[label] · loss (see LossOp in backend.h).
  std::vector<float> class_weights;
  // Data parallelism only (a communicator of N > 1): the gradients are
  // summed across ranks in buckets of about this many bytes, each started
  // as soon as the backward pass has produced all of its gradients, so
  // the transfers overlap the rest of the backward pass. Not a run config
  // key: the result is the same bits whatever the size (every element is
  // still its ranks' sum in rank order); it only moves the time. Tests set
  // 1 (a bucket per parameter) and SIZE_MAX (one bucket: everything after
  // the backward pass). 1 MiB: the Fashion-MNIST CNN's dense layers
  // (1.6 MB) go while its convolutions' backward runs, and a large model
  // is not cut into thousands of messages (and, on a GPU, host copies).
  std::size_t allreduce_bucket_bytes = kDefaultAllreduceBucketBytes;
  static constexpr std::size_t kDefaultAllreduceBucketBytes = std::size_t(1) << 20;
  // The most memory the network may need while training (NetworkOptions::
  // memory_limit); 0: unchecked. A run sets the machine's physical memory.
  std::uint64_t memory_limit = 0;
};

// Borrowed in-memory data; must outlive every Trainer call that uses it
// (read through an ArraySource, see sample_source.h).
struct DataView {
  std::span<const float> features;    // rows x prod(sample_shape), row-major
  std::span<const float> labels;      // rows: class index (classification) or value
  std::vector<std::int64_t> sample_shape;  // {F} or {C, H, W}
};

struct EpochMetrics {
  std::int64_t epoch = 0;             // 1-based
  std::int64_t steps = 0;             // optimizer steps done when the epoch ended
  double train_loss = 0, train_accuracy = 0;  // over the epoch's training batches
  bool has_validation = false;
  double val_loss = 0, val_accuracy = 0;
  float lr = 0;                       // learning rate of the epoch's last step
  double seconds = 0;                 // wall time of the epoch (not part of determinism)
  // Precision fp16 only: optimizer steps skipped in the epoch because the
  // scaled gradients overflowed, and the loss scale at its end.
  std::int64_t skipped_steps = 0;
  float loss_scale = 0;
};

struct Evaluation {
  double loss = 0;       // mean per-sample loss
  double accuracy = 0;   // classification only, else 0
  std::uint64_t rows = 0;
};

class Trainer {
 public:
  // Validates config and data (kUsage for the config, or a precision the
  // backend cannot run; kBadData for the data: sizes, labels outside
  // 0..classes-1, NaN features) and builds the network on `backend`,
  // raising spec errors (kUsage) before anything trains. `backend`,
  // `train_data`, `validation` and `reporter` must outlive the Trainer.
  Trainer(TrainerConfig config, Backend& backend, DataView train_data,
          std::optional<DataView> validation, Reporter& reporter);
  // The same over sources (sample_source.h), which are read a batch at a
  // time in the order the source's blocks and window allow; each batch is
  // checked as it is read (kBadData naming the source row for a label
  // outside 0..classes-1 or a feature that is not finite). `train_data` and
  // `validation` (may be null) must outlive the Trainer.
  //
  // Data parallelism: with a `communicator` of N > 1 ranks (communicator.h;
  // it must outlive the Trainer), every rank builds the same Trainer over
  // the same rows and trains the one run together: each reads only its
  // share of every global batch (rows n·r/N to n·(r+1)/N of it), the
  // gradients are summed across ranks before every optimizer step (so all
  // ranks keep the same weights), and the epoch's training totals are the
  // ranks' summed. Every rank must then call train(), save_state() and
  // load_state() at the same points. With one rank (or none) nothing
  // changes, bit for bit. Dropout masks are drawn per rank's share, so a
  // run with dropout differs from the single-process one by more than
  // rounding; validation and evaluate() run whole on every rank.
  Trainer(TrainerConfig config, Backend& backend, SampleSource& train_data, SampleSource* validation,
          Reporter& reporter, Communicator* communicator = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains until every epoch has run, early stopping fired, or `max_steps`
  // more optimizer steps have run. Reports each epoch's metrics through the
  // Reporter. Returns finished().
  bool train(std::uint64_t max_steps = ~std::uint64_t{0});
  bool finished() const;
  bool stopped_early() const;
  std::int64_t step() const;           // optimizer steps done
  std::int64_t epoch() const;          // epochs completed
  std::int64_t steps_per_epoch() const;
  std::int64_t total_steps() const;    // steps_per_epoch() x epochs
  const std::vector<EpochMetrics>& history() const;

  // Loss and accuracy of the current weights on `data` (inference mode).
  Evaluation evaluate(const DataView& data);
  // The same over every row of a source, read in row order a window at a time.
  Evaluation evaluate(SampleSource& data);
  // rows x outputs() predictions for `features` (rows x sample size):
  // softmax_ce class probabilities, bce P(1), mse/mae the value. The bits
  // runs::Predictor (eval, predict) gives for the same weights: where the
  // backend is batch-invariant, a forward-only copy of the network runs
  // them (unless fake quantization is set).
  std::vector<float> predict(std::span<const float> features);
  // rows x outputs() predictions for every row of a source, in row order
  // (its labels are not read).
  std::vector<float> predict(SampleSource& data);
  std::int64_t outputs() const;

  // The weights hash (anneal/weights_hash.h) of every parameter, then every
  // state buffer, as f32 with its name and dims: identical weights give
  // identical hashes, and it equals the hash of the model file that stores
  // these weights (docs/STORE.md, "Weights hash").
  std::string weights_hash();

  // Everything needed to resume exactly: weights, optimizer state, batch-norm
  // statistics, data order position, step, epoch, partial-epoch metric sums
  // (every rank's, summed), early-stopping state and metric history.
  std::vector<std::uint8_t> save_state();
  // Restores save_state() output into this Trainer, which must have been
  // built with the same layers, loss, optimizer kind, precision, batch, grad
  // accumulation, seed and training row count (kUsage otherwise; kCorrupt
  // for truncated or damaged bytes).
  void load_state(std::span<const std::uint8_t> bytes);

  const Network& network() const;
  const TrainerConfig& config() const;
  // The backend the network lives on: read its tensors through it.
  Backend& backend() const;

  // Replaces weights by name: each (name, row-major values) must name a
  // parameter or state buffer and hold its element count (kUsage otherwise);
  // those not named keep their values. How pruning starts from a model.
  void load_weights(const std::vector<std::pair<std::string, std::vector<float>>>& named);
  // The row-major values of a parameter or state buffer; kUsage when absent.
  std::vector<float> values(const std::string& name);
  // Holds a pruning mask on parameter `name` in the optimizer (see
  // Optimizer::set_mask): applied now and after every step.
  void set_mask(const std::string& name, const std::vector<float>& mask);
  // Quantization-aware training: fake quantization in every forward from
  // now on (see Network::set_fake_quantization). fp32 precision only (kUsage).
  void set_fake_quantization(const FakeQuantization& fq);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anneal
