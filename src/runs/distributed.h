// One training run on N processes (`mpirun -np N anneal train`): rank 0
// owns the store and drives; the other ranks follow. Internal to src/runs/.
//
// The protocol over the Communicator (communicator.h), every step of it in
// the same order on every rank:
//   1. hosts(): every rank's host name, for the run's lineage;
//   2. rank 0 broadcasts the setup (a JSON blob): the run's config text, the
//      loss, classes and class weights fitted from the data, and the shape
//      of its training and validation sources (rows, sample shape, blocks,
//      window), so every rank builds the same Trainer and data order;
//   3. every rank calls save_state() (a collective) and rank 0 broadcasts
//      its bytes, which the others load: the same start, whether fresh,
//      warm-started or resumed from a checkpoint;
//   4. commands from rank 0, one broadcast each: train K steps, save a
//      checkpoint (a collective save_state(); rank 0 writes it), done.
// While training, each rank's reads go through a RemoteSource: it sends the
// row indices it needs to rank 0, whose ServedSource reads them from the
// store's rows and sends back features and labels. So the other ranks
// never open the store (nor need a shared filesystem); they hold no more
// than a batch of rows at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/communicator.h"
#include "anneal/report.h"
#include "anneal/sample_source.h"

namespace anneal {
class Trainer;
struct TrainerConfig;
}  // namespace anneal

namespace anneal::runs {

// A byte blob from rank `root` to every rank (its size first).
void broadcast_blob(Communicator& comm, std::vector<std::byte>& bytes, int root = 0);

// What rank 0 tells the followers to do next.
enum class FollowerCommand : std::uint8_t { kTrain = 1, kSave = 2, kDone = 3 };
// Rank 0: broadcasts a command (`steps` with kTrain).
void send_command(Communicator& comm, FollowerCommand command, std::int64_t steps = 0);

// {"rows", "sample_shape", "block_starts", "window"} of a source.
nlohmann::json source_shape_json(const SampleSource& source);

// Rank 0's side of a source: while serving (from Leader::start() to
// Leader::done()), each read() first answers every other rank's request for
// its rows (in rank order), read from `inner`, then reads this rank's own;
// before and after, reads are this rank's alone (a layer fitted on the
// training rows as the Trainer is built). While serving, every rank must
// read at the same points, as the Trainer does (it reads a share, possibly
// empty, on every rank for each micro-batch, and validation on every rank).
class ServedSource final : public SampleSource {
 public:
  ServedSource(SampleSource& inner, Communicator& comm);

  std::int64_t rows() const override { return inner_.rows(); }
  const std::vector<std::int64_t>& sample_shape() const override { return inner_.sample_shape(); }
  std::span<const std::int64_t> block_starts() const override { return inner_.block_starts(); }
  std::int64_t window_blocks() const override { return inner_.window_blocks(); }
  void will_read(std::span<const std::uint32_t> now, std::span<const std::uint32_t> next) override {
    inner_.will_read(now, next);
  }
  void read(std::span<const std::uint32_t> rows, float* features, float* labels) override;

  // The followers have the plan: their reads come with this rank's from now on.
  void start_serving() { serving_ = true; }
  // After training: reads are this rank's alone (evaluation, prediction).
  void stop_serving() { serving_ = false; }

 private:
  SampleSource& inner_;
  Communicator& comm_;
  bool serving_ = false;
  std::size_t width_ = 1;
  std::vector<float> buffer_;
};

// A follower's source: the shape rank 0 sent (source_shape_json); read()
// asks rank 0 for the rows.
class RemoteSource final : public SampleSource {
 public:
  // kCorrupt when `shape` is not a source shape.
  RemoteSource(const nlohmann::json& shape, Communicator& comm);

  std::int64_t rows() const override { return rows_; }
  const std::vector<std::int64_t>& sample_shape() const override { return sample_shape_; }
  std::span<const std::int64_t> block_starts() const override { return block_starts_; }
  std::int64_t window_blocks() const override { return window_; }
  void will_read(std::span<const std::uint32_t>, std::span<const std::uint32_t>) override {}
  void read(std::span<const std::uint32_t> rows, float* features, float* labels) override;

 private:
  Communicator& comm_;
  std::int64_t rows_ = 0, window_ = 1;
  std::vector<std::int64_t> sample_shape_, block_starts_;
  std::size_t width_ = 1;
};

class ServedSource;

// Rank 0's side of the protocol above, one method per step;
// follow_training() (runs.h) is the other ranks'. A single process holds a
// Leader without a communicator, whose every step does nothing, so a
// training run reads the same on one process as on N. Not thread-safe.
class Leader {
 public:
  // `comm`: the ranks of `mpirun -np N` (not owned; outlives the Leader),
  // or null (or one rank) for a single process. Step 1: gathers every
  // rank's host. kFailure when this is not rank 0.
  explicit Leader(Communicator* comm);
  ~Leader();
  Leader(const Leader&) = delete;
  Leader& operator=(const Leader&) = delete;

  // The communicator a Trainer shares gradients over; null when alone.
  Communicator* communicator() const { return comm_; }
  // Every rank's host name in rank order (this host's alone when alone).
  const std::vector<std::string>& hosts() const { return hosts_; }

  // The sources the trainer reads: `train` and `validation` (may be null)
  // themselves when alone, else ServedSources over them that answer the
  // followers' reads. The Leader keeps the wrappers; the inner sources must
  // outlive it.
  SampleSource& serve_train(SampleSource& train);
  SampleSource* serve_validation(SampleSource* validation);

  // Steps 2 and 3: the setup the followers build their trainer from (the
  // run's config text, `tc`'s loss, classes and class weights, the served
  // sources' shapes), then `trainer`'s state, which they load.
  void start(const std::string& config_text, const TrainerConfig& tc, Trainer& trainer);
  // Step 4: the followers train `steps` steps, as this rank does next.
  void train(std::int64_t steps);
  // Step 4: the followers join the save_state() this rank's checkpoint
  // takes; saved() once the store committed it.
  void save();
  void saved();
  // The followers are released; from here this rank reads alone. Safe to
  // call more than once.
  void done();

 private:
  Communicator* comm_;
  std::vector<std::string> hosts_;
  std::unique_ptr<ServedSource> train_, validation_;
  bool done_ = false;
};

// The fault point each rank reaches once a checkpoint is written (on rank 0
// after the store committed it; on the others at the command that follows
// it, which rank 0 sends only then): "train.rank-R.checkpointed".
void reached_checkpoint(const Communicator& comm);

}  // namespace anneal::runs
