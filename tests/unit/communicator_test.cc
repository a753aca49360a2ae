// The Communicator (anneal/communicator.h): a communicator of one in a plain
// process; under mpirun (the ctest entries mpi.communicator_*, 2 and 3
// ranks: with 2, addition's commutativity hides the order), the MPI
// plugin's, whose sums must be the rank-order sums bit for bit on every
// rank, for counts that do not divide evenly, are empty, or are smaller
// than the number of ranks. The MPI tests report skipped outside mpirun.
#include "anneal/communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "anneal/error.h"

namespace anneal {
namespace {

TEST(SingleProcessCommunicator, IsRankZeroOfOneAndLeavesValuesAlone) {
  if (launched_by_mpi()) GTEST_SKIP() << "started by mpirun";
  const auto comm = make_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->hosts().size(), 1u);
  std::vector<float> v{1.5f, -2.0f};
  comm->allreduce_sum(v);
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
  std::vector<std::byte> b{std::byte{7}};
  comm->broadcast(b, 0);
  EXPECT_EQ(b[0], std::byte{7});
  comm->barrier();
  // A started sum over one rank: the values, once waited for.
  const Communicator::SumRequest request = comm->start_allreduce_sum(v);
  comm->progress();
  comm->wait(request);
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_THROW(comm->wait(request), Error) << "a sum waited for twice";
  // No peer to talk to: refused, not a hang.
  const std::vector<std::byte> none;
  EXPECT_THROW(comm->send(none, 0), Error);
  EXPECT_THROW(comm->receive(0), Error);
}

// The values rank r contributes: random, of mixed signs and magnitudes, so
// that the order of the additions shows in the bits.
template <typename T>
std::vector<T> contribution(int rank, std::size_t n) {
  std::mt19937_64 rng(1000 + std::uint64_t(rank) * 7919 + n);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<T> v(n);
  for (T& x : v) x = T(std::ldexp(mantissa(rng), exponent(rng)));
  return v;
}

class MpiCommunicator : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!launched_by_mpi()) GTEST_SKIP() << "needs mpirun: ctest runs it as mpi.communicator_2_ranks";
    comm_ = make_communicator();
  }
  std::unique_ptr<Communicator> comm_;
};

TEST_F(MpiCommunicator, HasEveryRankMpirunStarted) {
  EXPECT_EQ(comm_->size(), std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  EXPECT_EQ(comm_->rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  const std::vector<std::string> hosts = comm_->hosts();
  ASSERT_EQ(hosts.size(), std::size_t(comm_->size()));
  for (const std::string& h : hosts) EXPECT_FALSE(h.empty());
}

template <typename T>
void expect_rank_order_sums(Communicator& comm) {
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(1000), std::size_t(100003)}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::vector<T> values = contribution<T>(comm.rank(), n);
    std::vector<T> want(n, T(0));
    for (int r = 0; r < comm.size(); ++r) {
      const std::vector<T> part = contribution<T>(r, n);
      for (std::size_t i = 0; i < n; ++i) want[i] = r == 0 ? part[i] : want[i] + part[i];
    }
    comm.allreduce_sum(std::span<T>(values));
    ASSERT_EQ(values.size(), n);
    if (n > 0) {  // memcmp of an empty vector's null data() is undefined
      EXPECT_EQ(std::memcmp(values.data(), want.data(), n * sizeof(T)), 0) << "not the rank-order sum, bit for bit";
    }
  }
}

TEST_F(MpiCommunicator, FloatSumsAreTheRankOrderSumsBitForBit) { expect_rank_order_sums<float>(*comm_); }
TEST_F(MpiCommunicator, DoubleSumsAreTheRankOrderSumsBitForBit) { expect_rank_order_sums<double>(*comm_); }

// Started sums (start_allreduce_sum / progress / wait) are the rank-order
// sums too, bit for bit, several in flight at once, whatever was moved
// while progress() ran: sizes that do not divide evenly, are empty, or are
// smaller than the number of ranks, started and waited for interleaved.
TEST_F(MpiCommunicator, StartedSumsAreTheRankOrderSumsBitForBit) {
  const std::vector<std::size_t> sizes{100003, 0, 1, 3, 1000, 2, 65536};
  std::vector<std::vector<float>> values, want;
  for (std::size_t n : sizes) {
    values.push_back(contribution<float>(comm_->rank(), n));
    want.emplace_back(n, 0.0f);
    for (int r = 0; r < comm_->size(); ++r) {
      const std::vector<float> part = contribution<float>(r, n);
      for (std::size_t i = 0; i < n; ++i) want.back()[i] = r == 0 ? part[i] : want.back()[i] + part[i];
    }
  }
  std::vector<Communicator::SumRequest> requests;
  // The first four in flight together, the others started while earlier
  // ones are still pending.
  for (std::size_t k = 0; k < 4; ++k) requests.push_back(comm_->start_allreduce_sum(values[k]));
  for (int i = 0; i < 10; ++i) comm_->progress();
  comm_->wait(requests[0]);
  for (std::size_t k = 4; k < sizes.size(); ++k) {
    requests.push_back(comm_->start_allreduce_sum(values[k]));
    comm_->progress();
  }
  for (std::size_t k = 1; k < sizes.size(); ++k) comm_->wait(requests[k]);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    SCOPED_TRACE("n = " + std::to_string(sizes[k]));
    ASSERT_EQ(values[k].size(), sizes[k]);
    if (sizes[k] > 0) {
      EXPECT_EQ(std::memcmp(values[k].data(), want[k].data(), sizes[k] * sizeof(float)), 0)
          << "not the rank-order sum, bit for bit";
    }
  }
  // And the same bits as the blocking sum.
  std::vector<float> blocking = contribution<float>(comm_->rank(), sizes[0]);
  comm_->allreduce_sum(std::span<float>(blocking));
  EXPECT_EQ(std::memcmp(blocking.data(), values[0].data(), sizes[0] * sizeof(float)), 0);
  // Waiting for a sum that is not pending is refused on every rank alike,
  // without a message sent.
  EXPECT_THROW(comm_->wait(requests[0]), Error);
  EXPECT_THROW(comm_->wait(requests.back() + 1), Error);
  comm_->barrier();
}

TEST_F(MpiCommunicator, BroadcastCopiesTheRootsBytes) {
  const int root = comm_->size() - 1;
  std::vector<std::byte> bytes(100001);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = std::byte((comm_->rank() == root ? 3 : 11) * i + 1);
  comm_->broadcast(bytes, root);
  for (std::size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], std::byte(3 * i + 1)) << "byte " << i;
  comm_->barrier();
}

// Rank 0 sends each rank a message of its own (sizes 0 and over one MPI
// piece's worth of small ones), each answers with it reversed: every message
// arrives whole, in the order sent, from the rank that sent it.
TEST_F(MpiCommunicator, SendAndReceiveCarryEachRanksOwnBytes) {
  auto message = [](int rank, std::size_t which) {
    std::vector<std::byte> m(which == 0 ? 0 : 1000 * std::size_t(rank) + 37 * which);
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = std::byte(i * 7 + std::size_t(rank) + which);
    return m;
  };
  for (std::size_t which = 0; which < 3; ++which) {
    if (comm_->rank() == 0) {
      for (int r = 1; r < comm_->size(); ++r) comm_->send(message(r, which), r);
      for (int r = 1; r < comm_->size(); ++r) {
        std::vector<std::byte> want = message(r, which);
        std::reverse(want.begin(), want.end());
        EXPECT_EQ(comm_->receive(r), want) << "rank " << r << " message " << which;
      }
    } else {
      std::vector<std::byte> got = comm_->receive(0);
      EXPECT_EQ(got, message(comm_->rank(), which));
      std::reverse(got.begin(), got.end());
      comm_->send(got, 0);
    }
  }
  EXPECT_THROW(comm_->send({}, comm_->rank()), Error) << "a message to itself";
  EXPECT_THROW(comm_->receive(comm_->size()), Error) << "a rank that does not exist";
  comm_->barrier();
}

// Run by mpi.communicator_without_plugin: mpirun, but no libanneal-mpi.so.
TEST(MpiPluginMissing, IsAOneLineUsageErrorNamingThePlugin) {
  if (!launched_by_mpi() || !std::getenv("ANNEAL_TEST_NO_MPI_PLUGIN"))
    GTEST_SKIP() << "run by mpi.communicator_without_plugin";
  try {
    make_communicator();
    FAIL() << "made a communicator without the plugin";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("launched by mpirun, but anneal's MPI support is not installed (no "
                                         "libanneal-mpi.so in"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace anneal
