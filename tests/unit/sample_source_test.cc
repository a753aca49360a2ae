// The trainer over SampleSources: with every block held it trains exactly as
// over arrays; with a window smaller than the blocks each epoch still visits
// every row once, reads only from the windows it announced, and is as
// deterministic and as exactly resumable as the full shuffle.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "anneal/error.h"
#include "anneal/sample_source.h"
#include "engine/data_order.h"
#include "test_util.h"

namespace anneal {
namespace {

struct Data {
  std::vector<float> x, y;
  std::int64_t width = 6;
};

Data blobs(std::size_t rows, std::uint32_t seed) {
  Data d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  d.x.resize(rows * std::size_t(d.width));
  d.y.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const int c = int(rng() % 3u);
    d.y[r] = float(c);
    for (std::int64_t j = 0; j < d.width; ++j) d.x[r * std::size_t(d.width) + std::size_t(j)] = float(c * (j % 3)) + normal(rng);
  }
  return d;
}

// A source over arrays that holds only the blocks it was told about, like
// a streaming one, and records what it was asked.
class WindowedSource final : public SampleSource {
 public:
  WindowedSource(const Data& data, std::int64_t block_rows, std::int64_t window) : data_(data), window_(window) {
    const auto rows = std::int64_t(data.y.size());
    for (std::int64_t r = 0; r < rows; r += block_rows) starts_.push_back(r);
    starts_.push_back(rows);
    shape_ = {data.width};
  }
  std::int64_t rows() const override { return std::int64_t(data_.y.size()); }
  const std::vector<std::int64_t>& sample_shape() const override { return shape_; }
  std::span<const std::int64_t> block_starts() const override { return starts_; }
  std::int64_t window_blocks() const override { return window_; }
  void will_read(std::span<const std::uint32_t> now, std::span<const std::uint32_t> next) override {
    held_.clear();
    held_.insert(now.begin(), now.end());
    held_.insert(next.begin(), next.end());
    max_held = std::max(max_held, held_.size());
    ++announcements;
  }
  void read(std::span<const std::uint32_t> rows, float* features, float* labels) override {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::uint32_t r = rows[i];
      const auto block = std::uint32_t(std::upper_bound(starts_.begin(), starts_.end(), std::int64_t(r)) - starts_.begin() - 1);
      if (!held_.count(block)) ++reads_outside;
      std::copy_n(data_.x.begin() + std::ptrdiff_t(r) * data_.width, data_.width, features + i * std::size_t(data_.width));
      labels[i] = data_.y[r];
      seen.push_back(r);
    }
  }
  std::size_t max_held = 0;
  int announcements = 0, reads_outside = 0;
  std::vector<std::uint32_t> seen;

 private:
  const Data& data_;
  std::int64_t window_;
  std::vector<std::int64_t> starts_, shape_;
  std::set<std::uint32_t> held_;
};

TrainerConfig mlp(std::int64_t epochs) {
  TrainerConfig c;
  c.layers = "dense(16) relu dense(3)";
  c.classes = 3;
  c.batch = 32;
  c.epochs = epochs;
  c.seed = 7;
  c.optimizer.kind = OptimizerKind::kAdam;
  c.optimizer.lr = 0.01f;
  return c;
}

TEST(EpochOrder, OneWindowIsTheFullShuffleAndEveryWindowingVisitsEachRowOnce) {
  const std::vector<std::int64_t> one{0, 1000};
  const std::vector<std::int64_t> ten{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000};
  std::vector<std::uint32_t> a(1000), b(1000), c(1000);
  engine::EpochOrder(one, 1, 5, 2).rows(0, 1000, a.data());
  engine::EpochOrder(ten, 10, 5, 2).rows(0, 1000, b.data());
  EXPECT_EQ(a, b) << "a window holding every block is the full shuffle, whatever the blocks";
  engine::EpochOrder windowed(ten, 3, 5, 2);
  ASSERT_EQ(windowed.windows(), 4);
  for (std::int64_t first = 0; first < 1000; first += 64) windowed.rows(first, std::min<std::int64_t>(64, 1000 - first), c.data() + first);
  std::vector<std::uint32_t> sorted = c;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  // Each window's positions hold exactly the rows of its blocks.
  std::int64_t position = 0;
  for (std::int64_t w = 0; w < windowed.windows(); ++w) {
    std::set<std::uint32_t> rows;
    for (std::uint32_t block : windowed.window_blocks(w))
      for (std::uint32_t r = block * 100; r < block * 100 + 100; ++r) rows.insert(r);
    for (std::size_t i = 0; i < rows.size(); ++i, ++position) {
      ASSERT_EQ(windowed.window_of(position), w);
      ASSERT_TRUE(rows.count(c[std::size_t(position)])) << "position " << position;
    }
  }
  // Another epoch, another order; the same epoch, the same order.
  std::vector<std::uint32_t> again(1000), other(1000);
  engine::EpochOrder(ten, 3, 5, 2).rows(0, 1000, again.data());
  engine::EpochOrder(ten, 3, 5, 3).rows(0, 1000, other.data());
  EXPECT_EQ(again, c);
  EXPECT_NE(other, c);
}

TEST(SampleSource, HoldingEveryBlockTrainsExactlyAsOverArrays) {
  const Data d = blobs(500, 1);
  NullReporter reporter;
  auto backend = test::cpu_backend(1);
  Trainer arrays(mlp(3), *backend, DataView{d.x, d.y, {d.width}}, std::nullopt, reporter);
  arrays.train();
  WindowedSource source(d, 64, 100);
  Trainer streamed(mlp(3), *backend, source, nullptr, reporter);
  streamed.train();
  EXPECT_EQ(arrays.weights_hash(), streamed.weights_hash());
  EXPECT_EQ(source.reads_outside, 0);
}

TEST(SampleSource, AWindowReadsOnlyAnnouncedBlocksVisitsEveryRowAndIsDeterministic) {
  const Data d = blobs(700, 2);
  NullReporter reporter;
  auto backend = test::cpu_backend(1);
  std::string first_hash;
  for (int round = 0; round < 2; ++round) {
    WindowedSource source(d, 50, 3);  // 14 blocks, windows of 3: never more than 6 held
    Trainer trainer(mlp(2), *backend, source, nullptr, reporter);
    trainer.train();
    EXPECT_EQ(source.reads_outside, 0);
    EXPECT_LE(source.max_held, 6u);
    EXPECT_GE(source.announcements, 2 * 5);
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<std::uint32_t> rows(source.seen.begin() + epoch * 700, source.seen.begin() + (epoch + 1) * 700);
      std::sort(rows.begin(), rows.end());
      for (std::uint32_t i = 0; i < 700; ++i) ASSERT_EQ(rows[i], i) << "epoch " << epoch;
    }
    if (round == 0) first_hash = trainer.weights_hash();
    else EXPECT_EQ(trainer.weights_hash(), first_hash);
  }
  // The windowed order is another order than the full shuffle's.
  WindowedSource whole(d, 50, 14);
  Trainer full(mlp(2), *backend, whole, nullptr, reporter);
  full.train();
  EXPECT_NE(full.weights_hash(), first_hash);
}

TEST(SampleSource, AWindowedRunResumesExactlyMidWindow) {
  const Data d = blobs(640, 3);
  NullReporter reporter;
  auto backend = test::cpu_backend(1);
  WindowedSource a(d, 40, 2);
  Trainer straight(mlp(2), *backend, a, nullptr, reporter);
  straight.train();
  for (std::uint64_t stop : {1u, 7u, 20u, 23u}) {
    WindowedSource first_source(d, 40, 2);
    Trainer first(mlp(2), *backend, first_source, nullptr, reporter);
    first.train(stop);
    const std::vector<std::uint8_t> state = first.save_state();
    WindowedSource second_source(d, 40, 2);
    Trainer second(mlp(2), *backend, second_source, nullptr, reporter);
    second.load_state(state);
    second.train();
    EXPECT_EQ(second.weights_hash(), straight.weights_hash()) << "stopped after step " << stop;
    EXPECT_EQ(second_source.reads_outside, 0);
  }
  // A state saved under another window is refused, not silently reordered.
  WindowedSource other(d, 40, 3);
  Trainer wrong(mlp(2), *backend, other, nullptr, reporter);
  WindowedSource saved_source(d, 40, 2);
  Trainer saved(mlp(2), *backend, saved_source, nullptr, reporter);
  saved.train(3);
  try {
    wrong.load_state(saved.save_state());
    FAIL() << "expected kUsage";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("window=2"), std::string::npos) << e.what();
  }
}

TEST(SampleSource, EvaluationReadsInRowOrderAWindowAtATimeAndBadBatchesNameTheRow) {
  const Data d = blobs(300, 4);
  NullReporter reporter;
  auto backend = test::cpu_backend(1);
  WindowedSource train(d, 30, 2);
  Trainer trainer(mlp(1), *backend, train, nullptr, reporter);
  trainer.train();
  WindowedSource eval(d, 30, 2);
  const Evaluation e = trainer.evaluate(eval);
  EXPECT_EQ(e.rows, 300u);
  EXPECT_EQ(eval.reads_outside, 0);
  EXPECT_TRUE(std::is_sorted(eval.seen.begin(), eval.seen.end()));
  const Evaluation arrays = trainer.evaluate(DataView{d.x, d.y, {d.width}});
  EXPECT_EQ(e.loss, arrays.loss);
  WindowedSource predict(d, 30, 2);
  EXPECT_EQ(trainer.predict(predict), trainer.predict(d.x));

  Data bad = d;
  bad.y[123] = 5;  // not a class
  WindowedSource bad_source(bad, 30, 2);
  try {
    trainer.evaluate(bad_source);
    FAIL() << "expected kBadData";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kBadData);
    EXPECT_NE(std::string(err.what()).find("row 124"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace anneal
