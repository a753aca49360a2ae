// make_communicator (anneal/communicator.h): the MPI plugin under mpirun,
// else a communicator of one.
#include "anneal/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "anneal/build_info.h"
#include "anneal/communicator_plugin.h"
#include "anneal/error.h"
#include "engine/plugin_library.h"

namespace anneal {
namespace {

// This process alone: rank 0 of 1. Sums over one rank are the values.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> hosts() override {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || !name[0]) return {"localhost"};
    return {name};
  }
  void allreduce_sum(std::span<float>) override {}
  void allreduce_sum(std::span<double>) override {}
  // One rank's sum is its values: nothing to move; only the bookkeeping,
  // so that a wait for a request never started is refused here too.
  SumRequest start_allreduce_sum(std::span<float>) override {
    if (pending_.size() >= kMaxPendingSums)
      throw usage_error("communicator: more than " + std::to_string(kMaxPendingSums) + " sums pending");
    pending_.push_back(next_);
    return next_++;
  }
  void progress() override {}
  void wait(SumRequest request) override {
    const auto it = std::find(pending_.begin(), pending_.end(), request);
    if (it == pending_.end())
      throw usage_error("communicator: wait for sum " + std::to_string(request) + ", which is not pending");
    pending_.erase(it);
  }
  void broadcast(std::span<std::byte>, int) override {}
  void barrier() override {}
  void send(std::span<const std::byte>, int to) override {
    throw usage_error("communicator: send to rank " + std::to_string(to) + ": this process is the only rank");
  }
  std::vector<std::byte> receive(int from) override {
    throw usage_error("communicator: receive from rank " + std::to_string(from) + ": this process is the only rank");
  }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  SumRequest next_ = 0;
  std::vector<SumRequest> pending_;
};

}  // namespace

bool launched_by_mpi() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return size != nullptr && *size != '\0';
}

int mpi_world_size() {
  if (!launched_by_mpi()) return 1;
  const int size = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
  return size > 0 ? size : 1;
}

std::unique_ptr<Communicator> make_communicator() {
  if (!launched_by_mpi()) return std::make_unique<SingleProcess>();
  const engine::PluginEntry found = engine::find_plugin_entry(
      "libanneal-mpi.so", kCommunicatorPluginEntry, "launched by mpirun, but anneal's MPI support",
      "Open MPI's libraries", "communicator");
  if (!found.address) throw usage_error(found.reason);
  const CommunicatorPlugin* plugin = reinterpret_cast<CommunicatorPluginEntry>(found.address)();
  if (!plugin || plugin->abi != kCommunicatorPluginAbi || std::string_view(plugin->build) != build::kPluginBuild ||
      !plugin->make)
    throw usage_error(found.path + " was not built with this anneal (" + build::kPluginBuild +
                      "); install the package matching it");
  return plugin->make();
}

}  // namespace anneal
