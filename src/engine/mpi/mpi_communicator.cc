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
// Started sums (start_allreduce_sum) make the same moves with MPI_Isend and
// MPI_Irecv, in the caller's memory and buffers kept from sum to sum, so a
// training step's gradients are neither copied nor freshly allocated.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <memory>
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
    // Sums still pending here were abandoned by an error (every rank waits
    // for all it starts): MPI may still write into their buffers, so they
    // are left allocated rather than freed under it. (It may also still
    // write into the caller's values: an error ends the job, as
    // communicator.h says, before that memory is reused.)
    for (auto& sum : pending_) (void)sum.release();
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

  SumRequest start_allreduce_sum(std::span<float> values) override {
    if (pending_.size() >= kMaxPendingSums)
      throw usage_error("mpi: more than " + std::to_string(kMaxPendingSums) + " sums pending; wait for some first");
    auto sum = std::make_unique<PendingSum>();
    sum->id = next_sum_++;
    sum->values = values;
    if (size_ > 1 && !values.empty()) {
      const std::size_t n = values.size(), ranks = std::size_t(size_);
      sum->chunk = (n + ranks - 1) / ranks;
      sum->parts = take_buffer(sum->chunk * ranks);
      sum->peers.resize(ranks);
      const int tag = sum_tag(sum->id);
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        Peer& peer = sum->peers[std::size_t(r)];
        receive_async(sum->parts.data.get() + std::size_t(r) * sum->chunk, count_of(*sum, rank_), r, tag,
                      sum->scatter_receives);
        send_async(values.data() + first_of(*sum, r), count_of(*sum, r), r, tag, peer.chunk_sends);
      }
    } else {
      sum->summed = true;  // one rank, or nothing to add
    }
    pending_.push_back(std::move(sum));
    return pending_.back()->id;
  }

  void progress() override {
    for (auto& sum : pending_) {
      if (!sum->summed) {
        int done = 0;
        check(MPI_Testall(int(sum->scatter_receives.size()), sum->scatter_receives.data(), &done,
                          MPI_STATUSES_IGNORE),
              "MPI_Testall");
        if (done) add_up(*sum);
      }
      for (int r = 0; r < size_ && !sum->peers.empty(); ++r) {
        Peer& peer = sum->peers[std::size_t(r)];
        if (r == rank_ || peer.receiving_sum) continue;
        int sent = 0;
        check(MPI_Testall(int(peer.chunk_sends.size()), peer.chunk_sends.data(), &sent, MPI_STATUSES_IGNORE),
              "MPI_Testall");
        if (sent) receive_sum(*sum, r);
      }
      check_all(sum->others, "MPI_Testall");
    }
  }

  void wait(SumRequest request) override {
    const auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& s) { return s->id == request; });
    if (it == pending_.end())
      throw usage_error("mpi: wait for sum " + std::to_string(request) + ", which is not pending");
    // The sums started before this one are added (and their results sent)
    // first: a peer may be waiting for them.
    for (auto at = pending_.begin(); at != std::next(it); ++at) {
      PendingSum& sum = **at;
      if (sum.summed) continue;
      check(MPI_Waitall(int(sum.scatter_receives.size()), sum.scatter_receives.data(), MPI_STATUSES_IGNORE),
            "MPI_Waitall");
      add_up(sum);
    }
    PendingSum& sum = **it;
    for (int r = 0; r < size_ && !sum.peers.empty(); ++r) {
      Peer& peer = sum.peers[std::size_t(r)];
      if (r == rank_ || peer.receiving_sum) continue;
      check(MPI_Waitall(int(peer.chunk_sends.size()), peer.chunk_sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      receive_sum(sum, r);
    }
    check(MPI_Waitall(int(sum.others.size()), sum.others.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    give_back(std::move(sum.parts));
    pending_.erase(it);
  }

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

  // A buffer of floats, left uninitialized (it is always written before it
  // is read), kept for the next sum instead of freed: a training step sums
  // the same sizes every time, and a fresh megabyte buffer per step costs
  // its page faults and zeroing all over again.
  struct Buffer {
    std::unique_ptr<float[]> data;
    std::size_t capacity = 0;
  };
  Buffer take_buffer(std::size_t elements) {
    const auto fits = std::find_if(spare_.begin(), spare_.end(), [&](const Buffer& b) { return b.capacity >= elements; });
    if (fits == spare_.end()) return Buffer{std::unique_ptr<float[]>(new float[elements]), elements};
    Buffer out = std::move(*fits);
    spare_.erase(fits);
    return out;
  }
  void give_back(Buffer buffer) {
    if (buffer.data && spare_.size() < kMaxSpareBuffers) spare_.push_back(std::move(buffer));
  }

  // What a started sum exchanges with one peer: its chunk of the values,
  // sent from the caller's values, and the peer's summed chunk, received
  // into the same place once that send is done (MPI forbids receiving into
  // a buffer a pending send still reads).
  struct Peer {
    std::vector<MPI_Request> chunk_sends;  // values' chunk of this peer, to it
    bool receiving_sum = false;            // its summed chunk's receive is posted (in others)
  };

  // One started sum; see the top of the file. Everything happens in the
  // caller's values: this rank's chunk is added in place and sent from
  // there, the peers' chunks are sent from there and their sums received
  // into them.
  struct PendingSum {
    SumRequest id = 0;
    std::span<float> values;       // the caller's, summed in place by wait()
    std::size_t chunk = 0;         // elements of each rank's chunk (the last ones may be short or empty)
    Buffer parts;                  // ranks x chunk: each peer's values of this rank's chunk
    std::vector<Peer> peers;       // by rank (this rank's entry unused)
    std::vector<MPI_Request> scatter_receives;  // this rank's chunk, from each peer
    std::vector<MPI_Request> others;            // the summed chunk's sends, and the peers' sums' receives
    bool summed = false;           // this rank's chunk added and sent to the peers
  };

  std::size_t first_of(const PendingSum& sum, int r) const {
    return std::min(sum.values.size(), std::size_t(r) * sum.chunk);
  }
  std::size_t count_of(const PendingSum& sum, int r) const {
    return std::min(sum.values.size(), (std::size_t(r) + 1) * sum.chunk) - first_of(sum, r);
  }
  // Two tags per sum (its chunks, then their sums), reused only after
  // kMaxPendingSums sums; above kTag and within MPI's guaranteed 32767.
  static int sum_tag(SumRequest id) { return kSumTags + 2 * int(id % kMaxPendingSums); }

  // Messages of at most kMaxCount elements, matched in the order posted
  // (MPI does not let messages of one sender and tag overtake each other).
  void send_async(const float* data, std::size_t count, int to, int tag, std::vector<MPI_Request>& requests) {
    for (std::size_t at = 0; at < count; at += kMaxCount) {
      requests.emplace_back();
      check(MPI_Isend(data + at, int(std::min(kMaxCount, count - at)), MPI_FLOAT, to, tag, comm_, &requests.back()),
            "MPI_Isend");
    }
  }
  void receive_async(float* data, std::size_t count, int from, int tag, std::vector<MPI_Request>& requests) {
    for (std::size_t at = 0; at < count; at += kMaxCount) {
      requests.emplace_back();
      check(MPI_Irecv(data + at, int(std::min(kMaxCount, count - at)), MPI_FLOAT, from, tag, comm_,
                      &requests.back()),
            "MPI_Irecv");
    }
  }

  // Every rank's values of this rank's chunk have arrived: adds them in
  // rank order (allreduce_sum's additions, so the same bits) into this
  // rank's chunk of the values, and sends the sums to every peer. The sums
  // go through a small block on the stack because this rank's own values
  // are one of the addends: element by element the order is r = 0, 1, ...
  // as in allreduce_sum, but the loops run over a block so they vectorize.
  void add_up(PendingSum& sum) {
    const std::size_t first = first_of(sum, rank_), count = count_of(sum, rank_);
    float* own = sum.values.data() + first;
    std::vector<const float*> part(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r)
      part[std::size_t(r)] = r == rank_ ? own : sum.parts.data.get() + std::size_t(r) * sum.chunk;
    constexpr std::size_t kBlock = 1024;
    float block[kBlock];
    for (std::size_t at = 0; at < count; at += kBlock) {
      const std::size_t n = std::min(kBlock, count - at);
      std::copy(part[0] + at, part[0] + at + n, block);
      for (std::size_t r = 1; r < part.size(); ++r) {
        const float* p = part[r] + at;
        for (std::size_t i = 0; i < n; ++i) block[i] += p[i];
      }
      std::copy(block, block + n, own + at);
    }
    for (int r = 0; r < size_; ++r)
      if (r != rank_) send_async(own, count, r, sum_tag(sum.id) + 1, sum.others);
    sum.summed = true;
  }

  // The peer's chunk of the values has gone: its sum may be received there.
  void receive_sum(PendingSum& sum, int r) {
    receive_async(sum.values.data() + first_of(sum, r), count_of(sum, r), r, sum_tag(sum.id) + 1, sum.others);
    sum.peers[std::size_t(r)].receiving_sum = true;
  }

  void check_all(std::vector<MPI_Request>& requests, const char* call) {
    int done = 0;
    check(MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), call);
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw usage_error(std::string("mpi: ") + what + " rank " + std::to_string(peer) + ": rank " +
                        std::to_string(rank_) + " of " + std::to_string(size_) + " has no such peer");
  }

  static constexpr int kTag = 17;  // point-to-point messages (collectives use none)
  static constexpr int kSumTags = 1024;  // started sums' messages: kSumTags .. + 2·kMaxPendingSums − 1
  static constexpr std::size_t kMaxSpareBuffers = 8;
  SumRequest next_sum_ = 0;
  std::vector<std::unique_ptr<PendingSum>> pending_;  // in the order started
  std::vector<Buffer> spare_;                         // buffers of sums done, for the next ones
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
