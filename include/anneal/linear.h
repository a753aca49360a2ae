// The linear baseline: L2-regularized logistic regression (classification,
// fitted by Newton's method / IRLS) or ridge regression, solved exactly with
// LAPACK (Cholesky, dposv) rather than by SGD, so the result depends on the
// data alone. Every run on tabular data fits one beside the network so the
// user sees whether the network earns its keep; `layers = linear` makes it
// the model.
//
// Inputs are the preprocessed (standardized, one-hot) features, row-major.
// Pure functions; thread-safe; deterministic. Errors: kBadData for sizes
// that disagree; kFailure when LAPACK cannot solve (not positive definite).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anneal {

struct LinearModel {
  bool classification = true;
  std::int64_t inputs = 0;
  std::int64_t classes = 0;   // classification: K >= 2; regression: 0
  // One row of inputs + 1 values (the intercept last) per fitted output:
  // binary: 1 row (P(class 1)); K > 2: K one-vs-rest rows; regression: 1.
  std::vector<double> weights;
  double l2 = 0;
  int iterations = 0;         // Newton iterations of the slowest output

  std::int64_t outputs() const { return classification ? classes : 1; }
  // rows x outputs(): class probabilities (one-vs-rest sigmoids normalized
  // to sum to 1), or the regression value.
  std::vector<float> predict(std::span<const float> features) const;
  nlohmann::json to_json() const;
  static LinearModel from_json(const nlohmann::json& json);  // kCorrupt on bad JSON
};

// Minimizes sum w_y · log-loss + l2/2 |w|^2 (intercept not penalized) per
// output, w_y = class_weights[label] (empty: all 1, as the network's loss
// weighs its rows). `labels` are class indices 0..classes-1.
LinearModel fit_logistic(std::span<const float> features, std::span<const float> labels,
                         std::int64_t inputs, std::int64_t classes, double l2,
                         std::span<const float> class_weights = {});
// Minimizes |Xw - y|^2 + l2 |w|^2 (intercept not penalized).
LinearModel fit_ridge(std::span<const float> features, std::span<const float> targets,
                      std::int64_t inputs, double l2);

// Makes the BLAS the linear model calls (OpenBLAS) run on its caller's
// thread, and stops the threads it started when the process loaded it.
// Those threads spin for about 2^28 cycles (0.1 s) before they sleep, on a
// core the process's own work needs: on 2 cores they took 5% of a data
// import's time (bench/RESULTS.md). The linear model's products are small
// and the search runs its trials in parallel already, so one thread each
// loses nothing. Call once, first thing in main, before any other thread
// starts; not thread-safe. Where the BLAS is not OpenBLAS, or its
// threadless build, it does nothing.
void run_blas_on_calling_threads();

}  // namespace anneal
