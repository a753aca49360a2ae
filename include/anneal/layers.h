// Layers: the pieces a network is built from, each with its forward and its
// backward side by side (src/engine/layers.cc). A layer owns its parameters,
// its output and its input gradient; the math runs in Backend ops.
//
// Shapes in comments: N batch, C channels, H/W height/width, F features.
// A layer's input/output *shape* is per sample (no N): {F} or {C, H, W}.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "anneal/tensor.h"

namespace anneal {

// A trained tensor: fp32 master values and the gradient of the step's loss
// (same dims and layout).
struct Parameter {
  std::string name;  // "3.dense.weight": layer index, layer kind, role
  Tensor value;
  Tensor grad;
};

// A non-trained tensor that is part of the model state (batch-norm running
// statistics): checkpointed and hashed with the weights.
struct StateBuffer {
  std::string name;
  Tensor* tensor = nullptr;
};

// What one forward/backward pass needs to know beyond its tensors.
struct PassContext {
  bool training = true;     // dropout active, batch norm uses batch statistics
  bool accumulate = false;  // add to parameter gradients instead of overwriting
  std::uint64_t seed = 0;   // the run's seed (dropout masks derive from it)
  std::uint64_t micro_step = 0;  // global micro-batch counter: a fresh dropout mask each
  // The pass's first row within the global micro-batch (data parallel: the
  // rows of the ranks before this one): a sample's dropout mask is the same
  // whichever rank computes it, and the one it gets in a single process.
  std::int64_t first_row = 0;
};

// What one layer of an inference-only network ran on (Network::kernels()).
struct LayerKernel {
  std::string layer;    // the layer as described: "dense(256) relu"
  std::string kernel;   // "int8 inner product", "sparse csr", "fp32 convolution", ...
  double sparsity = 0;  // dense/conv: the fraction of zero weights
};

class Layer {
 public:
  virtual ~Layer() = default;

  // The layer as it would be written in a spec, fused activation included
  // ("conv(32,3,pad=1) relu").
  virtual std::string describe() const = 0;
  const Dims& input_shape() const { return input_shape_; }
  const Dims& output_shape() const { return output_shape_; }
  // Rows out per row in: 1 for every layer but an ensemble's, which turns
  // each sample into its k members' rows (Backend's EnsembleOp).
  virtual std::int64_t members() const { return 1; }

  // y = layer(x). x (N, input_shape...) must stay alive and unchanged until
  // backward() for this pass has run. The returned tensor is owned by the
  // layer (or is x itself) and is valid until the next forward().
  virtual const Tensor& forward(const Tensor& x, const PassContext& ctx) = 0;

  // Given dy = ∂L/∂y for the latest training forward, sets (or, with
  // ctx.accumulate, adds to) the parameter gradients and, when need_dx,
  // returns dx = ∂L/∂x (owned by the layer). Without need_dx the returned
  // reference is to an empty tensor.
  virtual const Tensor& backward(const Tensor& dy, const PassContext& ctx, bool need_dx) = 0;

  // What the latest forward ran on, for reports; the kernel is empty for
  // layers that do not say (the trainable dense, conv, pool, ...).
  virtual LayerKernel kernel() const { return {describe(), "", 0}; }

  // Layers whose constants are fitted on the rows the network trains on
  // (ple's bin edges, a state buffer) before the first step: true for
  // them. Such a layer takes the network's input (it must be the first).
  virtual bool fits_inputs() const { return false; }
  // Fits them on `rows` samples of this layer's input, given on the host
  // row-major (rows × input_shape().product() values); non-finite values
  // are left out. Only for a layer with fits_inputs(); kFailure otherwise.
  virtual void fit_inputs(std::span<const float> values, std::int64_t rows);

  // Appends this layer's parameters / state buffers (none by default).
  virtual void collect_parameters(std::vector<Parameter*>& out) { (void)out; }
  virtual void collect_buffers(std::vector<StateBuffer>& out) { (void)out; }

 protected:
  Dims input_shape_, output_shape_;
};

}  // namespace anneal
