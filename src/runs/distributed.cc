// Training across ranks: rank 0's served sources, the followers' remote
// sources and the followers' loop (see distributed.h for the protocol).
#include "runs/distributed.h"

#include <cstring>

#include "anneal/config.h"
#include "anneal/device.h"
#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/runs.h"
#include "anneal/trainer.h"
#include "runs/training_data.h"

namespace anneal::runs {
using nlohmann::json;

namespace {

std::size_t width_of(const std::vector<std::int64_t>& shape) {
  std::size_t width = 1;
  for (std::int64_t d : shape) width *= std::size_t(d);
  return width;
}

}  // namespace

// The followers' engine lines would repeat rank 0's: they say nothing.
class QuietReporter final : public Reporter {
 public:
  void note(std::string_view) override {}
  void progress(std::string_view, std::uint64_t, std::uint64_t) override {}
};

void broadcast_blob(Communicator& comm, std::vector<std::byte>& bytes, int root) {
  std::uint64_t size = bytes.size();
  comm.broadcast(std::as_writable_bytes(std::span(&size, 1)), root);
  bytes.resize(size);
  comm.broadcast(bytes, root);
}

void send_command(Communicator& comm, FollowerCommand command, std::int64_t steps) {
  std::int64_t message[2] = {std::int64_t(command), steps};
  comm.broadcast(std::as_writable_bytes(std::span(message)), 0);
}

json source_shape_json(const SampleSource& source) {
  const auto starts = source.block_starts();
  return {{"rows", source.rows()},
          {"sample_shape", source.sample_shape()},
          {"block_starts", std::vector<std::int64_t>(starts.begin(), starts.end())},
          {"window", source.window_blocks()}};
}

void reached_checkpoint(const Communicator& comm) {
  fault_point("train.rank-" + std::to_string(comm.rank()) + ".checkpointed");
}

ServedSource::ServedSource(SampleSource& inner, Communicator& comm)
    : inner_(inner), comm_(comm), width_(width_of(inner.sample_shape())) {}

void ServedSource::read(std::span<const std::uint32_t> rows, float* features, float* labels) {
  if (serving_) {
    for (int r = 1; r < comm_.size(); ++r) {
      const std::vector<std::byte> request = comm_.receive(r);
      if (request.size() % sizeof(std::uint32_t) != 0)
        throw corrupt("rank " + std::to_string(r) + " asked for rows in a message of " +
                      std::to_string(request.size()) + " bytes, not a whole number of row indices");
      std::vector<std::uint32_t> wanted(request.size() / sizeof(std::uint32_t));
      if (!wanted.empty()) std::memcpy(wanted.data(), request.data(), request.size());
      for (std::uint32_t row : wanted)
        if (std::int64_t(row) >= inner_.rows())
          throw corrupt("rank " + std::to_string(r) + " asked for row " + std::to_string(row) + " of " +
                        std::to_string(inner_.rows()));
      // Features, then labels: what RemoteSource::read takes apart.
      buffer_.assign(wanted.size() * (width_ + 1), 0.0f);
      if (!wanted.empty()) inner_.read(wanted, buffer_.data(), buffer_.data() + wanted.size() * width_);
      comm_.send(std::as_bytes(std::span<const float>(buffer_)), r);
    }
  }
  inner_.read(rows, features, labels);
}

RemoteSource::RemoteSource(const json& shape, Communicator& comm) : comm_(comm) {
  try {
    rows_ = shape.at("rows").get<std::int64_t>();
    sample_shape_ = shape.at("sample_shape").get<std::vector<std::int64_t>>();
    block_starts_ = shape.at("block_starts").get<std::vector<std::int64_t>>();
    window_ = shape.at("window").get<std::int64_t>();
  } catch (const json::exception& e) {
    throw corrupt(std::string("the data source rank 0 described: ") + e.what());
  }
  width_ = width_of(sample_shape_);
}

void RemoteSource::read(std::span<const std::uint32_t> rows, float* features, float* labels) {
  comm_.send(std::as_bytes(rows), 0);
  const std::vector<std::byte> answer = comm_.receive(0);
  const std::size_t n = rows.size();
  if (answer.size() != n * (width_ + 1) * sizeof(float))
    throw corrupt("rank 0 sent " + std::to_string(answer.size()) + " bytes for " + std::to_string(n) +
                  " rows of " + std::to_string(width_) + " features and a label");
  if (n == 0) return;
  std::memcpy(features, answer.data(), n * width_ * sizeof(float));
  std::memcpy(labels, answer.data() + n * width_ * sizeof(float), n * sizeof(float));
}

Leader::Leader(Communicator* comm) : comm_(comm && comm->size() > 1 ? comm : nullptr) {
  if (comm_ && comm_->rank() != 0)
    throw failure("train_model runs on rank 0 of " + std::to_string(comm_->size()) + ", not rank " +
                  std::to_string(comm_->rank()));
  // A collective the followers start with.
  hosts_ = comm_ ? comm_->hosts() : std::vector<std::string>{host_name()};
}

Leader::~Leader() = default;

SampleSource& Leader::serve_train(SampleSource& train) {
  if (!comm_) return train;
  train_ = std::make_unique<ServedSource>(train, *comm_);
  return *train_;
}

SampleSource* Leader::serve_validation(SampleSource* validation) {
  if (!comm_ || !validation) return validation;
  validation_ = std::make_unique<ServedSource>(*validation, *comm_);
  return validation_.get();
}

void Leader::start(const std::string& config_text, const TrainerConfig& tc, Trainer& trainer) {
  if (!comm_) return;
  const json plan = {{"config", config_text},
                     {"loss", static_cast<int>(tc.loss)},
                     {"classes", tc.classes},
                     {"class_weights", tc.class_weights},
                     {"train", source_shape_json(*train_)},
                     {"validation", validation_ ? source_shape_json(*validation_) : json()}};
  const std::string text = plan.dump();
  std::vector<std::byte> blob(reinterpret_cast<const std::byte*>(text.data()),
                              reinterpret_cast<const std::byte*>(text.data()) + text.size());
  broadcast_blob(*comm_, blob);
  const std::vector<std::uint8_t> state = trainer.save_state();
  std::vector<std::byte> state_blob(reinterpret_cast<const std::byte*>(state.data()),
                                    reinterpret_cast<const std::byte*>(state.data()) + state.size());
  broadcast_blob(*comm_, state_blob);
  train_->start_serving();
  if (validation_) validation_->start_serving();
}

void Leader::train(std::int64_t steps) {
  if (comm_) send_command(*comm_, FollowerCommand::kTrain, steps);
}

void Leader::save() {
  if (comm_) send_command(*comm_, FollowerCommand::kSave);
}

void Leader::saved() {
  if (comm_) reached_checkpoint(*comm_);
}

void Leader::done() {
  if (!comm_ || done_) return;
  done_ = true;
  send_command(*comm_, FollowerCommand::kDone);
  train_->stop_serving();
  if (validation_) validation_->stop_serving();
}

}  // namespace anneal::runs

namespace anneal {

void follow_training(Communicator& comm) {
  using nlohmann::json;
  using runs::FollowerCommand;
  comm.hosts();  // rank 0 records them
  std::vector<std::byte> blob;
  runs::broadcast_blob(comm, blob);
  json setup;
  try {
    setup = json::parse(reinterpret_cast<const char*>(blob.data()), reinterpret_cast<const char*>(blob.data()) + blob.size());
  } catch (const json::exception& e) {
    throw corrupt(std::string("the run setup rank 0 sent: ") + e.what());
  }
  TrainConfig config;
  TrainerConfig tc;
  std::unique_ptr<runs::RemoteSource> train, validation;
  try {
    config = parse_train_config(setup.at("config").get<std::string>(), "rank 0's config", {});
    tc = config.trainer;
    tc.loss = static_cast<LossKind>(setup.at("loss").get<int>());
    tc.classes = setup.at("classes").get<std::int64_t>();
    tc.class_weights = setup.at("class_weights").get<std::vector<float>>();
    tc.memory_limit = runs::physical_memory();
    train = std::make_unique<runs::RemoteSource>(setup.at("train"), comm);
    if (!setup.at("validation").is_null()) validation = std::make_unique<runs::RemoteSource>(setup["validation"], comm);
  } catch (const json::exception& e) {
    throw corrupt(std::string("the run setup rank 0 sent: ") + e.what());
  }
  std::unique_ptr<Backend> backend = make_backend(
      {.device = config.device, .threads = config.threads, .deterministic = config.deterministic, .tf32 = config.tf32});
  runs::QuietReporter quiet;
  Trainer trainer(tc, *backend, *train, validation.get(), quiet, &comm);
  // Rank 0's starting state (fresh, warm-started or a checkpoint's).
  trainer.save_state();
  std::vector<std::byte> state;
  runs::broadcast_blob(comm, state);
  trainer.load_state(std::span(reinterpret_cast<const std::uint8_t*>(state.data()), state.size()));

  bool saved = false;
  for (;;) {
    std::int64_t message[2] = {0, 0};
    comm.broadcast(std::as_writable_bytes(std::span(message)), 0);
    // Rank 0 sends the command after a save only once the store has it.
    if (saved) runs::reached_checkpoint(comm);
    saved = false;
    switch (static_cast<FollowerCommand>(message[0])) {
      case FollowerCommand::kTrain:
        trainer.train(std::uint64_t(std::max<std::int64_t>(message[1], 0)));
        break;
      case FollowerCommand::kSave:
        trainer.save_state();  // its share of the epoch's totals; rank 0 writes the checkpoint
        saved = true;
        break;
      case FollowerCommand::kDone:
        return;
      default:
        throw corrupt("rank 0 sent an unknown command " + std::to_string(message[0]));
    }
  }
}

}  // namespace anneal
