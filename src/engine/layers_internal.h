// Constructors of the concrete layers (layers.cc), used by the network
// builder. Each checks nothing about its spec: the builder validated it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "anneal/backend.h"
#include "anneal/layers.h"
#include "anneal/network.h"

namespace anneal::engine {

// Everything a layer constructor needs besides its own arguments.
struct LayerContext {
  Backend& backend;
  Dims input;          // per-sample input shape
  DType compute;
  std::uint64_t seed;  // initialisation stream of this layer
  int index;           // position in the network, 0-based (names, dropout streams)
  std::int64_t batch;  // expected batch size
  bool batch_invariant = false;  // NetworkOptions::batch_invariant
};

std::unique_ptr<Layer> make_dense_layer(const LayerContext& ctx, std::int64_t width,
                                        Activation fused);
// relu_mask_downstream: the conv's fused activation is a relu directly
// followed by a maxpool built with mask_relu, which applies relu's gradient
// on its (smaller) output instead (see PoolLayer::backward).
std::unique_ptr<Layer> make_conv_layer(const LayerContext& ctx, std::int64_t channels,
                                       std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                                       Activation fused, bool relu_mask_downstream = false);
std::unique_ptr<Layer> make_pool_layer(const LayerContext& ctx, bool max, std::int64_t kernel,
                                       std::int64_t stride, bool mask_relu = false);
std::unique_ptr<Layer> make_activation_layer(const LayerContext& ctx, Activation kind);
std::unique_ptr<Layer> make_flatten_layer(const LayerContext& ctx);
std::unique_ptr<Layer> make_dropout_layer(const LayerContext& ctx, float p);
std::unique_ptr<Layer> make_batch_norm_layer(const LayerContext& ctx);
std::unique_ptr<Layer> make_layer_norm_layer(const LayerContext& ctx);

// The periodic embedding of a flat input (F) into (F·2K) values, its
// frequencies (F, K) drawn from N(0, sigma²) with ctx.seed.
std::unique_ptr<Layer> make_periodic_layer(const LayerContext& ctx, std::int64_t frequencies, double sigma);

// The piecewise-linear encoding of a flat input (F) into (F·T) values
// (PiecewiseLinearOp), its edges (F, T + 1) a state buffer, "I.ple.edges",
// started as T equal bins over [−2, 2] and fitted by fit_inputs().
std::unique_ptr<Layer> make_piecewise_linear_layer(const LayerContext& ctx, std::int64_t bins);
// The edges ple(T) fits on `rows` samples of F values (row-major): per
// feature, its finite values' quantiles i/T (i = 0..T) at ranks
// ⌊i·(n−1)/T⌋ of the n sorted, each distinct value once, then the last
// repeated to T + 1 (the bins past it unused). A feature without a finite
// value gets edges all 0 (every bin unused). F·(T + 1) floats, row-major.
std::vector<float> fit_piecewise_linear_edges(std::span<const float> values, std::int64_t rows,
                                              std::int64_t features, std::int64_t bins);

// The k members of a parameter-efficient ensemble (TabM-mini): a flat input
// (N, F) becomes (N·k, F), member i's rows scaled by its trained r[i] (k, F),
// each started at a random sign drawn with ctx.seed.
std::unique_ptr<Layer> make_ensemble_layer(const LayerContext& ctx, std::int64_t members);
// The members' own output layers (TabM's K heads) on a flat input (N·K, I):
// weights (K, O, I) and biases (K, O), each member's drawn as a dense
// layer's, then `fused` applied.
std::unique_ptr<Layer> make_member_dense_layer(const LayerContext& ctx, std::int64_t width, Activation fused,
                                               std::int64_t members);

// ---- inference-only layers (quantized_layers.cc) ----
// Forward only (backward throws): the layers of an int8 or sparse network,
// each running one Backend inference op, which owns the weights in `spec`.

std::unique_ptr<Layer> make_inference_dense_layer(const LayerContext& ctx, InferenceDenseSpec spec);
// *runs_pool is set when the op also runs the pooling named in spec.pool
// (InferenceConvOp::runs_pool): the pooling layer is then make_fused_pool_layer.
std::unique_ptr<Layer> make_inference_conv_layer(const LayerContext& ctx, InferenceConvSpec spec,
                                                 bool* runs_pool);
std::unique_ptr<Layer> make_inference_pool_layer(const LayerContext& ctx, bool max, std::int64_t kernel,
                                                 std::int64_t stride);
// A pooling the conv before it already ran: hands its input on unchanged.
std::unique_ptr<Layer> make_fused_pool_layer(const LayerContext& ctx, bool max, std::int64_t kernel,
                                             std::int64_t stride);
// y = f(x as real values): x (f32, or s8/u8 at `input_scale`) dequantized to
// plain f32, then the activation; y is f32.
std::unique_ptr<Layer> make_inference_activation_layer(const LayerContext& ctx, Activation kind,
                                                       float input_scale);
// A flatten right before an int8 dense: hands the image on unchanged, and
// the dense op reads it in C, H, W order itself (as DenseSpec allows), which
// for an int8 image stored (N, H, W, C) costs no reorder at all.
std::unique_ptr<Layer> make_deferred_flatten_layer(const LayerContext& ctx);

}  // namespace anneal::engine
