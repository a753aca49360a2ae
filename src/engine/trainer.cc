// The training loop: deterministic shuffling, the batch gather (on the
// calling thread: see batch()), gradient accumulation, the optimizer step,
// per-epoch metrics, early stopping, and exact state save/restore.
#include "anneal/trainer.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "anneal/communicator.h"
#include "anneal/error.h"
#include "anneal/spelling.h"
#include "anneal/weights_hash.h"
#include "engine/data_order.h"
#include "engine/gradient_reducer.h"
#include "engine/state_io.h"

namespace anneal {

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw unknown_name_error("precision", name, {"fp32", "bf16", "fp16"});
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "fp32";
}

DType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return DType::kF32;
    case Precision::kBf16: return DType::kBF16;
    case Precision::kFp16: return DType::kF16;
  }
  return DType::kF32;
}

EarlyStopMetric parse_early_stop_metric(std::string_view name) {
  if (name == "none" || name.empty()) return EarlyStopMetric::kNone;
  if (name == "val_loss") return EarlyStopMetric::kValLoss;
  if (name == "val_accuracy") return EarlyStopMetric::kValAccuracy;
  if (name == "train_loss") return EarlyStopMetric::kTrainLoss;
  throw unknown_name_error("early-stop metric", name,
                                   {"none", "val_loss", "val_accuracy", "train_loss"});
}

const char* early_stop_metric_name(EarlyStopMetric metric) {
  switch (metric) {
    case EarlyStopMetric::kNone: return "none";
    case EarlyStopMetric::kValLoss: return "val_loss";
    case EarlyStopMetric::kValAccuracy: return "val_accuracy";
    case EarlyStopMetric::kTrainLoss: return "train_loss";
  }
  return "?";
}

namespace {

std::int64_t sample_size(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

// Checks n samples (features n x width, labels n) as the trainer is about
// to use them: a label the loss can take (when `labels`), finite features.
// `row(i)` is the 1-based row number the message names.
template <typename RowNumber>
void check_samples(const char* which, const float* features, const float* labels, std::size_t n, std::size_t width,
                   const TrainerConfig& config, RowNumber row) {
  const std::string name(which);
  for (std::size_t i = 0; labels != nullptr && i < n; ++i) {
    const float y = labels[i];
    if (!std::isfinite(y)) throw data_error(name + " row " + std::to_string(row(i)) + " has no label (NaN)");
    if (config.loss == LossKind::kSoftmaxCrossEntropy &&
        (y != std::floor(y) || y < 0 || y >= float(config.classes)))
      throw data_error(name + " row " + std::to_string(row(i)) + " has label " + std::to_string(y) +
                       ", not a class index 0.." + std::to_string(config.classes - 1));
    if (config.loss == LossKind::kBinaryCrossEntropy && y != 0.0f && y != 1.0f)
      throw data_error(name + " row " + std::to_string(row(i)) + " has label " + std::to_string(y) +
                       "; bce needs 0 or 1");
  }
  bool finite = true;
  for (std::size_t i = 0; i < n * width; ++i) finite &= std::isfinite(features[i]);
  if (finite) return;
  for (std::size_t i = 0; i < n * width; ++i)
    if (!std::isfinite(features[i]))
      throw data_error(name + " row " + std::to_string(row(i / width)) +
                       " has a missing or infinite feature value; impute or drop it first");
}

void validate_data(const DataView& data, const char* which, const Dims& expected_shape,
                   const TrainerConfig& config) {
  const std::string name(which);
  if (Dims(data.sample_shape) != expected_shape)
    throw data_error(name + " data has samples of shape " + Dims(data.sample_shape).str() +
                     " but the training data has " + expected_shape.str());
  const std::int64_t width = sample_size(data.sample_shape);
  const std::size_t rows = data.labels.size();
  if (rows == 0) throw data_error(name + " data has no rows");
  if (data.features.size() != rows * std::size_t(width))
    throw data_error(name + " data has " + std::to_string(data.features.size()) +
                     " feature values for " + std::to_string(rows) + " rows of " +
                     std::to_string(width));
  check_samples(which, data.features.data(), data.labels.data(), rows, std::size_t(width), config,
                [](std::size_t i) { return i + 1; });
}

// A source's shape and rows, checked before anything trains.
// `may_be_empty`: a source without rows is fine (a prediction of nothing).
void validate_source(const SampleSource& source, const char* which, const Dims& expected_shape,
                     bool may_be_empty = false) {
  const std::string name(which);
  if (Dims(source.sample_shape()) != expected_shape)
    throw data_error(name + " data has samples of shape " + Dims(source.sample_shape()).str() +
                     " but the training data has " + expected_shape.str());
  if (source.rows() == 0) {
    if (may_be_empty) return;
    throw data_error(name + " data has no rows");
  }
  if (source.rows() > std::int64_t(std::numeric_limits<std::uint32_t>::max()))
    throw data_error(name + " data has " + std::to_string(source.rows()) + " rows; at most 2^32 - 1 are supported");
  const auto starts = source.block_starts();
  bool ordered = starts.size() >= 2 && starts.front() == 0 && starts.back() == source.rows();
  for (std::size_t b = 1; ordered && b < starts.size(); ++b) ordered = starts[b] > starts[b - 1];
  if (!ordered || source.window_blocks() < 1)
    throw failure(name + " data source: blocks must cover its rows in ascending order, with a window of >= 1");
}

void validate_config(const TrainerConfig& c, const BackendCapabilities& backend, bool has_validation) {
  if (c.layers.empty()) throw usage_error("no layers given: set a layer spec such as 'dense(128) relu dense(10)'");
  if (c.batch < 1) throw usage_error("batch must be >= 1, not " + std::to_string(c.batch));
  if (c.epochs < 1) throw usage_error("epochs must be >= 1, not " + std::to_string(c.epochs));
  if (c.grad_accum < 1) throw usage_error("grad_accum must be >= 1, not " + std::to_string(c.grad_accum));
  if (c.loss == LossKind::kSoftmaxCrossEntropy && c.classes < 2)
    throw usage_error("softmax_ce needs the number of classes (>= 2), not " + std::to_string(c.classes));
  if (c.precision == Precision::kBf16 && !backend.bf16)
    throw usage_error("precision bf16: the " + backend.device +
                      " backend has no native bf16 (on a CPU: AVX512_BF16 or AMX); use fp32");
  if (c.precision == Precision::kFp16 && !backend.fp16)
    throw usage_error("precision fp16: the " + backend.device +
                      " backend has no fp16 training (it needs a GPU: device = cuda); use fp32 or bf16");
  if (c.early_stop != EarlyStopMetric::kNone) {
    if (c.patience < 1) throw usage_error("early stopping needs patience >= 1");
    if (c.early_stop != EarlyStopMetric::kTrainLoss && !has_validation)
      throw usage_error(std::string("early stopping on ") + early_stop_metric_name(c.early_stop) +
                        " needs validation data");
    if (c.early_stop == EarlyStopMetric::kValAccuracy && !is_classification(c.loss))
      throw usage_error("early stopping on val_accuracy needs a classification loss");
  }
  check_class_weights(c.loss, loss_output_width(c.loss, c.classes), c.class_weights);
  validate(c.optimizer);
}

}  // namespace

class Trainer::Impl {
 public:
  // Over arrays: checked whole up front, then read as ArraySources.
  Impl(const TrainerConfig& config, Backend& backend, const DataView& train_data,
       const std::optional<DataView>& validation, Reporter& reporter)
      : Impl(config, backend, checked_sources(config, backend, train_data, validation), reporter) {}

  using OwnedSources = std::pair<std::unique_ptr<ArraySource>, std::unique_ptr<ArraySource>>;
  Impl(const TrainerConfig& config, Backend& backend, OwnedSources sources, Reporter& reporter)
      : Impl(config, backend, *sources.first, sources.second.get(), reporter) {
    owned_train_ = std::move(sources.first);
    owned_validation_ = std::move(sources.second);
  }

  Impl(TrainerConfig config, Backend& backend, SampleSource& train_data, SampleSource* validation,
       Reporter& reporter, Communicator* communicator = nullptr)
      : config_(std::move(config)),
        train_(&train_data),
        validation_(validation),
        reporter_(reporter),
        backend_(&backend),
        comm_(communicator && communicator->size() > 1 ? communicator : nullptr) {
    validate_config(config_, backend_->capabilities(), validation_ != nullptr);
    const Dims sample_shape(train_->sample_shape());
    validate_source(*train_, "training", sample_shape);
    if (validation_) validate_source(*validation_, "validation", sample_shape);
    rows_ = train_->rows();
    width_ = sample_size(train_->sample_shape());
    window_ = std::min(train_->window_blocks(), train_->blocks());
    micro_per_epoch_ = (rows_ + config_.batch - 1) / config_.batch;
    steps_per_epoch_ = (micro_per_epoch_ + config_.grad_accum - 1) / config_.grad_accum;

    const auto scope = backend_->enter();
    NetworkOptions options;
    options.input_shape = sample_shape;
    options.outputs = loss_output_width(config_.loss, config_.classes);
    options.output_meaning = config_.loss == LossKind::kSoftmaxCrossEntropy
                                 ? std::to_string(config_.classes) + " classes"
                                 : std::string("1 output for ") + loss_name(config_.loss);
    options.compute = compute_dtype(config_.precision);
    options.seed = config_.seed;
    options.batch = config_.batch;
    options.memory_limit = config_.memory_limit;
    network_options_ = options;
    network_ = std::make_unique<Network>(config_.layers, options, *backend_);
    fit_network_inputs();
    optimizer_ = std::make_unique<Optimizer>(config_.optimizer, network_->parameters(), *backend_);
    train_loss_ = backend_->loss(config_.loss, options.outputs, config_.class_weights);
    if (comm_)
      reducer_ = std::make_unique<engine::GradientReducer>(network_->parameters(), *backend_, *comm_,
                                                           config_.allreduce_bucket_bytes, reporter_);
    eval_loss_ = backend_->loss(config_.loss, options.outputs, config_.class_weights);

    // Batch buffers sized for a full batch once, so steps never reallocate.
    backend_->shape_plain(slot_.x, sample_shape.with_batch(config_.batch), DType::kF32);
    backend_->shape_plain(slot_.y, Dims{config_.batch}, DType::kF32);
    if (config_.precision == Precision::kFp16) {
      backend_->shape_plain(loss_scale_, Dims{kLossScaleState}, DType::kF32);
      const std::array<float, kLossScaleState> initial{kInitialLossScale, 0, 0, 0};
      backend_->copy_from_host(initial.data(), loss_scale_);
    }
  }

  bool train(std::uint64_t max_steps) {
    const auto scope = backend_->enter();
    std::uint64_t done = 0;
    if (micro_index_ == 0 && !finished_) epoch_start_ = Clock::now();
    while (!finished_ && done < max_steps) {
      run_step();
      ++done;
      if (micro_index_ >= micro_per_epoch_) {
        end_epoch();
        if (!finished_) epoch_start_ = Clock::now();
      }
    }
    if (finished_ && announced_.first >= 0) {
      train_->will_read({}, {});  // training is over: its blocks may go
      announced_ = {-1, -1};
    }
    return finished_;
  }

  Evaluation evaluate(const DataView& data) {
    validate_data(data, "evaluation", Dims(train_->sample_shape()), config_);
    ArraySource source(data.features, data.labels, data.sample_shape);
    return evaluate(source);
  }

  Evaluation evaluate(SampleSource& data) {
    validate_source(data, "evaluation", Dims(train_->sample_shape()));
    const auto scope = backend_->enter();
    LossTotals totals = run_inference(data, "evaluation", /*score=*/true, nullptr);
    Evaluation e;
    e.loss = totals.mean_loss();
    e.accuracy = is_classification(config_.loss) ? totals.accuracy() : 0.0;
    e.rows = std::uint64_t(totals.count);
    return e;
  }

  std::vector<float> predict(std::span<const float> features) {
    if (features.size() % std::size_t(width_) != 0)
      throw data_error("predict: " + std::to_string(features.size()) +
                       " feature values is not a whole number of rows of " + std::to_string(width_));
    const std::vector<float> no_labels(features.size() / std::size_t(width_), 0.0f);
    ArraySource source(features, no_labels, train_->sample_shape());
    return predict(source);
  }

  std::vector<float> predict(SampleSource& data) {
    validate_source(data, "prediction", Dims(train_->sample_shape()), /*may_be_empty=*/true);
    const auto scope = backend_->enter();
    std::vector<float> out(std::size_t(data.rows()) * std::size_t(outputs()));
    run_inference(data, "prediction", /*score=*/false, out.data(), &prediction_network());
    return out;
  }

  // What predict() runs: the network runs::Predictor would build from the
  // current weights (batch_invariant where the backend offers it), so the
  // metrics a run records are the bits `anneal eval` reproduces; the
  // training network's batched kernels would give other last bits. With
  // fake quantization set, the training network itself (its pass quantizes).
  Network& prediction_network() {
    if (!backend_->capabilities().batch_invariant || fake_quantized_) return *network_;
    if (!prediction_network_) {
      NetworkOptions options = network_options_;
      options.batch_invariant = true;
      prediction_network_ = std::make_unique<Network>(config_.layers, options, *backend_);
    }
    std::vector<float> host;
    auto copy = [&](const Tensor& from, Tensor& to) {
      host.resize(std::size_t(from.elements()));
      backend_->copy_to_host(from, host.data());
      backend_->copy_from_host(host.data(), to);
    };
    const auto& from = network_->parameters();
    const auto& to = prediction_network_->parameters();
    for (std::size_t i = 0; i < from.size(); ++i) copy(from[i]->value, to[i]->value);
    const auto& from_buffers = network_->buffers();
    const auto& to_buffers = prediction_network_->buffers();
    for (std::size_t i = 0; i < from_buffers.size(); ++i) copy(*from_buffers[i].tensor, *to_buffers[i].tensor);
    return *prediction_network_;
  }

  std::int64_t outputs() const { return network_->output_shape()[0]; }

  // The tensors a model file stores (runs::export_weights), framed as
  // model_weights_hash() frames a network's: the two hashes are equal.
  std::string weights_hash() {
    const auto scope = backend_->enter();
    WeightsHasher hasher;
    std::vector<float> host;
    auto add = [&](const std::string& name, const Tensor& t) {
      host.resize(std::size_t(t.elements()));
      backend_->copy_to_host(t, host.data());
      hasher.add_f32(name, t.dims().to_vector(), host);
    };
    for (const Parameter* p : network_->parameters()) add(p->name, p->value);
    for (const StateBuffer& b : network_->buffers()) add(b.name, *b.tensor);
    return hasher.finish_hex();
  }

  std::vector<std::uint8_t> save_state() {
    const auto scope = backend_->enter();
    engine::StateWriter w;
    w.bytes(kMagic, sizeof kMagic);
    w.u32(kStateVersion);
    w.str(fingerprint());
    w.i64(epoch_);
    w.i64(micro_index_);
    w.i64(step_);
    w.u64(micro_step_);
    // Every rank's share of the epoch so far, summed: the checkpoint holds
    // the run's totals, whatever the number of ranks.
    const LossTotals epoch_totals = across_ranks(train_loss_->totals());
    w.f64(epoch_totals.loss_sum);
    w.i64(epoch_totals.correct);
    w.i64(epoch_totals.count);
    w.f64(best_metric_);
    w.i64(bad_epochs_);
    w.u8(finished_);
    w.u8(stopped_early_);
    w.f64(last_lr_);
    w.u64(history_.size());
    for (const EpochMetrics& m : history_) {
      w.i64(m.epoch);
      w.i64(m.steps);
      w.f64(m.train_loss);
      w.f64(m.train_accuracy);
      w.u8(m.has_validation);
      w.f64(m.val_loss);
      w.f64(m.val_accuracy);
      w.f64(m.lr);
      w.f64(m.seconds);
    }
    const auto tensors = state_tensors();
    w.u64(tensors.size());
    std::vector<float> host;
    for (const StateBuffer& t : tensors) {
      w.str(t.name);
      w.str(t.tensor->dims().str());
      host.resize(std::size_t(t.tensor->elements()));
      backend_->copy_to_host(*t.tensor, host.data());
      w.u64(host.size());
      w.bytes(host.data(), host.size() * sizeof(float));
    }
    w.i64(best_epoch_);
    w.u64(best_values_.size());
    for (const std::vector<float>& values : best_values_) {
      w.u64(values.size());
      w.bytes(values.data(), values.size() * sizeof(float));
    }
    return w.take();
  }

  void load_state(std::span<const std::uint8_t> bytes) {
    const auto scope = backend_->enter();
    engine::StateReader r(bytes);
    char magic[sizeof kMagic];
    r.bytes(magic, sizeof magic);
    if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) throw corrupt("trainer state: not an anneal trainer state");
    const std::uint32_t version = r.u32();
    if (version != 1 && version != kStateVersion)
      throw corrupt("trainer state: version " + std::to_string(version) + ", this build reads 1 to " +
                    std::to_string(kStateVersion));
    const std::string saved = r.str();
    const std::string mine = fingerprint();
    if (saved != mine)
      throw usage_error("trainer state was saved by a different configuration: saved [" + saved +
                        "], this trainer [" + mine + "]");
    // Read everything before changing anything, so a damaged state leaves
    // this trainer as it was.
    const std::int64_t epoch = r.i64(), micro_index = r.i64(), step = r.i64();
    const std::uint64_t micro_step = r.u64();
    LossTotals totals;
    totals.loss_sum = r.f64();
    totals.correct = r.i64();
    totals.count = r.i64();
    const double best = r.f64();
    const std::int64_t bad = r.i64();
    const bool finished = r.u8() != 0, stopped = r.u8() != 0;
    const double last_lr = r.f64();
    const std::uint64_t history_size = r.u64();
    if (history_size > std::uint64_t(config_.epochs) + 1000000) throw corrupt("trainer state: bad history size");
    std::vector<EpochMetrics> history(history_size);
    for (EpochMetrics& m : history) {
      m.epoch = r.i64();
      m.steps = r.i64();
      m.train_loss = r.f64();
      m.train_accuracy = r.f64();
      m.has_validation = r.u8() != 0;
      m.val_loss = r.f64();
      m.val_accuracy = r.f64();
      m.lr = float(r.f64());
      m.seconds = r.f64();
    }
    const auto tensors = state_tensors();
    if (r.u64() != tensors.size()) throw corrupt("trainer state: tensor count differs");
    std::vector<std::vector<float>> values(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (r.str() != tensors[i].name || r.str() != tensors[i].tensor->dims().str())
        throw corrupt("trainer state: tensor " + tensors[i].name + " is missing or has other dims");
      const std::uint64_t count = r.u64();
      if (count != std::uint64_t(tensors[i].tensor->elements()))
        throw corrupt("trainer state: tensor " + tensors[i].name + " has the wrong size");
      values[i].resize(count);
      r.bytes(values[i].data(), count * sizeof(float));
    }
    std::int64_t best_epoch = 0;
    std::vector<std::vector<float>> best_values;
    if (version >= 2) {
      best_epoch = r.i64();
      const std::uint64_t kept = r.u64();
      const std::size_t model_count = model_tensors().size();
      if ((kept != 0 && kept != model_count) || (kept == 0) != (best_epoch == 0) || best_epoch < 0 ||
          best_epoch > epoch)
        throw corrupt("trainer state: the best epoch's values do not match the model");
      best_values.resize(kept);
      for (std::size_t i = 0; i < kept; ++i) {
        const std::uint64_t count = r.u64();
        if (count != values[i].size()) throw corrupt("trainer state: the best epoch's " + tensors[i].name + " has the wrong size");
        best_values[i].resize(count);
        r.bytes(best_values[i].data(), count * sizeof(float));
      }
    }
    if (!r.at_end()) throw corrupt("trainer state: trailing bytes");
    if (micro_index < 0 || micro_index > micro_per_epoch_ || epoch < 0 || step < 0)
      throw corrupt("trainer state: position out of range");

    for (std::size_t i = 0; i < tensors.size(); ++i)
      backend_->copy_from_host(values[i].data(), *tensors[i].tensor);
    epoch_ = epoch;
    micro_index_ = micro_index;
    step_ = step;
    micro_step_ = micro_step;
    // The run's totals go to one rank: the epoch's end sums the ranks'.
    train_loss_->set_totals(rank() == 0 ? totals : LossTotals{});
    best_metric_ = best;
    bad_epochs_ = bad;
    finished_ = finished || epoch_ >= config_.epochs;
    stopped_early_ = stopped;
    best_epoch_ = best_epoch;
    best_values_ = std::move(best_values);
    last_lr_ = last_lr;
    history_ = std::move(history);
    order_.reset();
  }

  const TrainerConfig& config() const { return config_; }
  const Network& network() const { return *network_; }

  // The tensor called `name` (parameter value or state buffer), or null.
  Tensor* named_tensor(const std::string& name, std::size_t* parameter_index) {
    const auto& params = network_->parameters();
    for (std::size_t i = 0; i < params.size(); ++i)
      if (params[i]->name == name) {
        if (parameter_index) *parameter_index = i;
        return &params[i]->value;
      }
    for (const StateBuffer& b : network_->buffers())
      if (b.name == name) return b.tensor;
    return nullptr;
  }

  void load_weights(const std::vector<std::pair<std::string, std::vector<float>>>& named) {
    const auto scope = backend_->enter();
    for (const auto& [name, host] : named) {
      Tensor* t = named_tensor(name, nullptr);
      if (t == nullptr) throw usage_error("load_weights: the network has no tensor " + name);
      if (std::int64_t(host.size()) != t->elements())
        throw usage_error("load_weights: " + name + " holds " + std::to_string(t->elements()) +
                          " values, not " + std::to_string(host.size()));
      backend_->copy_from_host(host.data(), *t);
    }
  }

  std::vector<float> values(const std::string& name) {
    Tensor* t = named_tensor(name, nullptr);
    if (t == nullptr) throw usage_error("values: the network has no tensor " + name);
    const auto scope = backend_->enter();
    std::vector<float> out(std::size_t(t->elements()));
    backend_->copy_to_host(*t, out.data());
    return out;
  }

  void set_mask(const std::string& name, const std::vector<float>& mask) {
    std::size_t index = 0;
    if (named_tensor(name, &index) == nullptr || network_->parameters()[index]->name != name)
      throw usage_error("set_mask: the network has no parameter " + name);
    const auto scope = backend_->enter();
    optimizer_->set_mask(index, mask);
  }

  void set_fake_quantization(const FakeQuantization& fq) {
    if (config_.precision != Precision::kFp32)
      throw usage_error("fake quantization: train in fp32 precision (the int8 model is built from fp32 weights)");
    network_->set_fake_quantization(fq);
    fake_quantized_ = true;
  }

  TrainerConfig config_;
  SampleSource* train_;       // borrowed, or owned_train_
  SampleSource* validation_;  // borrowed or owned_validation_; null: none
  std::unique_ptr<ArraySource> owned_train_, owned_validation_;
  Reporter& reporter_;
  Backend* backend_;  // borrowed: outlives the Trainer
  NetworkOptions network_options_;
  std::unique_ptr<Network> network_;
  std::unique_ptr<Network> prediction_network_;  // predict()'s, made at its first call
  bool fake_quantized_ = false;
  std::unique_ptr<Optimizer> optimizer_;
  // Two losses, two running totals: the epoch's training batches, and the
  // evaluation in progress (validation, evaluate()).
  std::unique_ptr<LossOp> train_loss_, eval_loss_;

  std::int64_t rows_ = 0, width_ = 0, micro_per_epoch_ = 0, steps_per_epoch_ = 0;
  std::int64_t window_ = 1;  // blocks of the training source held at once

  // Position and progress: all of it is checkpointed.
  std::int64_t epoch_ = 0;        // epochs completed = index of the current epoch
  std::int64_t micro_index_ = 0;  // next micro-batch within the epoch
  std::int64_t step_ = 0;         // optimizer steps done
  std::uint64_t micro_step_ = 0;  // micro-batches done over the run (dropout streams)
  double best_metric_ = std::numeric_limits<double>::infinity();
  std::int64_t bad_epochs_ = 0;
  // restore_best: the epoch whose metric was best_metric_ (0: none yet) and
  // its parameters and state buffers (model_tensors() order), on the host.
  std::int64_t best_epoch_ = 0;
  std::vector<std::vector<float>> best_values_;
  bool finished_ = false, stopped_early_ = false;
  double last_lr_ = 0;
  std::vector<EpochMetrics> history_;

 private:
  using Clock = std::chrono::steady_clock;
  // The rows a layer fitted on the inputs (ple's edges) sees: at most this
  // many, spread evenly over the training rows.
  static constexpr std::int64_t kInputFitRows = 4096;

  // Network::fit_inputs on training rows ⌊i·rows/S⌋, i < S = min(rows,
  // kInputFitRows), read block by block in order: the same rows, so the
  // same edges, for a seed, a thread count and every rank of a
  // data-parallel run. A resumed or warm-started trainer then loads the
  // edges it had over these. Data parallel: rank 0 fits; the other ranks
  // take its edges with the state it sends them before training (their
  // sources answer reads only once training has started).
  void fit_network_inputs() {
    if (!network_->fits_inputs() || (comm_ && comm_->rank() != 0)) return;
    const std::int64_t take = std::min(rows_, kInputFitRows);
    std::vector<std::uint32_t> rows(static_cast<std::size_t>(take));
    for (std::int64_t i = 0; i < take; ++i) rows[std::size_t(i)] = std::uint32_t(i * rows_ / take);
    std::vector<float> features(static_cast<std::size_t>(take * width_));
    std::vector<float> labels(static_cast<std::size_t>(take));
    const std::span<const std::int64_t> starts = train_->block_starts();
    std::size_t at = 0;
    for (std::uint32_t b = 0; b + 1 < starts.size() && at < rows.size(); ++b) {
      std::size_t end = at;
      while (end < rows.size() && std::int64_t(rows[end]) < starts[b + 1]) ++end;
      if (end == at) continue;
      const std::uint32_t now[] = {b}, next[] = {b + 1};
      train_->will_read(now, b + 2 < starts.size() ? std::span<const std::uint32_t>(next)
                                                   : std::span<const std::uint32_t>());
      train_->read(std::span<const std::uint32_t>(rows).subspan(at, end - at), features.data() + at * width_,
                   labels.data() + at);
      at = end;
    }
    train_->will_read({}, {});
    network_->fit_inputs(features, take);
  }

  static constexpr char kMagic[8] = {'A', 'N', 'N', 'E', 'A', 'L', 'T', 'S'};
  // 2 appends the best epoch and its values (restore_best); 1 is read as
  // a state without them.
  static constexpr std::uint32_t kStateVersion = 2;

  // A batch buffer: features (n, sample...) and labels (n), plain fp32.
  struct Slot {
    Tensor x, y;
    // With an ensemble: y's labels each repeated for the sample's members,
    // one per row of the network's training output (Network::forward).
    Tensor member_y;
    std::int64_t first_row = 0;  // x's first row within the global micro-batch (this rank's share)
  };

  std::string fingerprint() const {
    std::string f = "layers=" + network_->describe() + ";input=" + Dims(train_->sample_shape()).str() +
           ";loss=" + loss_name(config_.loss) + ";outputs=" + std::to_string(outputs()) +
           ";optimizer=" + optimizer_name(config_.optimizer.kind) +
           ";momentum=" + std::to_string(config_.optimizer.momentum > 0) +
           ";precision=" + precision_name(config_.precision) + ";batch=" + std::to_string(config_.batch) +
           ";accum=" + std::to_string(config_.grad_accum) + ";seed=" + std::to_string(config_.seed) +
           ";rows=" + std::to_string(rows_);
    // A streamed order depends on the blocks and the window; a full
    // shuffle (the state's meaning before streaming) does not.
    if (window_ < train_->blocks())
      f += ";blocks=" + std::to_string(train_->blocks()) + ";window=" + std::to_string(window_);
    return f;
  }

  // Arrays checked whole (the config first), as sources over them.
  static OwnedSources checked_sources(const TrainerConfig& config, Backend& backend, const DataView& train,
                                      const std::optional<DataView>& validation) {
    validate_config(config, backend.capabilities(), validation.has_value());
    OwnedSources out;
    validate_data(train, "training", Dims(train.sample_shape), config);
    out.first = std::make_unique<ArraySource>(train.features, train.labels, train.sample_shape);
    if (validation) {
      validate_data(*validation, "validation", Dims(train.sample_shape), config);
      out.second = std::make_unique<ArraySource>(validation->features, validation->labels, validation->sample_shape);
    }
    return out;
  }

  // What the model is: every parameter's value, then the state buffers.
  std::vector<StateBuffer> model_tensors() const {
    std::vector<StateBuffer> out;
    for (Parameter* p : network_->parameters()) out.push_back({p->name, &p->value});
    for (const StateBuffer& b : network_->buffers()) out.push_back(b);
    return out;
  }

  // Everything a checkpoint holds on the device: the model, the
  // optimizer's state and the loss scale.
  std::vector<StateBuffer> state_tensors() const {
    std::vector<StateBuffer> out = model_tensors();
    for (const StateBuffer& s : optimizer_->state()) out.push_back(s);
    // Const: a StateBuffer names a tensor for reading and, on load, writing.
    if (loss_scaled()) out.push_back({"loss_scale", const_cast<Tensor*>(&loss_scale_)});
    return out;
  }

  bool loss_scaled() const { return config_.precision == Precision::kFp16; }
  std::array<float, 4> loss_scale_state() {
    std::array<float, kLossScaleState> s{};
    backend_->copy_to_host(loss_scale_, s.data());
    return s;
  }

  // The order of epoch `epoch` (see data_order.h), rebuilt when the epoch changes.
  engine::EpochOrder& order(std::int64_t epoch) {
    if (!order_ || order_->epoch() != epoch)
      order_.emplace(train_->block_starts(), window_, config_.seed, epoch);
    return *order_;
  }

  std::int64_t micro_rows(std::int64_t micro) const {
    return std::min(config_.batch, rows_ - micro * config_.batch);
  }

  // Tells the training source which window the reads from now on come from
  // and which follows (the next epoch's first, after an epoch's last), once
  // per window.
  void announce_window(std::int64_t position) {
    engine::EpochOrder& current = order(epoch_);
    const std::int64_t w = current.window_of(position);
    if (announced_ == std::pair{epoch_, w}) return;
    announced_ = {epoch_, w};
    const std::vector<std::uint32_t> now(current.window_blocks(w).begin(), current.window_blocks(w).end());
    std::vector<std::uint32_t> next;
    if (w + 1 < current.windows()) {
      const auto blocks = current.window_blocks(w + 1);
      next.assign(blocks.begin(), blocks.end());
    } else if (epoch_ + 1 < config_.epochs && current.windows() > 1) {
      const engine::EpochOrder following(train_->block_starts(), window_, config_.seed, epoch_ + 1);
      const auto blocks = following.window_blocks(0);
      next.assign(blocks.begin(), blocks.end());
    }
    train_->will_read(now, next);
  }

  // Reads `rows` of `source` into x and y (shaped plain fp32 (n, ...) and
  // (n) already): straight into the tensors where the backend lets the
  // host write them, else through a staging buffer. Checks them.
  void read_batch(SampleSource& source, const char* which, std::span<const std::uint32_t> rows, Tensor& x,
                  Tensor& y, bool labels) {
    const std::size_t n = rows.size(), width = std::size_t(width_);
    float* xp = backend_->host_view(x);
    float* yp = backend_->host_view(y);
    if (xp == nullptr) xp = (stage_x_.resize(n * width), stage_x_.data());
    if (yp == nullptr) yp = (stage_y_.resize(n), stage_y_.data());
    source.read(rows, xp, yp);
    check_samples(which, xp, labels ? yp : nullptr, n, width, config_,
                  [&](std::size_t i) { return std::size_t(rows[i]) + 1; });
    if (xp == stage_x_.data()) backend_->copy_from_host(xp, x);
    else x.mark_modified();
    if (yp == stage_y_.data()) backend_->copy_from_host(yp, y);
    else y.mark_modified();
  }

  // The batch buffer holding micro-batch `micro` of the current epoch,
  // read now from the training source.
  // With several ranks, this rank's share of it: rows [n·r/N, n·(r+1)/N)
  // of the global micro-batch, possibly none when n < N.
  Slot& batch(std::int64_t micro) {
    const std::int64_t n = micro_rows(micro);
    const std::int64_t first = micro * config_.batch;
    announce_window(first);
    batch_rows_.resize(std::size_t(n));
    order(epoch_).rows(first, n, batch_rows_.data());
    const std::int64_t lo = n * rank() / ranks(), hi = n * (rank() + 1) / ranks();
    const Dims sample(train_->sample_shape());
    backend_->shape_plain(slot_.x, sample.with_batch(hi - lo), DType::kF32);
    backend_->shape_plain(slot_.y, Dims{hi - lo}, DType::kF32);
    slot_.first_row = lo;
    const auto share = std::span<const std::uint32_t>(batch_rows_).subspan(std::size_t(lo), std::size_t(hi - lo));
    read_batch(*train_, "training", share, slot_.x, slot_.y, /*labels=*/true);
    if (network_->members() > 1) repeat_labels(slot_);
    return slot_;
  }

  // slot.member_y: label n at rows n·K + i, i < K = network_->members().
  void repeat_labels(Slot& slot) {
    const std::int64_t n = slot.y.batch(), k = network_->members();
    const float* yp = backend_->host_view(slot.y);
    if (yp == nullptr) {
      stage_y_.resize(std::size_t(n));
      backend_->copy_to_host(slot.y, stage_y_.data());
      yp = stage_y_.data();
    }
    backend_->shape_plain(slot.member_y, Dims{n * k}, DType::kF32);
    float* mp = backend_->host_view(slot.member_y);
    if (mp == nullptr) mp = (stage_member_y_.resize(std::size_t(n * k)), stage_member_y_.data());
    for (std::int64_t r = 0; r < n; ++r) std::fill(mp + r * k, mp + (r + 1) * k, yp[r]);
    if (mp == stage_member_y_.data()) backend_->copy_from_host(mp, slot.member_y);
    else slot.member_y.mark_modified();
  }

  int rank() const { return comm_ ? comm_->rank() : 0; }
  int ranks() const { return comm_ ? comm_->size() : 1; }

  // The ranks' totals summed (in rank order); this rank's alone without a
  // communicator. Every rank must call it at the same point.
  LossTotals across_ranks(const LossTotals& t) {
    if (!comm_) return t;
    std::array<double, 3> v{t.loss_sum, double(t.correct), double(t.count)};
    comm_->allreduce_sum(std::span<double>(v));
    LossTotals out;
    out.loss_sum = v[0];
    out.correct = std::int64_t(v[1]);
    out.count = std::int64_t(v[2]);
    return out;
  }

  void run_step() {
    if (reducer_) reducer_->agree_on_layouts();
    const std::int64_t first = micro_index_;
    const std::int64_t last = std::min(first + config_.grad_accum, micro_per_epoch_);
    std::int64_t samples = 0;
    for (std::int64_t m = first; m < last; ++m) samples += micro_rows(m);
    // The mean over the step's rows: an ensemble's K members each score
    // every sample, so its loss is the mean of the members' losses.
    const float grad_scale = 1.0f / (float(samples) * float(network_->members()));
    bool any_rows = false;  // this rank's: gradients hold something
    for (std::int64_t m = first; m < last; ++m) {
      Slot& slot = batch(m);
      ++micro_step_;
      if (slot.x.batch() == 0) continue;  // a global batch smaller than the ranks
      PassContext ctx;
      ctx.training = true;
      ctx.accumulate = any_rows;
      ctx.seed = config_.seed;
      ctx.micro_step = micro_step_ - 1;
      ctx.first_row = slot.first_row;
      const Tensor& out = network_->forward(slot.x, ctx);
      train_loss_->forward_backward(out, network_->members() > 1 ? slot.member_y : slot.y, &dloss_, grad_scale,
                                    loss_scaled() ? &loss_scale_ : nullptr);
      // The step's last backward hands each bucket to the communicator as
      // soon as its gradients are final; earlier micro-batches only add up.
      if (comm_ && m + 1 == last)
        network_->backward(dloss_, ctx, [this](std::size_t pending) { reducer_->gradients_ready(pending); });
      else
        network_->backward(dloss_, ctx);
      any_rows = true;
    }
    if (!any_rows)
      for (Parameter* p : network_->parameters()) backend_->fill_zero(p->grad);
    if (reducer_) reducer_->reduce();
    // fp16: the gradients came scaled by the loss scale; the optimizer
    // takes them times step_scale_ (1/scale, or 0 to skip the step when
    // they overflowed), and the scale adapts, all without a read-back.
    if (loss_scaled()) {
      std::vector<const Tensor*> grads;
      for (const Parameter* p : network_->parameters()) grads.push_back(&p->grad);
      backend_->unscale_gradients(grads, loss_scale_, kLossScaleGrowthInterval, step_scale_);
    }
    micro_index_ = last;
    last_lr_ = scheduled_lr(config_.optimizer, step_, total_steps());
    optimizer_->step(step_, total_steps(), loss_scaled() ? &step_scale_ : nullptr);
    ++step_;
    if (step_ % 16 == 0 || micro_index_ >= micro_per_epoch_)
      reporter_.progress("epoch " + std::to_string(epoch_ + 1) + "/" + std::to_string(config_.epochs),
                         std::uint64_t((micro_index_ + config_.grad_accum - 1) / config_.grad_accum),
                         std::uint64_t(steps_per_epoch_));
  }

  void end_epoch() {
    EpochMetrics m;
    m.epoch = epoch_ + 1;
    m.steps = step_;
    // The one read-back of the epoch's training totals (every rank's).
    const LossTotals epoch_totals = across_ranks(train_loss_->totals());
    m.train_loss = epoch_totals.mean_loss();
    m.train_accuracy = is_classification(config_.loss) ? epoch_totals.accuracy() : 0.0;
    m.lr = float(last_lr_);
    if (validation_) {
      const LossTotals v = run_inference(*validation_, "validation", /*score=*/true, nullptr);
      m.has_validation = true;
      m.val_loss = v.mean_loss();
      m.val_accuracy = is_classification(config_.loss) ? v.accuracy() : 0.0;
    }
    if (loss_scaled()) {
      // The state's last value is the skipped count when the epoch began
      // (the backend leaves it alone), so a resumed epoch counts right.
      std::array<float, kLossScaleState> s = loss_scale_state();
      m.loss_scale = s[0];
      m.skipped_steps = std::int64_t(s[2]) - std::int64_t(s[3]);
      s[3] = s[2];
      backend_->copy_from_host(s.data(), loss_scale_);
    }
    m.seconds = std::chrono::duration<double>(Clock::now() - epoch_start_).count();
    history_.push_back(m);

    std::string line = "epoch " + std::to_string(m.epoch) + "/" + std::to_string(config_.epochs) +
                       " train_loss=" + fmt(m.train_loss);
    if (is_classification(config_.loss)) line += " train_acc=" + fmt(m.train_accuracy);
    if (m.has_validation) {
      line += " val_loss=" + fmt(m.val_loss);
      if (is_classification(config_.loss)) line += " val_acc=" + fmt(m.val_accuracy);
    }
    line += " lr=" + fmt(m.lr);
    if (loss_scaled()) line += " loss_scale=" + fmt(m.loss_scale) + " skipped_steps=" + std::to_string(m.skipped_steps);
    line += " time=" + fmt(m.seconds) + "s";
    reporter_.note(line);

    ++epoch_;
    micro_index_ = 0;
    train_loss_->set_totals(LossTotals{});
    if (epoch_ >= config_.epochs) finished_ = true;
    if (config_.early_stop != EarlyStopMetric::kNone) {
      double value = 0;  // lower is better
      switch (config_.early_stop) {
        case EarlyStopMetric::kValLoss: value = m.val_loss; break;
        case EarlyStopMetric::kValAccuracy: value = -m.val_accuracy; break;
        case EarlyStopMetric::kTrainLoss: value = m.train_loss; break;
        case EarlyStopMetric::kNone: break;
      }
      if (value < best_metric_) {
        best_metric_ = value;
        bad_epochs_ = 0;
        if (config_.restore_best) keep_best(m.epoch);
      } else if (++bad_epochs_ >= config_.patience && !finished_) {
        finished_ = true;
        stopped_early_ = true;
        reporter_.note("early stop: " + std::string(early_stop_metric_name(config_.early_stop)) +
                       " did not improve for " + std::to_string(config_.patience) + " epochs");
      }
      if (finished_ && config_.restore_best) restore_best_epoch(m.epoch);
    }
  }

  // restore_best: copies the model's values to the host as the best epoch's.
  void keep_best(std::int64_t epoch) {
    const auto tensors = model_tensors();
    best_values_.resize(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      best_values_[i].resize(std::size_t(tensors[i].tensor->elements()));
      backend_->copy_to_host(*tensors[i].tensor, best_values_[i].data());
    }
    best_epoch_ = epoch;
  }

  // restore_best, once training has finished after epoch `last`: puts the
  // best epoch's values back (nothing to do when the last epoch was best).
  void restore_best_epoch(std::int64_t last) {
    if (best_epoch_ == 0 || best_epoch_ == last) return;
    const auto tensors = model_tensors();
    for (std::size_t i = 0; i < tensors.size(); ++i)
      backend_->copy_from_host(best_values_[i].data(), *tensors[i].tensor);
    reporter_.note("restored the weights of epoch " + std::to_string(best_epoch_) + ", the best " +
                   early_stop_metric_name(config_.early_stop) + " (" + fmt(config_.early_stop == EarlyStopMetric::kValAccuracy
                                                                               ? -best_metric_
                                                                               : best_metric_) +
                   ")");
  }

  static std::string fmt(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
  }

  // Forward passes in inference mode of `network` (null: the training one)
  // over every row of `source` in order, announced to it a window of blocks
  // at a time; scores them against the source's labels (`score`) and/or
  // writes predictions to `predictions`.
  LossTotals run_inference(SampleSource& source, const char* which, bool score, float* predictions,
                           Network* network = nullptr) {
    if (network == nullptr) network = network_.get();
    const std::int64_t rows = source.rows();
    const Dims sample(train_->sample_shape());
    const std::int64_t k = outputs();
    const auto starts = source.block_starts();
    const std::int64_t blocks = source.blocks();
    const std::int64_t window = std::max<std::int64_t>(1, std::min(source.window_blocks(), blocks));
    auto block_of = [&](std::int64_t row) {
      return std::int64_t(std::upper_bound(starts.begin(), starts.end(), row) - starts.begin()) - 1;
    };
    auto range = [](std::int64_t first, std::int64_t last) {
      std::vector<std::uint32_t> out;
      for (std::int64_t b = first; b <= last; ++b) out.push_back(std::uint32_t(b));
      return out;
    };
    // The blocks announced as `now`: the window from the batch's first block,
    // or as many as the batch spans when that is more (sparse rows); `next`
    // the same number after them.
    std::int64_t now_last = -1;
    eval_loss_->set_totals(LossTotals{});
    PassContext ctx;
    ctx.training = false;
    ctx.seed = config_.seed;
    std::vector<std::uint32_t> indices;
    for (std::int64_t start = 0; start < rows; start += config_.batch) {
      const std::int64_t n = std::min(config_.batch, rows - start);
      const std::int64_t first = block_of(start), last = block_of(start + n - 1);
      if (last > now_last) {
        now_last = std::min(blocks - 1, std::max(last, first + window - 1));
        const std::int64_t span = now_last - first + 1;
        source.will_read(range(first, now_last), range(now_last + 1, std::min(blocks - 1, now_last + span)));
      }
      backend_->shape_plain(eval_x_, sample.with_batch(n), DType::kF32);
      backend_->shape_plain(eval_y_, Dims{n}, DType::kF32);
      indices.resize(std::size_t(n));
      std::iota(indices.begin(), indices.end(), std::uint32_t(start));
      read_batch(source, which, indices, eval_x_, eval_y_, score);
      const Tensor& out = network->forward(eval_x_, ctx);
      if (score) eval_loss_->forward_backward(out, eval_y_, nullptr, 1.0f, nullptr);
      if (predictions != nullptr) eval_loss_->predict(out, predictions + start * k);
    }
    source.will_read({}, {});  // done: the source may let every block go
    return score ? eval_loss_->totals() : LossTotals{};
  }

  Slot slot_;
  std::optional<engine::EpochOrder> order_;
  std::pair<std::int64_t, std::int64_t> announced_{-1, -1};  // (epoch, window) told to the source
  std::vector<std::uint32_t> batch_rows_;
  std::vector<float> stage_x_, stage_y_;  // batches for a backend the host cannot write
  std::vector<float> stage_member_y_;      // Slot::member_y, for the same
  Communicator* comm_ = nullptr;          // null: this process alone (or a communicator of one)
  std::unique_ptr<engine::GradientReducer> reducer_;  // with comm_: sums the ranks' gradients
  Tensor dloss_, eval_x_, eval_y_;
  // fp16's dynamic loss scale: Backend::unscale_gradients's state
  // [scale, good steps, skipped steps, skipped steps when the epoch began]
  // and its per-step factor. Saved with the checkpoint as "loss_scale".
  Tensor loss_scale_, step_scale_;
  static constexpr int kLossScaleState = 4;
  static constexpr float kInitialLossScale = 65536.0f;  // 2^16, as the common AMP implementations start
  static constexpr int kLossScaleGrowthInterval = 2000;  // good steps in a row before the scale doubles
  Clock::time_point epoch_start_ = Clock::now();

 public:
  std::int64_t total_steps() const { return steps_per_epoch_ * config_.epochs; }
};

Trainer::Trainer(TrainerConfig config, Backend& backend, DataView train_data,
                 std::optional<DataView> validation, Reporter& reporter)
    : impl_(std::make_unique<Impl>(std::move(config), backend, train_data, validation, reporter)) {}
Trainer::Trainer(TrainerConfig config, Backend& backend, SampleSource& train_data, SampleSource* validation,
                 Reporter& reporter, Communicator* communicator)
    : impl_(std::make_unique<Impl>(std::move(config), backend, train_data, validation, reporter, communicator)) {}
Trainer::~Trainer() = default;

bool Trainer::train(std::uint64_t max_steps) { return impl_->train(max_steps); }
bool Trainer::finished() const { return impl_->finished_; }
bool Trainer::stopped_early() const { return impl_->stopped_early_; }
std::int64_t Trainer::step() const { return impl_->step_; }
std::int64_t Trainer::epoch() const { return impl_->epoch_; }
std::int64_t Trainer::steps_per_epoch() const { return impl_->steps_per_epoch_; }
std::int64_t Trainer::total_steps() const { return impl_->total_steps(); }
const std::vector<EpochMetrics>& Trainer::history() const { return impl_->history_; }
Evaluation Trainer::evaluate(const DataView& data) { return impl_->evaluate(data); }
Evaluation Trainer::evaluate(SampleSource& data) { return impl_->evaluate(data); }
std::vector<float> Trainer::predict(std::span<const float> features) { return impl_->predict(features); }
std::vector<float> Trainer::predict(SampleSource& data) { return impl_->predict(data); }
std::int64_t Trainer::outputs() const { return impl_->outputs(); }
std::string Trainer::weights_hash() { return impl_->weights_hash(); }
std::vector<std::uint8_t> Trainer::save_state() { return impl_->save_state(); }
void Trainer::load_state(std::span<const std::uint8_t> bytes) { impl_->load_state(bytes); }
const Network& Trainer::network() const { return impl_->network(); }
const TrainerConfig& Trainer::config() const { return impl_->config(); }
void Trainer::load_weights(const std::vector<std::pair<std::string, std::vector<float>>>& named) {
  impl_->load_weights(named);
}
std::vector<float> Trainer::values(const std::string& name) { return impl_->values(name); }
void Trainer::set_mask(const std::string& name, const std::vector<float>& mask) {
  impl_->set_mask(name, mask);
}

void Trainer::set_fake_quantization(const FakeQuantization& fq) { impl_->set_fake_quantization(fq); }
Backend& Trainer::backend() const { return *impl_->backend_; }

}  // namespace anneal
