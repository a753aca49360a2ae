// Data-parallel training (Trainer with a Communicator, trainer.h) across
// real processes: the ctest entries mpi.data_parallel_{1,2,3}_ranks run
// these cases under mpirun; outside mpirun they report skipped.
//
//   * every rank ends with the same weights, bit for bit;
//   * one rank under mpirun trains exactly the single-process weights;
//   * N ranks match the single process at the same global batch within
//     rounding (the ranks' gradient sums are added in another order than
//     one batch's), and the epoch metrics are the whole batch's;
//   * a checkpoint taken mid-epoch by N ranks resumes to the same weights,
//     and holds every rank's share of the epoch's totals, so it also goes
//     on in a single process (N changed on resume).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "anneal/communicator.h"
#include "anneal/report.h"
#include "anneal/sample_source.h"
#include "anneal/trainer.h"
#include "test_util.h"

namespace anneal {
namespace {

// Three separable Gaussian classes in 8 features; 301 rows, so that the
// last batch of 16 is short (13 rows) and splits unevenly across ranks.
struct Blobs {
  std::vector<float> x, y;
};
Blobs blobs(std::int64_t rows = 301, std::int64_t width = 8) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Blobs d;
  d.x.resize(std::size_t(rows * width));
  d.y.resize(std::size_t(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    const int c = int(r % 3);
    d.y[std::size_t(r)] = float(c);
    for (std::int64_t j = 0; j < width; ++j)
      d.x[std::size_t(r * width + j)] = float((j % 3) == c ? 2 : 0) + 0.7f * normal(rng);
  }
  return d;
}

TrainerConfig config() {
  TrainerConfig c;
  c.layers = "dense(32) relu dense(16) tanh dense(3)";
  c.classes = 3;
  c.batch = 16;
  c.epochs = 4;
  c.seed = 7;
  c.optimizer.kind = OptimizerKind::kAdam;
  c.optimizer.lr = 0.01f;
  return c;
}

std::vector<float> all_weights(Trainer& t) {
  std::vector<float> out;
  for (const Parameter* p : t.network().parameters()) {
    const std::vector<float> v = t.values(p->name);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

class DataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!launched_by_mpi()) GTEST_SKIP() << "needs mpirun: ctest runs it as mpi.data_parallel_*";
    comm_ = make_communicator();
    backend_ = test::cpu_backend(1);
  }
  // rank 0's string on every rank
  std::string from_rank0(std::string s) {
    std::vector<std::byte> b(64, std::byte{0});
    std::memcpy(b.data(), s.data(), std::min<std::size_t>(s.size(), b.size()));
    comm_->broadcast(b, 0);
    return std::string(reinterpret_cast<const char*>(b.data()), strnlen(reinterpret_cast<const char*>(b.data()), 64));
  }
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Backend> backend_;
  NullReporter reporter_;
  Blobs data_ = blobs();
  ArraySource source_{data_.x, data_.y, {8}};
};

// With dropout too: each sample's mask is drawn by its place in the global
// batch, so a rank drops what the single process drops for the same rows.
TEST_F(DataParallel, EveryRankEndsWithTheSameWeightsAsTheSingleProcess) {
  for (const std::string layers : {"dense(32) relu dense(16) tanh dense(3)",
                                   "dense(32) relu dropout(0.3) dense(16) tanh dropout(0.2) dense(3)"}) {
    SCOPED_TRACE(layers);
    TrainerConfig c = config();
    c.layers = layers;
    Trainer parallel(c, *backend_, source_, nullptr, reporter_, comm_.get());
    parallel.train();
    const std::string hash = parallel.weights_hash();
    EXPECT_EQ(from_rank0(hash), hash) << "rank " << comm_->rank() << " holds other weights than rank 0";

    Trainer single(c, *backend_, source_, nullptr, reporter_);
    single.train();
    const std::vector<float> got = all_weights(parallel), want = all_weights(single);
    ASSERT_EQ(got.size(), want.size());
    if (comm_->size() == 1) {
      EXPECT_EQ(hash, single.weights_hash()) << "one rank under mpirun must be the single process, bit for bit";
    } else {
      // Rounding only: the same global batches, their gradient added in two
      // or three partial sums instead of one. 4 epochs of Adam let it grow
      // from ~1e-7 to this.
      double max_error = 0, max_weight = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        max_error = std::max(max_error, double(std::fabs(got[i] - want[i])));
        max_weight = std::max(max_weight, double(std::fabs(want[i])));
      }
      EXPECT_LT(max_error, 1e-3 * max_weight) << "N ranks drifted from the single process";
    }
    // The epoch metrics are the whole global batches', not this rank's share.
    ASSERT_EQ(parallel.history().size(), single.history().size());
    for (std::size_t e = 0; e < single.history().size(); ++e) {
      EXPECT_NEAR(parallel.history()[e].train_loss, single.history()[e].train_loss, 1e-4);
      EXPECT_NEAR(parallel.history()[e].train_accuracy, single.history()[e].train_accuracy, 2.0 / 301);
    }
  }
}

TEST_F(DataParallel, AMidEpochCheckpointResumesToTheUninterruptedWeights) {
  Trainer uninterrupted(config(), *backend_, source_, nullptr, reporter_, comm_.get());
  uninterrupted.train();

  Trainer first(config(), *backend_, source_, nullptr, reporter_, comm_.get());
  first.train(30);  // 19 steps an epoch: mid-way through the second
  const std::vector<std::uint8_t> state = first.save_state();
  Trainer resumed(config(), *backend_, source_, nullptr, reporter_, comm_.get());
  resumed.load_state(state);
  resumed.train();
  EXPECT_EQ(resumed.weights_hash(), uninterrupted.weights_hash());
  ASSERT_EQ(resumed.history().size(), uninterrupted.history().size());
  for (std::size_t e = 0; e < resumed.history().size(); ++e)
    EXPECT_EQ(resumed.history()[e].train_loss, uninterrupted.history()[e].train_loss) << "epoch " << e + 1;
}

// 289 rows in batches of 16: the last batch has one row, so every rank
// but one has none of it and contributes zero gradients to that step.
TEST_F(DataParallel, ARankWithNoRowsOfABatchContributesNothing) {
  const Blobs small = blobs(289);
  ArraySource source(small.x, small.y, {8});
  Trainer parallel(config(), *backend_, source, nullptr, reporter_, comm_.get());
  parallel.train();
  EXPECT_EQ(from_rank0(parallel.weights_hash()), parallel.weights_hash());
  Trainer single(config(), *backend_, source, nullptr, reporter_);
  single.train();
  const std::vector<float> got = all_weights(parallel), want = all_weights(single);
  double max_error = 0, max_weight = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    max_error = std::max(max_error, double(std::fabs(got[i] - want[i])));
    max_weight = std::max(max_weight, double(std::fabs(want[i])));
  }
  EXPECT_LT(max_error, 1e-3 * max_weight);
  EXPECT_NEAR(parallel.history().back().train_loss, single.history().back().train_loss, 1e-4);
}

// A checkpoint of N ranks goes on in one process (N changed on resume): the
// same position and totals, so it ends within rounding of the N-rank run.
TEST_F(DataParallel, ACheckpointOfNRanksResumesInOneProcess) {
  Trainer uninterrupted(config(), *backend_, source_, nullptr, reporter_, comm_.get());
  uninterrupted.train();
  Trainer first(config(), *backend_, source_, nullptr, reporter_, comm_.get());
  first.train(30);
  const std::vector<std::uint8_t> state = first.save_state();  // every rank calls it

  Trainer alone(config(), *backend_, source_, nullptr, reporter_);  // no communicator
  alone.load_state(state);
  EXPECT_EQ(alone.step(), 30);
  alone.train();
  const std::vector<float> got = all_weights(alone), want = all_weights(uninterrupted);
  ASSERT_EQ(got.size(), want.size());
  double max_error = 0, max_weight = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    max_error = std::max(max_error, double(std::fabs(got[i] - want[i])));
    max_weight = std::max(max_weight, double(std::fabs(want[i])));
  }
  if (comm_->size() == 1) {
    EXPECT_EQ(alone.weights_hash(), uninterrupted.weights_hash());
  } else {
    EXPECT_LT(max_error, 1e-3 * max_weight);
  }
  // The epoch the checkpoint cut through counts every rank's rows once.
  ASSERT_EQ(alone.history().size(), uninterrupted.history().size());
  for (std::size_t e = 0; e < alone.history().size(); ++e)
    EXPECT_NEAR(alone.history()[e].train_loss, uninterrupted.history()[e].train_loss, 1e-4) << "epoch " << e + 1;
}

// The gradient sums in buckets (TrainerConfig::allreduce_bucket_bytes):
// a bucket per parameter, the default, and one bucket for everything (the
// one-buffer sum after the whole backward pass) train the same bits, with
// gradient accumulation too (the sums start only in the step's last
// micro-batch, and a short last step has fewer micro-batches).
TEST_F(DataParallel, BucketsOfAnySizeTrainTheOneBufferBits) {
  for (const std::int64_t accum : {1, 3}) {
    SCOPED_TRACE("grad_accum = " + std::to_string(accum));
    std::string one_buffer;
    // One buffer; a bucket per parameter (each summed in place); 256 bytes,
    // so that the 8 x 32 first weight (1 KiB) is summed in place between
    // buckets of small gradients copied out and back; the default.
    for (const std::size_t bytes :
         {~std::size_t{0}, std::size_t{1}, std::size_t{256}, TrainerConfig::kDefaultAllreduceBucketBytes}) {
      TrainerConfig c = config();
      c.grad_accum = accum;
      c.epochs = 2;
      c.allreduce_bucket_bytes = bytes;
      Trainer t(c, *backend_, source_, nullptr, reporter_, comm_.get());
      t.train();
      const std::string hash = t.weights_hash();
      EXPECT_EQ(from_rank0(hash), hash) << "rank " << comm_->rank() << " holds other weights than rank 0";
      if (one_buffer.empty()) one_buffer = hash;
      EXPECT_EQ(hash, one_buffer) << "buckets of " << bytes << " bytes changed the bits";
    }
    if (comm_->size() == 1) {
      TrainerConfig c = config();
      c.grad_accum = accum;
      c.epochs = 2;
      Trainer single(c, *backend_, source_, nullptr, reporter_);
      single.train();
      EXPECT_EQ(single.weights_hash(), one_buffer);
    }
  }
}

// Keeps the notes a trainer reports.
class RecordingReporter final : public Reporter {
 public:
  void note(std::string_view message) override { text += std::string(message) + "\n"; }
  void progress(std::string_view, std::uint64_t, std::uint64_t) override {}
  std::string text;
};

// Records the trainer's calls to the communicator (passing them on).
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::vector<std::string> hosts() override { return inner_.hosts(); }
  void allreduce_sum(std::span<float> v) override { calls += 'A', inner_.allreduce_sum(v); }
  void allreduce_sum(std::span<double> v) override { calls += 'D', inner_.allreduce_sum(v); }
  SumRequest start_allreduce_sum(std::span<float> v) override {
    calls += 'S';
    started.push_back(v.data());
    return inner_.start_allreduce_sum(v);
  }
  void progress() override { calls += 'p', inner_.progress(); }
  void wait(SumRequest r) override { calls += 'W', inner_.wait(r); }
  void broadcast(std::span<std::byte> b, int root) override {
    inner_.broadcast(b, root);
    if (garble_broadcasts && b.size() > 8 && inner_.rank() != root) b[b.size() - 1] ^= std::byte{1};
  }
  void barrier() override { inner_.barrier(); }
  void send(std::span<const std::byte> b, int to) override { inner_.send(b, to); }
  std::vector<std::byte> receive(int from) override { return inner_.receive(from); }
  [[noreturn]] void abort(int code) override {
    inner_.abort(code);
    std::abort();
  }
  std::string calls;  // S start, p progress, W wait, A / D blocking sums
  std::vector<const float*> started;  // where each started sum's values lie
  bool garble_broadcasts = false;      // flip a bit of what ranks other than the root receive (not sizes: over 8 bytes)

 private:
  Communicator& inner_;
};

// The overlap itself: with a bucket per layer, a step starts each bucket
// as soon as backward has passed its layer, with progress calls between
// them while the layers below still run, and waits only after the last.
// dense(32) relu dense(16) tanh dense(3) builds 3 layers (the activations
// fused) of 2 parameters each, so a step starts two sums after each layer
// (S S p, three times), makes one more progress call after the backward
// pass, then waits for the 6 sums. With one bucket, it starts after the
// first layer's backward (the last to run).
TEST_F(DataParallel, BucketsStartWhileBackwardRuns) {
  if (comm_->size() == 1) GTEST_SKIP() << "one rank sums nothing";
  RecordingCommunicator recording(*comm_);
  TrainerConfig c = config();
  c.allreduce_bucket_bytes = 1;  // a bucket per parameter
  Trainer t(c, *backend_, source_, nullptr, reporter_, &recording);
  t.train(1);  // the first step: every rank has rows of it
  // D: the one check, before the first step, that the ranks lay the
  // gradients out alike.
  EXPECT_EQ(recording.calls, "D" "SSpSSpSSp" "p" "WWWWWW");
  // Each bucket holds one parameter, which the CPU backend lets the sum
  // run on where it lies, in its own layout: the started values are the
  // gradients' own storage, last parameter first, not a copy.
  const std::vector<Parameter*>& params = t.network().parameters();
  ASSERT_EQ(recording.started.size(), params.size());
  for (std::size_t k = 0; k < params.size(); ++k)
    EXPECT_EQ(recording.started[k], backend_->storage_view(params[params.size() - 1 - k]->grad).data)
        << "sum " << k << " is not summed in its gradient's storage";
  recording.calls.clear();
  recording.started.clear();

  c.allreduce_bucket_bytes = ~std::size_t{0};  // one bucket, after the whole backward pass
  Trainer one(c, *backend_, source_, nullptr, reporter_, &recording);
  one.train(1);
  EXPECT_EQ(recording.calls, "D" "ppSp" "p" "W");
}

// Ranks on different processors may lay gradients out differently; then
// none is summed in place (elements of one rank's layout would be added to
// other elements of another's), but as plain floats, to the same bits. A
// rank that receives another description of rank 0's layouts than its own
// (here, a flipped bit) stands for such a rank: every rank must then agree
// to copy, or they would send sums of different sizes.
TEST_F(DataParallel, RanksThatLayOutGradientsDifferentlySumPlainCopies) {
  if (comm_->size() == 1) GTEST_SKIP() << "one rank sums nothing";
  TrainerConfig c = config();
  c.allreduce_bucket_bytes = 1;  // every parameter alone, so in place where the layouts agree
  Trainer agreeing(c, *backend_, source_, nullptr, reporter_, comm_.get());
  agreeing.train();

  RecordingCommunicator recording(*comm_);
  recording.garble_broadcasts = true;
  RecordingReporter notes;
  Trainer t(c, *backend_, source_, nullptr, notes, &recording);
  t.train(1);  // the ranks compare layouts before the first step
  recording.garble_broadcasts = false;
  t.train();
  EXPECT_EQ(t.weights_hash(), agreeing.weights_hash()) << "the plain copies are not the in-place bits";
  const std::vector<Parameter*>& params = t.network().parameters();
  ASSERT_FALSE(recording.started.empty());
  for (const float* values : recording.started)
    for (Parameter* p : params)
      EXPECT_NE(values, backend_->storage_view(p->grad).data) << p->name << " was summed in place all the same";
  EXPECT_NE(notes.text.find("lay out gradients differently"), std::string::npos) << notes.text;
}

}  // namespace
}  // namespace anneal
