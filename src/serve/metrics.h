// What a server counts, exposed at GET /metrics in the Prometheus text
// format (0.0.4): requests by route and status code, refused requests by
// the limit they broke, request latency and prediction batch sizes as
// histograms, open connections, and each served model's readiness and the
// version answering for it. Thread-safe. Internal to src/serve/.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace anneal::serve {

class Metrics {
 public:
  // A request answered with `status` on `route` ("infer", "invocations",
  // "metadata", "ready", "health", "metrics", "other", "-" for one refused
  // before it was read whole), in `seconds`; `limit` names the limit a
  // refusal broke ("" for none).
  void request(const std::string& route, int status, double seconds, const std::string& limit = "");
  // One forward pass of `rows` rows for `model` (served name).
  void batch(const std::string& model, std::uint64_t rows);
  // Rows of `model` waiting for a forward pass: `delta` more (or fewer).
  void queued(const std::string& model, std::int64_t delta);
  void connection_opened() { ++connections_; }
  void connection_closed() { --connections_; }
  // The version answering for `model` (0: none: not ready).
  void model_state(const std::string& model, int version, bool ready);

  // The exposition text.
  std::string text() const;

 private:
  static constexpr std::array<double, 16> kLatencyBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                             0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                             1,      2.5,     5,      10};
  static constexpr std::array<double, 12> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384};
  template <std::size_t N>
  struct Histogram {
    std::array<std::uint64_t, N> counts{};  // per bucket (not cumulative)
    std::uint64_t count = 0;
    double sum = 0;
  };

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::map<std::string, std::uint64_t> refused_;
  std::map<std::string, Histogram<kLatencyBuckets.size()>> latency_;
  std::map<std::string, Histogram<kBatchBuckets.size()>> batches_;
  std::map<std::string, std::pair<int, bool>> models_;
  std::map<std::string, std::int64_t> queued_;
  std::atomic<std::int64_t> connections_{0};
};

}  // namespace anneal::serve
