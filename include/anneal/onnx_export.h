// ONNX export of a registered model (`anneal model export REF --format
// onnx`): the model's preprocessing, network (or linear model) and output
// head as one ONNX graph that takes the raw feature columns, so another
// stack (ONNX Runtime in a web service, a database, a phone) predicts what
// `anneal predict` does. docs/STORE.md ("ONNX export") specifies the graph's
// inputs, outputs and operators.
//
// The protobuf is built with Debian's libprotobuf from the ONNX schema
// (onnx.proto, compiled by protoc at build time); only src/runs links it.
// Errors: kUsage naming the layer for a layer the export cannot write.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "anneal/catalog_runs.h"
#include "anneal/model_file.h"
#include "anneal/store.h"

namespace anneal::runs {

// ONNX opset of the default domain the graph uses (ai.onnx 17:
// LayerNormalization, per-channel DequantizeLinear), and of ai.onnx.ml
// (LabelEncoder: category names to slots, class indices to names).
inline constexpr int kOnnxOpset = 17;
inline constexpr int kOnnxMlOpset = 2;

// The serialized ModelProto of `model`; `ref` (NAME@vN) goes into its
// metadata. Pure; thread-safe.
std::string export_onnx(const ModelFile& model, const std::string& ref);

struct ExportResult {
  ModelRecord model;
  std::uint64_t bytes = 0;
};
// Writes model `ref` as ONNX to `out`, whole or not at all (a temporary
// file beside it, renamed into place). kUsage when `out` exists and not
// `force`; kFailure naming the file when it cannot be written. Reads the
// store only.
ExportResult export_model_onnx(Store& store, const ModelRef& ref, const std::filesystem::path& out, bool force,
                               unsigned mode);

}  // namespace anneal::runs
