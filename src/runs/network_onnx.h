// The ONNX graph of a network's layers (NetworkKind::write_onnx): every
// step mirrors Network's constructor (network.cc: layer numbering, fused
// activations, the int8 activation types). Internal to src/runs/.
#pragma once

#include <string>

#include "anneal/model_file.h"
#include "runs/onnx_graph.h"

namespace anneal::runs {

// Appends the layers of `model`'s network to `g`, from `x` (N, then the
// model's input_shape) to the network's output (N, outputs): the logits or
// the standardized value. kUsage naming the layer for a layer the export
// has no operator for; kCorrupt for a tensor that is missing or does not
// fit its layer.
std::string write_network_onnx(onnx_graph::Graph& g, const ModelFile& model, const std::string& x);

}  // namespace anneal::runs
