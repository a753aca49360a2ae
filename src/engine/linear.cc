#include "anneal/linear.h"

#include <cblas.h>
#include <dlfcn.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>

#include "anneal/error.h"

namespace anneal {
namespace {

// X with a column of ones appended: rows x (inputs + 1), double.
std::vector<double> design_matrix(std::span<const float> features, std::size_t rows, std::size_t inputs) {
  const std::size_t d = inputs + 1;
  std::vector<double> x(rows * d);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < inputs; ++c) x[r * d + c] = features[r * inputs + c];
    x[r * d + inputs] = 1.0;
  }
  return x;
}

std::size_t row_count(std::span<const float> features, std::size_t labels, std::int64_t inputs) {
  if (inputs < 1 || features.size() != labels * static_cast<std::size_t>(inputs))
    throw data_error("linear model: " + std::to_string(features.size()) + " feature values for " +
                     std::to_string(labels) + " rows of " + std::to_string(inputs));
  return labels;
}

// Solves A x = b for symmetric positive definite A (d x d, upper triangle
// used); b is overwritten with x.
void solve_spd(std::vector<double>& a, std::vector<double>& b, std::size_t d) {
  lapack_int info = LAPACKE_dposv(LAPACK_ROW_MAJOR, 'U', static_cast<lapack_int>(d), 1, a.data(),
                                  static_cast<lapack_int>(d), b.data(), 1);
  if (info != 0)
    throw failure("linear model: LAPACK dposv failed (info " + std::to_string(info) +
                  "); the system is not positive definite, raise linear_l2");
}

double sigmoid(double z) { return z >= 0 ? 1.0 / (1.0 + std::exp(-z)) : std::exp(z) / (1.0 + std::exp(z)); }

}  // namespace

void run_blas_on_calling_threads() {
  // One thread from now on: OpenBLAS then never hands work to its pool,
  // so it never starts the pool again.
  openblas_set_num_threads(1);
  // The pool started at load: OpenBLAS's own fork handler, exported by its
  // threaded builds only, so looked up rather than linked.
  using Shutdown = int (*)();
  if (auto shutdown = reinterpret_cast<Shutdown>(dlsym(RTLD_DEFAULT, "blas_thread_shutdown_"))) shutdown();
}

LinearModel fit_logistic(std::span<const float> features, std::span<const float> labels,
                         std::int64_t inputs, std::int64_t classes, double l2,
                         std::span<const float> class_weights) {
  const std::size_t rows = row_count(features, labels.size(), inputs);
  if (classes < 2) throw data_error("linear model: logistic regression needs >= 2 classes");
  if (!class_weights.empty() && static_cast<std::int64_t>(class_weights.size()) != classes)
    throw usage_error("linear model: " + std::to_string(class_weights.size()) + " class weights for " +
                      std::to_string(classes) + " classes");
  auto row_weight = [&](std::size_t r) {
    return class_weights.empty() ? 1.0 : static_cast<double>(class_weights[static_cast<std::size_t>(labels[r])]);
  };
  const std::size_t d = static_cast<std::size_t>(inputs) + 1;
  const std::vector<double> x = design_matrix(features, rows, static_cast<std::size_t>(inputs));
  LinearModel m;
  m.classification = true;
  m.inputs = inputs;
  m.classes = classes;
  m.l2 = l2;
  const std::int64_t fitted = classes == 2 ? 1 : classes;
  m.weights.assign(static_cast<std::size_t>(fitted) * d, 0.0);
  std::vector<double> sqrt_wx(rows * d), hessian(d * d), gradient(d), z(rows);
  for (std::int64_t k = 0; k < fitted; ++k) {
    const float positive = classes == 2 ? 1.0f : static_cast<float>(k);
    double* w = m.weights.data() + static_cast<std::size_t>(k) * d;
    int iteration = 0;
    for (; iteration < 50; ++iteration) {
      // z = X w; gradient = X^T diag(c) (p - y) + l2 w; H = X^T diag(c p(1-p)) X + l2 I,
      // c the row's class weight.
      cblas_dgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(d), 1.0, x.data(),
                  static_cast<int>(d), w, 1, 0.0, z.data(), 1);
      std::fill(gradient.begin(), gradient.end(), 0.0);
      for (std::size_t r = 0; r < rows; ++r) {
        const double p = sigmoid(z[r]);
        const double y = labels[r] == positive ? 1.0 : 0.0;
        const double cw = row_weight(r);
        const double s = std::sqrt(cw * std::max(p * (1 - p), 1e-12));
        for (std::size_t c = 0; c < d; ++c) {
          gradient[c] += cw * (p - y) * x[r * d + c];
          sqrt_wx[r * d + c] = s * x[r * d + c];
        }
      }
      cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(d), static_cast<int>(rows), 1.0,
                  sqrt_wx.data(), static_cast<int>(d), 0.0, hessian.data(), static_cast<int>(d));
      for (std::size_t c = 0; c + 1 < d; ++c) {
        gradient[c] += l2 * w[c];
        hessian[c * d + c] += l2;
      }
      hessian[(d - 1) * d + (d - 1)] += 1e-9;  // keeps a separable intercept solvable
      solve_spd(hessian, gradient, d);
      double step = 0;
      for (std::size_t c = 0; c < d; ++c) {
        w[c] -= gradient[c];
        step = std::max(step, std::abs(gradient[c]));
      }
      if (step < 1e-7) break;
    }
    m.iterations = std::max(m.iterations, iteration + 1);
  }
  return m;
}

LinearModel fit_ridge(std::span<const float> features, std::span<const float> targets, std::int64_t inputs,
                      double l2) {
  const std::size_t rows = row_count(features, targets.size(), inputs);
  const std::size_t d = static_cast<std::size_t>(inputs) + 1;
  const std::vector<double> x = design_matrix(features, rows, static_cast<std::size_t>(inputs));
  std::vector<double> gram(d * d), rhs(d, 0.0), y(targets.begin(), targets.end());
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(d), static_cast<int>(rows), 1.0, x.data(),
              static_cast<int>(d), 0.0, gram.data(), static_cast<int>(d));
  cblas_dgemv(CblasRowMajor, CblasTrans, static_cast<int>(rows), static_cast<int>(d), 1.0, x.data(),
              static_cast<int>(d), y.data(), 1, 0.0, rhs.data(), 1);
  for (std::size_t c = 0; c + 1 < d; ++c) gram[c * d + c] += l2;
  gram[(d - 1) * d + (d - 1)] += 1e-9;
  solve_spd(gram, rhs, d);
  LinearModel m;
  m.classification = false;
  m.inputs = inputs;
  m.l2 = l2;
  m.weights = std::move(rhs);
  m.iterations = 1;
  return m;
}

std::vector<float> LinearModel::predict(std::span<const float> features) const {
  const auto in = static_cast<std::size_t>(inputs);
  if (in == 0 || features.size() % in != 0)
    throw data_error("linear model: " + std::to_string(features.size()) +
                     " feature values is not a whole number of rows of " + std::to_string(inputs));
  const std::size_t rows = features.size() / in, d = in + 1;
  const auto k = static_cast<std::size_t>(outputs());
  const std::size_t fitted = weights.size() / d;
  std::vector<float> out(rows * k);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* x = features.data() + r * in;
    std::vector<double> score(fitted);
    for (std::size_t j = 0; j < fitted; ++j) {
      const double* w = weights.data() + j * d;
      double s = w[in];
      for (std::size_t c = 0; c < in; ++c) s += w[c] * x[c];
      score[j] = s;
    }
    if (!classification) {
      out[r] = static_cast<float>(score[0]);
    } else if (classes == 2) {
      double p = sigmoid(score[0]);
      out[r * 2] = static_cast<float>(1 - p);
      out[r * 2 + 1] = static_cast<float>(p);
    } else {
      double total = 0;
      for (double& s : score) total += (s = sigmoid(s));
      for (std::size_t j = 0; j < k; ++j) out[r * k + j] = static_cast<float>(total > 0 ? score[j] / total : 1.0 / double(k));
    }
  }
  return out;
}

nlohmann::json LinearModel::to_json() const {
  return {{"classification", classification}, {"inputs", inputs}, {"classes", classes},
          {"l2", l2}, {"iterations", iterations}, {"weights", weights}};
}

LinearModel LinearModel::from_json(const nlohmann::json& j) {
  try {
    LinearModel m;
    m.classification = j.at("classification").get<bool>();
    m.inputs = j.at("inputs").get<std::int64_t>();
    m.classes = j.at("classes").get<std::int64_t>();
    m.l2 = j.at("l2").get<double>();
    m.iterations = j.at("iterations").get<int>();
    m.weights = j.at("weights").get<std::vector<double>>();
    const std::size_t fitted = !m.classification || m.classes == 2 ? 1 : static_cast<std::size_t>(m.classes);
    if (m.inputs < 1 || m.weights.size() != fitted * static_cast<std::size_t>(m.inputs + 1))
      throw corrupt("linear model: weights do not match its inputs and classes");
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw corrupt(std::string("linear model: ") + e.what());
  }
}

}  // namespace anneal
