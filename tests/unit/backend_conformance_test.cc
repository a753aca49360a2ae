// The Backend conformance suite: every op of the Backend interface
// (include/anneal/backend.h) against reference results that the test computes
// itself with plain loops in double precision on host vectors, plus
// finite-difference checks of every backward pass.
//
// It is instantiated for every backend the registry knows
// (anneal::available_backends()), with threads 1 and 2; one that is not
// usable on this machine (cuda without a GPU) is reported skipped with the
// registry's reason. It uses only the public interface: values enter through
// copy_from_host and leave through copy_to_host, every call runs inside the
// backend's enter() scope, and no test looks at a tensor's bytes or layout. A new backend joins by adding its
// registry entry; this file must then pass unchanged (docs/ENGINE.md).
//
// How the checks work
//
//   * Forward: the backend's output vs the reference forward, evaluated in
//     double on the values the backend actually holds (inputs are uploaded
//     in the op's dtype and read back, so bf16 rounding of the inputs is not
//     counted as error).
//   * Backward: the scalar L = Σ r ⊙ y for a fixed random r (so ∂L/∂y = r is
//     the dy fed to backward). The analytic gradients are compared with
//       - the numeric gradient of the *reference* forward (central
//         differences in double: accurate to ~1e-9, no hand-written
//         backward formulas to get wrong), for fp32 and bf16;
//       - the numeric gradient of the *backend's own* forward (central
//         differences in fp32), for fp32.
//     Each numeric derivative is taken at two step sizes; where they
//     disagree, the step crossed a kink (relu, max-pool argmax) and the
//     coordinate is skipped. At most a quarter may be skipped.
//   * accumulate = true must add to the gradient tensors' previous values.
//   * Every op is run twice on the same inputs and must give the same bits.
//   * The inference-only ops (int8 and sparse models) are forward only: see
//     their section for how int8 outputs are judged (half a step of the
//     output's grid plus the fp32 tolerance).
//
// Tolerances (see kF32Tolerance / kBf16Tolerance / kFiniteDifference*):
// an element passes when |got − want| ≤ tol · (|want| + max_j |want_j|): a
// relative error, with the tensor's largest value added so that an element
// produced by cancellation (a small sum of large terms) is judged against
// the size of its terms.
//
// Adding an op group: write its reference
// forward as a plain loop, add a section of TEST_P(BackendConformance, ...)
// below that builds a Differentiable (for a differentiable op) or compares
// with expect_close/expect_same_bits (for the rest), and, if the group is
// elementwise or a reduction, add it to run_thread_sensitive_ops() so the
// thread-count determinism check covers it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <limits>
#include <numbers>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "anneal/backend.h"
#include "anneal/device.h"
#include "anneal/error.h"
#include "anneal/loss.h"
#include "anneal/tensor.h"

namespace anneal {
namespace {

using HostTensor = std::vector<float>;
using RefTensor = std::vector<double>;

// ---- Tolerances ---------------------------------------------------------------

// fp32 compute against a double reference: fp32 has a unit roundoff of
// 2^-24 ≈ 6e-8; the ops here reduce at most a few hundred terms and use
// vectorized approximations of exp/tanh/erf accurate to a few ulp, so their
// error stays below ~1e-6 of the terms' size (the largest seen on
// avx512_core_bf16 is 0.17 of the bound). 1e-5 leaves a 5-10x margin and
// still catches any wrong index, missing term or wrong formula (those show
// up at 1e-2 and above).
constexpr double kF32Tolerance = 1e-5;
// bf16 compute: bf16 keeps 8 significant bits (unit roundoff u = 2^-8 ≈
// 3.9e-3). A value crosses up to three bf16 roundings on its way (the bf16
// working copy of the fp32 weights, an intermediate such as the fused
// activation's output that dz is computed from, and the bf16 output or
// gradient), each ≤ u of its size, with fp32 accumulation in between; summing
// such values (a bias gradient over N·H·W positions) can cancel, so the
// error is judged against the tensor's largest value. 8u = 2^-5 ≈ 3.1e-2
// keeps a margin over that worst case (the largest error seen on
// avx512_core_bf16 is 0.3 of this bound), and wrong math (a missing term, a
// wrong index, a wrong formula) is still off by far more.
constexpr double kBf16Tolerance = 1.0 / 32;
// fp16 compute: 11 significant bits (u = 2^-11 ≈ 4.9e-4), the same three
// roundings and cancellation as bf16: 8u = 2^-8.
constexpr double kF16Tolerance = 1.0 / 256;
// The backend's own forward differenced in fp32 (fp32 only): L carries an
// fp32 rounding error of ~1e-6 of its terms, divided by 2h = 2e-2, so the
// numeric derivative is good to ~1e-4 of the gradient's size; 2e-3 is a
// 10x margin.
constexpr float kFiniteDifferenceStep = 1e-2f;
constexpr double kFiniteDifferenceTolerance = 2e-3;
// The reference forward differenced in double: truncation error h²·f'''/6
// ≈ 1e-9 at h = 1e-4; two steps disagreeing by more than 1e-6 mean a kink.
constexpr double kReferenceStep = 1e-4;

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? kF32Tolerance : dtype == DType::kF16 ? kF16Tolerance : kBf16Tolerance;
}

// ---- Host-side helpers ------------------------------------------------------------

HostTensor randn(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  HostTensor v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Values at least `margin` away from zero (relu's kink).
HostTensor away_from_zero(HostTensor v, float margin = 0.05f) {
  for (float& x : v)
    if (std::fabs(x) < margin) x = x < 0 ? x - margin : x + margin;
  return v;
}

// n distinct values k/16 (exact in bf16 for |k| ≤ 256) in a shuffled order:
// max pooling then has no ties, and no perturbation of ±1e-2 changes an argmax.
HostTensor distinct_values(std::size_t n, std::uint32_t seed) {
  HostTensor v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (float(i) - float(n) / 2.0f) / 16.0f;
  std::mt19937 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

RefTensor to_double(const HostTensor& v) { return RefTensor(v.begin(), v.end()); }

bool verbose() { return std::getenv("ANNEAL_CONFORMANCE_VERBOSE") != nullptr; }

// |got − want| ≤ absolute + tol · (|want| + max(max_j |want_j|, scale_floor))
// for every element; reports the first few offenders. Elements whose `want` is
// NaN are skipped. `scale_floor` is the size of the terms an output sums when
// that can exceed the outputs themselves (a relu after a sum that cancelled);
// `absolute` is a quantization grid's share (half a step of an int8 output).
void expect_close(const std::string& what, const HostTensor& got, const RefTensor& want,
                  double tol, double scale_floor = 0, double absolute = 0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = scale_floor;
  for (double w : want)
    if (!std::isnan(w)) scale = std::max(scale, std::fabs(w));
  int reported = 0;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) continue;
    const double bound = absolute + tol * (std::fabs(want[i]) + scale);
    const double err = std::fabs(double(got[i]) - want[i]);
    if (bound > 0) worst = std::max(worst, err / bound);
    if (!(err <= bound) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (error " << err << " > bound " << bound << ")";
  }
  if (verbose()) std::printf("  %-48s tolerance %.1e: worst error / bound = %.3f\n", what.c_str(), tol, worst);
}

void expect_close(const std::string& what, const HostTensor& got, const HostTensor& want,
                  double tol) {
  expect_close(what, got, to_double(want), tol);
}

void expect_same_bits(const std::string& what, const HostTensor& a, const HostTensor& b) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": differs first at [" << i << "]: " << a[i] << " vs " << b[i];
      return;
    }
}

double activation_ref(Activation a, double x) {
  switch (a) {
    case Activation::kNone: return x;
    case Activation::kRelu: return x > 0 ? x : 0;
    case Activation::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));  // the exact (erf) form
    case Activation::kTanh: return std::tanh(x);
    case Activation::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
  }
  return 0;
}

std::string dtype_trace(DType dt) { return std::string("dtype ") + dtype_name(dt); }

// ---- The parameter: a backend from the registry -----------------------------------------

struct BackendCase {
  Device device;
  int threads;
};

// Every backend the registry knows, usable here or not: one that is not
// is reported skipped, with the registry's reason, rather than left out.
std::vector<BackendCase> known_backends() {
  std::vector<BackendCase> cases;
  for (const BackendAvailability& a : available_backends())
    for (int threads : {1, 2}) cases.push_back({a.device, threads});
  return cases;
}

void PrintTo(const BackendCase& c, std::ostream* os) {
  *os << device_name(c.device) << " with " << c.threads << " thread(s)";
}

std::string case_name(const ::testing::TestParamInfo<BackendCase>& info) {
  return std::string(device_name(info.param.device)) + "_threads" +
         std::to_string(info.param.threads);
}

// A differentiable op instance: its inputs' host values and three views of
// it (the backend's forward, the backend's backward, the reference forward).
struct Differentiable {
  std::vector<std::string> names;  // one per input: "x", "weights", ...
  std::vector<HostTensor> values;  // the values the backend holds (read back)
  // Uploads `values`, runs the backend's forward, returns y.
  std::function<HostTensor()> forward;
  // Uploads `values`, runs forward and backward with dy = r, returns one
  // gradient per input (empty for an input without one). With `start`
  // non-null, the parameter gradients are first set to (*start)[k] and the
  // backward runs with accumulate = true.
  std::function<std::vector<HostTensor>(const HostTensor& r, const std::vector<HostTensor>* start)>
      backward;
  // y in double from the inputs in double.
  std::function<RefTensor(const std::vector<RefTensor>&)> reference;
  // Inputs whose gradient accumulates (parameters; not x).
  std::vector<bool> accumulates;
  // Optional: for ops that sum products (dense, conv), the sum of the terms'
  // absolute values per output, Σ|x·w| + |b|: the scale that the forward's
  // rounding error is relative to.
  std::function<RefTensor(const std::vector<RefTensor>&)> terms;
};

class BackendConformance : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    for (const BackendAvailability& a : available_backends())
      if (a.device == GetParam().device && !a.usable)
        GTEST_SKIP() << device_name(a.device) << " is not usable here: " << a.reason;
    backend_ = make_backend({.device = GetParam().device, .threads = GetParam().threads});
    scope_ = backend_->enter();
  }
  void TearDown() override { scope_.reset(); }

  Backend& be() { return *backend_; }
  const BackendCapabilities& caps() { return backend_->capabilities(); }

  // fp32 always, bf16 and fp16 where the backend computes in them.
  std::vector<DType> precisions() {
    std::vector<DType> p{DType::kF32};
    if (caps().bf16) p.push_back(DType::kBF16);
    if (caps().fp16) p.push_back(DType::kF16);
    return p;
  }

  void upload(Tensor& t, const HostTensor& values) {
    ASSERT_EQ(std::size_t(t.elements()), values.size()) << "upload into " << t.dims().str();
    be().copy_from_host(values.data(), t);
  }
  HostTensor read(const Tensor& t) {
    HostTensor h(std::size_t(t.elements()));
    be().copy_to_host(t, h.data());
    return h;
  }
  Tensor plain(const Dims& dims, const HostTensor& values, DType dt = DType::kF32) {
    Tensor t;
    be().shape_plain(t, dims, dt);
    upload(t, values);
    return t;
  }
  // The values as a tensor of dtype `dt` holds them.
  HostTensor stored(const HostTensor& values, DType dt) {
    if (dt == DType::kF32) return values;
    Tensor t = plain(Dims{std::int64_t(values.size())}, values, dt);
    return read(t);
  }

  // A tensor of dims (N, C, H, W) in the layout this backend's conv chooses
  // for its output (e.g. a blocked one): what a pool, norm, eltwise or dense
  // after a conv receives. Its values are unspecified; use it with shape_like.
  Tensor conv_output_like(const Dims& nchw, DType dt) {
    auto conv = be().conv(ConvSpec{Dims{1, nchw[2], nchw[3]}, nchw[1], 1, 1, 0, dt,
                                   Activation::kNone, nchw[0]});
    Tensor x, w, b, y;
    be().shape_plain(x, Dims{nchw[0], 1, nchw[2], nchw[3]}, dt);
    be().fill_zero(x);
    conv->shape_parameters(w, b);
    be().fill_zero(w);
    be().fill_zero(b);
    conv->forward(x, w, b, y);
    EXPECT_EQ(y.dims(), nchw);
    return y;
  }

  // fp32 tensors in the layouts parameters live in, each with a name: plain,
  // and the master-weight layouts a dense and a conv op chose (possibly
  // blocked): what the optimizers, multiply (pruning) and clip_scale see.
  // Values are unspecified; use them with shape_like.
  std::vector<std::pair<std::string, Tensor>> parameter_layouts() {
    std::vector<std::pair<std::string, Tensor>> out;
    Tensor p, w, b;
    be().shape_plain(p, Dims{37}, DType::kF32);  // two vectors of 16 and a tail
    out.emplace_back("plain {37}", std::move(p));
    auto dense = be().dense(DenseSpec{Dims{9}, 5, DType::kF32, Activation::kNone, 128});
    dense->shape_parameters(w, b);
    out.emplace_back("dense weights " + w.dims().str(), std::move(w));
    auto conv = be().conv(ConvSpec{Dims{16, 5, 5}, 16, 3, 1, 1, DType::kF32, Activation::kNone, 128});
    conv->shape_parameters(w, b);
    out.emplace_back("conv weights " + w.dims().str(), std::move(w));
    return out;
  }
  Tensor shaped_like(const Tensor& like, const HostTensor& values) {
    Tensor t;
    be().shape_like(t, like, DType::kF32);
    upload(t, values);
    return t;
  }

  // Numeric ∂(Σ r·reference)/∂values[k][i] in double; NaN at a kink.
  double reference_derivative(const Differentiable& d, std::vector<RefTensor>& v, std::size_t k,
                              std::size_t i, const HostTensor& r) {
    auto objective = [&] {
      const RefTensor y = d.reference(v);
      double s = 0;
      for (std::size_t j = 0; j < y.size(); ++j) s += y[j] * double(r[j]);
      return s;
    };
    auto central = [&](double h) {
      const double original = v[k][i];
      v[k][i] = original + h;
      const double up = objective();
      v[k][i] = original - h;
      const double down = objective();
      v[k][i] = original;
      return (up - down) / (2 * h);
    };
    const double h = kReferenceStep * std::max(1.0, std::fabs(v[k][i]));
    const double g1 = central(h), g2 = central(h / 2);
    if (std::fabs(g1 - g2) > 1e-6 * (1.0 + std::fabs(g2))) return std::nan("");
    return g2;
  }

  // Numeric ∂L/∂values[k][i] through the backend's forward, in fp32, at two steps.
  std::pair<double, double> backend_derivative(Differentiable& d, std::size_t k, std::size_t i,
                                               const HostTensor& r) {
    auto objective = [&] {
      const HostTensor y = d.forward();
      double s = 0;
      for (std::size_t j = 0; j < y.size(); ++j) s += double(y[j]) * double(r[j]);
      return s;
    };
    auto central = [&](float h) {
      const float original = d.values[k][i];
      d.values[k][i] = original + h;
      const double up = objective();
      d.values[k][i] = original - h;
      const double down = objective();
      d.values[k][i] = original;
      return (up - down) / (double(original + h) - double(original - h));
    };
    return {central(kFiniteDifferenceStep), central(kFiniteDifferenceStep / 2)};
  }

  // The whole check of a differentiable op in dtype `dt` (see the top of the file).
  void check_differentiable(Differentiable& d, DType dt, std::uint32_t seed = 99) {
    std::vector<RefTensor> v;
    for (const HostTensor& h : d.values) v.push_back(to_double(h));
    const HostTensor y = d.forward();
    double terms = 0;
    if (d.terms) {
      std::vector<RefTensor> magnitudes = v;
      for (RefTensor& m : magnitudes)
        for (double& e : m) e = std::fabs(e);
      for (double t : d.terms(magnitudes)) terms = std::max(terms, t);
    }
    expect_close("forward", y, d.reference(v), tolerance(dt), terms);
    expect_same_bits("forward run twice", y, d.forward());

    const HostTensor r = stored(randn(y.size(), seed), dt);
    const std::vector<HostTensor> grads = d.backward(r, nullptr);
    ASSERT_EQ(grads.size(), d.values.size());
    {
      const std::vector<HostTensor> again = d.backward(r, nullptr);
      for (std::size_t k = 0; k < grads.size(); ++k)
        expect_same_bits("d" + d.names[k] + " run twice", grads[k], again[k]);
    }

    for (std::size_t k = 0; k < grads.size(); ++k) {
      if (grads[k].empty()) continue;
      SCOPED_TRACE("gradient of " + d.names[k]);
      ASSERT_EQ(grads[k].size(), d.values[k].size());
      // vs the reference, every coordinate.
      RefTensor want(grads[k].size());
      std::size_t kinks = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        want[i] = reference_derivative(d, v, k, i, r);
        kinks += std::isnan(want[i]);
      }
      EXPECT_LE(4 * kinks, want.size()) << "too many coordinates at a kink";
      double norm = 0;
      for (float g : grads[k]) norm += double(g) * g;
      EXPECT_GT(norm, 0.0) << "the gradient is all zero";
      expect_close("d" + d.names[k] + " vs reference", grads[k], want, tolerance(dt));

      // vs the backend's own forward differenced, a sample of coordinates (fp32).
      if (dt == DType::kF32) {
        double scale = 0;
        for (float g : grads[k]) scale = std::max(scale, double(std::fabs(g)));
        const std::size_t stride = std::max<std::size_t>(1, grads[k].size() / 16);
        int checked = 0, skipped = 0;
        for (std::size_t i = (k * 7) % stride; i < grads[k].size(); i += stride) {
          const auto [n1, n2] = backend_derivative(d, k, i, r);
          const double bound = kFiniteDifferenceTolerance * (std::fabs(n2) + scale);
          if (std::fabs(n1 - n2) > bound) {
            ++skipped;
            continue;
          }
          ++checked;
          EXPECT_NEAR(grads[k][i], n2, bound)
              << "d" << d.names[k] << "[" << i << "] vs the backend's forward differenced";
        }
        EXPECT_GE(checked, 3 * skipped) << "too many coordinates at a kink";
        EXPECT_GT(checked, 0);
      }
    }

    // accumulate = true adds to what the gradient tensors held.
    std::vector<HostTensor> start(d.values.size());
    bool any = false;
    for (std::size_t k = 0; k < start.size(); ++k)
      if (k < d.accumulates.size() && d.accumulates[k]) {
        start[k] = randn(grads[k].size(), seed + 17 + std::uint32_t(k));
        any = true;
      }
    if (!any) return;
    const std::vector<HostTensor> summed = d.backward(r, &start);
    for (std::size_t k = 0; k < start.size(); ++k) {
      if (start[k].empty()) continue;
      RefTensor want(start[k].size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = double(start[k][i]) + grads[k][i];
      expect_close("d" + d.names[k] + " with accumulate", summed[k], want, kF32Tolerance);
    }
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ExecutionScope> scope_;
};

// ======================================================================================
// Memory and transfers
// ======================================================================================

const std::vector<Dims>& odd_shapes() {
  static const std::vector<Dims> shapes = {Dims{1},          Dims{7},
                                           Dims{3, 5},       Dims{2, 3, 5, 7},
                                           Dims{1, 3, 1, 5, 2}, Dims{5, 1, 1, 1}};
  return shapes;
}

TEST_P(BackendConformance, ShapePlainGivesTheDimsAndDtypeAsked) {
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    for (const Dims& dims : odd_shapes()) {
      Tensor t;
      be().shape_plain(t, dims, dt);
      EXPECT_EQ(t.dims(), dims);
      EXPECT_EQ(t.dtype(), dt);
      EXPECT_EQ(t.elements(), dims.product());
      EXPECT_FALSE(t.empty());
    }
    // Reshaping an existing tensor, smaller then larger, keeps working.
    Tensor t;
    for (const Dims& dims : {Dims{4, 9}, Dims{2, 3}, Dims{6, 11}}) {
      be().shape_plain(t, dims, dt);
      const HostTensor v = stored(randn(std::size_t(dims.product()), 3), dt);
      upload(t, v);
      expect_same_bits("round trip after reshape to " + dims.str(), read(t), v);
    }
  }
}

TEST_P(BackendConformance, CopyRoundTripIsExactInF32AndRoundsToNearestInBf16) {
  for (const Dims& dims : odd_shapes()) {
    SCOPED_TRACE(dims.str());
    const HostTensor v = randn(std::size_t(dims.product()), 5, 3.0f);
    Tensor t = plain(dims, v);
    expect_same_bits("f32 round trip", read(t), v);
    if (!caps().bf16) continue;
    Tensor b = plain(dims, v, DType::kBF16);
    const HostTensor got = read(b);
    for (std::size_t i = 0; i < v.size(); ++i)
      EXPECT_LE(std::fabs(got[i] - v[i]), std::ldexp(std::fabs(v[i]), -8))
          << "bf16 of " << v[i] << " is " << got[i] << ": not the nearest";
    // Values bf16 holds exactly come back exactly; converting again changes nothing.
    expect_same_bits("bf16 round trip of bf16 values", read(plain(dims, got, DType::kBF16)), got);
  }
}

TEST_P(BackendConformance, CopyRoundTripRoundsToNearestInF16) {
  if (!caps().fp16) GTEST_SKIP() << "no fp16 on this backend";
  for (const Dims& dims : odd_shapes()) {
    SCOPED_TRACE(dims.str());
    const HostTensor v = randn(std::size_t(dims.product()), 5, 3.0f);
    const HostTensor got = read(plain(dims, v, DType::kF16));
    for (std::size_t i = 0; i < v.size(); ++i)
      EXPECT_LE(std::fabs(got[i] - v[i]), std::max(std::ldexp(std::fabs(v[i]), -11), std::ldexp(1.0f, -25)))
          << "f16 of " << v[i] << " is " << got[i] << ": not the nearest";
    expect_same_bits("f16 round trip of f16 values", read(plain(dims, got, DType::kF16)), got);
  }
}

TEST_P(BackendConformance, ShapeLikeAndCopiesWorkInAConvOutputLayout) {
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const Dims dims{3, 16, 3, 5};
    const Tensor like = conv_output_like(dims, dt);
    for (DType as : precisions()) {
      Tensor t;
      be().shape_like(t, like, as);
      EXPECT_EQ(t.dims(), dims);
      EXPECT_EQ(t.dtype(), as);
      const HostTensor v = stored(randn(std::size_t(dims.product()), 7), as);
      upload(t, v);
      expect_same_bits(std::string("round trip as ") + dtype_name(as), read(t), v);
    }
  }
}

TEST_P(BackendConformance, FlattenAndUnflattenKeepRowMajorOrder) {
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const Dims dims{2, 16, 3, 3};
    const HostTensor v = stored(randn(std::size_t(dims.product()), 9), dt);
    const Tensor conv_like = conv_output_like(dims, dt);
    for (bool conv_layout : {false, true}) {
      SCOPED_TRACE(conv_layout ? "conv output layout" : "plain");
      Tensor src;
      if (conv_layout) {
        be().shape_like(src, conv_like, dt);
      } else {
        be().shape_plain(src, dims, dt);
      }
      upload(src, v);
      Tensor flat;
      be().flatten(src, flat);
      EXPECT_EQ(flat.dims(), (Dims{2, 144}));
      EXPECT_EQ(flat.dtype(), dt);
      expect_same_bits("flatten", read(flat), v);

      const HostTensor g = stored(randn(v.size(), 10), dt);
      Tensor gflat = plain(Dims{2, 144}, g, dt);
      Tensor gimg;
      be().unflatten(gflat, src, gimg);
      EXPECT_EQ(gimg.dims(), dims);
      EXPECT_EQ(gimg.dtype(), dt);
      expect_same_bits("unflatten", read(gimg), g);
    }
  }
}

TEST_P(BackendConformance, HostViewIsNullOrAliasesAPlainF32Tensor) {
  const HostTensor v = randn(15, 18);
  Tensor t = plain(Dims{3, 5}, v);
  if (float* view = be().host_view(t)) {
    expect_same_bits("values through the view", HostTensor(view, view + 15), v);
    view[4] = 42.0f;  // what a batch pipeline gathering into it does
    t.mark_modified();
    HostTensor want = v;
    want[4] = 42.0f;
    expect_same_bits("a write through the view", read(t), want);
  }
  if (caps().bf16) {
    Tensor b = plain(Dims{3, 5}, v, DType::kBF16);
    EXPECT_EQ(be().host_view(b), nullptr) << "a bf16 tensor has no fp32 host view";
  }
}

// storage_view: the whole fp32 storage in the tensor's own layout, for
// element-wise work done in place (gradients summed across ranks). Doubling
// every stored float doubles every element whatever the layout (padding
// stays zero), and the description tells layouts apart.
TEST_P(BackendConformance, StorageViewIsEmptyOrTheWholeStorageInItsLayout) {
  const Dims dims{3, 16, 3, 5};
  const HostTensor v = randn(std::size_t(dims.product()), 19);
  Tensor t;
  be().shape_like(t, conv_output_like(dims, DType::kF32), DType::kF32);
  upload(t, v);
  const Backend::StorageView view = be().storage_view(t);
  if (view.data == nullptr) {
    EXPECT_EQ(view.elements, 0u);
    EXPECT_TRUE(view.layout.empty());
    GTEST_SKIP() << "no host-addressable storage on this backend";
  }
  EXPECT_EQ(view.elements * sizeof(float), t.bytes());
  EXPECT_FALSE(view.layout.empty());
  for (std::size_t i = 0; i < view.elements; ++i) view.data[i] *= 2.0f;
  t.mark_modified();
  HostTensor doubled = v;
  for (float& x : doubled) x *= 2.0f;
  expect_same_bits("every element doubled through the view", read(t), doubled);

  Tensor same;
  be().shape_like(same, t, DType::kF32);
  EXPECT_EQ(be().storage_view(same).layout, view.layout) << "one layout, two descriptions";
  Tensor flat = plain(dims, v);
  if (!t.layout()->is_plain()) {
    EXPECT_NE(be().storage_view(flat).layout, view.layout) << "a blocked and a plain layout described alike";
  }
  Tensor reshaped = plain(Dims{3, 16, 15}, v);
  EXPECT_NE(be().storage_view(flat).layout, be().storage_view(reshaped).layout) << "other dims described alike";
  if (caps().bf16) {
    Tensor b = plain(dims, v, DType::kBF16);
    EXPECT_EQ(be().storage_view(b).data, nullptr) << "a bf16 tensor has no fp32 storage view";
  }
}

TEST_P(BackendConformance, FillZeroZeroesEveryElement) {
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const Dims dims{2, 16, 3, 3};
    Tensor a = plain(Dims{3, 7}, randn(21, 12), dt);
    Tensor b;
    be().shape_like(b, conv_output_like(dims, dt), dt);
    upload(b, randn(std::size_t(dims.product()), 13));
    for (Tensor* t : {&a, &b}) {
      be().fill_zero(*t);
      const HostTensor h = read(*t);
      EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](float x) { return x == 0.0f && !std::signbit(x); }));
    }
  }
}

TEST_P(BackendConformance, MultiplyIsAnExactElementwiseProduct) {
  for (const auto& [name, like] : parameter_layouts()) {
    SCOPED_TRACE(name);
    const HostTensor a = randn(std::size_t(like.elements()), 14);
    HostTensor m = randn(a.size(), 15);
    for (std::size_t i = 0; i < m.size(); i += 3) m[i] = 0.0f;  // a pruning mask's zeros
    for (std::size_t i = 1; i < m.size(); i += 3) m[i] = 1.0f;
    Tensor t = shaped_like(like, a), mask = shaped_like(like, m);
    const std::uint64_t version = t.version();
    be().multiply(t, mask);
    EXPECT_GT(t.version(), version) << "multiply must mark t modified";
    HostTensor want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) want[i] = a[i] * m[i];  // one IEEE product: exact
    expect_same_bits("t ⊙ mask", read(t), want);
  }
}

TEST_P(BackendConformance, UpdateRunningStatBlendsWithMomentumAndScale) {
  const HostTensor running = randn(13, 16), batch = randn(13, 17);
  for (const auto& [momentum, scale] : {std::pair{0.1f, 1.0f}, std::pair{0.25f, 1.2f}}) {
    Tensor r = plain(Dims{13}, running), b = plain(Dims{13}, batch);
    be().update_running_stat(r, b, momentum, scale);
    RefTensor want(13);
    for (std::size_t i = 0; i < 13; ++i)
      want[i] = (1.0 - momentum) * running[i] + double(momentum) * scale * batch[i];
    expect_close("running", read(r), want, kF32Tolerance);
  }
}

// ======================================================================================
// Eltwise
// ======================================================================================

TEST_P(BackendConformance, EltwiseForwardBackwardAndBackwardFromOutput) {
  for (DType dt : precisions()) {
    for (Activation act :
         {Activation::kRelu, Activation::kGelu, Activation::kTanh, Activation::kSigmoid}) {
      for (bool conv_layout : {false, true}) {
        SCOPED_TRACE(dtype_trace(dt) + ", " + activation_name(act) +
                     (conv_layout ? ", conv output layout" : ", plain"));
        const Dims dims = conv_layout ? Dims{2, 16, 2, 3} : Dims{3, 7};
        auto op = be().eltwise(EltwiseSpec{act, dt});
        Tensor x, y, dy, dx, dx_from_y;
        if (conv_layout) {
          be().shape_like(x, conv_output_like(dims, dt), dt);
        } else {
          be().shape_plain(x, dims, dt);
        }
        const bool from_output = act != Activation::kGelu;  // relu, tanh, sigmoid only
        Differentiable d;
        d.names = {"x"};
        d.values = {stored(away_from_zero(randn(std::size_t(dims.product()), 20, 1.5f)), dt)};
        d.forward = [&] {
          upload(x, d.values[0]);
          op->forward(x, y);
          EXPECT_EQ(y.dims(), x.dims());
          EXPECT_EQ(y.dtype(), x.dtype());
          return read(y);
        };
        d.backward = [&](const HostTensor& r, const std::vector<HostTensor>*) {
          upload(x, d.values[0]);
          op->forward(x, y);
          be().shape_like(dy, y, dt);
          upload(dy, r);
          op->backward(x, dy, dx);
          EXPECT_EQ(dx.dims(), x.dims());
          EXPECT_EQ(dx.dtype(), x.dtype());
          if (from_output) {
            // The same derivative from the output: equal up to the rounding
            // of y (exact in fp32 for relu; one rounding of y in bf16).
            op->backward_from_output(y, dy, dx_from_y);
            EXPECT_EQ(dx_from_y.dims(), x.dims());
            expect_close("backward_from_output vs backward", read(dx_from_y), read(dx),
                         tolerance(dt));
          }
          return std::vector<HostTensor>{read(dx)};
        };
        d.reference = [&](const std::vector<RefTensor>& v) {
          RefTensor out(v[0].size());
          for (std::size_t i = 0; i < out.size(); ++i) out[i] = activation_ref(act, v[0][i]);
          return out;
        };
        check_differentiable(d, dt);
      }
    }
  }
}

// ======================================================================================
// Dense
// ======================================================================================

// y(N,O) = act(x(N,F) · W(O,F)ᵀ + b); an image input is flattened in C,H,W order.
RefTensor dense_ref(const std::vector<RefTensor>& v, std::int64_t n, std::int64_t f,
                    std::int64_t out, Activation act) {
  RefTensor y(std::size_t(n * out));
  for (std::int64_t s = 0; s < n; ++s)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = v[2][std::size_t(o)];
      for (std::int64_t i = 0; i < f; ++i) acc += v[0][std::size_t(s * f + i)] * v[1][std::size_t(o * f + i)];
      y[std::size_t(s * out + o)] = activation_ref(act, acc);
    }
  return y;
}

class DenseCheck {
 public:
  // `x_like`: when given, x takes its layout (an image in a conv's output layout).
  DenseCheck(Backend& be, const Dims& in, std::int64_t n, std::int64_t out,
             Activation act, DType dt, const Tensor* x_like)
      : be_(be), op_(be.dense(DenseSpec{in, out, dt, act, n})) {
    if (act != Activation::kNone) act_op_ = be.eltwise(EltwiseSpec{act, dt});
    if (x_like != nullptr) {
      be.shape_like(x_, *x_like, dt);
    } else {
      be.shape_plain(x_, in.with_batch(n), dt);
    }
    op_->shape_parameters(w_, b_);
    op_->shape_parameters(dw_, db_);
  }

  void build(Differentiable& d, std::function<void(Tensor&, const HostTensor&)> upload,
             std::function<HostTensor(const Tensor&)> read) {
    auto upload_all = [this, &d, upload] {
      upload(x_, d.values[0]);
      upload(w_, d.values[1]);
      upload(b_, d.values[2]);
    };
    d.names = {"x", "weights", "bias"};
    d.accumulates = {false, true, true};
    d.forward = [this, upload_all, read] {
      upload_all();
      op_->forward(x_, w_, b_, y_);
      return read(y_);
    };
    d.backward = [this, upload_all, upload, read](const HostTensor& r,
                                                  const std::vector<HostTensor>* start) {
      upload_all();
      op_->forward(x_, w_, b_, y_);
      be_.shape_like(dy_, y_, y_.dtype());
      upload(dy_, r);
      const Tensor* dz = &dy_;
      if (act_op_) {
        act_op_->backward_from_output(y_, dy_, dz_);
        dz = &dz_;
      }
      if (start != nullptr) {
        upload(dw_, (*start)[1]);
        upload(db_, (*start)[2]);
      }
      op_->backward_weights(x_, *dz, dw_, db_, start != nullptr);
      op_->backward_data(*dz, w_, dx_);
      EXPECT_EQ(dx_.dims(), x_.dims());
      EXPECT_EQ(dx_.dtype(), x_.dtype());
      return std::vector<HostTensor>{read(dx_), read(dw_), read(db_)};
    };
  }

  const Tensor& weights() const { return w_; }

 private:
  Backend& be_;
  std::unique_ptr<DenseOp> op_;
  std::unique_ptr<EltwiseOp> act_op_;
  Tensor x_, w_, b_, y_, dy_, dz_, dx_, dw_, db_;
};

TEST_P(BackendConformance, DenseFlatInputWithEachFusedActivation) {
  const std::int64_t n = 3, f = 5, out = 4;
  for (DType dt : precisions())
    for (Activation act :
         {Activation::kNone, Activation::kRelu, Activation::kTanh, Activation::kSigmoid}) {
      SCOPED_TRACE(dtype_trace(dt) + ", fused " + activation_name(act));
      DenseCheck c(be(), Dims{f}, n, out, act, dt, nullptr);
      Differentiable d;
      c.build(d, [this](Tensor& t, const HostTensor& v) { upload(t, v); },
              [this](const Tensor& t) { return read(t); });
      EXPECT_EQ(c.weights().dims(), (Dims{out, f}));
      d.values = {stored(randn(n * f, 21), dt), randn(out * f, 22, 0.5f), randn(out, 23, 0.5f)};
      d.reference = [&](const std::vector<RefTensor>& v) { return dense_ref(v, n, f, out, act); };
      d.terms = [&](const std::vector<RefTensor>& v) { return dense_ref(v, n, f, out, Activation::kNone); };
      check_differentiable(d, dt);
    }
}

TEST_P(BackendConformance, DenseImageInputPlainAndInAConvOutputLayout) {
  const std::int64_t n = 2, out = 3;
  for (DType dt : precisions())
    for (bool conv_layout : {false, true}) {
      for (Activation act : {Activation::kNone, Activation::kRelu}) {
        SCOPED_TRACE(dtype_trace(dt) + (conv_layout ? ", conv output layout" : ", plain") +
                     ", fused " + activation_name(act));
        const Dims in = conv_layout ? Dims{16, 2, 3} : Dims{2, 3, 3};
        const std::int64_t f = in.product();
        Tensor like;
        if (conv_layout) like = conv_output_like(in.with_batch(n), dt);
        DenseCheck c(be(), in, n, out, act, dt, conv_layout ? &like : nullptr);
        Differentiable d;
        c.build(d, [this](Tensor& t, const HostTensor& v) { upload(t, v); },
                [this](const Tensor& t) { return read(t); });
        EXPECT_EQ(c.weights().dims(), in.with_batch(out));
        d.values = {stored(randn(std::size_t(n * f), 24), dt), randn(std::size_t(out * f), 25, 0.3f),
                    randn(std::size_t(out), 26, 0.5f)};
        d.reference = [&](const std::vector<RefTensor>& v) { return dense_ref(v, n, f, out, act); };
        d.terms = [&](const std::vector<RefTensor>& v) { return dense_ref(v, n, f, out, Activation::kNone); };
        check_differentiable(d, dt);
      }
    }
}

// ======================================================================================
// Convolution
// ======================================================================================

struct ConvShape {
  std::int64_t n, c, h, w, out, k, stride, pad;
  std::int64_t ho() const { return (h + 2 * pad - k) / stride + 1; }
  std::int64_t wo() const { return (w + 2 * pad - k) / stride + 1; }
};

RefTensor conv_ref(const std::vector<RefTensor>& v, const ConvShape& s, Activation act) {
  const RefTensor &x = v[0], &wt = v[1], &b = v[2];
  RefTensor y(std::size_t(s.n * s.out * s.ho() * s.wo()));
  std::size_t at = 0;
  for (std::int64_t n = 0; n < s.n; ++n)
    for (std::int64_t o = 0; o < s.out; ++o)
      for (std::int64_t i = 0; i < s.ho(); ++i)
        for (std::int64_t j = 0; j < s.wo(); ++j) {
          double acc = b[std::size_t(o)];
          for (std::int64_t c = 0; c < s.c; ++c)
            for (std::int64_t ki = 0; ki < s.k; ++ki)
              for (std::int64_t kj = 0; kj < s.k; ++kj) {
                const std::int64_t hi = i * s.stride - s.pad + ki, wj = j * s.stride - s.pad + kj;
                if (hi < 0 || hi >= s.h || wj < 0 || wj >= s.w) continue;  // zero padding
                acc += x[std::size_t(((n * s.c + c) * s.h + hi) * s.w + wj)] *
                       wt[std::size_t(((o * s.c + c) * s.k + ki) * s.k + kj)];
              }
          y[at++] = activation_ref(act, acc);
        }
  return y;
}

TEST_P(BackendConformance, ConvWithStridePaddingAndFusedActivations) {
  const ConvShape shapes[] = {
      {2, 3, 5, 5, 4, 3, 1, 0},  // plain 3x3
      {2, 3, 6, 7, 4, 3, 2, 1},  // stride 2, pad 1, non-square image
      {1, 2, 5, 5, 3, 2, 2, 0},  // even kernel, stride 2 (drops the last column)
      {2, 2, 4, 4, 3, 1, 1, 0},  // 1x1
  };
  for (DType dt : precisions())
    for (const ConvShape& s : shapes)
      for (Activation act :
           {Activation::kNone, Activation::kRelu, Activation::kTanh, Activation::kSigmoid}) {
        SCOPED_TRACE(dtype_trace(dt) + ", in " + (Dims{s.n, s.c, s.h, s.w}).str() + " k" +
                     std::to_string(s.k) + " stride " + std::to_string(s.stride) + " pad " +
                     std::to_string(s.pad) + ", fused " + activation_name(act));
        auto op = be().conv(ConvSpec{Dims{s.c, s.h, s.w}, s.out, s.k, s.stride, s.pad, dt, act, s.n});
        std::unique_ptr<EltwiseOp> act_op;
        if (act != Activation::kNone) act_op = be().eltwise(EltwiseSpec{act, dt});
        Tensor x, w, b, y, dy, dz, dx, dw, db;
        be().shape_plain(x, Dims{s.n, s.c, s.h, s.w}, dt);
        op->shape_parameters(w, b);
        op->shape_parameters(dw, db);
        EXPECT_EQ(w.dims(), (Dims{s.out, s.c, s.k, s.k}));
        EXPECT_EQ(b.dims(), (Dims{s.out}));
        Differentiable d;
        d.names = {"x", "weights", "bias"};
        d.accumulates = {false, true, true};
        d.values = {stored(randn(std::size_t(x.elements()), 30), dt),
                    randn(std::size_t(w.elements()), 31, 0.4f), randn(std::size_t(s.out), 32, 0.5f)};
        auto upload_all = [&] {
          upload(x, d.values[0]);
          upload(w, d.values[1]);
          upload(b, d.values[2]);
        };
        d.forward = [&] {
          upload_all();
          op->forward(x, w, b, y);
          EXPECT_EQ(y.dims(), (Dims{s.n, s.out, s.ho(), s.wo()}));
          return read(y);
        };
        d.backward = [&](const HostTensor& r, const std::vector<HostTensor>* start) {
          upload_all();
          op->forward(x, w, b, y);
          be().shape_like(dy, y, y.dtype());
          upload(dy, r);
          const Tensor* g = &dy;
          if (act_op) {
            act_op->backward_from_output(y, dy, dz);
            g = &dz;
          }
          if (start != nullptr) {
            upload(dw, (*start)[1]);
            upload(db, (*start)[2]);
          }
          op->backward_weights(x, *g, dw, db, start != nullptr);
          op->backward_data(*g, w, dx);
          EXPECT_EQ(dx.dims(), x.dims());
          EXPECT_EQ(dx.dtype(), x.dtype());
          return std::vector<HostTensor>{read(dx), read(dw), read(db)};
        };
        d.reference = [&](const std::vector<RefTensor>& v) { return conv_ref(v, s, act); };
        d.terms = [&](const std::vector<RefTensor>& v) { return conv_ref(v, s, Activation::kNone); };
        check_differentiable(d, dt);
      }
}

// ======================================================================================
// Pooling
// ======================================================================================

TEST_P(BackendConformance, MaxAndAvgPooling) {
  struct PoolShape {
    std::int64_t k, stride;
  };
  for (DType dt : precisions())
    for (bool max : {true, false})
      for (PoolShape p : {PoolShape{2, 2}, PoolShape{3, 1}, PoolShape{3, 2}})
        for (bool conv_layout : {false, true}) {
          SCOPED_TRACE(dtype_trace(dt) + (max ? ", max" : ", avg") + " k" + std::to_string(p.k) +
                       " stride " + std::to_string(p.stride) +
                       (conv_layout ? ", conv output layout" : ", plain"));
          // Sizes keep every value k/16 with |k| <= 256, exact in bf16.
          const Dims in = conv_layout ? Dims{16, 4, 4} : Dims{3, 5, 5};
          const std::int64_t n = 2, c = in[0], h = in[1], w = in[2];
          const std::int64_t ho = (h - p.k) / p.stride + 1, wo = (w - p.k) / p.stride + 1;
          auto op = be().pool(PoolSpec{in, p.k, p.stride, max, dt});
          Tensor x, y, dy, dx;
          if (conv_layout) {
            be().shape_like(x, conv_output_like(in.with_batch(n), dt), dt);
          } else {
            be().shape_plain(x, in.with_batch(n), dt);
          }
          Differentiable d;
          d.names = {"x"};
          d.values = {stored(distinct_values(std::size_t(x.elements()), 40), dt)};
          d.forward = [&] {
            upload(x, d.values[0]);
            op->forward(x, y);
            EXPECT_EQ(y.dims(), (Dims{n, c, ho, wo}));
            return read(y);
          };
          d.backward = [&](const HostTensor& r, const std::vector<HostTensor>*) {
            upload(x, d.values[0]);
            op->forward(x, y);
            be().shape_like(dy, y, y.dtype());
            upload(dy, r);
            op->backward(x, dy, dx);
            EXPECT_EQ(dx.dims(), x.dims());
            EXPECT_EQ(dx.dtype(), x.dtype());
            return std::vector<HostTensor>{read(dx)};
          };
          d.reference = [&](const std::vector<RefTensor>& v) {
            RefTensor out;
            for (std::int64_t s = 0; s < n * c; ++s)
              for (std::int64_t i = 0; i < ho; ++i)
                for (std::int64_t j = 0; j < wo; ++j) {
                  double best = -1e300, sum = 0;
                  for (std::int64_t ki = 0; ki < p.k; ++ki)
                    for (std::int64_t kj = 0; kj < p.k; ++kj) {
                      const double e = v[0][std::size_t((s * h + i * p.stride + ki) * w + j * p.stride + kj)];
                      best = std::max(best, e);
                      sum += e;
                    }
                  out.push_back(max ? best : sum / double(p.k * p.k));
                }
            return out;
          };
          check_differentiable(d, dt);
        }
}

// ======================================================================================
// Batch norm and layer norm
// ======================================================================================

// Per-group statistics: group g of `groups`, element i of it at index(g, i).
struct NormGeometry {
  std::int64_t n, c, spatial;  // batch norm: stats per c over (n, spatial); layer norm: per n over c
  bool layer;
  std::int64_t groups() const { return layer ? n : c; }
  std::int64_t group_size() const { return layer ? c : n * spatial; }
  std::size_t index(std::int64_t g, std::int64_t i) const {
    if (layer) return std::size_t(g * c + i);
    const std::int64_t s = i / spatial, p = i % spatial;
    return std::size_t((s * c + g) * spatial + p);
  }
  // The parameter (γ, β) index of element index(g, i).
  std::int64_t param(std::int64_t g, std::int64_t i) const { return layer ? i : g; }
};

// Biased (population) mean and variance of each group.
void norm_stats(const RefTensor& x, const NormGeometry& geo, RefTensor& mean, RefTensor& var) {
  mean.assign(std::size_t(geo.groups()), 0);
  var.assign(std::size_t(geo.groups()), 0);
  for (std::int64_t g = 0; g < geo.groups(); ++g) {
    double s = 0;
    for (std::int64_t i = 0; i < geo.group_size(); ++i) s += x[geo.index(g, i)];
    const double m = s / double(geo.group_size());
    double q = 0;
    for (std::int64_t i = 0; i < geo.group_size(); ++i) q += (x[geo.index(g, i)] - m) * (x[geo.index(g, i)] - m);
    mean[std::size_t(g)] = m;
    var[std::size_t(g)] = q / double(geo.group_size());
  }
}

RefTensor norm_apply(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta,
                     const RefTensor& mean, const RefTensor& var, const NormGeometry& geo,
                     double eps) {
  RefTensor y(x.size());
  for (std::int64_t g = 0; g < geo.groups(); ++g)
    for (std::int64_t i = 0; i < geo.group_size(); ++i) {
      const std::size_t at = geo.index(g, i);
      const auto p = std::size_t(geo.param(g, i));
      y[at] = gamma[p] * (x[at] - mean[std::size_t(g)]) / std::sqrt(var[std::size_t(g)] + eps) + beta[p];
    }
  return y;
}

TEST_P(BackendConformance, BatchNormFlatAndImage) {
  const float eps = 1e-5f;
  for (DType dt : precisions())
    for (int shape = 0; shape < 3; ++shape) {
      // flat (N, F); image (N, C, H, W) plain; image in a conv's output layout
      const bool image = shape > 0, conv_layout = shape == 2;
      SCOPED_TRACE(dtype_trace(dt) + (image ? conv_layout ? ", image in conv output layout" : ", image" : ", flat"));
      const Dims in = !image ? Dims{4} : conv_layout ? Dims{16, 2, 2} : Dims{3, 2, 3};
      const std::int64_t n = image ? 2 : 5;
      const NormGeometry geo{n, in[0], image ? in[1] * in[2] : 1, false};
      auto op = be().batch_norm(NormSpec{in, eps, dt});
      Tensor x, scale, shift, y, mean, var, dy, dx, dscale, dshift;
      if (conv_layout) {
        be().shape_like(x, conv_output_like(in.with_batch(n), dt), dt);
      } else {
        be().shape_plain(x, in.with_batch(n), dt);
      }
      op->shape_parameters(scale, shift);
      op->shape_parameters(dscale, dshift);
      EXPECT_EQ(scale.dims(), (Dims{in[0]}));
      Differentiable d;
      d.names = {"x", "scale", "shift"};
      d.accumulates = {false, true, true};
      HostTensor xv = randn(std::size_t(x.elements()), 50, 1.5f);
      for (float& e : xv) e += 0.5f;  // a nonzero mean
      d.values = {stored(xv, dt), randn(std::size_t(in[0]), 51, 0.5f),
                  randn(std::size_t(in[0]), 52, 0.5f)};
      for (float& g : d.values[1]) g += 1.0f;
      auto upload_all = [&] {
        upload(x, d.values[0]);
        upload(scale, d.values[1]);
        upload(shift, d.values[2]);
      };
      d.forward = [&] {
        upload_all();
        op->forward_training(x, scale, shift, y, mean, var);
        EXPECT_EQ(y.dims(), x.dims());
        EXPECT_EQ(y.dtype(), x.dtype());
        return read(y);
      };
      d.backward = [&](const HostTensor& r, const std::vector<HostTensor>* start) {
        upload_all();
        op->forward_training(x, scale, shift, y, mean, var);
        be().shape_like(dy, y, y.dtype());
        upload(dy, r);
        if (start != nullptr) {
          upload(dscale, (*start)[1]);
          upload(dshift, (*start)[2]);
        }
        op->backward(x, dy, scale, shift, mean, var, dx, dscale, dshift, start != nullptr);
        EXPECT_EQ(dx.dims(), x.dims());
        EXPECT_EQ(dx.dtype(), x.dtype());
        return std::vector<HostTensor>{read(dx), read(dscale), read(dshift)};
      };
      d.reference = [&](const std::vector<RefTensor>& v) {
        RefTensor m, s;
        norm_stats(v[0], geo, m, s);
        return norm_apply(v[0], v[1], v[2], m, s, geo, eps);
      };
      check_differentiable(d, dt);

      // The batch statistics forward_training wrote (fp32, biased variance).
      RefTensor want_mean, want_var;
      norm_stats(to_double(d.values[0]), geo, want_mean, want_var);
      d.forward();
      EXPECT_EQ(mean.dims(), (Dims{in[0]}));
      EXPECT_EQ(var.dims(), (Dims{in[0]}));
      expect_close("mean", read(mean), want_mean, kF32Tolerance);
      expect_close("variance", read(var), want_var, kF32Tolerance);

      // forward_inference normalizes with the (running) statistics given.
      HostTensor rm = randn(std::size_t(in[0]), 53), rv = randn(std::size_t(in[0]), 54);
      for (float& e : rv) e = 0.5f + e * e;
      Tensor running_mean = plain(Dims{in[0]}, rm), running_var = plain(Dims{in[0]}, rv);
      upload(x, d.values[0]);
      op->forward_inference(x, scale, shift, running_mean, running_var, y);
      EXPECT_EQ(y.dims(), x.dims());
      const HostTensor yi = read(y);
      expect_close("forward_inference",
                   yi, norm_apply(to_double(d.values[0]), to_double(d.values[1]), to_double(d.values[2]),
                                  to_double(rm), to_double(rv), geo, eps),
                   tolerance(dt));
      op->forward_inference(x, scale, shift, running_mean, running_var, y);
      expect_same_bits("forward_inference run twice", read(y), yi);
    }
}

TEST_P(BackendConformance, LayerNorm) {
  const float eps = 1e-5f;
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const std::int64_t n = 3, f = 6;
    const NormGeometry geo{n, f, 1, true};
    auto op = be().layer_norm(NormSpec{Dims{f}, eps, dt});
    Tensor x, scale, shift, y, mean, var, dy, dx, dscale, dshift;
    be().shape_plain(x, Dims{n, f}, dt);
    op->shape_parameters(scale, shift);
    op->shape_parameters(dscale, dshift);
    EXPECT_EQ(scale.dims(), (Dims{f}));
    Differentiable d;
    d.names = {"x", "scale", "shift"};
    d.accumulates = {false, true, true};
    HostTensor xv = randn(std::size_t(n * f), 60, 1.5f);
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] += float(i / f);  // per-sample means differ
    d.values = {stored(xv, dt), randn(std::size_t(f), 61, 0.5f), randn(std::size_t(f), 62, 0.5f)};
    for (float& g : d.values[1]) g += 1.0f;
    auto upload_all = [&] {
      upload(x, d.values[0]);
      upload(scale, d.values[1]);
      upload(shift, d.values[2]);
    };
    d.forward = [&] {
      upload_all();
      op->forward_training(x, scale, shift, y, mean, var);
      EXPECT_EQ(y.dims(), x.dims());
      return read(y);
    };
    d.backward = [&](const HostTensor& r, const std::vector<HostTensor>* start) {
      upload_all();
      op->forward_training(x, scale, shift, y, mean, var);
      be().shape_like(dy, y, y.dtype());
      upload(dy, r);
      if (start != nullptr) {
        upload(dscale, (*start)[1]);
        upload(dshift, (*start)[2]);
      }
      op->backward(x, dy, scale, shift, mean, var, dx, dscale, dshift, start != nullptr);
      EXPECT_EQ(dx.dims(), x.dims());
      EXPECT_EQ(dx.dtype(), x.dtype());
      return std::vector<HostTensor>{read(dx), read(dscale), read(dshift)};
    };
    d.reference = [&](const std::vector<RefTensor>& v) {
      RefTensor m, s;
      norm_stats(v[0], geo, m, s);
      return norm_apply(v[0], v[1], v[2], m, s, geo, eps);
    };
    check_differentiable(d, dt);

    RefTensor want_mean, want_var;
    norm_stats(to_double(d.values[0]), geo, want_mean, want_var);
    const HostTensor y_training = d.forward();
    EXPECT_EQ(mean.dims(), (Dims{n}));
    expect_close("mean", read(mean), want_mean, kF32Tolerance);
    expect_close("variance", read(var), want_var, kF32Tolerance);

    // forward_inference ignores the statistics given: each sample's own are used.
    Tensor bogus_mean = plain(Dims{n}, HostTensor(std::size_t(n), 100.0f));
    Tensor bogus_var = plain(Dims{n}, HostTensor(std::size_t(n), 1e4f));
    op->forward_inference(x, scale, shift, bogus_mean, bogus_var, y);
    expect_close("forward_inference", read(y), y_training, tolerance(dt));
  }
}

// ======================================================================================
// Periodic embedding
// ======================================================================================

// y[n][f·2K + j] = sin(2π·c[f][j]·x[n][f]), y[n][f·2K + K + j] = cos(same), in double.
RefTensor periodic_ref(const RefTensor& x, const RefTensor& c, std::int64_t n, std::int64_t f, std::int64_t k) {
  RefTensor y(std::size_t(n * f * 2 * k));
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t i = 0; i < f; ++i)
      for (std::int64_t j = 0; j < k; ++j) {
        const double theta = 2 * std::numbers::pi * c[std::size_t(i * k + j)] * x[std::size_t(r * f + i)];
        y[std::size_t((r * f + i) * 2 * k + j)] = std::sin(theta);
        y[std::size_t((r * f + i) * 2 * k + k + j)] = std::cos(theta);
      }
  return y;
}

TEST_P(BackendConformance, PeriodicEmbeddingForwardAndGradients) {
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const std::int64_t n = 5, f = 3, k = 4;
    auto op = be().periodic(PeriodicSpec{f, k});
    Tensor x, c, y, dy, dx, dc;
    be().shape_plain(x, Dims{n, f}, dt);
    op->shape_parameters(c);
    op->shape_parameters(dc);
    EXPECT_EQ(c.dims(), (Dims{f, k}));
    EXPECT_EQ(c.dtype(), DType::kF32);
    Differentiable d;
    d.names = {"x", "frequencies"};
    d.accumulates = {false, true};
    // |θ| up to about 2π·0.4·3: several periods, so a wrong sign, index or
    // sine/cosine swap shows.
    d.values = {stored(randn(std::size_t(n * f), 70, 1.5f), dt), randn(std::size_t(f * k), 71, 0.4f)};
    auto upload_all = [&] {
      upload(x, d.values[0]);
      upload(c, d.values[1]);
    };
    d.forward = [&] {
      upload_all();
      op->forward(x, c, y);
      EXPECT_EQ(y.dims(), (Dims{n, f * 2 * k}));
      EXPECT_EQ(y.dtype(), x.dtype());
      return read(y);
    };
    d.backward = [&](const HostTensor& r, const std::vector<HostTensor>* start) {
      upload_all();
      op->forward(x, c, y);
      be().shape_like(dy, y, y.dtype());
      upload(dy, r);
      if (start != nullptr) upload(dc, (*start)[1]);
      op->backward_weights(x, dy, c, dc, start != nullptr);
      op->backward_data(x, dy, c, dx);
      EXPECT_EQ(dx.dims(), x.dims());
      EXPECT_EQ(dx.dtype(), x.dtype());
      return std::vector<HostTensor>{read(dx), read(dc)};
    };
    d.reference = [&](const std::vector<RefTensor>& v) { return periodic_ref(v[0], v[1], n, f, k); };
    check_differentiable(d, dt);
  }
}

TEST_P(BackendConformance, PeriodicEmbeddingRefusesAMismatchedInput) {
  auto op = be().periodic(PeriodicSpec{3, 2});
  Tensor c, y;
  op->shape_parameters(c);
  be().fill_zero(c);
  Tensor x = plain(Dims{4, 5}, randn(20, 72));
  EXPECT_THROW(op->forward(x, c, y), Error);
  EXPECT_THROW(be().periodic(PeriodicSpec{3, 0}), Error);
}

// ======================================================================================
// Piecewise-linear encoding (ple)
// ======================================================================================

// Edges (3, T + 1 = 5) that take every case backend.h names: feature 0 four
// used bins of unequal widths, feature 1 one used bin (its edges repeat the
// last: open at both ends, the identity past them), feature 2 a constant
// (every bin unused).
const HostTensor kPleEdges = {-1.5f, -0.5f, 0.0f, 0.75f, 2.0f,  //
                              0.0f,  1.0f,  1.0f, 1.0f,  1.0f,  //
                              0.3f,  0.3f,  0.3f, 0.3f,  0.3f};

// The layer as backend.h writes it, in double from the fp32 edges:
// y = clamp((x − b[t])/w, lo, hi), 0 for w = 0; and ∂y/∂x = 1/w strictly
// inside the clamp, else 0.
struct PleReference {
  RefTensor y, slope;
};
PleReference ple_ref(const HostTensor& x, const HostTensor& b, std::int64_t n, std::int64_t f, std::int64_t t) {
  PleReference r{RefTensor(std::size_t(n * f * t)), RefTensor(std::size_t(n * f * t))};
  for (std::int64_t row = 0; row < n; ++row)
    for (std::int64_t i = 0; i < f; ++i)
      for (std::int64_t j = 0; j < t; ++j) {
        const float* e = b.data() + i * (t + 1);
        const double w = double(e[j + 1]) - double(e[j]);
        const std::size_t at = std::size_t((row * f + i) * t + j);
        if (w == 0) continue;
        const double lo = j == 0 ? -INFINITY : 0.0, hi = e[j + 1] == e[t] ? INFINITY : 1.0;
        const double z = (double(x[std::size_t(row * f + i)]) - e[j]) / w;
        r.y[at] = std::clamp(z, lo, hi);
        r.slope[at] = z > lo && z < hi ? 1.0 / w : 0.0;
      }
  return r;
}

TEST_P(BackendConformance, PiecewiseLinearEncodingForwardAndGradient) {
  const std::int64_t f = 3, t = 4;
  // Each feature's values below, inside each bin, on an edge and above the
  // fitted range; plus random ones.
  HostTensor xv = {-3.0f, -1.0f, 0.3f,  -1.0f, 0.5f, 0.3f,   -0.25f, 1.0f, 5.0f,  0.0f, 7.0f, -4.0f,
                   1.2f,  -2.5f, 0.29f, 2.0f,  0.999f, 0.31f, 9.0f,  3.0f, 0.3f};
  const HostTensor noise = randn(30, 80, 1.5f);
  xv.insert(xv.end(), noise.begin(), noise.end());
  const std::int64_t n = std::int64_t(xv.size()) / f;
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    auto op = be().piecewise_linear(PiecewiseLinearSpec{f, t});
    Tensor b, x, y, dy, dx;
    op->shape_edges(b);
    EXPECT_EQ(b.dims(), (Dims{f, t + 1}));
    EXPECT_EQ(b.dtype(), DType::kF32);
    upload(b, kPleEdges);
    const HostTensor xs = stored(xv, dt);
    be().shape_plain(x, Dims{n, f}, dt);
    upload(x, xs);
    op->forward(x, b, y);
    EXPECT_EQ(y.dims(), (Dims{n, f * t}));
    EXPECT_EQ(y.dtype(), x.dtype());
    const PleReference want = ple_ref(xs, kPleEdges, n, f, t);
    expect_close("forward", read(y), want.y, tolerance(dt));
    if (dt == DType::kF32) {
      // The documented fp32 steps, bit for bit: (x − b[t])·fp32(1/w).
      const HostTensor got = read(y);
      const float* e = kPleEdges.data();  // feature 0, bin 1
      for (std::int64_t r = 0; r < n; ++r) {
        const float z = (xv[std::size_t(r * f)] - e[1]) * (1.0f / (e[2] - e[1]));
        if (z > 0 && z < 1) {
          EXPECT_EQ(got[std::size_t(r * f * t + 1)], z) << "row " << r;
        }
      }
    }
    const HostTensor g = stored(randn(std::size_t(n * f * t), 81, 1.0f), dt);
    be().shape_like(dy, y, y.dtype());
    upload(dy, g);
    op->backward_data(x, dy, b, dx);
    EXPECT_EQ(dx.dims(), x.dims());
    EXPECT_EQ(dx.dtype(), x.dtype());
    RefTensor want_dx(std::size_t(n * f), 0.0);
    for (std::size_t i = 0; i < want.slope.size(); ++i) want_dx[i / std::size_t(t)] += double(g[i]) * want.slope[i];
    expect_close("dx", read(dx), want_dx, tolerance(dt), /*scale_floor=*/2.0);
  }
}

// The backend's own forward differenced (fp32): away from the edges the
// gradient is the forward's slope.
TEST_P(BackendConformance, PiecewiseLinearEncodingGradientMatchesItsForward) {
  const std::int64_t f = 3, t = 4, n = 4;
  // Each value at least 2h from every edge of its feature.
  const HostTensor xv = {-2.0f, -1.0f, 0.0f, -0.8f, 0.5f, 1.0f, 0.4f, 1.5f, 0.6f, 3.0f, 4.0f, -1.0f};
  const HostTensor g = randn(std::size_t(n * f * t), 82, 1.0f);
  auto op = be().piecewise_linear(PiecewiseLinearSpec{f, t});
  Tensor b, x, y, dy, dx;
  op->shape_edges(b);
  upload(b, kPleEdges);
  auto loss = [&](const HostTensor& v) {
    x = plain(Dims{n, f}, v);
    op->forward(x, b, y);
    const HostTensor out = read(y);
    double l = 0;
    for (std::size_t i = 0; i < out.size(); ++i) l += double(out[i]) * double(g[i]);
    return l;
  };
  loss(xv);
  dy = plain(Dims{n, f * t}, g);
  op->backward_data(x, dy, b, dx);
  const HostTensor analytic = read(dx);
  RefTensor numeric(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    HostTensor up = xv, down = xv;
    up[i] += kFiniteDifferenceStep;
    down[i] -= kFiniteDifferenceStep;
    numeric[i] = (loss(up) - loss(down)) / (2 * double(kFiniteDifferenceStep));
  }
  expect_close("dx vs the forward differenced", analytic, numeric, kFiniteDifferenceTolerance, 1.0);
}

TEST_P(BackendConformance, PiecewiseLinearEncodingRefusesAMismatchedInput) {
  auto op = be().piecewise_linear(PiecewiseLinearSpec{3, 2});
  Tensor b, y;
  op->shape_edges(b);
  be().fill_zero(b);
  Tensor x = plain(Dims{4, 5}, randn(20, 83));
  EXPECT_THROW(op->forward(x, b, y), Error);
  Tensor wrong = plain(Dims{3, 2}, randn(6, 84));
  Tensor good = plain(Dims{4, 3}, randn(12, 85));
  EXPECT_THROW(op->forward(good, wrong, y), Error);
  EXPECT_THROW(be().piecewise_linear(PiecewiseLinearSpec{3, 0}), Error);
}

// ======================================================================================
// Ensemble members (TabM-mini): the per-member input scaling and the members' mean
// ======================================================================================

// y[n·k + i][f] = x[n][f]·r[i][f], in double.
RefTensor ensemble_ref(const RefTensor& x, const RefTensor& r, std::int64_t n, std::int64_t f, std::int64_t k) {
  RefTensor y(std::size_t(n * k * f));
  for (std::int64_t s = 0; s < n; ++s)
    for (std::int64_t i = 0; i < k; ++i)
      for (std::int64_t j = 0; j < f; ++j)
        y[std::size_t((s * k + i) * f + j)] = x[std::size_t(s * f + j)] * r[std::size_t(i * f + j)];
  return y;
}

TEST_P(BackendConformance, EnsembleMembersForwardAndGradients) {
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const std::int64_t n = 5, f = 3, k = 4;
    auto op = be().ensemble(EnsembleSpec{f, k});
    Tensor x, r, y, dy, dx, dr;
    be().shape_plain(x, Dims{n, f}, dt);
    op->shape_parameters(r);
    op->shape_parameters(dr);
    EXPECT_EQ(r.dims(), (Dims{k, f}));
    EXPECT_EQ(r.dtype(), DType::kF32);
    Differentiable d;
    d.names = {"x", "scales"};
    d.accumulates = {false, true};
    d.values = {stored(randn(std::size_t(n * f), 73, 1.5f), dt), randn(std::size_t(k * f), 74, 1.0f)};
    auto upload_all = [&] {
      upload(x, d.values[0]);
      upload(r, d.values[1]);
    };
    d.forward = [&] {
      upload_all();
      op->forward(x, r, y);
      EXPECT_EQ(y.dims(), (Dims{n * k, f}));
      EXPECT_EQ(y.dtype(), x.dtype());
      return read(y);
    };
    d.backward = [&](const HostTensor& g, const std::vector<HostTensor>* start) {
      upload_all();
      op->forward(x, r, y);
      be().shape_like(dy, y, y.dtype());
      upload(dy, g);
      if (start != nullptr) upload(dr, (*start)[1]);
      op->backward_weights(x, dy, dr, start != nullptr);
      op->backward_data(dy, r, x, dx);
      EXPECT_EQ(dx.dims(), x.dims());
      EXPECT_EQ(dx.dtype(), x.dtype());
      return std::vector<HostTensor>{read(dx), read(dr)};
    };
    d.reference = [&](const std::vector<RefTensor>& v) { return ensemble_ref(v[0], v[1], n, f, k); };
    check_differentiable(d, dt);
  }
}

// y[n·k + i][o] = Σ_a W[i][o][a]·x[n·k + i][a] + b[i][o] in double; with
// `magnitude`, Σ|W·x| + |b| (the scale of the fp32 sum's rounding).
RefTensor member_dense_ref(const std::vector<RefTensor>& v, std::int64_t rows, std::int64_t k, std::int64_t in,
                           std::int64_t out, bool magnitude) {
  const RefTensor &x = v[0], &w = v[1], &b = v[2];
  RefTensor y(std::size_t(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      const std::int64_t i = r % k;
      double sum = magnitude ? std::fabs(b[std::size_t(i * out + o)]) : b[std::size_t(i * out + o)];
      for (std::int64_t a = 0; a < in; ++a) {
        const double term = w[std::size_t((i * out + o) * in + a)] * x[std::size_t(r * in + a)];
        sum += magnitude ? std::fabs(term) : term;
      }
      y[std::size_t(r * out + o)] = sum;
    }
  return y;
}

// The members' own output layers: each member's rows by its own weights.
// Widths past one 16-column panel and a member count that is no divisor of
// them, so an index mixing members, rows or panels shows.
TEST_P(BackendConformance, MemberDenseForwardAndGradients) {
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const std::int64_t n = 4, k = 3, in = 19, out = 17, rows = n * k;
    auto op = be().member_dense(MemberDenseSpec{k, in, out});
    Tensor x, w, b, y, dy, dx, dw, db;
    be().shape_plain(x, Dims{rows, in}, dt);
    op->shape_parameters(w, b);
    op->shape_parameters(dw, db);
    EXPECT_EQ(w.dims(), (Dims{k, out, in}));
    EXPECT_EQ(b.dims(), (Dims{k, out}));
    Differentiable d;
    d.names = {"x", "weights", "biases"};
    d.accumulates = {false, true, true};
    d.values = {stored(randn(std::size_t(rows * in), 78, 1.0f), dt), randn(std::size_t(k * out * in), 79, 0.5f),
                randn(std::size_t(k * out), 80, 0.5f)};
    auto upload_all = [&] {
      upload(x, d.values[0]);
      upload(w, d.values[1]);
      upload(b, d.values[2]);
    };
    d.forward = [&] {
      upload_all();
      op->forward(x, w, b, y);
      EXPECT_EQ(y.dims(), (Dims{rows, out}));
      EXPECT_EQ(y.dtype(), x.dtype());
      return read(y);
    };
    d.backward = [&](const HostTensor& g, const std::vector<HostTensor>* start) {
      upload_all();
      op->forward(x, w, b, y);
      be().shape_like(dy, y, y.dtype());
      upload(dy, g);
      if (start != nullptr) {
        upload(dw, (*start)[1]);
        upload(db, (*start)[2]);
      }
      op->backward_weights(x, dy, dw, db, start != nullptr);
      op->backward_data(dy, w, x, dx);
      EXPECT_EQ(dx.dims(), x.dims());
      EXPECT_EQ(dx.dtype(), x.dtype());
      return std::vector<HostTensor>{read(dx), read(dw), read(db)};
    };
    d.reference = [&](const std::vector<RefTensor>& v) { return member_dense_ref(v, rows, k, in, out, false); };
    d.terms = [&](const std::vector<RefTensor>& v) { return member_dense_ref(v, rows, k, in, out, true); };
    check_differentiable(d, dt);
  }
}

// y[n][j] = mean over i of z[n·k + i][j]: against the double mean, and a
// member's change moves its sample's row alone, by 1/k of the change.
TEST_P(BackendConformance, MemberMeanAveragesEachSamplesRows) {
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const std::int64_t n = 6, k = 5, width = 3;
    HostTensor zv = stored(randn(std::size_t(n * k * width), 75, 2.0f), dt);
    Tensor z = plain(Dims{n * k, width}, zv, dt), y;
    be().member_mean(z, k, y);
    EXPECT_EQ(y.dims(), (Dims{n, width}));
    EXPECT_EQ(y.dtype(), z.dtype());
    RefTensor want(std::size_t(n * width), 0.0);
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t i = 0; i < k; ++i)
        for (std::int64_t j = 0; j < width; ++j)
          want[std::size_t(s * width + j)] += double(zv[std::size_t((s * k + i) * width + j)]) / double(k);
    const HostTensor got = read(y);
    expect_close("member_mean", got, want, tolerance(dt));
    // Member 2 of sample 4, output 1, up by 5·k: that output alone moves, by about 5.
    zv[std::size_t((4 * k + 2) * width + 1)] += float(5 * k);
    upload(z, zv);
    be().member_mean(z, k, y);
    const HostTensor moved = read(y);
    for (std::size_t i = 0; i < got.size(); ++i)
      if (i == std::size_t(4 * width + 1))
        EXPECT_NEAR(moved[i] - got[i], 5.0, dt == DType::kF32 ? 1e-4 : 0.1) << i;
      else
        EXPECT_EQ(moved[i], got[i]) << i;
  }
}

TEST_P(BackendConformance, EnsembleRefusesMismatchedShapes) {
  auto op = be().ensemble(EnsembleSpec{3, 2});
  Tensor r, y;
  op->shape_parameters(r);
  be().fill_zero(r);
  Tensor x = plain(Dims{4, 5}, randn(20, 76));
  EXPECT_THROW(op->forward(x, r, y), Error);
  EXPECT_THROW(be().ensemble(EnsembleSpec{3, 0}), Error);
  Tensor z = plain(Dims{7, 2}, randn(14, 77));
  EXPECT_THROW(be().member_mean(z, 3, y), Error) << "7 rows are not a multiple of 3 members";
  auto heads = be().member_dense(MemberDenseSpec{3, 2, 4});
  Tensor w, b;
  heads->shape_parameters(w, b);
  be().fill_zero(w);
  be().fill_zero(b);
  EXPECT_THROW(heads->forward(z, w, b, y), Error) << "7 rows are not a multiple of 3 members";
  Tensor wide = plain(Dims{6, 5}, randn(30, 81));
  EXPECT_THROW(heads->forward(wide, w, b, y), Error) << "5 inputs, not 2";
  EXPECT_THROW(be().member_dense(MemberDenseSpec{3, 0, 4}), Error);
}

// ======================================================================================
// Losses
// ======================================================================================

struct LossRef {
  RefTensor loss;     // per sample
  RefTensor grad;     // ∂loss/∂pred, unscaled
  RefTensor predict;  // what predict() returns
  std::int64_t correct = 0;
};

LossRef loss_ref(LossKind kind, const HostTensor& pred, const HostTensor& labels, std::int64_t k) {
  LossRef r;
  const std::size_t n = labels.size();
  r.grad.resize(pred.size());
  r.predict.resize(pred.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double y = labels[i];
    switch (kind) {
      case LossKind::kSoftmaxCrossEntropy: {
        double mx = -1e300;
        std::size_t best = 0;
        for (std::int64_t j = 0; j < k; ++j) {
          mx = std::max(mx, double(pred[i * k + j]));
          if (pred[i * k + j] > pred[i * k + best]) best = std::size_t(j);
        }
        double z = 0;
        for (std::int64_t j = 0; j < k; ++j) z += std::exp(double(pred[i * k + j]) - mx);
        const double lse = mx + std::log(z);
        const auto label = std::size_t(y);
        r.loss.push_back(lse - pred[i * k + label]);
        r.correct += best == label;
        for (std::int64_t j = 0; j < k; ++j) {
          const double p = std::exp(double(pred[i * k + j]) - lse);
          r.predict[i * k + j] = p;
          r.grad[i * k + j] = p - (std::size_t(j) == label ? 1.0 : 0.0);
        }
        break;
      }
      case LossKind::kBinaryCrossEntropy: {
        const double z = pred[i];
        const double sig = 1.0 / (1.0 + std::exp(-z));
        r.loss.push_back(std::log1p(std::exp(z)) - y * z);  // log(1+e^z) − y·z
        r.correct += (z > 0) == (y > 0.5);
        r.grad[i] = sig - y;
        r.predict[i] = sig;
        break;
      }
      case LossKind::kMeanSquaredError: {
        const double e = pred[i] - y;
        r.loss.push_back(e * e);
        r.grad[i] = 2 * e;
        r.predict[i] = pred[i];
        break;
      }
      case LossKind::kMeanAbsoluteError: {
        const double e = pred[i] - y;
        r.loss.push_back(std::fabs(e));
        r.grad[i] = e > 0 ? 1.0 : -1.0;  // the labels are never exactly hit
        r.predict[i] = pred[i];
        break;
      }
    }
  }
  return r;
}

// A batch of predictions and labels for a loss with k outputs.
void loss_batch(LossKind kind, std::int64_t n, std::int64_t k, std::uint32_t seed, HostTensor& pred,
                HostTensor& labels) {
  pred = randn(std::size_t(n * k), seed, 2.0f);
  labels.resize(std::size_t(n));
  std::mt19937 rng(seed + 1);
  for (float& y : labels) {
    switch (kind) {
      case LossKind::kSoftmaxCrossEntropy: y = float(rng() % std::uint32_t(k)); break;
      case LossKind::kBinaryCrossEntropy: y = float(rng() % 2); break;
      default: y = float(int(rng() % 64) - 32) / 8.0f + 1.0f / 32; break;  // never equal to a pred
    }
  }
}

TEST_P(BackendConformance, LossesGradientTotalsAndPredict) {
  for (DType dt : precisions())
    for (LossKind kind : {LossKind::kSoftmaxCrossEntropy, LossKind::kBinaryCrossEntropy,
                          LossKind::kMeanSquaredError, LossKind::kMeanAbsoluteError}) {
      SCOPED_TRACE(dtype_trace(dt) + ", " + loss_name(kind));
      const std::int64_t k = kind == LossKind::kSoftmaxCrossEntropy ? 5 : 1;
      auto op = be().loss(kind, k, {});
      LossTotals expected;
      double abs_sum = 0;
      // Three batches, the second of another size: the totals add up.
      const std::int64_t sizes[] = {6, 4, 6};
      const float scales[] = {1.0f / 16, 0.3f, 1.0f};
      for (int b = 0; b < 3; ++b) {
        const std::int64_t n = sizes[b];
        HostTensor pv, lv;
        loss_batch(kind, n, k, 70 + std::uint32_t(b), pv, lv);
        pv = stored(pv, dt);
        Tensor pred = plain(Dims{n, k}, pv, dt), labels = plain(Dims{n}, lv), dpred;
        const LossRef want = loss_ref(kind, pv, lv, k);
        op->forward_backward(pred, labels, &dpred, scales[b], nullptr);
        EXPECT_EQ(dpred.dims(), pred.dims());
        EXPECT_EQ(dpred.dtype(), pred.dtype());
        RefTensor grad = want.grad;
        for (double& g : grad) g *= scales[b];
        const HostTensor got_grad = read(dpred);
        expect_close("dpred, batch " + std::to_string(b), got_grad, grad, tolerance(dt));
        for (double l : want.loss) {
          expected.loss_sum += l;
          abs_sum += std::fabs(l);
        }
        expected.count += n;
        if (is_classification(kind)) expected.correct += want.correct;

        const LossTotals t = op->totals();
        EXPECT_EQ(t.count, expected.count) << "after batch " << b;
        if (is_classification(kind)) {
          EXPECT_EQ(t.correct, expected.correct) << "after batch " << b;
        }
        EXPECT_NEAR(t.loss_sum, expected.loss_sum, kF32Tolerance * abs_sum) << "after batch " << b;

        HostTensor predicted(pv.size());
        op->predict(pred, predicted.data());
        expect_close("predict, batch " + std::to_string(b), predicted, want.predict, kF32Tolerance);

        // The same batch again on a fresh op gives the same gradient bits.
        auto fresh = be().loss(kind, k, {});
        Tensor dpred2;
        fresh->forward_backward(pred, labels, &dpred2, scales[b], nullptr);
        expect_same_bits("dpred run twice", read(dpred2), got_grad);
      }

      // set_totals replaces the running totals; later batches add to them.
      op->set_totals(LossTotals{});
      LossTotals zero = op->totals();
      EXPECT_EQ(zero.count, 0);
      EXPECT_EQ(zero.correct, 0);
      EXPECT_EQ(zero.loss_sum, 0.0);
      const LossTotals saved{12.5, 3, 7};
      op->set_totals(saved);
      LossTotals back = op->totals();
      EXPECT_EQ(back.loss_sum, saved.loss_sum);
      EXPECT_EQ(back.correct, saved.correct);
      EXPECT_EQ(back.count, saved.count);
      HostTensor pv, lv;
      loss_batch(kind, 5, k, 80, pv, lv);
      pv = stored(pv, dt);
      Tensor pred = plain(Dims{5, k}, pv, dt), labels = plain(Dims{5}, lv);
      op->forward_backward(pred, labels, nullptr, 1.0f, nullptr);  // totals only, no gradient
      const LossRef want = loss_ref(kind, pv, lv, k);
      const LossTotals after = op->totals();
      double sum = saved.loss_sum, abs = saved.loss_sum;
      for (double l : want.loss) sum += l, abs += std::fabs(l);
      EXPECT_NEAR(after.loss_sum, sum, kF32Tolerance * abs);
      EXPECT_EQ(after.count, saved.count + 5);
      if (is_classification(kind)) {
        EXPECT_EQ(after.correct, saved.correct + want.correct);
      }
    }
}

// Class weights: each sample's loss and gradient are w[label] times the
// unweighted ones (bce: w[0] for label 0, w[1] for label 1), in every
// precision; weights for a regression loss or of the wrong count are kUsage.
TEST_P(BackendConformance, ClassWeightedLossesScaleEachSample) {
  for (DType dt : precisions())
    for (LossKind kind : {LossKind::kSoftmaxCrossEntropy, LossKind::kBinaryCrossEntropy}) {
      SCOPED_TRACE(dtype_trace(dt) + ", " + loss_name(kind));
      const std::int64_t k = kind == LossKind::kSoftmaxCrossEntropy ? 5 : 1;
      const std::vector<float> weights = kind == LossKind::kSoftmaxCrossEntropy
                                             ? std::vector<float>{0.5f, 2.0f, 1.0f, 3.0f, 0.25f}
                                             : std::vector<float>{0.3f, 4.0f};
      auto op = be().loss(kind, k, weights);
      const std::int64_t n = 7;
      HostTensor pv, lv;
      loss_batch(kind, n, k, 90, pv, lv);
      pv = stored(pv, dt);
      Tensor pred = plain(Dims{n, k}, pv, dt), labels = plain(Dims{n}, lv), dpred;
      const LossRef want = loss_ref(kind, pv, lv, k);
      op->forward_backward(pred, labels, &dpred, 0.5f, nullptr);
      RefTensor grad = want.grad;
      double sum = 0, abs = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double w = weights[std::size_t(lv[std::size_t(i)])];
        for (std::int64_t j = 0; j < k; ++j) grad[std::size_t(i * k + j)] *= w * 0.5;
        sum += w * want.loss[std::size_t(i)];
        abs += std::fabs(w * want.loss[std::size_t(i)]);
      }
      expect_close("weighted dpred", read(dpred), grad, tolerance(dt));
      const LossTotals t = op->totals();
      EXPECT_NEAR(t.loss_sum, sum, kF32Tolerance * abs);
      EXPECT_EQ(t.count, n);  // the mean stays over samples: balanced weights average 1
      EXPECT_EQ(t.correct, want.correct);
    }
  const std::vector<float> two = {1.0f, 2.0f};
  EXPECT_THROW(be().loss(LossKind::kMeanSquaredError, 1, two), Error);
  EXPECT_THROW(be().loss(LossKind::kSoftmaxCrossEntropy, 3, two), Error);
  const std::vector<float> bad = {1.0f, 0.0f};
  EXPECT_THROW(be().loss(LossKind::kBinaryCrossEntropy, 1, bad), Error);
}

TEST_P(BackendConformance, LossTotalsAreTheSameBitsRunTwice) {
  for (LossKind kind : {LossKind::kSoftmaxCrossEntropy, LossKind::kBinaryCrossEntropy,
                        LossKind::kMeanSquaredError, LossKind::kMeanAbsoluteError}) {
    SCOPED_TRACE(loss_name(kind));
    const std::int64_t k = kind == LossKind::kSoftmaxCrossEntropy ? 5 : 1;
    LossTotals first;
    for (int run = 0; run < 2; ++run) {
      auto op = be().loss(kind, k, {});
      for (int b = 0; b < 3; ++b) {
        HostTensor pv, lv;
        loss_batch(kind, 40, k, 90 + std::uint32_t(b), pv, lv);
        Tensor pred = plain(Dims{40, k}, pv), labels = plain(Dims{40}, lv), dpred;
        op->forward_backward(pred, labels, &dpred, 1.0f / 40, nullptr);
      }
      const LossTotals t = op->totals();
      if (run == 0) {
        first = t;
      } else {
        EXPECT_EQ(std::memcmp(&t.loss_sum, &first.loss_sum, sizeof(double)), 0);
        EXPECT_EQ(t.correct, first.correct);
        EXPECT_EQ(t.count, first.count);
      }
    }
  }
}

// ======================================================================================
// Gradient clipping and optimizer updates
// ======================================================================================

TEST_P(BackendConformance, ClipScaleAgainstTheGlobalNorm) {
  // Gradients of several sizes, in the layouts parameters live in.
  std::vector<Tensor> grads;
  double squares = 0;
  std::uint32_t seed = 100;
  for (const auto& [name, like] : parameter_layouts()) {
    const HostTensor g = randn(std::size_t(like.elements()), seed++);
    for (float e : g) squares += double(e) * e;
    grads.push_back(shaped_like(like, g));
  }
  const HostTensor small = randn(7, seed);
  for (float e : small) squares += double(e) * e;
  grads.push_back(plain(Dims{7}, small));
  const double norm = std::sqrt(squares);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& g : grads) ptrs.push_back(&g);
  for (double max_norm : {norm / 3, norm / 1.01, norm * 1.01, norm * 4}) {
    SCOPED_TRACE("max_norm " + std::to_string(max_norm) + ", norm " + std::to_string(norm));
    Tensor scale;
    be().clip_scale(ptrs, float(max_norm), nullptr, scale);
    EXPECT_EQ(scale.elements(), 1);
    EXPECT_EQ(scale.dtype(), DType::kF32);
    const float got = read(scale)[0];
    if (norm > max_norm) {
      EXPECT_NEAR(got, float(max_norm) / (norm + 1e-6), 1e-6 * got);
    } else {
      EXPECT_EQ(got, 1.0f) << "below max_norm the scale is exactly 1";
    }
    Tensor again;
    be().clip_scale(ptrs, float(max_norm), nullptr, again);
    expect_same_bits("clip_scale run twice", read(again), read(scale));
  }
}

TEST_P(BackendConformance, ClipScaleTakesAPreScaleAndAZeroPreScaleGivesZero) {
  const HostTensor gh = randn(50, 77);
  double squares = 0;
  for (float e : gh) squares += double(e) * e;
  const Tensor g = plain(Dims{50}, gh);
  for (float pre : {0.25f, 1.0f / 65536, 0.0f}) {
    SCOPED_TRACE("pre_scale " + std::to_string(pre));
    const Tensor p = plain(Dims{1}, HostTensor{pre});
    const double norm = pre * std::sqrt(squares);
    for (double max_norm : {norm / 2 + 1e-12, norm * 2 + 1e-12}) {
      Tensor scale;
      be().clip_scale({&g}, float(max_norm), &p, scale);
      const float got = read(scale)[0];
      if (pre == 0.0f) {
        EXPECT_EQ(got, 0.0f) << "a skipped step stays skipped";
      } else if (norm > max_norm) {
        EXPECT_NEAR(got, pre * max_norm / (norm + 1e-6), 1e-6 * got);
      } else {
        EXPECT_EQ(got, pre) << "below max_norm the scale is the pre-scale";
      }
    }
  }
}

// Backend::unscale_gradients against the rule of its contract, step by step.
TEST_P(BackendConformance, UnscaleGradientsSkipsOverflowsAndAdaptsTheScale) {
  const auto layouts = parameter_layouts();
  std::vector<Tensor> grads;
  std::uint32_t seed = 300;
  for (const auto& [name, like] : layouts) grads.push_back(shaped_like(like, randn(std::size_t(like.elements()), seed++)));
  std::vector<const Tensor*> ptrs;
  for (const Tensor& g : grads) ptrs.push_back(&g);
  Tensor state = plain(Dims{4}, HostTensor{1024.0f, 0, 0, 0}), step_scale;
  float scale = 1024, good = 0, skipped = 0;
  constexpr int kInterval = 3;
  // Finite steps, enough to double the scale twice; then an inf and a NaN
  // in different tensors (each halves it); then the floor of 1.
  auto expect_state = [&](const char* what) {
    const HostTensor s = read(state);
    EXPECT_EQ(s[0], scale) << what << ": scale";
    EXPECT_EQ(s[1], good) << what << ": good steps";
    EXPECT_EQ(s[2], skipped) << what << ": skipped steps";
  };
  for (int step = 0; step < 2 * kInterval; ++step) {
    be().unscale_gradients(ptrs, state, kInterval, step_scale);
    EXPECT_EQ(step_scale.elements(), 1);
    EXPECT_EQ(read(step_scale)[0], 1.0f / scale) << "step " << step;
    if (++good == kInterval) scale *= 2, good = 0;
    expect_state("after a finite step");
  }
  good = 0;
  be().unscale_gradients(ptrs, state, kInterval, step_scale);  // one good step before the overflow
  ++good;
  for (std::size_t bad : {std::size_t(0), grads.size() - 1}) {
    HostTensor values = read(grads[bad]);
    const HostTensor saved = values;
    values[values.size() / 2] = bad == 0 ? std::numeric_limits<float>::infinity() : std::nanf("");
    upload(grads[bad], values);
    be().unscale_gradients(ptrs, state, kInterval, step_scale);
    EXPECT_EQ(read(step_scale)[0], 0.0f) << "an overflow skips the step";
    scale /= 2, good = 0, ++skipped;
    expect_state("after an overflow");
    upload(grads[bad], saved);
  }
  // The floor: from scale 2, two overflows leave 1.
  upload(state, HostTensor{2.0f, 5, 7, 0});
  HostTensor values = read(grads[0]);
  values[0] = -std::numeric_limits<float>::infinity();
  upload(grads[0], values);
  be().unscale_gradients(ptrs, state, kInterval, step_scale);
  be().unscale_gradients(ptrs, state, kInterval, step_scale);
  scale = 1, good = 0, skipped = 9;
  expect_state("at the floor");
  // The ceiling: 2^24 stays 2^24.
  values[0] = 0.5f;
  upload(grads[0], values);
  upload(state, HostTensor{16777216.0f, kInterval - 1, 0, 0});
  be().unscale_gradients(ptrs, state, kInterval, step_scale);
  scale = 16777216.0f, good = 0, skipped = 0;
  expect_state("at the ceiling");
}

TEST_P(BackendConformance, OptimizerStepsWithAZeroGradScaleChangeNothing) {
  const auto n = std::size_t{37};
  const Tensor zero = plain(Dims{1}, HostTensor{0.0f});
  const HostTensor w0 = randn(n, 11), m0 = randn(n, 12), v0 = randn(n, 13, 0.1f), g0 = randn(n, 14);
  HostTensor v_pos = v0;
  for (float& e : v_pos) e = std::fabs(e);
  Tensor w = plain(Dims{std::int64_t(n)}, w0), m = plain(Dims{std::int64_t(n)}, m0),
         v = plain(Dims{std::int64_t(n)}, v_pos), g = plain(Dims{std::int64_t(n)}, g0);
  AdamUpdate a;
  a.weight_decay = 0.1f;
  a.decoupled_weight_decay = true;
  a.step = 5;
  a.grad_scale = &zero;
  be().adam_update(w, g, m, v, a);
  expect_same_bits("adam: w after a skipped step", read(w), w0);
  expect_same_bits("adam: m after a skipped step", read(m), m0);
  expect_same_bits("adam: v after a skipped step", read(v), v_pos);
  SgdUpdate s;
  s.momentum = 0.9f;
  s.weight_decay = 0.01f;
  s.grad_scale = &zero;
  be().sgd_update(w, g, m, s);
  expect_same_bits("sgd: w after a skipped step", read(w), w0);
  expect_same_bits("sgd: velocity after a skipped step", read(m), m0);
}

TEST_P(BackendConformance, LossGradientIsMultipliedByTheLossScale) {
  const std::int64_t rows = 6, classes = 4;
  const HostTensor logits = randn(std::size_t(rows * classes), 21);
  const HostTensor labels{0, 3, 1, 2, 2, 0};
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const Tensor pred = plain(Dims{rows, classes}, logits, dt), y = plain(Dims{rows}, labels);
    const Tensor state = plain(Dims{4}, HostTensor{1024.0f, 0, 0, 0});
    auto plain_op = be().loss(LossKind::kSoftmaxCrossEntropy, classes, {});
    auto scaled_op = be().loss(LossKind::kSoftmaxCrossEntropy, classes, {});
    Tensor d1, d2;
    plain_op->forward_backward(pred, y, &d1, 1.0f / float(rows), nullptr);
    scaled_op->forward_backward(pred, y, &d2, 1.0f / float(rows), &state);
    const HostTensor a = read(d1), b = read(d2);
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(b[i], 1024.0 * a[i], 1024.0 * tolerance(dt) * std::fabs(a[i]) + 1e-3) << "element " << i;
    // The totals are the loss's, not the scaled loss's.
    EXPECT_DOUBLE_EQ(scaled_op->totals().loss_sum, plain_op->totals().loss_sum);
  }
}

// A one-element scale from clip_scale (< 1), and its value.
float make_clip_scale(Backend& be, const Tensor& g, Tensor& scale) {
  be.clip_scale({&g}, 0.5f, nullptr, scale);
  float s = 0;
  be.copy_to_host(scale, &s);
  return s;
}

TEST_P(BackendConformance, AdamStepsWithBiasCorrectionWeightDecayAndClipping) {
  struct Case {
    float weight_decay;
    bool decoupled, clip;
  };
  const auto layouts = parameter_layouts();
  for (Case c : {Case{0, false, false}, Case{0.1f, false, false}, Case{0.1f, true, false},
                 Case{0.05f, true, true}, Case{0, false, true}})
    for (const auto& [name, like] : layouts) {
      SCOPED_TRACE(name + ", weight_decay " + std::to_string(c.weight_decay) +
                   (c.decoupled ? " decoupled" : " coupled") + (c.clip ? ", clipped" : ""));
      const auto n = std::size_t(like.elements());
      const HostTensor w0 = randn(n, 110);
      Tensor w = shaped_like(like, w0), g, m = shaped_like(like, HostTensor(n, 0.0f)),
             v = shaped_like(like, HostTensor(n, 0.0f)), scale;
      RefTensor rw = to_double(w0), rm(n, 0.0), rv(n, 0.0);
      AdamUpdate u;
      u.lr = 0.01f;
      u.weight_decay = c.weight_decay;
      u.decoupled_weight_decay = c.decoupled;
      // Steps 1, 2, 3, then 10: a resumed run's bias correction uses the t it is given.
      for (std::int64_t t : {1, 2, 3, 10}) {
        SCOPED_TRACE("step " + std::to_string(t));
        const HostTensor gh = randn(n, 120 + std::uint32_t(t));
        g = shaped_like(like, gh);
        double gs = 1;
        u.grad_scale = nullptr;
        if (c.clip) {
          gs = make_clip_scale(be(), g, scale);
          EXPECT_LT(gs, 1.0);
          u.grad_scale = &scale;
        }
        u.step = t;
        const std::uint64_t version = w.version();
        be().adam_update(w, g, m, v, u);
        EXPECT_GT(w.version(), version) << "adam_update must mark w modified";
        const double b1 = u.beta1, b2 = u.beta2, lr = u.lr, wd = c.weight_decay;
        for (std::size_t i = 0; i < n; ++i) {
          double grad = gh[i] * gs;
          if (!c.decoupled) grad += wd * rw[i];
          rm[i] = b1 * rm[i] + (1 - b1) * grad;
          rv[i] = b2 * rv[i] + (1 - b2) * grad * grad;
          const double mhat = rm[i] / (1 - std::pow(b1, double(t)));
          const double vhat = rv[i] / (1 - std::pow(b2, double(t)));
          if (c.decoupled) rw[i] -= lr * wd * rw[i];
          rw[i] -= lr * mhat / (std::sqrt(vhat) + double(u.epsilon));
        }
        expect_close("m", read(m), rm, kF32Tolerance);
        expect_close("v", read(v), rv, kF32Tolerance);
        expect_close("w", read(w), rw, kF32Tolerance);
      }
    }
}

TEST_P(BackendConformance, SgdStepsWithMomentumNesterovWeightDecayAndClipping) {
  const auto layouts = parameter_layouts();
  struct Case {
    float momentum, weight_decay;
    bool nesterov, clip;
  };
  for (Case c : {Case{0, 0, false, false}, Case{0, 0.1f, false, false}, Case{0.9f, 0, false, false},
                 Case{0.9f, 0.05f, false, true}, Case{0.9f, 0, true, false},
                 Case{0.8f, 0.1f, true, true}})
    for (const auto& [name, like] : layouts) {
      SCOPED_TRACE(name + ", momentum " + std::to_string(c.momentum) + " weight_decay " +
                   std::to_string(c.weight_decay) + (c.nesterov ? " nesterov" : "") +
                   (c.clip ? ", clipped" : ""));
      const auto n = std::size_t(like.elements());
      const HostTensor w0 = randn(n, 130);
      Tensor w = shaped_like(like, w0), g, vel = shaped_like(like, HostTensor(n, 0.0f)), scale;
      RefTensor rw = to_double(w0), rv(n, 0.0);
      SgdUpdate u;
      u.lr = 0.05f;
      u.momentum = c.momentum;
      u.weight_decay = c.weight_decay;
      u.nesterov = c.nesterov;
      for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const HostTensor gh = randn(n, 140 + std::uint32_t(step));
        g = shaped_like(like, gh);
        double gs = 1;
        u.grad_scale = nullptr;
        if (c.clip) {
          gs = make_clip_scale(be(), g, scale);
          u.grad_scale = &scale;
        }
        be().sgd_update(w, g, vel, u);
        for (std::size_t i = 0; i < n; ++i) {
          const double grad = gh[i] * gs + double(c.weight_decay) * rw[i];
          if (c.momentum == 0) {
            rw[i] -= double(u.lr) * grad;
            continue;
          }
          rv[i] = double(c.momentum) * rv[i] + grad;
          rw[i] -= double(u.lr) * (c.nesterov ? grad + double(c.momentum) * rv[i] : rv[i]);
        }
        expect_close("w", read(w), rw, kF32Tolerance);
        if (c.momentum != 0) expect_close("velocity", read(vel), rv, kF32Tolerance);
      }
    }
}

// ======================================================================================
// Dropout
// ======================================================================================

TEST_P(BackendConformance, DropoutMaskIsAPureFunctionOfTheKeyAndBackwardReusesIt) {
  const std::int64_t n = 100003;
  const float p = 0.3f;
  const HostTensor xh = away_from_zero(randn(n, 150));  // nonzero: y == 0 exactly where dropped
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    const HostTensor xv = stored(xh, dt);
    Tensor x = plain(Dims{n}, xv, dt), y, y_again, y_other_stream, y_other_seed, dy, dx;
    be().dropout_forward(x, y, p, 7, 3, 0);
    EXPECT_EQ(y.dims(), x.dims());
    EXPECT_EQ(y.dtype(), x.dtype());
    const HostTensor yv = read(y);
    // Other keys in between leave no state behind: the same key gives the same bits.
    be().dropout_forward(x, y_other_stream, p, 7, 4, 0);
    be().dropout_forward(x, y_other_seed, p, 8, 3, 0);
    be().dropout_forward(x, y_again, p, 7, 3, 0);
    expect_same_bits("the same key twice", read(y_again), yv);

    std::size_t kept = 0;
    RefTensor want(yv.size());
    for (std::size_t i = 0; i < yv.size(); ++i) {
      const bool keep = yv[i] != 0.0f;
      kept += keep;
      want[i] = keep ? double(xv[i]) / (1.0 - p) : 0.0;
    }
    expect_close("kept values are x/(1-p)", yv, want, tolerance(dt));
    const double fraction = double(kept) / double(n);
    EXPECT_NEAR(fraction, 1.0 - p, 0.01) << "kept fraction (σ ≈ 0.0015 at this size)";

    auto differs = [&](const HostTensor& other) {
      std::size_t diff = 0;
      for (std::size_t i = 0; i < yv.size(); ++i) diff += (other[i] == 0.0f) != (yv[i] == 0.0f);
      return diff;
    };
    EXPECT_GT(differs(read(y_other_stream)), std::size_t(n / 10)) << "another stream, another mask";
    EXPECT_GT(differs(read(y_other_seed)), std::size_t(n / 10)) << "another seed, another mask";

    // The mask depends on the element's index, not on the tensor's size.
    Tensor head = plain(Dims{1000}, HostTensor(xv.begin(), xv.begin() + 1000), dt), y_head;
    be().dropout_forward(head, y_head, p, 7, 3, 0);
    expect_same_bits("the first 1000 elements alone", read(y_head), HostTensor(yv.begin(), yv.begin() + 1000));

    // Backward recomputes the same mask from the key.
    const HostTensor dyv = stored(away_from_zero(randn(n, 151)), dt);
    dy = plain(Dims{n}, dyv, dt);
    be().dropout_backward(dy, dx, p, 7, 3, 0);
    EXPECT_EQ(dx.dims(), dy.dims());
    EXPECT_EQ(dx.dtype(), dy.dtype());
    const HostTensor dxv = read(dx);
    RefTensor want_dx(dxv.size());
    for (std::size_t i = 0; i < dxv.size(); ++i) want_dx[i] = yv[i] != 0.0f ? double(dyv[i]) / (1.0 - p) : 0.0;
    expect_close("dx", dxv, want_dx, tolerance(dt));
    for (std::size_t i = 0; i < dxv.size(); ++i)
      if ((dxv[i] == 0.0f) != (yv[i] == 0.0f)) {
        ADD_FAILURE() << "backward's mask differs from forward's at " << i;
        break;
      }

    // p = 0 keeps everything unchanged.
    Tensor y0;
    be().dropout_forward(x, y0, 0.0f, 7, 3, 0);
    expect_same_bits("p = 0", read(y0), xv);
  }
}

// A rank's share of a batch (rows [first, ...) of it, passed as
// first_sample) gets the masks those rows get in the whole batch, forward
// and backward, flat and in a convolution's output layout: data-parallel
// dropout drops what one process would.
TEST_P(BackendConformance, DropoutOfAShareOfABatchIsThatShareOfTheWholeBatchsDropout) {
  const float p = 0.4f;
  for (DType dt : precisions()) {
    SCOPED_TRACE(dtype_trace(dt));
    for (const bool image : {false, true}) {
      SCOPED_TRACE(image ? "(6, 16, 3, 5) in a conv output layout" : "(6, 37) plain");
      const Dims whole_dims = image ? Dims{6, 16, 3, 5} : Dims{6, 37};
      const Dims share_dims = image ? Dims{4, 16, 3, 5} : Dims{4, 37};
      const std::size_t per_row = std::size_t(whole_dims.product() / 6);
      const HostTensor xv = stored(away_from_zero(randn(6 * per_row, 152)), dt);
      const HostTensor tail(xv.begin() + std::ptrdiff_t(2 * per_row), xv.end());  // rows 2..5
      auto shaped = [&](const Dims& dims, const HostTensor& v) {
        Tensor t;
        if (image) {
          be().shape_like(t, conv_output_like(dims, dt), dt);
        } else {
          be().shape_plain(t, dims, dt);
        }
        upload(t, v);
        return t;
      };
      Tensor whole = shaped(whole_dims, xv), share = shaped(share_dims, tail), y_whole, y_share, dx_whole, dx_share;
      be().dropout_forward(whole, y_whole, p, 11, 5, 0);
      be().dropout_forward(share, y_share, p, 11, 5, 2);
      const HostTensor yw = read(y_whole);
      expect_same_bits("rows 2..5 alone, from sample 2", read(y_share),
                       HostTensor(yw.begin() + std::ptrdiff_t(2 * per_row), yw.end()));
      be().dropout_backward(whole, dx_whole, p, 11, 5, 0);
      be().dropout_backward(share, dx_share, p, 11, 5, 2);
      const HostTensor dxw = read(dx_whole);
      expect_same_bits("backward, rows 2..5 alone", read(dx_share),
                       HostTensor(dxw.begin() + std::ptrdiff_t(2 * per_row), dxw.end()));
      Tensor y_first;  // the same share taken as the batch's start draws other masks
      be().dropout_forward(share, y_first, p, 11, 5, 0);
      const HostTensor yf = read(y_first), ys = read(y_share);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < yf.size(); ++i) differ += (yf[i] == 0.0f) != (ys[i] == 0.0f);
      EXPECT_GT(differ, yf.size() / 10) << "first_sample changed nothing";
    }
  }
}

// ======================================================================================
// Fake quantization
// ======================================================================================

TEST_P(BackendConformance, FakeQuantizeMatchesTheFormulaBitForBit) {
  const float scale = 0.25f;
  HostTensor xv = randn(61, 160, 20.0f);
  // Exact ties (x/scale = k + 0.5) round half to even; values past the range clamp.
  const float ties[] = {0.125f, 0.375f, 0.625f, -0.375f, -0.625f, 2.5f * scale, 100.0f, -100.0f, 0.0f};
  std::copy(std::begin(ties), std::end(ties), xv.begin());
  for (const auto& [lo, hi] : {std::pair{0.0f, 255.0f}, std::pair{-127.0f, 127.0f}}) {
    for (bool conv_layout : {false, true}) {
      SCOPED_TRACE("range " + std::to_string(lo) + ".." + std::to_string(hi) +
                   (conv_layout ? ", conv output layout" : ", plain"));
      const Dims dims = conv_layout ? Dims{2, 16, 2, 2} : Dims{61};
      HostTensor v = conv_layout ? randn(std::size_t(dims.product()), 161, 20.0f) : xv;
      Tensor x;
      if (conv_layout) {
        be().shape_like(x, conv_output_like(dims, DType::kF32), DType::kF32);
      } else {
        be().shape_plain(x, dims, DType::kF32);
      }
      upload(x, v);
      Tensor y;
      be().fake_quantize(x, y, scale, lo, hi);
      EXPECT_EQ(y.dims(), dims);
      HostTensor want(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) want[i] = std::clamp(std::nearbyint(v[i] / scale), lo, hi) * scale;
      expect_same_bits("fake_quantize", read(y), want);
    }
  }
}

TEST_P(BackendConformance, FakeQuantizeChannelsMatchesTheFormulaBitForBit) {
  // Dense weights (O, I) and conv weights (O, C, K, K), each in the layout
  // its op's shape_parameters chose; one row all zero (scale 1).
  auto dense = be().dense(DenseSpec{Dims{9}, 4, DType::kF32, Activation::kNone, 8});
  auto conv = be().conv(ConvSpec{Dims{3, 5, 5}, 4, 3, 1, 1, DType::kF32, Activation::kNone, 8});
  Tensor wd, bd, wc, bc;
  dense->shape_parameters(wd, bd);
  conv->shape_parameters(wc, bc);
  // 127 levels (8-bit weights) and 64 (the 7-bit weights of CPUs without VNNI).
  for (Tensor* w : {&wd, &wc})
    for (int levels : {127, 64}) {
      SCOPED_TRACE(w->dims().str() + ", levels " + std::to_string(levels));
      const auto o = std::size_t(w->dims()[0]);
      const std::size_t per = std::size_t(w->elements()) / o;
      HostTensor v = randn(std::size_t(w->elements()), 170, 0.3f);
      std::fill(v.begin() + std::ptrdiff_t(per), v.begin() + std::ptrdiff_t(2 * per), 0.0f);
      v[2 * per + 1] = -1.5f;  // the row's extreme is negative
      upload(*w, v);
      Tensor y;
      be().fake_quantize_channels(*w, y, levels);
      EXPECT_EQ(y.dims(), w->dims());
      HostTensor want(v.size());
      const float l = float(levels);
      for (std::size_t r = 0; r < o; ++r) {
        float mx = 0;
        for (std::size_t i = 0; i < per; ++i) mx = std::max(mx, std::fabs(v[r * per + i]));
        const float s = mx > 0 ? mx / l : 1.0f;
        for (std::size_t i = 0; i < per; ++i)
          want[r * per + i] = std::clamp(std::nearbyint(v[r * per + i] / s), -l, l) * s;
      }
      expect_same_bits("fake_quantize_channels", read(y), want);
    }
  // Levels outside 1..127 are a usage error on every backend.
  Tensor y;
  for (int levels : {0, 128, -1}) {
    try {
      be().fake_quantize_channels(wd, y, levels);
      ADD_FAILURE() << "levels " << levels << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << levels;
    }
  }
}

TEST_P(BackendConformance, FakeQuantizeRefusesBf16WithAUsageError) {
  if (!caps().bf16)
    GTEST_SKIP() << "no bf16 on this backend (isa " << caps().isa << "; a CPU needs avx512_core_bf16 or AMX)";
  Tensor x = plain(Dims{2, 4}, randn(8, 180), DType::kBF16), y;
  auto kind_of = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kBusy;  // not thrown: reported as a mismatch below
  };
  EXPECT_EQ(kind_of([&] { be().fake_quantize(x, y, 0.1f, -127, 127); }), ErrorKind::kUsage);
  EXPECT_EQ(kind_of([&] { be().fake_quantize_channels(x, y, 127); }), ErrorKind::kUsage);
}

// ======================================================================================
// Inference-only ops: int8 and sparse models
// ======================================================================================
//
// Forward only (there is nothing to differentiate), each compared with a
// reference in double and run twice for the same bits.
//
// Int8 (the whole group skips when capabilities().int8 is false): a quantized
// activation is uploaded as its integer values q (exact in f32, s8 and u8) and
// read back the same way; its real value is q·scale, as backend.h defines.
// Weights are s8 q with a different scale per output channel. The reference
// runs in double on the dequantized values the backend holds, q_x·s_in and
// q_w·s_w[o] (an f32 input is given as (q + δ)·s_in with |δ| ≤ 0.3, so the
// op's own quantization must land on exactly q), so what remains is:
//   * the fp32 arithmetic after the exact int32 accumulation: oscale =
//     s_in·s_w/s_out and bias/(s_in·s_w) each rounded, then one multiply-add
//     and the fused activation (a vectorized tanh/sigmoid of a few ulp):
//     a few 2^-24 of the terms' size, below kF32Tolerance·(|want| + Σ|x·w|+|b|)
//     as for the fp32 ops;
//   * an s8/u8 output rounds the real result to its grid: ≤ s_out/2 more;
//   * avg pooling of s8/u8 values (fused, or inference_pool after the conv)
//     averages values each within s_out/2 of the truth and rounds the mean
//     once more: ≤ s_out (one step) more. Max pooling commutes with the
//     (monotone) rounding: still s_out/2.
// The output scale puts the largest reference output at 100 steps (200 for
// u8, twice the resolution), so half a step is a tight bound: a wrong scale,
// a dropped bias or zero point, or a wrong weight index moves outputs by many
// steps. Outputs do not saturate (saturation is not pinned down here).
//
// fp32 (the inference dense and conv, and the dense of mostly-zero weights
// on either kernel): kF32Tolerance of the terms, as for the training ops; the
// CSR and dense kernels also agree with each other within it. The sparse
// kernel is always named (kSparse or kDense) rather than left to kAuto's
// rule. Thread-count determinism is asked of the int8 ops only
// (exact int32 accumulation; backend.h promises no more for fp32 products).

// The int8 group's skip reason.
constexpr const char* kNoInt8 = "capabilities().int8 is false: the backend has no int8 inference ops";

bool is_int8(DType dt) { return dt == DType::kS8 || dt == DType::kU8; }

HostTensor read_back(Backend& be, const Tensor& t) {
  HostTensor h(std::size_t(t.elements()));
  be.copy_to_host(t, h.data());
  return h;
}

Tensor plain_tensor(Backend& be, const Dims& dims, const HostTensor& values, DType dt) {
  Tensor t;
  be.shape_plain(t, dims, dt);
  EXPECT_EQ(std::size_t(t.elements()), values.size());
  be.copy_from_host(values.data(), t);
  return t;
}

// s8 weights, q in [-127, 127], with scale 0.003·(1 + o mod 4) for output
// channel o (so a scale applied to the wrong channel shows), and real biases.
InferenceWeights int8_weights(std::int64_t out, std::int64_t fan_in, std::uint32_t seed) {
  InferenceWeights w;
  const HostTensor g = randn(std::size_t(out * fan_in), seed, 45.0f);
  w.scales.resize(std::size_t(out));
  for (std::int64_t o = 0; o < out; ++o) w.scales[std::size_t(o)] = 0.003f * float(1 + o % 4);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const float q = std::clamp(std::nearbyint(g[i]), -127.0f, 127.0f);
    w.q.push_back(std::int8_t(q));
    w.weight.push_back(q * w.scales[i / std::size_t(fan_in)]);
  }
  w.bias = randn(std::size_t(out), seed + 1, 0.3f);
  return w;
}

// The weights' real values as the backend holds them: q·s_w[o], in double.
RefTensor real_weights(const InferenceWeights& w) {
  const std::size_t fan_in = w.q.size() / w.scales.size();
  RefTensor r(w.q.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = double(w.q[i]) * double(w.scales[i / fan_in]);
  return r;
}

// fp32 weights: dense normal values, or with `zero_fraction` of them zero.
InferenceWeights f32_weights(std::int64_t out, std::int64_t fan_in, std::uint32_t seed,
                             double zero_fraction = 0) {
  InferenceWeights w;
  w.weight = randn(std::size_t(out * fan_in), seed, 0.4f);
  std::mt19937 rng(seed + 7);
  std::uniform_real_distribution<double> u(0, 1);
  for (float& v : w.weight)
    if (u(rng) < zero_fraction) v = 0;
  w.bias = randn(std::size_t(out), seed + 1, 0.3f);
  return w;
}

// An int8 layer's input: `host` is what is uploaded into a tensor of dtype
// dt (q itself for s8/u8; (q + δ)·scale, |δ| ≤ 0.3, for f32, which the op
// quantizes to s8), `real` = q·scale in double.
struct Int8Input {
  HostTensor host;
  RefTensor real;
};
Int8Input int8_input(std::size_t count, DType dt, float scale, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 45.0f);
  std::uniform_real_distribution<float> delta(-0.3f, 0.3f);
  Int8Input in;
  for (std::size_t i = 0; i < count; ++i) {
    const float q = dt == DType::kU8 ? std::clamp(std::nearbyint(2.0f * std::fabs(g(rng))), 0.0f, 255.0f)
                                     : std::clamp(std::nearbyint(g(rng)), -127.0f, 127.0f);
    in.host.push_back(dt == DType::kF32 ? (q + delta(rng)) * scale : q);
    in.real.push_back(double(q) * double(scale));
  }
  return in;
}

// The output scale that puts the largest |want| at 100 steps of s8 (200 of u8).
float output_scale_for(const RefTensor& want, DType out) {
  double m = 0;
  for (double v : want) m = std::max(m, std::fabs(v));
  return out == DType::kU8 ? float(m / 200) : float(m / 100);
}

// An op's output as real values: q·s_out for an s8/u8 y, whose values must be
// integers in the dtype's range; y itself when f32.
HostTensor real_values(Backend& be, const Tensor& y, float s_out) {
  HostTensor h = read_back(be, y);
  if (!is_int8(y.dtype())) return h;
  const float lo = y.dtype() == DType::kU8 ? 0.0f : -128.0f, hi = y.dtype() == DType::kU8 ? 255.0f : 127.0f;
  for (float& v : h) {
    if (v != std::nearbyint(v) || v < lo || v > hi) {
      ADD_FAILURE() << dtype_name(y.dtype()) << " output holds " << v;
      break;
    }
    v = float(double(v) * double(s_out));
  }
  return h;
}

// The largest Σ|x·w| + |b| over the outputs of a dense/conv reference.
double max_terms(const std::function<RefTensor(const std::vector<RefTensor>&)>& ref_none,
                 std::vector<RefTensor> v) {
  for (RefTensor& t : v)
    for (double& e : t) e = std::fabs(e);
  double m = 0;
  for (double t : ref_none(v)) m = std::max(m, t);
  return m;
}

// K×K pooling with stride S, no padding, of y (n, c, h, w) in double.
RefTensor pool_ref(const RefTensor& y, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                   std::int64_t k, std::int64_t stride, bool max) {
  const std::int64_t ho = (h - k) / stride + 1, wo = (w - k) / stride + 1;
  RefTensor out;
  for (std::int64_t s = 0; s < n * c; ++s)
    for (std::int64_t i = 0; i < ho; ++i)
      for (std::int64_t j = 0; j < wo; ++j) {
        double best = -1e300, sum = 0;
        for (std::int64_t ki = 0; ki < k; ++ki)
          for (std::int64_t kj = 0; kj < k; ++kj) {
            const double e = y[std::size_t((s * h + i * stride + ki) * w + j * stride + kj)];
            best = std::max(best, e);
            sum += e;
          }
        out.push_back(max ? best : sum / double(k * k));
      }
  return out;
}

// A tensor of dims nchw and int8 dtype dt in the layout an int8 conv with
// `in_channels` input channels leaves its output in (fewer than 4: the CPU
// backend's im2col path; else oneDNN's int8 conv): what the layer after an
// int8 conv receives. Its values are unspecified; use it with shape_like.
Tensor int8_conv_output_like(Backend& be, const Dims& nchw, DType dt, std::int64_t in_channels) {
  InferenceConvSpec spec;
  spec.in = Dims{in_channels, nchw[2], nchw[3]};
  spec.out_channels = nchw[1];
  spec.kernel = 1;
  spec.fused = dt == DType::kU8 ? Activation::kRelu : Activation::kNone;
  const std::size_t count = std::size_t(nchw[1] * in_channels);
  spec.weights.q.assign(count, 1);
  spec.weights.weight.assign(count, 1.0f);
  spec.weights.scales.assign(std::size_t(nchw[1]), 1.0f);
  spec.weights.bias.assign(std::size_t(nchw[1]), 0.0f);
  spec.int8 = true;
  spec.quant = Int8Activations{1.0f, dt, 1.0f};
  auto op = be.inference_conv(spec);
  Tensor x, y;
  be.shape_plain(x, Dims{nchw[0], in_channels, nchw[2], nchw[3]}, DType::kF32);
  be.fill_zero(x);
  op->forward(x, y);
  EXPECT_EQ(y.dims(), nchw);
  EXPECT_EQ(y.dtype(), dt);
  Tensor t;
  be.shape_like(t, y, dt);
  return t;
}

// The activation and output dtype pairs an int8 layer accepts.
struct Int8Output {
  Activation act;
  DType out;
};
constexpr Int8Output kInt8Outputs[] = {
    {Activation::kRelu, DType::kU8},    {Activation::kRelu, DType::kS8},
    {Activation::kNone, DType::kS8},    {Activation::kNone, DType::kF32},
    {Activation::kRelu, DType::kF32},   {Activation::kTanh, DType::kF32},
    {Activation::kSigmoid, DType::kF32},
};

std::string int8_trace(DType x_dt, const Int8Output& o) {
  return std::string("x ") + dtype_name(x_dt) + ", fused " + activation_name(o.act) + ", y " +
         dtype_name(o.out);
}

TEST_P(BackendConformance, Int8DenseEachInputDtypeActivationAndOutput) {
  if (!caps().int8) GTEST_SKIP() << kNoInt8;
  struct Input {
    Dims in;
    std::int64_t layout_channels;  // 0: plain; else the int8 conv output layout of that many input channels
  };
  const std::int64_t n = 5, out = 11;
  const float s_in = 0.02f;
  for (const Input& input : {Input{Dims{37}, 0}, Input{Dims{6, 3, 4}, 0}, Input{Dims{6, 3, 4}, 1},
                             Input{Dims{6, 3, 4}, 4}})
    for (DType x_dt : {DType::kF32, DType::kS8, DType::kU8})
      for (const Int8Output& o : kInt8Outputs) {
        SCOPED_TRACE(int8_trace(x_dt, o) + ", in " + input.in.str() +
                     (input.layout_channels ? ", conv output layout (" +
                                                  std::to_string(input.layout_channels) + " input channels)"
                                            : ", plain"));
        if (input.layout_channels > 1 && x_dt == DType::kF32) continue;  // one f32 conv output layout is enough
        const std::int64_t f = input.in.product();
        const InferenceWeights w = int8_weights(out, f, 50);
        const Int8Input in = int8_input(std::size_t(n * f), x_dt, s_in, 51);
        const std::vector<RefTensor> v{in.real, real_weights(w), to_double(w.bias)};
        const RefTensor want = dense_ref(v, n, f, out, o.act);
        const double terms =
            max_terms([&](const std::vector<RefTensor>& a) { return dense_ref(a, n, f, out, Activation::kNone); }, v);
        const float s_out = o.out == DType::kF32 ? 0.0f : output_scale_for(want, o.out);

        InferenceDenseSpec spec;
        spec.in = input.in;
        spec.out = out;
        spec.fused = o.act;
        spec.weights = w;
        spec.int8 = true;
        spec.quant = Int8Activations{s_in, o.out, s_out};
        auto op = be().inference_dense(spec);
        EXPECT_TRUE(op->kernel().empty()) << "kernel() before the first forward";
        Tensor x, y;
        if (input.layout_channels > 0) {
          // f32: the layout an fp32 conv leaves its output in.
          be().shape_like(x,
                          x_dt == DType::kF32 ? conv_output_like(input.in.with_batch(n), x_dt)
                                              : int8_conv_output_like(be(), input.in.with_batch(n), x_dt,
                                                                      input.layout_channels),
                          x_dt);
          upload(x, in.host);
        } else {
          x = plain(input.in.with_batch(n), in.host, x_dt);
        }
        op->forward(x, y);
        EXPECT_FALSE(op->kernel().empty());
        if (verbose()) std::printf("  int8 dense %s, x %s: kernel %s\n", input.in.str().c_str(), dtype_name(x_dt),
                                   op->kernel().c_str());
        ASSERT_EQ(y.dims(), (Dims{n, out}));
        ASSERT_EQ(y.dtype(), o.out);
        const HostTensor first = read(y);
        expect_close("int8 dense", real_values(be(), y, s_out), want, kF32Tolerance, terms,
                     o.out == DType::kF32 ? 0.0 : 0.5 * s_out);
        op->forward(x, y);
        expect_same_bits("int8 dense run twice", read(y), first);
      }
}

TEST_P(BackendConformance, Int8ConvIm2colAndDirectWithAndWithoutFusedPooling) {
  if (!caps().int8) GTEST_SKIP() << kNoInt8;
  const ConvShape shapes[] = {
      {2, 1, 6, 6, 4, 3, 1, 1},  // one channel (im2col + matmul on the CPU), pad 1
      {2, 3, 7, 6, 5, 3, 2, 1},  // three channels, stride 2, pad 1, non-square; 4x3 output: an odd pool
      {2, 3, 8, 8, 4, 2, 2, 0},  // even kernel, stride 2
      {2, 5, 6, 6, 8, 3, 1, 1},  // five channels (oneDNN's int8 conv on the CPU)
      {1, 8, 7, 5, 6, 3, 2, 0},  // eight channels, stride 2, non-square
  };
  struct PoolCase {
    std::int64_t window;
    bool max;
  };
  const Int8Output outputs[] = {{Activation::kRelu, DType::kU8},
                                {Activation::kNone, DType::kS8},
                                {Activation::kNone, DType::kF32},
                                {Activation::kSigmoid, DType::kF32}};
  const float s_in = 0.02f;
  for (const ConvShape& s : shapes) {
    const InferenceWeights w = int8_weights(s.out, s.c * s.k * s.k, 60);
    for (DType x_dt : {DType::kF32, DType::kS8, DType::kU8})
      for (bool x_layout : {false, true}) {
        const Int8Input in = int8_input(std::size_t(s.n * s.c * s.h * s.w), x_dt, s_in, 61);
        const std::vector<RefTensor> v{in.real, real_weights(w), to_double(w.bias)};
        const double terms =
            max_terms([&](const std::vector<RefTensor>& a) { return conv_ref(a, s, Activation::kNone); }, v);
        for (const Int8Output& o : outputs)
          for (PoolCase p : {PoolCase{0, true}, PoolCase{2, true}, PoolCase{2, false}}) {
            SCOPED_TRACE(int8_trace(x_dt, o) + ", in " + (Dims{s.n, s.c, s.h, s.w}).str() + " k" +
                         std::to_string(s.k) + " stride " + std::to_string(s.stride) + " pad " +
                         std::to_string(s.pad) + (x_layout ? ", x in a conv output layout" : "") +
                         (p.window ? std::string(", then ") + (p.max ? "max" : "avg") + " pool 2" : ""));
            const RefTensor want = conv_ref(v, s, o.act);
            const float s_out = o.out == DType::kF32 ? 0.0f : output_scale_for(want, o.out);
            const double half_step = o.out == DType::kF32 ? 0.0 : 0.5 * s_out;
            InferenceConvSpec spec;
            spec.in = Dims{s.c, s.h, s.w};
            spec.out_channels = s.out;
            spec.kernel = s.k;
            spec.stride = s.stride;
            spec.pad = s.pad;
            spec.fused = o.act;
            spec.weights = w;
            spec.int8 = true;
            spec.quant = Int8Activations{s_in, o.out, s_out};
            spec.pool = p.window;
            spec.pool_max = p.max;
            auto op = be().inference_conv(spec);
            if (p.window == 0) {
              EXPECT_FALSE(op->runs_pool()) << "no pooling was asked for";
            }
            Tensor x, y;
            if (x_layout) {
              const Dims nchw{s.n, s.c, s.h, s.w};
              be().shape_like(x, x_dt == DType::kF32 ? conv_output_like(nchw, x_dt) : int8_conv_output_like(be(), nchw, x_dt, 1),
                              x_dt);
              upload(x, in.host);
            } else {
              x = plain(Dims{s.n, s.c, s.h, s.w}, in.host, x_dt);
            }
            op->forward(x, y);
            if (verbose())
              std::printf("  int8 conv %lld channels, pool %lld: kernel %s, runs_pool %d\n",
                          static_cast<long long>(s.c), static_cast<long long>(p.window), op->kernel().c_str(),
                          int(op->runs_pool()));
            ASSERT_EQ(y.dtype(), o.out);
            const HostTensor first = read(y);
            op->forward(x, y);
            expect_same_bits("int8 conv run twice", read(y), first);
            const double pooled_step = p.max ? half_step : 2 * half_step;  // avg rounds once more
            const RefTensor want_pooled =
                p.window ? pool_ref(want, s.n, s.out, s.ho(), s.wo(), p.window, p.window, p.max) : RefTensor{};
            if (op->runs_pool()) {
              ASSERT_EQ(y.dims(), (Dims{s.n, s.out, s.ho() / p.window, s.wo() / p.window}));
              expect_close("int8 conv with its pooling", real_values(be(), y, s_out), want_pooled, kF32Tolerance,
                           terms, pooled_step);
              continue;
            }
            ASSERT_EQ(y.dims(), (Dims{s.n, s.out, s.ho(), s.wo()}));
            expect_close("int8 conv", real_values(be(), y, s_out), want, kF32Tolerance, terms, half_step);
            if (p.window == 0) continue;
            // The op left the pooling to the pooling layer: run it on the conv's output.
            auto pool = be().inference_pool(InferencePoolSpec{Dims{s.out, s.ho(), s.wo()}, p.window, p.window, p.max});
            Tensor py;
            pool->forward(y, py);
            ASSERT_EQ(py.dtype(), y.dtype());
            expect_close("int8 conv then inference_pool", real_values(be(), py, s_out), want_pooled, kF32Tolerance,
                         terms, pooled_step);
          }
      }
  }
}

// The worst case for int8 instructions without VNNI, which add two u8·s8
// products into a saturating 16-bit sum: every input at the end of its range
// (u8 255; s8 127 or −128) against weights of ±127 that give every product
// the same sign, so a pair sums to ±2·255·127 = ±64770 (or 2·128·127 for s8
// inputs, whatever offset a kernel adds); and against ±64, the most such a
// CPU takes unsplit (2·255·64 = 32640, just inside 16 bits). With unit
// scales, no bias and an f32 output every result is an integer below 2^24:
// the op must give it exactly. Dense, and conv both as im2col (1 channel)
// and as oneDNN's own conv where it is exact (5 channels).
TEST_P(BackendConformance, Int8ProductsAreExactAtTheEndsOfTheirRanges) {
  if (!caps().int8) GTEST_SKIP() << kNoInt8;
  struct Case {
    DType x_dt;
    float x;        // every input element
    int w;          // every weight is w ...
    bool alternate; // ... or alternates in sign along the input
  };
  const Case cases[] = {{DType::kU8, 255, 127, false}, {DType::kU8, 255, -127, false}, {DType::kU8, 255, 127, true},
                        {DType::kU8, 255, 64, false},  {DType::kU8, 255, -64, false},  {DType::kS8, 127, 127, false},
                        {DType::kS8, 127, -127, false}, {DType::kS8, -128, -127, false}, {DType::kS8, -128, 127, true},
                        {DType::kS8, -128, -64, false}, {DType::kS8, 127, 64, true}};
  const std::int64_t n = 3, out = 4;
  auto weights = [](std::int64_t fan_in, const Case& c) {
    InferenceWeights w;
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < fan_in; ++i) {
        const int q = (c.alternate && i % 2 ? -c.w : c.w) * (o % 2 ? -1 : 1);
        w.q.push_back(std::int8_t(q));
        w.weight.push_back(float(q));
      }
    w.scales.assign(std::size_t(out), 1.0f);
    w.bias.assign(std::size_t(out), 0.0f);
    return w;
  };
  // The exact output of channel o: x · Σ_i q[o, i] (every input is x).
  auto exact = [](const InferenceWeights& w, std::int64_t fan_in, std::int64_t o, float x) {
    std::int64_t sum = 0;
    for (std::int64_t i = 0; i < fan_in; ++i) sum += w.q[std::size_t(o * fan_in + i)];
    return float(std::int64_t(x) * sum);
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("x ") + dtype_name(c.x_dt) + " " + std::to_string(int(c.x)) + ", weights " +
                 std::to_string(c.w) + (c.alternate ? " alternating" : ""));
    {
      const std::int64_t f = 48;
      InferenceDenseSpec spec;
      spec.in = Dims{f};
      spec.out = out;
      spec.weights = weights(f, c);
      spec.int8 = true;
      spec.quant = Int8Activations{1.0f, DType::kF32, 0.0f};
      auto op = be().inference_dense(spec);
      Tensor x = plain(Dims{n, f}, HostTensor(std::size_t(n * f), c.x), c.x_dt), y;
      op->forward(x, y);
      const HostTensor got = read(y);
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t o = 0; o < out; ++o)
          ASSERT_EQ(got[std::size_t(r * out + o)], exact(spec.weights, f, o, c.x))
              << "dense, row " << r << " channel " << o << " (" << op->kernel() << ")";
    }
    for (std::int64_t channels : {1, 5}) {
      const std::int64_t k = 3, h = 5, fan_in = channels * k * k;
      InferenceConvSpec spec;
      spec.in = Dims{channels, h, h};
      spec.out_channels = out;
      spec.kernel = k;
      spec.weights = weights(fan_in, c);
      spec.int8 = true;
      spec.quant = Int8Activations{1.0f, DType::kF32, 0.0f};
      auto op = be().inference_conv(spec);
      Tensor x = plain(Dims{n, channels, h, h}, HostTensor(std::size_t(n * channels * h * h), c.x), c.x_dt), y;
      op->forward(x, y);
      ASSERT_EQ(y.dims(), (Dims{n, out, h - k + 1, h - k + 1}));
      const HostTensor got = read(y);
      const std::int64_t pixels = (h - k + 1) * (h - k + 1);
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t o = 0; o < out; ++o)
          for (std::int64_t p = 0; p < pixels; ++p)
            ASSERT_EQ(got[std::size_t((r * out + o) * pixels + p)], exact(spec.weights, fan_in, o, c.x))
                << "conv of " << channels << " channel(s), row " << r << " channel " << o << " pixel " << p << " ("
                << op->kernel() << ")";
    }
  }
}

TEST_P(BackendConformance, InferencePoolOfF32AndInt8InPlainAndConvOutputLayouts) {
  struct PoolShape {
    std::int64_t k, stride;
  };
  const std::int64_t n = 2;
  for (DType dt : {DType::kF32, DType::kS8, DType::kU8})
    for (bool max : {true, false})
      for (PoolShape p : {PoolShape{2, 2}, PoolShape{3, 1}, PoolShape{3, 2}})
        for (bool conv_layout : {false, true}) {
          if (is_int8(dt) && !caps().int8) GTEST_SKIP() << kNoInt8;
          SCOPED_TRACE(dtype_trace(dt) + (max ? ", max" : ", avg") + " k" + std::to_string(p.k) + " stride " +
                       std::to_string(p.stride) + (conv_layout ? ", conv output layout" : ", plain"));
          const Dims in = conv_layout ? Dims{16, 5, 5} : Dims{3, 5, 5};
          Tensor x, y;
          if (!conv_layout) {
            be().shape_plain(x, in.with_batch(n), dt);
          } else if (dt == DType::kF32) {
            be().shape_like(x, conv_output_like(in.with_batch(n), dt), dt);
          } else {
            be().shape_like(x, int8_conv_output_like(be(), in.with_batch(n), dt, 1), dt);
          }
          // f32: distinct values k/16 (no ties); s8/u8: integers q of the dtype's range.
          const HostTensor values =
              dt == DType::kF32 ? distinct_values(std::size_t(x.elements()), 70)
                                : int8_input(std::size_t(x.elements()), dt, 1.0f, 71).host;
          upload(x, values);
          auto op = be().inference_pool(InferencePoolSpec{in, p.k, p.stride, max});
          op->forward(x, y);
          const std::int64_t ho = (in[1] - p.k) / p.stride + 1, wo = (in[2] - p.k) / p.stride + 1;
          ASSERT_EQ(y.dims(), (Dims{n, in[0], ho, wo}));
          ASSERT_EQ(y.dtype(), dt);
          const HostTensor got = read(y);
          const RefTensor want = pool_ref(to_double(values), n, in[0], in[1], in[2], p.k, p.stride, max);
          if (max) {
            expect_close("max pool (exact)", got, want, 0.0);
          } else if (dt == DType::kF32) {
            expect_close("avg pool", got, want, kF32Tolerance);
          } else {
            // The mean of integers rounded to an integer of the dtype: within half a step.
            for (float v : got) ASSERT_EQ(v, std::nearbyint(v)) << "an int8 average is an integer";
            expect_close("int8 avg pool (within half a step)", got, want, 0.0, 0.0, 0.5);
          }
          op->forward(x, y);
          expect_same_bits("pool run twice", read(y), got);
        }
}

TEST_P(BackendConformance, F32InferenceDenseAndConvWithEachFusedActivation) {
  const std::int64_t n = 5, out = 11;
  for (bool conv_layout : {false, true})
    for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kTanh, Activation::kSigmoid}) {
      SCOPED_TRACE(std::string("dense, fused ") + activation_name(act) +
                   (conv_layout ? ", image in a conv output layout" : ", flat"));
      const Dims in = conv_layout ? Dims{16, 2, 3} : Dims{37};
      const std::int64_t f = in.product();
      InferenceDenseSpec spec;
      spec.in = in;
      spec.out = out;
      spec.fused = act;
      spec.weights = f32_weights(out, f, 80);
      spec.sparse = SparseKernel::kDense;  // named, not left to kAuto
      auto op = be().inference_dense(spec);
      Tensor x, y;
      if (conv_layout) {
        be().shape_like(x, conv_output_like(in.with_batch(n), DType::kF32), DType::kF32);
      } else {
        be().shape_plain(x, in.with_batch(n), DType::kF32);
      }
      const HostTensor xv = randn(std::size_t(n * f), 81);
      upload(x, xv);
      op->forward(x, y);
      ASSERT_EQ(y.dims(), (Dims{n, out}));
      ASSERT_EQ(y.dtype(), DType::kF32);
      const std::vector<RefTensor> v{to_double(xv), to_double(spec.weights.weight), to_double(spec.weights.bias)};
      const HostTensor got = read(y);
      expect_close("fp32 inference dense", got, dense_ref(v, n, f, out, act), kF32Tolerance,
                   max_terms([&](const std::vector<RefTensor>& a) { return dense_ref(a, n, f, out, Activation::kNone); }, v));
      op->forward(x, y);
      expect_same_bits("fp32 inference dense run twice", read(y), got);
    }
  const ConvShape shapes[] = {{2, 3, 6, 7, 4, 3, 2, 1}, {2, 5, 6, 6, 8, 3, 1, 1}, {1, 2, 5, 5, 3, 2, 2, 0}};
  for (const ConvShape& s : shapes)
    for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kTanh, Activation::kSigmoid}) {
      SCOPED_TRACE("conv, in " + (Dims{s.n, s.c, s.h, s.w}).str() + " k" + std::to_string(s.k) + " stride " +
                   std::to_string(s.stride) + " pad " + std::to_string(s.pad) + ", fused " + activation_name(act));
      InferenceConvSpec spec;
      spec.in = Dims{s.c, s.h, s.w};
      spec.out_channels = s.out;
      spec.kernel = s.k;
      spec.stride = s.stride;
      spec.pad = s.pad;
      spec.fused = act;
      spec.weights = f32_weights(s.out, s.c * s.k * s.k, 82);
      auto op = be().inference_conv(spec);
      const HostTensor xv = randn(std::size_t(s.n * s.c * s.h * s.w), 83);
      Tensor x = plain(Dims{s.n, s.c, s.h, s.w}, xv), y;
      op->forward(x, y);
      ASSERT_EQ(y.dims(), (Dims{s.n, s.out, s.ho(), s.wo()}));
      ASSERT_EQ(y.dtype(), DType::kF32);
      const std::vector<RefTensor> v{to_double(xv), to_double(spec.weights.weight), to_double(spec.weights.bias)};
      const HostTensor got = read(y);
      expect_close("fp32 inference conv", got, conv_ref(v, s, act), kF32Tolerance,
                   max_terms([&](const std::vector<RefTensor>& a) { return conv_ref(a, s, Activation::kNone); }, v));
      op->forward(x, y);
      expect_same_bits("fp32 inference conv run twice", read(y), got);
    }
}

TEST_P(BackendConformance, SparseDenseCsrAndDenseKernelsAgreeWithTheReference) {
  const std::int64_t out = 33;
  for (bool image : {false, true})
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{63}, std::int64_t{130}})  // not multiples of 64
      for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kSigmoid}) {
        SCOPED_TRACE("batch " + std::to_string(n) + ", fused " + activation_name(act) +
                     (image ? ", image in a conv output layout" : ", flat"));
        const Dims in = image ? Dims{16, 2, 3} : Dims{70};
        const std::int64_t f = in.product();
        const InferenceWeights w = f32_weights(out, f, 90, 0.9);
        ASSERT_GE(std::count(w.weight.begin(), w.weight.end(), 0.0f), std::int64_t(w.weight.size()) / 2)
            << "the weights must be mostly zero";
        const HostTensor xv = randn(std::size_t(n * f), 91);
        Tensor x;
        if (image) {
          be().shape_like(x, conv_output_like(in.with_batch(n), DType::kF32), DType::kF32);
        } else {
          be().shape_plain(x, in.with_batch(n), DType::kF32);
        }
        upload(x, xv);
        const std::vector<RefTensor> v{to_double(xv), to_double(w.weight), to_double(w.bias)};
        const RefTensor want = dense_ref(v, n, f, out, act);
        const double terms =
            max_terms([&](const std::vector<RefTensor>& a) { return dense_ref(a, n, f, out, Activation::kNone); }, v);
        HostTensor results[2];
        int at = 0;
        // kSparse and kDense by name, not kAuto (its choice depends on the weights).
        for (SparseKernel kernel : {SparseKernel::kSparse, SparseKernel::kDense}) {
          SCOPED_TRACE(kernel == SparseKernel::kSparse ? "kSparse" : "kDense");
          InferenceDenseSpec spec;
          spec.in = in;
          spec.out = out;
          spec.fused = act;
          spec.weights = w;
          spec.sparse = kernel;
          auto op = be().inference_dense(spec);
          Tensor y;
          op->forward(x, y);
          ASSERT_EQ(y.dims(), (Dims{n, out}));
          ASSERT_EQ(y.dtype(), DType::kF32);
          results[at] = read(y);
          expect_close("sparse-weight dense", results[at], want, kF32Tolerance, terms);
          op->forward(x, y);
          expect_same_bits("sparse-weight dense run twice", read(y), results[at]);
          if (verbose()) std::printf("  batch %lld, %s: kernel %s\n", static_cast<long long>(n),
                                     activation_name(act), op->kernel().c_str());
          ++at;
        }
        // Both kernels round differently but within fp32 of each other.
        expect_close("kSparse vs kDense", results[0], to_double(results[1]), kF32Tolerance, terms);
      }
}

TEST_P(BackendConformance, DequantizeIsQTimesScaleInAnyLayout) {
  const float scale = 0.0371f;
  // f32: scale 1 is the identity (a view is allowed), another scale multiplies.
  for (bool conv_layout : {false, true})
    for (float s : {1.0f, scale}) {
      SCOPED_TRACE(std::string("f32, scale ") + std::to_string(s) + (conv_layout ? ", conv output layout" : ", plain"));
      const Dims dims{2, 16, 3, 3};
      Tensor x, y;
      if (conv_layout) {
        be().shape_like(x, conv_output_like(dims, DType::kF32), DType::kF32);
      } else {
        be().shape_plain(x, dims, DType::kF32);
      }
      const HostTensor xv = randn(std::size_t(x.elements()), 100);
      upload(x, xv);
      be().dequantize(x, s, y);
      ASSERT_EQ(y.dims(), dims);
      ASSERT_EQ(y.dtype(), DType::kF32);
      HostTensor want(xv.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = xv[i] * s;
      expect_same_bits("dequantized f32", read(y), want);
    }
  if (!caps().int8) GTEST_SKIP() << kNoInt8;
  // s8/u8: y = q·scale, one fp32 multiply, so bit-exact.
  for (DType dt : {DType::kS8, DType::kU8})
    for (std::int64_t layout_channels : {0, 1, 4}) {
      SCOPED_TRACE(dtype_trace(dt) + (layout_channels ? ", int8 conv output layout (" +
                                                            std::to_string(layout_channels) + " input channels)"
                                                      : ", plain"));
      const Dims dims{2, 6, 5, 5};  // 300 elements: room for all 256 values
      Tensor x, y;
      if (layout_channels) {
        be().shape_like(x, int8_conv_output_like(be(), dims, dt, layout_channels), dt);
      } else {
        be().shape_plain(x, dims, dt);
      }
      // Every value of the dtype's range, then random ones.
      HostTensor q = int8_input(std::size_t(x.elements()), dt, 1.0f, 101).host;
      for (std::size_t i = 0; i < 256; ++i) q[i] = dt == DType::kU8 ? float(i) : float(int(i) - 128);
      upload(x, q);
      expect_same_bits("int8 copy round trip", read(x), q);
      be().dequantize(x, scale, y);
      ASSERT_EQ(y.dims(), dims);
      ASSERT_EQ(y.dtype(), DType::kF32);
      HostTensor want(q.size());
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = q[i] * scale;
      const HostTensor got = read(y);
      expect_same_bits("dequantized", got, want);
      be().dequantize(x, scale, y);  // again into the same y
      expect_same_bits("dequantized twice", read(y), got);
    }
}

TEST_P(BackendConformance, ViewHostReadsTheHostRowsOrDeclines) {
  const Dims dims{4, 6};
  HostTensor host = randn(24, 110);
  Tensor t;
  if (!be().view_host(host.data(), dims, t)) {
    EXPECT_TRUE(t.empty()) << "view_host returned false but changed the tensor";
    GTEST_SKIP() << "view_host declines on this backend (copy_from_host then)";
  }
  ASSERT_EQ(t.dims(), dims);
  ASSERT_EQ(t.dtype(), DType::kF32);
  expect_same_bits("viewed rows", read(t), host);
  // An op reads the viewed rows as it reads an uploaded copy of them.
  InferenceDenseSpec spec;
  spec.in = Dims{6};
  spec.out = 5;
  spec.weights = f32_weights(5, 6, 111);
  spec.sparse = SparseKernel::kDense;
  auto op = be().inference_dense(spec);
  Tensor copy = plain(dims, host), y;
  op->forward(copy, y);
  const HostTensor from_copy = read(y);
  op->forward(t, y);
  expect_same_bits("dense of the viewed rows", read(y), from_copy);
  // A view, not a copy: new host values show through, also after viewing again.
  for (float& v : host) v = -v;
  expect_same_bits("viewed rows after the host changed", read(t), host);
  HostTensor other = randn(24, 112);
  ASSERT_TRUE(be().view_host(other.data(), dims, t));
  expect_same_bits("viewed other rows", read(t), other);
}

TEST_P(BackendConformance, InferenceOpsAlternatingBatchSizesMatchAFreshOp) {
  // An op caches its plan per batch size and layout: batches of 5, 3, 5 rows
  // through one op (into one y) give the bits a fresh op gives each.
  struct Case {
    std::string name;
    Dims in;
    DType x_dt;
    std::function<std::unique_ptr<InferenceOp>()> make;
  };
  std::vector<Case> cases;
  for (SparseKernel kernel : {SparseKernel::kSparse, SparseKernel::kDense})
    cases.push_back({kernel == SparseKernel::kSparse ? "sparse dense, kSparse" : "sparse dense, kDense", Dims{70},
                     DType::kF32, [this, kernel] {
                       InferenceDenseSpec spec;
                       spec.in = Dims{70};
                       spec.out = 9;
                       spec.fused = Activation::kRelu;
                       spec.weights = f32_weights(9, 70, 130, 0.9);
                       spec.sparse = kernel;
                       return be().inference_dense(spec);
                     }});
  if (caps().int8) {
    cases.push_back({"int8 dense", Dims{37}, DType::kS8, [this] {
                       InferenceDenseSpec spec;
                       spec.in = Dims{37};
                       spec.out = 9;
                       spec.fused = Activation::kRelu;
                       spec.weights = int8_weights(9, 37, 131);
                       spec.int8 = true;
                       spec.quant = Int8Activations{0.02f, DType::kU8, 0.01f};
                       return be().inference_dense(spec);
                     }});
    for (std::int64_t c : {3, 8})
      cases.push_back({"int8 conv, " + std::to_string(c) + " channels, max pool 2", Dims{c, 6, 6}, DType::kS8,
                       [this, c]() -> std::unique_ptr<InferenceOp> {
                         InferenceConvSpec spec;
                         spec.in = Dims{c, 6, 6};
                         spec.out_channels = 4;
                         spec.kernel = 3;
                         spec.pad = 1;
                         spec.fused = Activation::kRelu;
                         spec.weights = int8_weights(4, c * 9, 132);
                         spec.int8 = true;
                         spec.quant = Int8Activations{0.02f, DType::kU8, 0.01f};
                         spec.pool = 2;
                         return be().inference_conv(spec);
                       }});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto op = c.make();
    Tensor y;
    for (std::int64_t n : {5, 3, 5}) {
      SCOPED_TRACE("batch " + std::to_string(n));
      const std::size_t count = std::size_t(n * c.in.product());
      Tensor x = plain(c.in.with_batch(n), int8_input(count, c.x_dt, 0.02f, std::uint32_t(140 + n)).host, c.x_dt);
      op->forward(x, y);
      ASSERT_EQ(y.batch(), n);
      Tensor fresh_y;
      c.make()->forward(x, fresh_y);
      expect_same_bits("the op after other batch sizes vs a fresh op", read(y), read(fresh_y));
    }
  }
}

// The int8 ops on shapes large enough to be split across threads; returns every result read back.
std::vector<HostTensor> run_int8_ops(Backend& be) {
  auto scope = be.enter();
  std::vector<HostTensor> out;
  const float s_in = 0.02f;
  // Dense: s8 in, u8 out with relu; f32 in, f32 out.
  {
    const std::int64_t n = 130, f = 77, o = 40;
    for (DType x_dt : {DType::kS8, DType::kF32}) {
      InferenceDenseSpec spec;
      spec.in = Dims{f};
      spec.out = o;
      spec.fused = x_dt == DType::kS8 ? Activation::kRelu : Activation::kNone;
      spec.weights = int8_weights(o, f, 120);
      spec.int8 = true;
      spec.quant = x_dt == DType::kS8 ? Int8Activations{s_in, DType::kU8, 0.01f} : Int8Activations{s_in, DType::kF32, 0};
      auto op = be.inference_dense(spec);
      Tensor x = plain_tensor(be, Dims{n, f}, int8_input(std::size_t(n * f), x_dt, s_in, 121).host, x_dt), y;
      op->forward(x, y);
      out.push_back(read_back(be, y));
    }
  }
  // Conv: 3 channels (im2col) with a fused max and avg pool, and 8 channels (oneDNN's int8 conv).
  for (std::int64_t c : {3, 8})
    for (std::int64_t pool : {0, 2})
      for (bool pool_max : {true, false}) {
        if (pool == 0 && !pool_max) continue;
        const std::int64_t n = 9, h = 12, w = 12, o = 16;
        InferenceConvSpec spec;
        spec.in = Dims{c, h, w};
        spec.out_channels = o;
        spec.kernel = 3;
        spec.pad = 1;
        spec.fused = Activation::kRelu;
        spec.weights = int8_weights(o, c * 9, 122);
        spec.int8 = true;
        spec.quant = Int8Activations{s_in, DType::kU8, 0.01f};
        spec.pool = pool;
        spec.pool_max = pool_max;
        auto op = be.inference_conv(spec);
        Tensor x = plain_tensor(be, Dims{n, c, h, w}, int8_input(std::size_t(n * c * h * w), DType::kS8, s_in, 123).host,
                                DType::kS8),
               y, pooled, real;
        op->forward(x, y);
        out.push_back(read_back(be, y));
        if (pool > 0 && !op->runs_pool()) {
          auto p = be.inference_pool(InferencePoolSpec{Dims{o, h, w}, pool, pool, pool_max});
          p->forward(y, pooled);
          out.push_back(read_back(be, pooled));
        }
        be.dequantize(y, 0.01f, real);
        out.push_back(read_back(be, real));
      }
  return out;
}

TEST_P(BackendConformance, Int8OpsGiveTheSameBitsRunTwiceAndForAnyThreadCount) {
  if (!caps().int8) GTEST_SKIP() << kNoInt8;
  const std::vector<HostTensor> first = run_int8_ops(be());
  const std::vector<HostTensor> second = run_int8_ops(be());
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i)
    expect_same_bits("int8 result " + std::to_string(i) + " run twice", second[i], first[i]);
  if (!caps().deterministic) GTEST_SKIP() << "the backend does not report deterministic";
  const int other_threads = GetParam().threads == 1 ? 2 : 1;
  auto other = make_backend({.device = GetParam().device, .threads = other_threads});
  const std::vector<HostTensor> third = run_int8_ops(*other);
  ASSERT_EQ(first.size(), third.size());
  for (std::size_t i = 0; i < first.size(); ++i)
    expect_same_bits("int8 result " + std::to_string(i) + " with " + std::to_string(other_threads) + " threads",
                     third[i], first[i]);
}

// ======================================================================================
// Determinism across thread counts
// ======================================================================================

// The elementwise ops and reductions on tensors large enough to be split
// across threads; returns every result read back.
std::vector<HostTensor> run_thread_sensitive_ops(Backend& be) {
  auto scope = be.enter();
  std::vector<HostTensor> out;
  const std::int64_t n = 100003;
  auto plain = [&](const Dims& dims, const HostTensor& v) {
    Tensor t;
    be.shape_plain(t, dims, DType::kF32);
    be.copy_from_host(v.data(), t);
    return t;
  };
  auto read = [&](const Tensor& t) {
    HostTensor h(std::size_t(t.elements()));
    be.copy_to_host(t, h.data());
    out.push_back(h);
  };
  const HostTensor a = randn(n, 200), b = randn(n, 201);
  Tensor x = plain(Dims{n}, a), mask = plain(Dims{n}, b), y;
  be.multiply(x, mask);
  read(x);
  be.update_running_stat(x, mask, 0.1f, 1.3f);
  read(x);
  be.fake_quantize(x, y, 0.05f, -127, 127);
  read(y);
  Tensor w = plain(Dims{61, 1639}, randn(61 * 1639, 202));
  be.fake_quantize_channels(w, y, 127);
  read(y);
  be.dropout_forward(x, y, 0.2f, 5, 6, 0);
  read(y);
  be.dropout_backward(mask, y, 0.2f, 5, 6, 0);
  read(y);
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kTanh, Activation::kSigmoid}) {
    auto op = be.eltwise(EltwiseSpec{act, DType::kF32});
    Tensor ex = plain(Dims{7, n / 7}, HostTensor(a.begin(), a.begin() + 7 * (n / 7))), ey, edx;
    op->forward(ex, ey);
    read(ey);
    op->backward(ex, ey, edx);
    read(edx);
  }
  {
    // Periodic: rows shared out, the frequency gradient summed over a large batch.
    const std::int64_t rows = 801, f = 7, k = 8;  // N·F·K past the CPU's threading threshold
    auto op = be.periodic(PeriodicSpec{f, k});
    Tensor px = plain(Dims{rows, f}, HostTensor(a.begin(), a.begin() + rows * f)), pc, py, pdy, pdx, pdc;
    op->shape_parameters(pc);
    op->shape_parameters(pdc);
    const HostTensor cv = randn(std::size_t(f * k), 205, 0.3f);
    be.copy_from_host(cv.data(), pc);
    op->forward(px, pc, py);
    read(py);
    pdy = plain(Dims{rows, f * 2 * k}, HostTensor(b.begin(), b.begin() + rows * f * 2 * k));
    op->backward_data(px, pdy, pc, pdx);
    read(pdx);
    op->backward_weights(px, pdy, pc, pdc, false);
    read(pdc);
  }
  {
    // ple: rows shared out past the CPU's threading threshold.
    const std::int64_t rows = 801, f = 7, t = 8;
    auto op = be.piecewise_linear(PiecewiseLinearSpec{f, t});
    Tensor px = plain(Dims{rows, f}, HostTensor(a.begin(), a.begin() + rows * f)), pb, py, pdy, pdx;
    op->shape_edges(pb);
    HostTensor edges(std::size_t(f * (t + 1)));
    for (std::size_t i = 0; i < edges.size(); ++i) edges[i] = -2.0f + 0.5f * float(i % std::size_t(t + 1));
    be.copy_from_host(edges.data(), pb);
    op->forward(px, pb, py);
    read(py);
    pdy = plain(Dims{rows, f * t}, HostTensor(b.begin(), b.begin() + rows * f * t));
    op->backward_data(px, pdy, pb, pdx);
    read(pdx);
  }
  {
    // Ensemble: rows shared out, the scale gradient summed over a large batch.
    const std::int64_t rows = 801, f = 7, k = 8;  // N·k·F past the CPU's threading threshold
    auto op = be.ensemble(EnsembleSpec{f, k});
    Tensor ex = plain(Dims{rows, f}, HostTensor(a.begin(), a.begin() + rows * f)), er, ey, edy, edx, edr;
    op->shape_parameters(er);
    op->shape_parameters(edr);
    const HostTensor rv = randn(std::size_t(k * f), 206, 1.0f);
    be.copy_from_host(rv.data(), er);
    op->forward(ex, er, ey);
    read(ey);
    edy = plain(Dims{rows * k, f}, HostTensor(b.begin(), b.begin() + rows * k * f));
    op->backward_data(edy, er, ex, edx);
    read(edx);
    op->backward_weights(ex, edy, edr, false);
    read(edr);
    Tensor mean;
    be.member_mean(edy, k, mean);
    read(mean);
    // The members' own output layers on those rows: their sums over the
    // samples (the weight gradient) past the threading thresholds.
    const std::int64_t out = 5;
    auto heads = be.member_dense(MemberDenseSpec{k, f, out});
    Tensor hw, hb, hy, hdy, hdx, hdw, hdb;
    heads->shape_parameters(hw, hb);
    heads->shape_parameters(hdw, hdb);
    const HostTensor wv = randn(std::size_t(k * out * f), 207, 0.5f), bv = randn(std::size_t(k * out), 208, 0.5f);
    be.copy_from_host(wv.data(), hw);
    be.copy_from_host(bv.data(), hb);
    heads->forward(ey, hw, hb, hy);
    read(hy);
    hdy = plain(Dims{rows * k, out}, HostTensor(a.begin(), a.begin() + rows * k * out));
    heads->backward_data(hdy, hw, ey, hdx);
    read(hdx);
    heads->backward_weights(ey, hdy, hdw, hdb, false);
    read(hdw);
    read(hdb);
  }
  // Reductions: clip_scale over several gradients, then the updates that use it.
  Tensor g1 = plain(Dims{n}, b), g2 = plain(Dims{333}, randn(333, 203)), scale;
  be.clip_scale({&g1, &g2}, 1.0f, nullptr, scale);
  read(scale);
  Tensor m, v, vel;
  be.shape_plain(m, Dims{n}, DType::kF32);
  be.shape_plain(v, Dims{n}, DType::kF32);
  be.shape_plain(vel, Dims{n}, DType::kF32);
  be.fill_zero(m);
  be.fill_zero(v);
  be.fill_zero(vel);
  Tensor wa = plain(Dims{n}, a), ws = plain(Dims{n}, a);
  for (std::int64_t t = 1; t <= 2; ++t) {
    AdamUpdate au;
    au.step = t;
    au.weight_decay = 0.01f;
    au.decoupled_weight_decay = true;
    au.grad_scale = &scale;
    be.adam_update(wa, g1, m, v, au);
    SgdUpdate su;
    su.momentum = 0.9f;
    su.nesterov = true;
    su.weight_decay = 0.01f;
    su.grad_scale = &scale;
    be.sgd_update(ws, g1, vel, su);
  }
  read(wa);
  read(m);
  read(v);
  read(ws);
  read(vel);
  // Loss totals over large batches.
  for (LossKind kind : {LossKind::kSoftmaxCrossEntropy, LossKind::kBinaryCrossEntropy,
                        LossKind::kMeanSquaredError, LossKind::kMeanAbsoluteError}) {
    const std::int64_t k = kind == LossKind::kSoftmaxCrossEntropy ? 10 : 1, rows = 20000;
    HostTensor pv, lv;
    loss_batch(kind, rows, k, 204, pv, lv);
    auto op = be.loss(kind, k, {});
    Tensor pred = plain(Dims{rows, k}, pv), labels = plain(Dims{rows}, lv), dpred;
    op->forward_backward(pred, labels, &dpred, 1.0f / float(rows), nullptr);
    op->forward_backward(pred, labels, nullptr, 1.0f, nullptr);
    read(dpred);
    const LossTotals t = op->totals();
    float bits[2];
    std::memcpy(bits, &t.loss_sum, sizeof(double));
    out.push_back({bits[0], bits[1], float(t.correct), float(t.count)});
  }
  return out;
}

TEST_P(BackendConformance, ElementwiseOpsAndReductionsGiveTheSameBitsRunTwiceAndForAnyThreadCount) {
  const std::vector<HostTensor> first = run_thread_sensitive_ops(be());
  const std::vector<HostTensor> second = run_thread_sensitive_ops(be());
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i)
    expect_same_bits("result " + std::to_string(i) + " run twice", second[i], first[i]);
  if (!caps().deterministic) GTEST_SKIP() << "the backend does not report deterministic";
  const int other_threads = GetParam().threads == 1 ? 2 : 1;
  auto other = make_backend({.device = GetParam().device, .threads = other_threads});
  const std::vector<HostTensor> third = run_thread_sensitive_ops(*other);
  ASSERT_EQ(first.size(), third.size());
  for (std::size_t i = 0; i < first.size(); ++i)
    expect_same_bits("result " + std::to_string(i) + " with " + std::to_string(other_threads) +
                         " threads",
                     third[i], first[i]);
}

// ======================================================================================
// Batch invariance: a sample's inference output does not depend on its batch
// ======================================================================================
//
// What `predict`, `eval` and a server that batches concurrent requests rely
// on (backend.h, "Determinism"): every op an inference forward runs gives a
// sample the same bits whatever samples share its batch and wherever in the
// batch it sits. Each op below runs on kInvariantSamples samples at once, then
// on the same samples cut into batches of 1, 3, 17, 64 and 256 (the last one
// short), and cut after a first batch of 5 (so every later sample moves to
// another place in its batch); every cut must give the whole batch's bits.
// The shapes have odd feature counts (vector tails) and a wide dense layer
// (several register tiles of outputs). The ops: dense and conv built with
// batch_invariant (fp32, and bf16 where capabilities().bf16), each fused
// activation; what else a network's inference pass runs (pooling, eltwise,
// batch norm's forward_inference, layer norm, loss predict); and the
// inference-only ops: fp32 dense on each sparse kernel (kAuto included:
// whatever it measured, every batch size must run the same kernel), fp32
// conv, int8 dense and conv where capabilities().int8, pooling. One op
// object serves every batch size, as in a Predictor.

constexpr std::int64_t kInvariantSamples = 300;

// The cuts: batch sizes in order, the last repeated until the samples end.
const std::vector<std::vector<std::int64_t>>& invariance_cuts() {
  static const std::vector<std::vector<std::int64_t>> cuts = {{1}, {3}, {17}, {64}, {256}, {5, 64}};
  return cuts;
}

// `forward(first, count)`: the outputs of samples [first, first + count) run
// as one batch, sample-major (row-major read back).
void expect_batch_invariant(const std::string& what,
                            const std::function<HostTensor(std::int64_t first, std::int64_t count)>& forward) {
  SCOPED_TRACE(what);
  const HostTensor whole = forward(0, kInvariantSamples);
  ASSERT_EQ(whole.size() % std::size_t(kInvariantSamples), 0u);
  for (const std::vector<std::int64_t>& cut : invariance_cuts()) {
    HostTensor pieces;
    std::string name = "batches of";
    for (std::int64_t n : cut) name += ' ' + std::to_string(n);
    std::size_t at = 0;
    for (std::int64_t first = 0; first < kInvariantSamples;) {
      const std::int64_t n = std::min(cut[std::min(at++, cut.size() - 1)], kInvariantSamples - first);
      const HostTensor y = forward(first, n);
      ASSERT_EQ(y.size(), whole.size() / std::size_t(kInvariantSamples) * std::size_t(n)) << name;
      pieces.insert(pieces.end(), y.begin(), y.end());
      first += n;
    }
    expect_same_bits(name + " vs one batch of " + std::to_string(kInvariantSamples), pieces, whole);
  }
}

// Samples [first, first + count) of `all` (per_sample values each).
HostTensor samples_of(const HostTensor& all, std::int64_t per_sample, std::int64_t first, std::int64_t count) {
  return HostTensor(all.begin() + first * per_sample, all.begin() + (first + count) * per_sample);
}

TEST_P(BackendConformance, DenseForwardGivesEachSampleTheSameBitsInAnyBatch) {
  if (!caps().batch_invariant) GTEST_SKIP() << "capabilities().batch_invariant is false";
  struct Shape {
    Dims in;
    std::int64_t out;
    bool conv_layout;  // x arrives in a conv's output layout (an image into dense)
  };
  const Shape shapes[] = {{Dims{37}, 19, false}, {Dims{130}, 150, false}, {Dims{16, 2, 3}, 11, true}};
  for (DType dt : precisions())
    for (const Shape& s : shapes)
      for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kTanh, Activation::kSigmoid}) {
        const std::int64_t f = s.in.product();
        DenseSpec spec{s.in, s.out, dt, act, 256};
        spec.batch_invariant = true;
        auto op = be().dense(spec);
        Tensor w, b, x, y;
        op->shape_parameters(w, b);
        upload(w, randn(std::size_t(w.elements()), 200, 0.3f));
        upload(b, randn(std::size_t(b.elements()), 201, 0.5f));
        const HostTensor xv = stored(randn(std::size_t(kInvariantSamples * f), 202), dt);
        expect_batch_invariant(dtype_trace(dt) + ", dense " + s.in.str() + " -> " + std::to_string(s.out) +
                                   (s.conv_layout ? " (conv output layout)" : "") + ", fused " + activation_name(act),
                               [&](std::int64_t first, std::int64_t n) {
                                 if (s.conv_layout) {
                                   be().shape_like(x, conv_output_like(s.in.with_batch(n), dt), dt);
                                 } else {
                                   be().shape_plain(x, s.in.with_batch(n), dt);
                                 }
                                 upload(x, samples_of(xv, f, first, n));
                                 op->forward(x, w, b, y);
                                 return read(y);
                               });
      }
}

TEST_P(BackendConformance, ConvForwardGivesEachSampleTheSameBitsInAnyBatch) {
  if (!caps().batch_invariant) GTEST_SKIP() << "capabilities().batch_invariant is false";
  // (n unused) c, h, w, out, k, stride, pad: strided and padded; 16 channels
  // in and out, 3x3 stride 1 (where the CPU backend runs Winograd); 1x1.
  const ConvShape shapes[] = {{0, 3, 6, 7, 4, 3, 2, 1}, {0, 16, 6, 6, 16, 3, 1, 1}, {0, 5, 4, 4, 7, 1, 1, 0}};
  for (DType dt : precisions())
    for (const ConvShape& s : shapes)
      for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kSigmoid}) {
        ConvSpec spec{Dims{s.c, s.h, s.w}, s.out, s.k, s.stride, s.pad, dt, act, 256};
        spec.batch_invariant = true;
        auto op = be().conv(spec);
        Tensor w, b, x, y;
        op->shape_parameters(w, b);
        upload(w, randn(std::size_t(w.elements()), 210, 0.3f));
        upload(b, randn(std::size_t(b.elements()), 211, 0.5f));
        const std::int64_t per = s.c * s.h * s.w;
        const HostTensor xv = stored(randn(std::size_t(kInvariantSamples * per), 212), dt);
        expect_batch_invariant(dtype_trace(dt) + ", conv " + (Dims{s.c, s.h, s.w}).str() + " -> " +
                                   std::to_string(s.out) + " k" + std::to_string(s.k) + " stride " +
                                   std::to_string(s.stride) + " pad " + std::to_string(s.pad) + ", fused " +
                                   activation_name(act),
                               [&](std::int64_t first, std::int64_t n) {
                                 be().shape_plain(x, Dims{n, s.c, s.h, s.w}, dt);
                                 upload(x, samples_of(xv, per, first, n));
                                 op->forward(x, w, b, y);
                                 return read(y);
                               });
      }
}

TEST_P(BackendConformance, PoolEltwiseNormPeriodicPleEnsembleAndPredictGiveEachSampleTheSameBitsInAnyBatch) {
  if (!caps().batch_invariant) GTEST_SKIP() << "capabilities().batch_invariant is false";
  const Dims image{16, 6, 6};
  const std::int64_t pixels = image.product();
  for (DType dt : precisions()) {
    // Pooling, on an image in a conv's output layout (what follows a conv).
    for (bool max : {true, false}) {
      auto op = be().pool(PoolSpec{image, 2, 2, max, dt});
      const HostTensor xv = stored(randn(std::size_t(kInvariantSamples * pixels), 220), dt);
      Tensor x, y;
      expect_batch_invariant(dtype_trace(dt) + (max ? ", max pool" : ", avg pool"),
                             [&](std::int64_t first, std::int64_t n) {
                               be().shape_like(x, conv_output_like(image.with_batch(n), dt), dt);
                               upload(x, samples_of(xv, pixels, first, n));
                               op->forward(x, y);
                               return read(y);
                             });
    }
    // Eltwise on flat rows of an odd width.
    for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kTanh, Activation::kSigmoid}) {
      auto op = be().eltwise(EltwiseSpec{act, dt});
      const std::int64_t f = 21;
      const HostTensor xv = stored(randn(std::size_t(kInvariantSamples * f), 221, 2.0f), dt);
      Tensor x, y;
      expect_batch_invariant(dtype_trace(dt) + ", eltwise " + activation_name(act),
                             [&](std::int64_t first, std::int64_t n) {
                               be().shape_plain(x, Dims{n, f}, dt);
                               upload(x, samples_of(xv, f, first, n));
                               op->forward(x, y);
                               return read(y);
                             });
    }
    // Batch norm with running statistics (flat, and an image in a conv's
    // output layout); layer norm with each sample's own (its forward_training,
    // which a network's inference pass runs).
    for (bool flat : {true, false}) {
      const Dims in = flat ? Dims{21} : image;
      const std::int64_t per = in.product(), channels = in[0];
      auto op = be().batch_norm(NormSpec{in, 1e-5f, dt});
      Tensor scale, shift, x, y;
      op->shape_parameters(scale, shift);
      upload(scale, randn(std::size_t(channels), 222, 0.5f));
      upload(shift, randn(std::size_t(channels), 223, 0.5f));
      HostTensor rv = randn(std::size_t(channels), 224);
      for (float& v : rv) v = 0.5f + v * v;
      Tensor mean = plain(Dims{channels}, randn(std::size_t(channels), 225)), var = plain(Dims{channels}, rv);
      const HostTensor xv = stored(randn(std::size_t(kInvariantSamples * per), 226), dt);
      expect_batch_invariant(dtype_trace(dt) + ", batch norm forward_inference " + in.str(),
                             [&](std::int64_t first, std::int64_t n) {
                               if (flat) {
                                 be().shape_plain(x, in.with_batch(n), dt);
                               } else {
                                 be().shape_like(x, conv_output_like(in.with_batch(n), dt), dt);
                               }
                               upload(x, samples_of(xv, per, first, n));
                               op->forward_inference(x, scale, shift, mean, var, y);
                               return read(y);
                             });
    }
    {
      const std::int64_t f = 21;
      auto op = be().layer_norm(NormSpec{Dims{f}, 1e-5f, dt});
      Tensor scale, shift, x, y, mean, var;
      op->shape_parameters(scale, shift);
      upload(scale, randn(std::size_t(f), 227, 0.5f));
      upload(shift, randn(std::size_t(f), 228, 0.5f));
      const HostTensor xv = stored(randn(std::size_t(kInvariantSamples * f), 229, 1.5f), dt);
      expect_batch_invariant(dtype_trace(dt) + ", layer norm", [&](std::int64_t first, std::int64_t n) {
        be().shape_plain(x, Dims{n, f}, dt);
        upload(x, samples_of(xv, f, first, n));
        op->forward_training(x, scale, shift, y, mean, var);
        return read(y);
      });
    }
    {
      const std::int64_t f = 5, k = 6;
      auto op = be().periodic(PeriodicSpec{f, k});
      Tensor c, x, y;
      op->shape_parameters(c);
      upload(c, randn(std::size_t(f * k), 231, 0.5f));
      const HostTensor xv = stored(randn(std::size_t(kInvariantSamples * f), 232, 1.5f), dt);
      expect_batch_invariant(dtype_trace(dt) + ", periodic", [&](std::int64_t first, std::int64_t n) {
        be().shape_plain(x, Dims{n, f}, dt);
        upload(x, samples_of(xv, f, first, n));
        op->forward(x, c, y);
        return read(y);
      });
    }
    {
      const std::int64_t f = 3, t = 4;
      auto op = be().piecewise_linear(PiecewiseLinearSpec{f, t});
      Tensor b, x, y;
      op->shape_edges(b);
      upload(b, kPleEdges);
      const HostTensor xv = stored(randn(std::size_t(kInvariantSamples * f), 234, 1.5f), dt);
      expect_batch_invariant(dtype_trace(dt) + ", ple", [&](std::int64_t first, std::int64_t n) {
        be().shape_plain(x, Dims{n, f}, dt);
        upload(x, samples_of(xv, f, first, n));
        op->forward(x, b, y);
        return read(y);
      });
    }
    {
      const std::int64_t f = 5, k = 4;
      const std::int64_t out = 3;
      auto op = be().ensemble(EnsembleSpec{f, k});
      auto heads = be().member_dense(MemberDenseSpec{k, f, out});
      Tensor r, x, y, z, mean, hw, hb;
      op->shape_parameters(r);
      upload(r, randn(std::size_t(k * f), 233, 1.0f));
      heads->shape_parameters(hw, hb);
      upload(hw, randn(std::size_t(k * out * f), 235, 0.5f));
      upload(hb, randn(std::size_t(k * out), 236, 0.5f));
      const HostTensor xv = stored(randn(std::size_t(kInvariantSamples * f), 234, 1.5f), dt);
      expect_batch_invariant(dtype_trace(dt) + ", ensemble, member_dense and member_mean", [&](std::int64_t first, std::int64_t n) {
        be().shape_plain(x, Dims{n, f}, dt);
        upload(x, samples_of(xv, f, first, n));
        op->forward(x, r, y);
        heads->forward(y, hw, hb, z);
        be().member_mean(z, k, mean);
        // Per sample: its k members' rows, their heads' outputs, then their mean.
        const HostTensor rows = read(y), each = read(z), m = read(mean);
        HostTensor got;
        for (std::int64_t s = 0; s < n; ++s) {
          got.insert(got.end(), rows.begin() + s * k * f, rows.begin() + (s + 1) * k * f);
          got.insert(got.end(), each.begin() + s * k * out, each.begin() + (s + 1) * k * out);
          got.insert(got.end(), m.begin() + s * out, m.begin() + (s + 1) * out);
        }
        return got;
      });
    }
    // The loss's predict (softmax, sigmoid, identity) of the network output.
    for (LossKind kind : {LossKind::kSoftmaxCrossEntropy, LossKind::kBinaryCrossEntropy, LossKind::kMeanSquaredError}) {
      const std::int64_t k = kind == LossKind::kSoftmaxCrossEntropy ? 7 : 1;
      auto op = be().loss(kind, k, {});
      const HostTensor pv = stored(randn(std::size_t(kInvariantSamples * k), 230, 3.0f), dt);
      Tensor pred;
      expect_batch_invariant(dtype_trace(dt) + ", loss predict " + loss_name(kind),
                             [&](std::int64_t first, std::int64_t n) {
                               be().shape_plain(pred, Dims{n, k}, dt);
                               upload(pred, samples_of(pv, k, first, n));
                               HostTensor out(std::size_t(n * k));
                               op->predict(pred, out.data());
                               return out;
                             });
    }
  }
}

TEST_P(BackendConformance, InferenceOnlyOpsGiveEachSampleTheSameBitsInAnyBatch) {
  if (!caps().batch_invariant) GTEST_SKIP() << "capabilities().batch_invariant is false";
  // Dense: dense weights (the inner product), and 90% zero weights on each
  // sparse kernel, kAuto included.
  struct DenseCase {
    const char* name;
    double zeros;
    SparseKernel kernel;
  };
  const DenseCase dense_cases[] = {{"dense weights", 0, SparseKernel::kDense},
                                   {"90% zero weights, kDense", 0.9, SparseKernel::kDense},
                                   {"90% zero weights, kSparse", 0.9, SparseKernel::kSparse},
                                   {"90% zero weights, kAuto", 0.9, SparseKernel::kAuto}};
  for (const DenseCase& c : dense_cases)
    for (bool conv_layout : {false, true})
      for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kSigmoid}) {
        const Dims in = conv_layout ? Dims{16, 2, 3} : Dims{70};
        const std::int64_t f = in.product(), out = 33;
        InferenceDenseSpec spec;
        spec.in = in;
        spec.out = out;
        spec.fused = act;
        spec.weights = f32_weights(out, f, 240, c.zeros);
        spec.sparse = c.kernel;
        auto op = be().inference_dense(spec);
        const HostTensor xv = randn(std::size_t(kInvariantSamples * f), 241);
        Tensor x, y;
        expect_batch_invariant(std::string("inference dense, ") + c.name +
                                   (conv_layout ? ", image in a conv output layout" : ", flat") + ", fused " +
                                   activation_name(act),
                               [&](std::int64_t first, std::int64_t n) {
                                 if (conv_layout) {
                                   be().shape_like(x, conv_output_like(in.with_batch(n), DType::kF32), DType::kF32);
                                 } else {
                                   be().shape_plain(x, in.with_batch(n), DType::kF32);
                                 }
                                 upload(x, samples_of(xv, f, first, n));
                                 op->forward(x, y);
                                 return read(y);
                               });
      }
  const ConvShape shapes[] = {{0, 3, 6, 7, 4, 3, 2, 1}, {0, 16, 6, 6, 16, 3, 1, 1}};
  for (const ConvShape& s : shapes)
    for (Activation act : {Activation::kNone, Activation::kRelu}) {
      InferenceConvSpec spec;
      spec.in = Dims{s.c, s.h, s.w};
      spec.out_channels = s.out;
      spec.kernel = s.k;
      spec.stride = s.stride;
      spec.pad = s.pad;
      spec.fused = act;
      spec.weights = f32_weights(s.out, s.c * s.k * s.k, 242);
      auto op = be().inference_conv(spec);
      const std::int64_t per = s.c * s.h * s.w;
      const HostTensor xv = randn(std::size_t(kInvariantSamples * per), 243);
      Tensor x, y;
      expect_batch_invariant("inference conv " + spec.in.str() + " -> " + std::to_string(s.out) + ", fused " +
                                 activation_name(act),
                             [&](std::int64_t first, std::int64_t n) {
                               x = plain(Dims{n, s.c, s.h, s.w}, samples_of(xv, per, first, n));
                               op->forward(x, y);
                               return read(y);
                             });
    }
  // int8: dense from s8 (u8 out after relu) and from f32 (f32 out); conv of
  // 3 channels with a fused max pool (the im2col product) and of 8 (oneDNN's
  // int8 conv), u8 out.
  if (caps().int8) {
    const float s_in = 0.02f;
    for (DType x_dt : {DType::kS8, DType::kF32}) {
      const std::int64_t f = 77, out = 40;
      InferenceDenseSpec spec;
      spec.in = Dims{f};
      spec.out = out;
      spec.fused = x_dt == DType::kS8 ? Activation::kRelu : Activation::kNone;
      spec.weights = int8_weights(out, f, 245);
      spec.int8 = true;
      spec.quant = x_dt == DType::kS8 ? Int8Activations{s_in, DType::kU8, 0.01f} : Int8Activations{s_in, DType::kF32, 0};
      auto op = be().inference_dense(spec);
      const HostTensor xv = int8_input(std::size_t(kInvariantSamples * f), x_dt, s_in, 246).host;
      Tensor x, y;
      expect_batch_invariant("int8 dense from " + dtype_trace(x_dt), [&](std::int64_t first, std::int64_t n) {
        x = plain_tensor(be(), Dims{n, f}, samples_of(xv, f, first, n), x_dt);
        op->forward(x, y);
        return read(y);
      });
    }
    for (std::int64_t c : {3, 8}) {
      const Dims in{c, 6, 6};
      InferenceConvSpec spec;
      spec.in = in;
      spec.out_channels = 16;
      spec.kernel = 3;
      spec.pad = 1;
      spec.fused = Activation::kRelu;
      spec.weights = int8_weights(16, c * 9, 247);
      spec.int8 = true;
      spec.quant = Int8Activations{s_in, DType::kU8, 0.01f};
      spec.pool = c == 3 ? 2 : 0;
      auto op = be().inference_conv(spec);
      const HostTensor xv = int8_input(std::size_t(kInvariantSamples * in.product()), DType::kS8, s_in, 248).host;
      Tensor x, y;
      expect_batch_invariant("int8 conv of " + std::to_string(c) + " channels", [&](std::int64_t first, std::int64_t n) {
        x = plain_tensor(be(), in.with_batch(n), samples_of(xv, in.product(), first, n), DType::kS8);
        op->forward(x, y);
        return read(y);
      });
    }
  }
  for (bool max : {true, false}) {
    const Dims image{16, 6, 6};
    auto op = be().inference_pool(InferencePoolSpec{image, 2, 2, max});
    const HostTensor xv = randn(std::size_t(kInvariantSamples * image.product()), 244);
    Tensor x, y;
    expect_batch_invariant(std::string("inference pool, ") + (max ? "max" : "avg"),
                           [&](std::int64_t first, std::int64_t n) {
                             be().shape_like(x, conv_output_like(image.with_batch(n), DType::kF32), DType::kF32);
                             upload(x, samples_of(xv, image.product(), first, n));
                             op->forward(x, y);
                             return read(y);
                           });
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendConformance, ::testing::ValuesIn(known_backends()),
                         case_name);

}  // namespace
}  // namespace anneal
