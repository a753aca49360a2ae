// The ONNX export's refusals (src/runs/onnx_export.cc): a layer it has no
// operator for, tensors a model lacks, and a column name that would clash
// with its own tensor names are one-line errors naming what is wrong. Every
// layer anneal trains today exports (tests/e2e/onnx_export_test.sh runs
// them through ONNX Runtime); a model from a newer anneal, or a damaged
// one, can still name another.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "anneal/error.h"
#include "anneal/model_file.h"
#include "anneal/onnx_export.h"

namespace anneal {
namespace {

// A two-class MLP on three numeric columns: dense(2) relu dense(2).
runs::ModelFile small_model() {
  runs::ModelFile m;
  nlohmann::json columns = nlohmann::json::array();
  for (const char* name : {"a", "b", "c"}) columns.push_back({{"column", name}, {"width", 1}, {"mean", 0.5}, {"scale", 2.0}});
  m.features = FeatureTransform::from_json({{"input_shape", {3}}, {"columns", columns}});
  m.labels = LabelEncoding::from_json(
      {{"column", "y"}, {"classification", true}, {"categorical", true}, {"classes", {"no", "yes"}}});
  m.layers = "dense(2) relu dense(2)";
  m.input_shape = {3};
  m.outputs = 2;
  auto tensor = [&](const std::string& name, std::vector<std::int64_t> dims, std::vector<float> values) {
    runs::NamedTensor t;
    t.name = name;
    t.dims = std::move(dims);
    t.values = std::move(values);
    m.tensors.push_back(std::move(t));
  };
  tensor("0.dense.weight", {2, 3}, {1, 2, 3, 4, 5, 6});
  tensor("0.dense.bias", {2}, {0, 0});
  tensor("1.dense.weight", {2, 2}, {1, 0, 0, 1});
  tensor("1.dense.bias", {2}, {0, 0});
  return m;
}

// Runs the export, expecting an anneal::Error of `kind` whose one-line
// message holds `needle`.
void expect_refused(const runs::ModelFile& m, ErrorKind kind, const std::string& needle) {
  try {
    runs::export_onnx(m, "m@v1");
    FAIL() << "exported; expected an error with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("model m@v1: ONNX export: "), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(OnnxExport, WritesAModel) {
  const std::string bytes = runs::export_onnx(small_model(), "m@v1");
  // A ModelProto starts with its ir_version, field 1 (varint): tag 0x08, then 8.
  ASSERT_GE(bytes.size(), 2u);
  EXPECT_EQ(bytes[0], '\x08');
  EXPECT_EQ(bytes[1], '\x08');
  EXPECT_NE(bytes.find("anneal.inputs"), std::string::npos);
}

TEST(OnnxExport, UnknownLayerNamesIt) {
  runs::ModelFile m = small_model();
  m.layers = "dense(2) swish dense(2)";
  expect_refused(m, ErrorKind::kUsage, "'swish'");
}

TEST(OnnxExport, MissingTensorIsCorrupt) {
  runs::ModelFile m = small_model();
  m.tensors.pop_back();
  expect_refused(m, ErrorKind::kCorrupt, "layer 3 'dense(2)' has no tensor '1.dense.bias'");
}

TEST(OnnxExport, MisSizedTensorIsCorrupt) {
  runs::ModelFile m = small_model();
  m.tensors[0].values.pop_back();
  expect_refused(m, ErrorKind::kCorrupt, "tensor '0.dense.weight' has 5 values, expected 6");
}

TEST(OnnxExport, Int8WithoutScalesIsCorrupt) {
  runs::ModelFile m = small_model();
  m.int8 = true;
  expect_refused(m, ErrorKind::kCorrupt, "int8 layer 0.dense lacks its s8 weights or scales");
}

TEST(OnnxExport, ColumnNamedLikeItsTensorsIsRefused) {
  runs::ModelFile m = small_model();
  nlohmann::json j = m.features.to_json();
  j["columns"][1]["column"] = "anneal:7:sum";
  m.features = FeatureTransform::from_json(j);
  expect_refused(m, ErrorKind::kUsage, "column 'anneal:7:sum'");
}

}  // namespace
}  // namespace anneal
