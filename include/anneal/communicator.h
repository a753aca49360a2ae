// Communicator: the processes of one data-parallel run, or just this one.
//
//   std::unique_ptr<anneal::Communicator> comm = anneal::make_communicator();
//   comm->allreduce_sum(gradients);   // the same bits on every rank
//
// A process started by Open MPI's mpirun gets an MPI communicator from the
// plugin libanneal-mpi.so (built where Open MPI's development files are
// found), so the anneal executable links no MPI library and a
// single-server install needs none; any other process is a communicator
// of one (rank 0, size 1), on which every operation is a no-op.
//
// Determinism: allreduce_sum adds the ranks' values in rank order, so the
// result is the same bits on every rank and run after run for a fixed
// number of ranks, whatever algorithm MPI picks for its collectives: the
// plugin moves the data with MPI (a reduce-scatter by MPI_Alltoall, then
// MPI_Allgather) and does every addition itself.
//
// Overlap: start_allreduce_sum / progress / wait are the same sum started
// without blocking, so a caller can send gradients while it computes the
// next ones (the Trainer's buckets). The plugin sends the chunks with
// MPI_Isend/MPI_Irecv straight from the caller's memory, adds them in rank
// order when they have all arrived, and sends the summed chunk back the
// same way: the bits are those of allreduce_sum whatever the timing. MPI moves non-blocking transfers only
// inside MPI calls (Open MPI has no progress thread), so the caller calls
// progress() between pieces of its work.
//
// Thread-safety: a Communicator is used by one thread at a time. Every rank
// must make the same calls in the same order (the MPI rule). Errors:
// anneal::Error kFailure naming the MPI call and MPI's message; a rank that
// dies makes mpirun stop the job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace anneal {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // 0 .. size() − 1
  virtual int size() const = 0;
  // Every rank's host name, in rank order (the same list on every rank).
  virtual std::vector<std::string> hosts() = 0;

  // values = Σ over ranks of each rank's values, added in rank order; every
  // rank passes the same count.
  virtual void allreduce_sum(std::span<float> values) = 0;
  virtual void allreduce_sum(std::span<double> values) = 0;

  // The same sum as allreduce_sum, bit for bit, started without waiting:
  // the plugin works in `values` itself (sends from it, adds into it,
  // receives the sums into it; no copy), so it must stay alive, neither
  // read nor written by the caller, until wait(request) returns with the
  // sum in it. A caller that gives up on a started sum (an error) must end
  // the job with abort() before that memory is freed or reused, since MPI
  // may still move data there in its next call. Every rank starts the same
  // sums (the same counts) in the same order and waits for each of them,
  // in the order started. progress() lets the started sums move on (and
  // adds the chunks that have arrived); it never blocks. Errors: kFailure
  // naming the MPI call; kUsage for a request that is not pending, or more
  // than kMaxPendingSums pending at once.
  using SumRequest = std::uint64_t;
  static constexpr std::size_t kMaxPendingSums = 4096;
  virtual SumRequest start_allreduce_sum(std::span<float> values) = 0;
  virtual void progress() = 0;
  virtual void wait(SumRequest request) = 0;
  // Copies `root`'s bytes to every rank (each passes a span of that size).
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;
  virtual void barrier() = 0;
  // Point to point, for data that differs per rank (a rank's share of each
  // batch, which rank 0 reads from the store for it): `bytes` go to rank
  // `to`, which takes them, whole and in the order sent, with receive(from).
  // Any size; a message to this rank itself is kUsage.
  virtual void send(std::span<const std::byte> bytes, int to) = 0;
  virtual std::vector<std::byte> receive(int from) = 0;
  // Ends every rank of the job with exit status `code` (MPI_Abort): how a
  // rank that fails stops the others, which would otherwise wait on it for
  // ever. Does not return.
  [[noreturn]] virtual void abort(int code) = 0;
};

// True when this process was started by Open MPI's launcher (mpirun or
// mpiexec set OMPI_COMM_WORLD_SIZE).
bool launched_by_mpi();
// How many processes that launcher started (OMPI_COMM_WORLD_SIZE), read
// without starting MPI; 1 when not launched by it.
int mpi_world_size();

// The MPI communicator when launched_by_mpi(), else a communicator of one.
// Throws kUsage, one line, when launched by mpirun but the MPI plugin is
// missing or cannot be loaded ("... libanneal-mpi.so is not installed ..."),
// and kFailure when MPI fails to start.
std::unique_ptr<Communicator> make_communicator();

}  // namespace anneal
