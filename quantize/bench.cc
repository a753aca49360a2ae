// anneal bench: batch inference throughput of a registered model through
// the same Predictor eval uses (preprocessing excluded).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "anneal/error.h"
#include "anneal/quantize.h"
#include "derived_model.h"
#include "anneal/model_file.h"
#include "anneal/model_kind.h"

namespace anneal {

BenchResult bench_model(Store& store, const BenchRequest& request) {
  if (request.batch < 1) throw usage_error(Subject::kBenchBatch, "must be >= 1, not " + std::to_string(request.batch));
  if (request.repeats < 1) throw usage_error(Subject::kBenchRepeats, "must be >= 1");
  if (!(request.seconds > 0)) throw usage_error(Subject::kBenchSeconds, "must be > 0");
  if (request.threads < 1) throw usage_error(Subject::kThreads, "must be >= 1");
  BenchResult result;
  result.model = find_model(store, parse_model_ref(request.model, "MODEL"));
  const runs::ModelFile model = runs::decode_model(read_model(store, result.model), "model " + result.model.ref());
  const runs::ModelKind& kind = runs::model_kind(model);
  result.precision = kind.precision(model);
  result.sparsity = compress::weight_sparsity(model);
  result.batch = request.batch;
  std::int64_t width = 1;
  for (auto d : kind.input_shape(model)) width *= d;

  // Standardized inputs look like N(0, 1): draw them from a fixed-seed
  // generator (SplitMix64 + Box-Muller), so every run sees the same rows.
  auto make_rows = [&](std::int64_t rows) {
    std::vector<float> x(std::size_t(rows * width));
    std::uint64_t s = 0x616e6e65616cull;
    auto next = [&] {
      std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return double((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
    };
    for (auto& v : x) v = float(std::sqrt(-2.0 * std::log(next() + 1e-300)) * std::cos(6.283185307179586 * next()));
    return x;
  };

  const std::unique_ptr<Backend> backend = make_backend({.device = request.device, .threads = request.threads, .int8 = model.int8});
  runs::Predictor predictor(model, *backend, request.batch);
  result.engine = predictor.engine();
  std::vector<float> x = make_rows(request.batch);
  using Clock = std::chrono::steady_clock;
  auto time = [&](const std::vector<float>& rows) {
    const auto t0 = Clock::now();
    predictor.predict(rows);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Warm up (builds primitives, measures sparse vs dense), then size each
  // repeat to about seconds / repeats.
  time(x);
  const double one = std::max(time(x), 1e-6);
  const double per_repeat = request.seconds / request.repeats;
  const auto batches = std::int64_t(std::clamp(per_repeat / one, 1.0, 1e6));
  result.rows_per_repeat = batches * request.batch;
  std::vector<float> rows;
  rows.reserve(std::size_t(result.rows_per_repeat * width));
  for (std::int64_t b = 0; b < batches; ++b) rows.insert(rows.end(), x.begin(), x.end());
  for (int r = 0; r < request.repeats; ++r)
    result.repeat_samples_per_s.push_back(double(result.rows_per_repeat) / time(rows));
  std::vector<double> sorted = result.repeat_samples_per_s;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t mid = sorted.size() / 2;
  result.samples_per_s = sorted.size() % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
  result.layers = predictor.kernels();
  return result;
}

}  // namespace anneal
