// libanneal-mpi.so: the Communicator (anneal/communicator.h) over MPI's
// world communicator, loaded by make_communicator() in a process that
// mpirun started. Built where CMake finds Open MPI's development files
// (-DANNEAL_MPI=auto|on|off); the anneal executable never links MPI.
//
// MPI is a process-wide library: it is started once (MPI_Init_thread) by
// the first communicator made and finalized at exit, after every
// communicator is gone. Each communicator works on its own duplicate of
// MPI_COMM_WORLD, so two never see each other's messages.
//
// Deterministic sums: allreduce_sum splits the values into size() equal
// chunks (the last padded with zeros), sends chunk j of every rank to rank
// j (MPI_Alltoall: data movement only), where they are added in rank order,
// then gathers the summed chunks back to every rank (MPI_Allgather). MPI
// adds nothing itself, so its choice of algorithm cannot change a bit.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "anneal/build_info.h"
#include "anneal/communicator_plugin.h"
#include "anneal/error.h"

namespace anneal::mpi {
namespace {

void check(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) length = 0;
  throw failure(std::string("mpi: ") + call + ": " + (length > 0 ? std::string(text, length) : "error " +
                                                                                                  std::to_string(status)));
}

// MPI counts are ints: larger transfers go in pieces of this many elements.
constexpr std::size_t kMaxCount = std::size_t(INT_MAX) / 2;

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }

void finalize_at_exit() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

// Starts MPI once per process.
void start_mpi() {
  int initialized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized) return;
  int provided = 0;
  // One thread at a time calls MPI (communicator.h), but not always the
  // same one (a job's thread, then the main thread).
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  std::atexit(finalize_at_exit);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    start_mpi();
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    // Errors come back as codes (and are thrown here) instead of aborting.
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> hosts() override {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
    std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, '\0');
    std::copy(name, name + length, mine.begin());
    std::vector<char> all(std::size_t(size_) * MPI_MAX_PROCESSOR_NAME);
    check(MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                        comm_),
          "MPI_Allgather");
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.emplace_back(all.data() + std::size_t(r) * MPI_MAX_PROCESSOR_NAME);
    return out;
  }

  void allreduce_sum(std::span<float> values) override { sum(values); }
  void allreduce_sum(std::span<double> values) override { sum(values); }

  void broadcast(std::span<std::byte> bytes, int root) override {
    for (std::size_t at = 0; at < bytes.size(); at += kMaxCount) {
      const auto count = int(std::min(kMaxCount, bytes.size() - at));
      check(MPI_Bcast(bytes.data() + at, count, MPI_BYTE, root, comm_), "MPI_Bcast");
    }
  }

  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  // The size first (8 bytes), then the bytes in pieces of at most kMaxCount:
  // MPI orders the messages between two ranks on one communicator and tag.
  void send(std::span<const std::byte> bytes, int to) override {
    check_peer(to, "send to");
    const std::uint64_t size = bytes.size();
    check(MPI_Send(&size, 1, MPI_UINT64_T, to, kTag, comm_), "MPI_Send");
    for (std::size_t at = 0; at < bytes.size(); at += kMaxCount) {
      const auto count = int(std::min(kMaxCount, bytes.size() - at));
      check(MPI_Send(bytes.data() + at, count, MPI_BYTE, to, kTag, comm_), "MPI_Send");
    }
  }

  std::vector<std::byte> receive(int from) override {
    check_peer(from, "receive from");
    std::uint64_t size = 0;
    check(MPI_Recv(&size, 1, MPI_UINT64_T, from, kTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    std::vector<std::byte> bytes(size);
    for (std::size_t at = 0; at < bytes.size(); at += kMaxCount) {
      const auto count = int(std::min(kMaxCount, bytes.size() - at));
      check(MPI_Recv(bytes.data() + at, count, MPI_BYTE, from, kTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    }
    return bytes;
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(comm_, code);
    std::_Exit(code);  // MPI_Abort does not return; should it, still never go on
  }

 private:
  // See the top of the file: reduce-scatter by data movement, additions in
  // rank order here, allgather.
  template <typename T>
  void sum(std::span<T> values) {
    if (size_ == 1 || values.empty()) return;
    const std::size_t ranks = std::size_t(size_);
    for (std::size_t at = 0; at < values.size(); at += kMaxCount * ranks) {
      const std::span<T> piece = values.subspan(at, std::min(kMaxCount * ranks, values.size() - at));
      const std::size_t chunk = (piece.size() + ranks - 1) / ranks;
      std::vector<T> send(chunk * ranks, T(0)), received(chunk * ranks), mine(chunk), gathered(chunk * ranks);
      std::copy(piece.begin(), piece.end(), send.begin());
      check(MPI_Alltoall(send.data(), int(chunk), mpi_type<T>(), received.data(), int(chunk), mpi_type<T>(), comm_),
            "MPI_Alltoall");
      // received holds rank 0's part of my chunk, then rank 1's, ...
      for (std::size_t i = 0; i < chunk; ++i) {
        T total = received[i];
        for (std::size_t r = 1; r < ranks; ++r) total += received[r * chunk + i];
        mine[i] = total;
      }
      check(MPI_Allgather(mine.data(), int(chunk), mpi_type<T>(), gathered.data(), int(chunk), mpi_type<T>(), comm_),
            "MPI_Allgather");
      std::copy(gathered.begin(), gathered.begin() + std::ptrdiff_t(piece.size()), piece.begin());
    }
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw usage_error(std::string("mpi: ") + what + " rank " + std::to_string(peer) + ": rank " +
                        std::to_string(rank_) + " of " + std::to_string(size_) + " has no such peer");
  }

  static constexpr int kTag = 17;  // point-to-point messages (collectives use none)
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

std::unique_ptr<Communicator> make() { return std::make_unique<MpiCommunicator>(); }

constexpr CommunicatorPlugin kPlugin{kCommunicatorPluginAbi, build::kPluginBuild, &make};

}  // namespace
}  // namespace anneal::mpi

extern "C" __attribute__((visibility("default"))) const anneal::CommunicatorPlugin* anneal_communicator_plugin_v1() {
  return &anneal::mpi::kPlugin;
}
