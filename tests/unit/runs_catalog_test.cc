// Catalog records of training (store/runs.cc): runs and their status,
// epoch metrics, checkpoints released beyond keep (the best kept), models
// numbered per name, and gc keeping exactly what runs and models own.
#include <gtest/gtest.h>

#include "anneal/catalog_runs.h"
#include "anneal/error.h"
#include "anneal/maintenance.h"
#include "test_util.h"

namespace anneal {
namespace {

namespace fs = std::filesystem;

class RunsCatalogTest : public ::testing::Test {
 protected:
  void SetUp() override { test::init_store_with_dataset(root(), "iris", "iris.csv"); }
  fs::path root() const { return dir_.path() / "store"; }
  test::TempDir dir_;
  NullReporter reporter_;
};

std::string bytes_of(char c, std::size_t n) { return std::string(n, c); }

TEST_F(RunsCatalogTest, RunLifecycle) {
  Store store = Store::open(root());
  RunRecord run = create_run(store, "iris-mlp", {"iris", 1}, "name = iris-mlp\n", "host1");
  EXPECT_EQ(run.label(), "run-1");
  EXPECT_EQ(run.status, RunStatus::kRunning);
  EXPECT_EQ(run.dataset, "iris@v1");
  EXPECT_TRUE(run.ended_at.empty());
  record_epoch(store, run.id, {1, {{"train_loss", 0.5}, {"val_accuracy", 0.8}}});
  record_epoch(store, run.id, {2, {{"train_loss", 0.25}}});
  record_epoch(store, run.id, {2, {{"train_loss", 0.2}}});  // a resumed run recomputes epoch 2
  auto epochs = run_epochs(store, run.id);
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_EQ(epochs[1].values.size(), 1u);
  EXPECT_DOUBLE_EQ(epochs[1].values[0].second, 0.2);
  end_run(store, run.id, RunStatus::kFailed, "out of memory", {{"step", 3}});
  RunRecord failed = find_run(store, run.id);
  EXPECT_EQ(failed.status, RunStatus::kFailed);
  EXPECT_EQ(failed.error, "out of memory");
  EXPECT_FALSE(failed.ended_at.empty());
  reopen_run(store, run.id);
  EXPECT_EQ(find_run(store, run.id).status, RunStatus::kRunning);
  EXPECT_TRUE(find_run(store, run.id).error.empty());
  EXPECT_THROW(find_run(store, 99), Error);
  EXPECT_THROW(create_run(store, "x", {"iris", 5}, "", "h"), Error);
  EXPECT_EQ(parse_run_id("run-12"), 12);
  EXPECT_EQ(parse_run_id("7"), 7);
  EXPECT_THROW(parse_run_id("run-"), Error);
  EXPECT_THROW(parse_run_id("abc"), Error);
}

TEST_F(RunsCatalogTest, CheckpointsBeyondKeepAreReleasedButNotTheBest) {
  Store store = Store::open(root());
  RunRecord run = create_run(store, "m", {"iris", 1}, "", "h");
  // Scores: lower is better; step 20 is the best.
  const double scores[] = {0.9, 0.1, 0.5, 0.4, 0.3};
  for (int i = 0; i < 5; ++i)
    save_checkpoint(store, run.id, (i + 1) * 10, bytes_of(static_cast<char>('a' + i), 100000 + i), scores[i], 2);
  auto kept = run_checkpoints(store, run.id);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].step, 20);  // the best
  EXPECT_EQ(kept[1].step, 40);
  EXPECT_EQ(kept[2].step, 50);
  EXPECT_EQ(read_checkpoint(store, kept[2]), bytes_of('e', 100004));
  // The rotation removed the released checkpoints' blobs and objects
  // itself (no one held the gc lock): gc finds nothing left of them.
  GcReport report = gc(store, /*dry_run=*/true, reporter_);
  EXPECT_EQ(report.blobs_removed, 0u);
  EXPECT_EQ(report.objects_removed, 0u);
  for (const auto& c : run_checkpoints(store, run.id)) EXPECT_NO_THROW(read_checkpoint(store, c));
  EXPECT_TRUE(fsck(store, reporter_).ok());
}

TEST_F(RunsCatalogTest, RotationLeavesReleasedObjectsToGcWhileTheGcLockIsHeld) {
  Store store = Store::open(root());
  RunRecord run = create_run(store, "m", {"iris", 1}, "", "h");
  save_checkpoint(store, run.id, 10, bytes_of('a', 100000), std::nullopt, 1);
  SavedCheckpoint second;
  {
    // Another process's import holds the writer lock shared: the rotation
    // must neither wait for it nor remove objects under it.
    FileLock importer(root() / "locks" / "gc.lock", FileLock::Mode::kShared);
    second = save_checkpoint(store, run.id, 20, bytes_of('b', 100000), std::nullopt, 1);
  }
  EXPECT_TRUE(second.reclaimed.deferred);
  EXPECT_EQ(second.reclaimed.objects_removed, 0u);
  EXPECT_GE(gc(store, /*dry_run=*/true, reporter_).blobs_removed, 1u);  // left for gc
  SavedCheckpoint third = save_checkpoint(store, run.id, 30, bytes_of('c', 100000), std::nullopt, 1);
  EXPECT_FALSE(third.reclaimed.deferred);
  EXPECT_EQ(third.reclaimed.blobs_removed, 1u);  // step 20's; step 10's waits for gc
  EXPECT_GE(third.reclaimed.objects_removed, 1u);
  EXPECT_EQ(read_checkpoint(store, third.checkpoint), bytes_of('c', 100000));
  EXPECT_TRUE(fsck(store, reporter_).ok());
}

TEST_F(RunsCatalogTest, ModelsAreNumberedPerNameAndMarkTheRunSucceeded) {
  Store store = Store::open(root());
  RunRecord a = create_run(store, "iris-mlp", {"iris", 1}, "", "h");
  RunRecord b = create_run(store, "iris-mlp", {"iris", 1}, "", "h");
  ModelRecord v1 = register_model(store, a.id, "iris-mlp", "model bytes A", {{"seed", 1}},
                                  {{"test_accuracy", 0.9}}, {{"samples_per_s", 10.0}});
  ModelRecord v2 = register_model(store, b.id, "iris-mlp", "model bytes B", {{"seed", 2}},
                                  {{"test_accuracy", 0.95}}, {});
  EXPECT_EQ(v1.ref(), "iris-mlp@v1");
  EXPECT_EQ(v2.ref(), "iris-mlp@v2");
  EXPECT_EQ(find_run(store, a.id).status, RunStatus::kSucceeded);
  EXPECT_EQ(find_run(store, a.id).model, "iris-mlp@v1");
  EXPECT_EQ(find_model(store, parse_model_ref("iris-mlp")).version, 2);
  EXPECT_EQ(find_model(store, parse_model_ref("iris-mlp@latest")).version, 2);
  EXPECT_EQ(find_model(store, parse_model_ref("iris-mlp@v1")).lineage["seed"], 1);
  EXPECT_EQ(read_model(store, find_model(store, parse_model_ref("iris-mlp@v1"))), "model bytes A");
  EXPECT_THROW(find_model(store, parse_model_ref("iris-mlp@v3")), Error);
  EXPECT_THROW(find_model(store, parse_model_ref("nope")), Error);
  EXPECT_EQ(list_models(store).size(), 2u);
  gc(store, false, reporter_);
  EXPECT_EQ(read_model(store, v2), "model bytes B");  // gc keeps what models own
}

TEST_F(RunsCatalogTest, RunLockIsExclusive) {
  Store store = Store::open(root());
  FileLock first = try_lock_run(store, 1);
  EXPECT_TRUE(first.held());
  // flock is per open file description: a second open in this process conflicts too.
  FileLock second = try_lock_run(store, 1);
  EXPECT_FALSE(second.held());
  EXPECT_TRUE(try_lock_run(store, 2).held());
}

}  // namespace
}  // namespace anneal
