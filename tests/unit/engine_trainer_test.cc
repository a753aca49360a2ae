// The Trainer end to end on small synthetic tasks: it learns, it is
// deterministic, it resumes bit-exactly from saved state, bf16 lands near
// fp32, and every loss / optimizer / schedule trains.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "anneal/error.h"
#include "test_util.h"
#include "anneal/trainer.h"

namespace anneal {
namespace {

struct Dataset {
  std::vector<float> x, y;
  std::vector<std::int64_t> shape;
  DataView view() const { return DataView{x, y, shape}; }
};

// `classes` Gaussian blobs around random prototypes: learnable, not trivial.
Dataset blobs(std::size_t rows, std::vector<std::int64_t> shape, int classes, std::uint32_t seed,
              float noise = 1.0f) {
  std::int64_t width = 1;
  for (auto d : shape) width *= d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::mt19937 proto_rng(1234);  // same prototypes for train and validation
  std::vector<float> protos(std::size_t(classes * width));
  for (float& p : protos) p = normal(proto_rng);
  Dataset d;
  d.shape = shape;
  d.x.resize(rows * std::size_t(width));
  d.y.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const int c = int(rng() % unsigned(classes));
    d.y[r] = float(c);
    for (std::int64_t j = 0; j < width; ++j)
      d.x[r * std::size_t(width) + std::size_t(j)] = protos[std::size_t(c * width + j)] + noise * normal(rng);
  }
  return d;
}

class RecordingReporter final : public Reporter {
 public:
  void note(std::string_view m) override {
    std::lock_guard lock(mu_);
    notes.emplace_back(m);
  }
  void progress(std::string_view, std::uint64_t, std::uint64_t) override {
    std::lock_guard lock(mu_);
    ++progress_calls;
  }
  std::vector<std::string> notes;
  int progress_calls = 0;

 private:
  std::mutex mu_;
};

TrainerConfig mlp_config() {
  TrainerConfig c;
  c.layers = "dense(32) relu dense(3)";
  c.classes = 3;
  c.batch = 16;
  c.epochs = 3;
  c.seed = 42;
  c.optimizer.lr = 1e-2f;
  return c;
}

TEST(Trainer, OverfitsATinyBatch) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  Dataset d;
  d.shape = {10};
  for (int i = 0; i < 32 * 10; ++i) d.x.push_back(normal(rng));
  for (int i = 0; i < 32; ++i) d.y.push_back(float(rng() % 4));  // random labels: memorize
  TrainerConfig c;
  c.layers = "dense(64) relu dense(64) relu dense(4)";
  c.classes = 4;
  c.batch = 32;
  c.epochs = 300;
  c.optimizer.lr = 1e-2f;
  NullReporter reporter;
  test::CpuTrainer t(c, d.view(), std::nullopt, reporter);
  EXPECT_TRUE(t.train());
  EXPECT_GT(t.history().front().train_loss, 1.0);
  EXPECT_LT(t.history().back().train_loss, 0.02);
  EXPECT_EQ(t.history().back().train_accuracy, 1.0);
  const Evaluation e = t.evaluate(d.view());
  EXPECT_LT(e.loss, 0.02);
  EXPECT_EQ(e.accuracy, 1.0);
}

TEST(Trainer, LearnsAndReportsEveryEpoch) {
  const Dataset train = blobs(600, {20}, 3, 1), val = blobs(200, {20}, 3, 2);
  RecordingReporter reporter;
  test::CpuTrainer t(mlp_config(), train.view(), val.view(), reporter);
  t.train();
  ASSERT_EQ(t.history().size(), 3u);
  EXPECT_EQ(t.step(), 3 * t.steps_per_epoch());
  EXPECT_EQ(t.steps_per_epoch(), (600 + 15) / 16);
  EXPECT_TRUE(t.history().back().has_validation);
  EXPECT_GT(t.history().back().val_accuracy, 0.95);
  EXPECT_LT(t.history().back().train_loss, t.history().front().train_loss);
  ASSERT_EQ(reporter.notes.size(), 3u);
  EXPECT_NE(reporter.notes[2].find("epoch 3/3"), std::string::npos) << reporter.notes[2];
  EXPECT_NE(reporter.notes[2].find("val_acc="), std::string::npos) << reporter.notes[2];
  EXPECT_GT(reporter.progress_calls, 0);

  const auto p = t.predict(std::span<const float>(val.x.data(), 5 * 20));
  ASSERT_EQ(p.size(), 15u);
  for (int r = 0; r < 5; ++r) EXPECT_NEAR(p[r * 3] + p[r * 3 + 1] + p[r * 3 + 2], 1.0f, 1e-5f);
}

TEST(Trainer, SameSeedSameWeightsOtherSeedOtherWeights) {
  const Dataset d = blobs(300, {12}, 3, 5);
  NullReporter reporter;
  TrainerConfig c = mlp_config();
  c.layers = "dense(32) relu dropout(0.2) dense(16) batchnorm relu dense(3)";
  auto run = [&](const TrainerConfig& config, int threads = 1) {
    test::CpuTrainer t(config, d.view(), std::nullopt, reporter, threads);
    t.train();
    return t.weights_hash();
  };
  const std::string a = run(c), b = run(c);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 64u);
  TrainerConfig other = c;
  other.seed = 43;
  EXPECT_NE(run(other), a);
  // Thread count is part of the determinism contract; each count is stable.
  EXPECT_EQ(run(c, 2), run(c, 2));
}

// Train N steps, save, restore into a fresh Trainer, continue: the weights
// must be bitwise those of an uninterrupted run. Exercises dropout (RNG
// position), batch norm (running stats), grad accumulation, a partial last
// batch, clipping, and a warmup+cosine schedule.
void expect_exact_resume(TrainerConfig c, const Dataset& train, const Dataset& val,
                         std::uint64_t stop_after) {
  NullReporter reporter;
  test::CpuTrainer uninterrupted(c, train.view(), val.view(), reporter);
  uninterrupted.train();
  const std::string expected = uninterrupted.weights_hash();

  std::vector<std::uint8_t> state;
  {
    test::CpuTrainer first(c, train.view(), val.view(), reporter);
    EXPECT_FALSE(first.train(stop_after));
    EXPECT_EQ(first.step(), std::int64_t(stop_after));
    state = first.save_state();
  }
  test::CpuTrainer resumed(c, train.view(), val.view(), reporter);
  EXPECT_NE(resumed.weights_hash(), expected);
  resumed.load_state(state);
  EXPECT_EQ(resumed.step(), std::int64_t(stop_after));
  EXPECT_TRUE(resumed.train());
  EXPECT_EQ(resumed.weights_hash(), expected);
  ASSERT_EQ(resumed.history().size(), uninterrupted.history().size());
  for (std::size_t i = 0; i < resumed.history().size(); ++i) {
    EXPECT_EQ(resumed.history()[i].train_loss, uninterrupted.history()[i].train_loss) << i;
    EXPECT_EQ(resumed.history()[i].val_loss, uninterrupted.history()[i].val_loss) << i;
    EXPECT_EQ(resumed.history()[i].lr, uninterrupted.history()[i].lr) << i;
  }
}

TEST(Trainer, ResumesBitExactlyMidEpoch) {
  const Dataset train = blobs(250, {12}, 3, 7), val = blobs(64, {12}, 3, 8);
  TrainerConfig c = mlp_config();
  c.layers = "dense(32) relu dropout(0.3) dense(16) batchnorm relu dense(3)";
  c.batch = 32;  // 250 rows: a partial last batch of 26
  c.grad_accum = 2;
  c.epochs = 3;
  c.optimizer.kind = OptimizerKind::kAdamW;
  c.optimizer.weight_decay = 0.01f;
  c.optimizer.schedule = ScheduleKind::kCosine;
  c.optimizer.warmup_steps = 3;
  c.optimizer.grad_clip = 1.0f;
  expect_exact_resume(c, train, val, 5);  // mid epoch 2 (4 steps per epoch)
  c.optimizer.kind = OptimizerKind::kSgd;
  c.optimizer.momentum = 0.9f;
  c.optimizer.nesterov = true;
  expect_exact_resume(c, train, val, 4);  // exactly at an epoch boundary
}

TEST(Trainer, CnnResumesBitExactly) {
  const Dataset train = blobs(96, {1, 8, 8}, 3, 9), val = blobs(32, {1, 8, 8}, 3, 10);
  TrainerConfig c = mlp_config();
  c.layers = "conv(4,3,pad=1) relu maxpool(2) conv(8,3,pad=1) batchnorm relu avgpool(2) flatten dropout(0.2) dense(3)";
  c.batch = 16;
  c.epochs = 2;
  expect_exact_resume(c, train, val, 7);
}

TEST(Trainer, LoadStateRejectsOtherConfigsAndDamage) {
  const Dataset d = blobs(64, {12}, 3, 11);
  NullReporter reporter;
  TrainerConfig c = mlp_config();
  test::CpuTrainer t(c, d.view(), std::nullopt, reporter);
  t.train(2);
  const auto state = t.save_state();
  TrainerConfig other = c;
  other.layers = "dense(16) relu dense(3)";
  test::CpuTrainer u(other, d.view(), std::nullopt, reporter);
  try {
    u.load_state(state);
    FAIL() << "accepted another config's state";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
  }
  test::CpuTrainer v(c, d.view(), std::nullopt, reporter);
  const std::string before = v.weights_hash();
  std::vector<std::uint8_t> truncated(state.begin(), state.end() - 10);
  try {
    v.load_state(truncated);
    FAIL() << "accepted truncated state";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCorrupt) << e.what();
  }
  EXPECT_EQ(v.weights_hash(), before);  // a failed restore changes nothing
  v.load_state(state);
  EXPECT_EQ(v.weights_hash(), t.weights_hash());
}

TEST(Trainer, Bf16LandsCloseToFp32) {
  if (!test::cpu_backend()->capabilities().bf16)
    GTEST_SKIP() << "the CPU lacks avx512_core_bf16 (oneDNN isa " << test::cpu_backend()->capabilities().isa << ")";
  const Dataset train = blobs(800, {32}, 4, 12, 1.5f), val = blobs(400, {32}, 4, 13, 1.5f);
  NullReporter reporter;
  TrainerConfig c = mlp_config();
  c.layers = "dense(64) relu dense(32) relu dense(4)";
  c.classes = 4;
  c.batch = 32;
  c.epochs = 4;
  c.optimizer.lr = 3e-3f;
  test::CpuTrainer fp32(c, train.view(), val.view(), reporter);
  fp32.train();
  c.precision = Precision::kBf16;
  test::CpuTrainer bf16(c, train.view(), val.view(), reporter);
  bf16.train();
  EXPECT_NE(fp32.weights_hash(), bf16.weights_hash());  // it really ran in bf16
  const auto& a = fp32.history().back();
  const auto& b = bf16.history().back();
  EXPECT_GT(a.val_accuracy, 0.9);
  EXPECT_NEAR(b.val_accuracy, a.val_accuracy, 0.03);
  EXPECT_NEAR(b.val_loss, a.val_loss, 0.05 + 0.1 * a.val_loss);
}

TEST(Trainer, CnnBf16Trains) {
  if (!test::cpu_backend()->capabilities().bf16)
    GTEST_SKIP() << "the CPU lacks avx512_core_bf16 (oneDNN isa " << test::cpu_backend()->capabilities().isa << ")";
  const Dataset train = blobs(256, {1, 12, 12}, 3, 14, 1.5f), val = blobs(128, {1, 12, 12}, 3, 15, 1.5f);
  NullReporter reporter;
  TrainerConfig c = mlp_config();
  c.layers = "conv(8,3,pad=1) relu maxpool(2) conv(8,3,pad=1) relu maxpool(2) flatten dense(16) relu dense(3)";
  c.precision = Precision::kBf16;
  c.batch = 32;
  c.epochs = 4;
  c.optimizer.lr = 3e-3f;
  test::CpuTrainer t(c, train.view(), val.view(), reporter);
  t.train();
  EXPECT_GT(t.history().back().val_accuracy, 0.9);
}

struct OptimizerCase {
  OptimizerKind kind;
  ScheduleKind schedule;
  float lr, momentum;
  bool nesterov;
};

class EveryOptimizer : public ::testing::TestWithParam<OptimizerCase> {};

TEST_P(EveryOptimizer, Trains) {
  const OptimizerCase& oc = GetParam();
  const Dataset train = blobs(400, {16}, 3, 16), val = blobs(200, {16}, 3, 17);
  NullReporter reporter;
  TrainerConfig c = mlp_config();
  c.epochs = 4;
  c.optimizer.kind = oc.kind;
  c.optimizer.schedule = oc.schedule;
  c.optimizer.step_size = 30;
  c.optimizer.gamma = 0.5f;
  c.optimizer.lr = oc.lr;
  c.optimizer.momentum = oc.momentum;
  c.optimizer.nesterov = oc.nesterov;
  c.optimizer.weight_decay = 1e-4f;
  test::CpuTrainer t(c, train.view(), val.view(), reporter);
  t.train();
  EXPECT_LT(t.history().back().train_loss, 0.5 * t.history().front().train_loss);
  EXPECT_GT(t.history().back().val_accuracy, 0.95);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, EveryOptimizer,
    ::testing::Values(OptimizerCase{OptimizerKind::kSgd, ScheduleKind::kConstant, 0.05f, 0.0f, false},
                      OptimizerCase{OptimizerKind::kSgd, ScheduleKind::kStep, 0.05f, 0.9f, false},
                      OptimizerCase{OptimizerKind::kSgd, ScheduleKind::kCosine, 0.05f, 0.9f, true},
                      OptimizerCase{OptimizerKind::kAdam, ScheduleKind::kStep, 1e-2f, 0.0f, false},
                      OptimizerCase{OptimizerKind::kAdamW, ScheduleKind::kCosine, 1e-2f, 0.0f, false}));

TEST(Schedules, WarmupStepAndCosine) {
  OptimizerConfig c;
  c.lr = 1.0f;
  c.warmup_steps = 4;
  EXPECT_FLOAT_EQ(scheduled_lr(c, 0, 100), 0.25f);
  EXPECT_FLOAT_EQ(scheduled_lr(c, 3, 100), 1.0f);
  EXPECT_FLOAT_EQ(scheduled_lr(c, 50, 100), 1.0f);
  c.schedule = ScheduleKind::kStep;
  c.step_size = 10;
  c.gamma = 0.5f;
  EXPECT_FLOAT_EQ(scheduled_lr(c, 13, 100), 1.0f);
  EXPECT_FLOAT_EQ(scheduled_lr(c, 14, 100), 0.5f);
  EXPECT_FLOAT_EQ(scheduled_lr(c, 34, 100), 0.125f);
  c.schedule = ScheduleKind::kCosine;
  c.min_lr = 0.1f;
  EXPECT_FLOAT_EQ(scheduled_lr(c, 4, 100), 1.0f);
  EXPECT_NEAR(scheduled_lr(c, 99, 100), 0.1f, 1e-6f);
  EXPECT_NEAR(scheduled_lr(c, 4 + 95 / 2, 100), 0.55f, 0.02f);
}

TEST(Trainer, RegressionLosses) {
  // y = a·x + noise: mse and mae both fit it.
  std::mt19937 rng(18);
  std::normal_distribution<float> normal;
  Dataset d;
  d.shape = {8};
  std::vector<float> a(8);
  for (float& v : a) v = normal(rng);
  for (int r = 0; r < 512; ++r) {
    float y = 0;
    for (int j = 0; j < 8; ++j) {
      const float v = normal(rng);
      d.x.push_back(v);
      y += a[std::size_t(j)] * v;
    }
    d.y.push_back(y + 0.05f * normal(rng));
  }
  NullReporter reporter;
  for (LossKind loss : {LossKind::kMeanSquaredError, LossKind::kMeanAbsoluteError}) {
    TrainerConfig c;
    c.layers = "dense(32) tanh dense(1)";
    c.loss = loss;
    c.batch = 32;
    c.epochs = 20;
    c.optimizer.lr = 1e-2f;
    test::CpuTrainer t(c, d.view(), std::nullopt, reporter);
    t.train();
    EXPECT_LT(t.history().back().train_loss, 0.1 * t.history().front().train_loss) << loss_name(loss);
    const auto p = t.predict(std::span<const float>(d.x.data(), 8));
    ASSERT_EQ(p.size(), 1u);
    EXPECT_NEAR(p[0], d.y[0], 0.5f) << loss_name(loss);
  }
}

TEST(Trainer, BinaryCrossEntropy) {
  const Dataset blob = blobs(400, {10}, 2, 19);
  NullReporter reporter;
  TrainerConfig c;
  c.layers = "dense(16) gelu layernorm dense(1)";
  c.loss = LossKind::kBinaryCrossEntropy;
  c.batch = 32;
  c.epochs = 5;
  c.optimizer.lr = 1e-2f;
  test::CpuTrainer t(c, blob.view(), blob.view(), reporter);
  t.train();
  EXPECT_GT(t.history().back().val_accuracy, 0.95);
  const auto p = t.predict(std::span<const float>(blob.x.data(), 10));
  EXPECT_NEAR(p[0], blob.y[0], 0.3f);
}

TEST(Trainer, EarlyStopsWhenTheMetricStalls) {
  const Dataset train = blobs(64, {8}, 3, 20), val = blobs(32, {8}, 3, 21);
  NullReporter reporter;
  TrainerConfig c = mlp_config();
  c.batch = 64;  // one step per epoch
  c.epochs = 10;
  c.optimizer.lr = 1e-12f;  // updates below fp32 resolution: val_loss never changes
  c.early_stop = EarlyStopMetric::kValLoss;
  c.patience = 2;
  test::CpuTrainer t(c, train.view(), val.view(), reporter);
  EXPECT_TRUE(t.train());
  EXPECT_TRUE(t.stopped_early());
  EXPECT_EQ(t.history().size(), 3u);
}

// Few noisy rows, a wide network and a high learning rate: the validation
// loss bottoms out early and climbs as the network memorizes the noise.
struct Overfitting {
  Dataset train = blobs(48, {8}, 3, 30, 3.0f), val = blobs(200, {8}, 3, 31, 3.0f);
  TrainerConfig config() const {
    TrainerConfig c = mlp_config();
    c.layers = "dense(128) relu dense(128) relu dense(3)";
    c.batch = 16;
    c.epochs = 40;
    c.optimizer.kind = OptimizerKind::kAdam;
    c.optimizer.lr = 1e-2f;
    c.early_stop = EarlyStopMetric::kValLoss;
    c.patience = 5;
    return c;
  }
};

std::size_t best_epoch_index(const std::vector<EpochMetrics>& history) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < history.size(); ++i)
    if (history[i].val_loss < history[best].val_loss) best = i;
  return best;
}

TEST(Trainer, RestoreBestEndsWithTheBestEpochsWeights) {
  const Overfitting task;
  TrainerConfig c = task.config();
  RecordingReporter reporter;
  test::CpuTrainer last(c, task.train.view(), task.val.view(), reporter);
  last.train();
  ASSERT_TRUE(last.stopped_early());
  const std::size_t best = best_epoch_index(last.history());
  ASSERT_LT(best + 1, last.history().size()) << "the last epoch was the best: the task does not overfit";
  // Without restore_best the model is the last epoch's: worse on validation.
  EXPECT_GT(last.evaluate(task.val.view()).loss, last.history()[best].val_loss);

  c.restore_best = true;
  test::CpuTrainer restored(c, task.train.view(), task.val.view(), reporter);
  restored.train();
  ASSERT_EQ(restored.history().size(), last.history().size());
  // The same validation loss as the best epoch measured, bit for bit.
  EXPECT_EQ(restored.evaluate(task.val.view()).loss, restored.history()[best].val_loss);
  // And the same weights as a run that simply stopped after that epoch.
  TrainerConfig stop_there = task.config();
  stop_there.early_stop = EarlyStopMetric::kNone;
  stop_there.epochs = static_cast<std::int64_t>(best) + 1;
  NullReporter quiet;
  test::CpuTrainer reference(stop_there, task.train.view(), task.val.view(), quiet);
  reference.train();
  EXPECT_EQ(restored.weights_hash(), reference.weights_hash());
  bool noted = false;
  for (const std::string& n : reporter.notes)
    noted |= n.find("restored the weights of epoch " + std::to_string(best + 1)) != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Trainer, RestoreBestSurvivesACheckpointAndResume) {
  const Overfitting task;
  TrainerConfig c = task.config();
  c.restore_best = true;
  NullReporter reporter;
  test::CpuTrainer uninterrupted(c, task.train.view(), task.val.view(), reporter);
  uninterrupted.train();
  const std::size_t best = best_epoch_index(uninterrupted.history());
  // Stop after the best epoch, before early stopping fires: the best
  // epoch's weights live only in the saved state from here on.
  test::CpuTrainer first(c, task.train.view(), task.val.view(), reporter);
  first.train(static_cast<std::uint64_t>(first.steps_per_epoch()) * (best + 2));
  ASSERT_FALSE(first.finished());
  const std::vector<std::uint8_t> state = first.save_state();
  test::CpuTrainer resumed(c, task.train.view(), task.val.view(), reporter);
  resumed.load_state(state);
  resumed.train();
  EXPECT_EQ(resumed.weights_hash(), uninterrupted.weights_hash());
  // Damage in the best epoch's values is refused, not trained on.
  std::vector<std::uint8_t> truncated(state.begin(), state.end() - 4);
  test::CpuTrainer damaged(c, task.train.view(), task.val.view(), reporter);
  EXPECT_THROW(damaged.load_state(truncated), Error);
}

TEST(Trainer, ReadsAVersion1StateWithoutABestEpoch) {
  // Version 1 is version 2 less the tail: best epoch 0, no values.
  const Dataset d = blobs(64, {12}, 3, 11);
  NullReporter reporter;
  TrainerConfig c = mlp_config();
  test::CpuTrainer t(c, d.view(), std::nullopt, reporter);
  t.train(2);
  std::vector<std::uint8_t> state = t.save_state();
  ASSERT_GT(state.size(), 16u);
  state.resize(state.size() - 16);  // i64 best epoch = 0, u64 count = 0
  state[8] = 1;                     // the u32 version after the 8-byte magic
  test::CpuTrainer v1(c, d.view(), std::nullopt, reporter);
  v1.load_state(state);
  EXPECT_EQ(v1.weights_hash(), t.weights_hash());
  state[8] = 3;
  EXPECT_THROW(v1.load_state(state), Error);
}

TEST(Trainer, GradAccumulationMatchesOneBigBatch) {
  // With no batch-dependent layers, 4 micro-batches of 8 accumulate to the
  // gradient of one batch of 32 (up to summation order).
  const Dataset d = blobs(32, {6}, 3, 22);
  NullReporter reporter;
  TrainerConfig c;
  c.layers = "dense(8) tanh dense(3)";
  c.classes = 3;
  c.epochs = 5;
  c.optimizer.kind = OptimizerKind::kSgd;
  c.optimizer.lr = 0.1f;
  c.batch = 32;
  test::CpuTrainer big(c, d.view(), std::nullopt, reporter);
  big.train();
  c.batch = 8;
  c.grad_accum = 4;
  test::CpuTrainer accumulated(c, d.view(), std::nullopt, reporter);
  accumulated.train();
  EXPECT_EQ(accumulated.step(), big.step());
  const auto pa = big.predict(d.x), pb = accumulated.predict(d.x);
  for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_NEAR(pa[i], pb[i], 1e-4f) << i;
}

}  // namespace
}  // namespace anneal
