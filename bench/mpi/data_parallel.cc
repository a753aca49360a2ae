// Data-parallel training at the engine level, for bench/mpi/scaling.sh:
//
//   mpirun -np N anneal-data-parallel mlp|cnn STEPS FMNIST_DIR [BUCKET_BYTES]
//     -> rank 0 prints "SAMPLES_PER_S COMM_SHARE"
//
// BUCKET_BYTES sets TrainerConfig::allreduce_bucket_bytes (default: the
// trainer's); a huge one makes a single bucket summed after the whole
// backward pass, so the overlap can be measured against none.
//
// Every rank reads Fashion-MNIST's training images itself and standardizes
// them as anneal does, so this times the training step alone: each rank's
// share of the batch, and the gradient all-reduce, without the rank-0 data
// service of `mpirun anneal train` (which scaling.sh measures as well). Each rank trains the MLP or
// CNN of docs/examples (Adam, batch 128, seed 1) on the CPU backend with
// one thread for STEPS optimizer steps, with the MPI communicator. Rank 0
// prints the global samples per second over the steps (between barriers)
// and the share of that time spent in the communicator's calls.
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "anneal/backend.h"
#include "anneal/communicator.h"
#include "anneal/device.h"
#include "anneal/report.h"
#include "anneal/sample_source.h"
#include "anneal/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<unsigned char> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<unsigned char> out;
  unsigned char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(f, buffer, sizeof buffer)) > 0) out.insert(out.end(), buffer, buffer + n);
  gzclose(f);
  if (n < 0) throw std::runtime_error("cannot read " + path);
  return out;
}

// The communicator's calls, timed.
class TimedCommunicator final : public anneal::Communicator {
 public:
  explicit TimedCommunicator(anneal::Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::vector<std::string> hosts() override { return inner_.hosts(); }
  void allreduce_sum(std::span<float> v) override { timed([&] { inner_.allreduce_sum(v); }); }
  void allreduce_sum(std::span<double> v) override { timed([&] { inner_.allreduce_sum(v); }); }
  SumRequest start_allreduce_sum(std::span<float> v) override {
    SumRequest request = 0;
    timed([&] { request = inner_.start_allreduce_sum(v); });
    return request;
  }
  void progress() override { timed([&] { inner_.progress(); }); }
  void wait(SumRequest request) override { timed([&] { inner_.wait(request); }); }
  void broadcast(std::span<std::byte> b, int root) override { timed([&] { inner_.broadcast(b, root); }); }
  void barrier() override { timed([&] { inner_.barrier(); }); }
  void send(std::span<const std::byte> b, int to) override { timed([&] { inner_.send(b, to); }); }
  std::vector<std::byte> receive(int from) override {
    std::vector<std::byte> out;
    timed([&] { out = inner_.receive(from); });
    return out;
  }
  [[noreturn]] void abort(int code) override {
    inner_.abort(code);
    __builtin_unreachable();  // the inner abort does not return either; GCC does not see through the virtual call
  }
  double seconds = 0;

 private:
  template <typename F>
  void timed(F f) {
    const auto start = Clock::now();
    f();
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
  }
  anneal::Communicator& inner_;
};

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: anneal-data-parallel mlp|cnn STEPS FMNIST_DIR [BUCKET_BYTES]\n");
    return 2;
  }
  const std::string model = argv[1];
  const std::uint64_t steps = std::strtoull(argv[2], nullptr, 10);
  const std::string dir = argv[3];
  const std::vector<unsigned char> images = read_gz(dir + "/train-images-idx3-ubyte.gz");
  const std::vector<unsigned char> labels = read_gz(dir + "/train-labels-idx1-ubyte.gz");
  const std::size_t rows = labels.size() - 8, width = 784;
  if (images.size() != 16 + rows * width) throw std::runtime_error("unexpected IDX sizes");
  std::vector<float> x(rows * width), y(rows);
  double sum = 0, squares = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sum += images[16 + i];
  const double mean = sum / double(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) squares += (images[16 + i] - mean) * (images[16 + i] - mean);
  const double deviation = std::sqrt(squares / double(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float((images[16 + i] - mean) / deviation);
  for (std::size_t r = 0; r < rows; ++r) y[r] = float(labels[8 + r]);

  anneal::TrainerConfig config;
  config.layers = model == "mlp" ? "dense(256) relu dense(128) relu dense(10)"
                                 : "conv(32,3,pad=1) relu maxpool(2) conv(64,3,pad=1) relu maxpool(2) flatten "
                                   "dense(128) relu dense(10)";
  config.classes = 10;
  config.batch = 128;
  config.epochs = 100;  // more than STEPS needs: train(STEPS) stops first
  config.seed = 1;
  config.optimizer.lr = 0.001f;
  if (argc == 5) config.allreduce_bucket_bytes = std::strtoull(argv[4], nullptr, 10);
  const std::vector<std::int64_t> shape = model == "mlp" ? std::vector<std::int64_t>{784}
                                                        : std::vector<std::int64_t>{1, 28, 28};
  anneal::ArraySource source(x, y, shape);

  const std::unique_ptr<anneal::Communicator> mpi = anneal::make_communicator();
  TimedCommunicator comm(*mpi);
  const std::unique_ptr<anneal::Backend> backend = anneal::make_backend({.device = anneal::Device::kCpu, .threads = 1});
  anneal::NullReporter reporter;
  anneal::Trainer trainer(config, *backend, source, nullptr, reporter, &comm);
  trainer.train(2);  // warm-up: primitives, first allocations
  comm.barrier();
  comm.seconds = 0;
  const auto start = Clock::now();
  trainer.train(steps);
  comm.barrier();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (comm.rank() == 0)
    std::printf("%.1f %.4f\n", double(steps) * double(config.batch) / seconds, comm.seconds / seconds);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "anneal-data-parallel: %s\n", e.what());
  return 1;
}
