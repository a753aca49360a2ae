// InferenceNetwork: inference only, for models whose weights are not plain
// fp32 tensors: INT8-quantized models (s8 weights with a scale per output
// channel, u8/s8 activations with calibrated scales, run on oneDNN's int8
// inner product and convolution with the activation fused) and pruned models
// (mostly-zero weights, whose dense layers run through a sparse CSR kernel
// when it measures faster than oneDNN's dense one at that batch size).
//
// It runs a layer spec (network.h) built with the same parameter names as
// Network: dense, conv (with a fused relu/tanh/sigmoid), maxpool, avgpool,
// flatten, dropout (a no-op at inference) and standalone activations.
// Batch and layer normalization are not supported (kUsage).
//
// Quantization convention: a real value x is held as q with x ≈ q · scale
// (symmetric, no zero point). A layer's int8 output is u8 after a fused relu
// (non-negative), s8 otherwise; the last layer's output is fp32. A tensor
// whose producer and consumer disagree on type or scale is converted by a
// oneDNN reorder with the ratio of the scales.
//
// Threads: ops run on the calling thread's OpenMP team (bound it with
// omp_set_num_threads). One thread at a time may use an InferenceNetwork.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "anneal/tensor.h"

namespace anneal {

// The weights of one dense or conv layer.
struct InferenceWeights {
  std::vector<float> weight;  // (O, I...) row-major, real values (dequantized when int8)
  std::vector<float> bias;    // (O)
  // int8 only: weight ≈ q · scales[o], q (O, I...) row-major in [-127, 127].
  std::vector<std::int8_t> q;
  std::vector<float> scales;
  // int8 only: the scale of the layer's input, and of its output after the
  // fused activation (unused for the last layer, whose output is fp32).
  float input_scale = 0, output_scale = 0;
};

// How a mostly-zero fp32 dense layer is run.
enum class SparseKernel : std::uint8_t {
  kMeasure,  // time the CSR and the dense kernel once per batch size, keep the faster
  kDense,    // always oneDNN's dense inner product
  kSparse,   // always CSR (for tests)
};

struct InferenceSpec {
  std::string layers;      // the layer spec
  Dims input_shape;        // per sample: {F} or {C, H, W}
  std::int64_t outputs = 0;
  bool int8 = false;       // dense and conv layers run int8 (every one needs q and scales)
  SparseKernel sparse = SparseKernel::kMeasure;
  // By parameter prefix as Network names them: "0.dense", "3.conv".
  std::map<std::string, InferenceWeights> weights;
};

// What one layer of the chain runs on (for bench and model reports).
struct InferenceLayerInfo {
  std::string layer;   // "dense(256) relu"
  std::string kernel;  // "int8 inner product", "sparse csr", "fp32 convolution", ...
  double sparsity = 0; // fraction of zero weights (dense/conv)
};

// A dense or conv layer of a spec, in order, with its parameter prefix.
struct WeightedLayer {
  std::string prefix;  // "3.conv"
  std::string text;    // "conv(32,3,pad=1) relu"
  bool conv = false;
  bool relu = false;   // a fused relu follows (its output is non-negative)
  bool last = false;   // the network's output layer
  std::int64_t out = 0;                 // O (features or channels)
  std::vector<std::int64_t> weight_dims;
};
// The dense and conv layers `layers` builds for this input (kUsage for a bad spec).
std::vector<WeightedLayer> weighted_layers(const std::string& layers, const Dims& input_shape);

class InferenceNetwork {
 public:
  // Builds the layer chain and reorders the weights into the layouts the
  // primitives want. Throws kUsage for an unsupported layer, kCorrupt for a
  // missing or mis-sized weight.
  explicit InferenceNetwork(InferenceSpec spec);
  ~InferenceNetwork();
  InferenceNetwork(const InferenceNetwork&) = delete;
  InferenceNetwork& operator=(const InferenceNetwork&) = delete;

  // y (rows, outputs) = the network's raw outputs (logits) for x (rows,
  // input...), both row-major host floats. Primitives are built once per
  // batch size and cached.
  void forward(const float* x, std::int64_t rows, float* y);

  // Called with the fp32 output of the k-th dense/conv layer (after its
  // fused activation) for a batch, row-major: calibration reads activation
  // ranges through it.
  using Observer = std::function<void(std::size_t k, const float* values, std::size_t count)>;
  void forward(const float* x, std::int64_t rows, float* y, const Observer& observe);

  // The chain as last built (kernels chosen for the latest batch size).
  std::vector<InferenceLayerInfo> describe() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Compressed sparse rows of a (rows, cols) matrix: the nonzeros of row r are
// values[row_ptr[r] .. row_ptr[r+1]) at columns col[...].
struct CsrMatrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<std::int64_t> row_ptr;
  std::vector<std::int32_t> col;
  std::vector<float> values;
  static CsrMatrix from_dense(const float* w, std::int64_t rows, std::int64_t cols);
};

// y (n, O) = act(x (n, I) · Wᵀ + b) with W in CSR (O rows, I columns); act is
// relu when `relu`, else identity. `scratch` is reused between calls.
void sparse_dense_forward(const CsrMatrix& w, const float* bias, bool relu, const float* x,
                          std::int64_t n, float* y, std::vector<float>& scratch);

}  // namespace anneal
