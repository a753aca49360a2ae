// ONNX export: see anneal/onnx_export.h; docs/STORE.md ("ONNX export")
// specifies the graph. Every step mirrors the code it stands for: the
// preprocessing transform_row/expand_datetime (preprocess.cc), the model's
// scores its kind (ModelKind::write_onnx: the network's layers and
// LossOp::predict, LinearModel::predict), and the class names
// prediction_csv.cc.
#include "anneal/onnx_export.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anneal/error.h"
#include "anneal/fault_point.h"
#include "anneal/fs.h"
#include "anneal/model_inputs.h"
#include "anneal/model_kind.h"
#include "anneal/version.h"
#include "runs/onnx_graph.h"

namespace anneal::runs {
namespace {

using nlohmann::json;
using namespace onnx_graph;

constexpr double kTwoPi = 6.283185307179586;

// ------------------------------------------------------------ preprocessing

// x (N) -> x (N, 1)
std::string column_of(Graph& g, const std::string& x) {
  return g.op("Unsqueeze", {x, g.int64s("axes", {1}, {1})}, "column");
}

// Standardization as transform_row does it in float: (x - mean) · (1/scale),
// NaN -> 0. x: (N, width).
std::string standardize(Graph& g, const ColumnTransform& c, const std::string& x) {
  const std::string y = g.op("Mul",
                             {g.op("Sub", {x, g.scalar_f(static_cast<float>(c.mean))}, "centred"),
                              g.scalar_f(static_cast<float>(1.0 / c.scale))},
                             "standardized");
  return g.op("Where", {g.op1("IsNaN", x, "missing"), g.scalar_f(0.0f), y}, "imputed");
}

// Robust scaling's smooth clip after standardize, as transform_row does it
// in float: z / sqrt(1 + (z · (1/3))^2). z: (N, 1).
std::string smooth_clip(Graph& g, const std::string& z) {
  const std::string t = g.op("Mul", {z, g.scalar_f(1.0f / 3.0f)}, "third");
  const std::string s = g.op("Add", {g.scalar_f(1.0f), g.op("Mul", {t, t}, "third_squared")}, "one_plus");
  return g.op("Div", {z, g.op1("Sqrt", s, "root")}, "clipped");
}

// One-hot over the column's slots: the category name -> its slot
// (LabelEncoder), then slot == 0..K-1. A rare level, a level no training
// row had and an unseen name take the other slot when there is one, else
// -1 (all zeros); the empty string is a missing value: -1.
std::string one_hot(Graph& g, const ColumnTransform& c, const std::string& x) {
  const std::int64_t other = c.other ? c.categories - 1 : -1;
  std::vector<std::string> keys;
  std::vector<std::int64_t> values;
  bool empty_is_level = false;
  for (std::size_t code = 0; code < c.category_names.size(); ++code) {
    std::int64_t slot = c.slots.empty() ? static_cast<std::int64_t>(code) : c.slots[code];
    if (slot < 0) slot = other;
    keys.push_back(c.category_names[code]);
    values.push_back(slot);
    empty_is_level = empty_is_level || c.category_names[code].empty();
  }
  if (!empty_is_level) {
    keys.push_back("");
    values.push_back(-1);
  }
  const std::string slot = g.fresh("slot");
  onnx::NodeProto* n = g.node("LabelEncoder", {x}, {slot}, "ai.onnx.ml");
  attr_strings(n, "keys_strings", keys);
  attr_ints(n, "values_int64s", values);
  attr_int(n, "default_int64", other);
  std::vector<std::int64_t> range(static_cast<std::size_t>(c.categories));
  for (std::size_t k = 0; k < range.size(); ++k) range[k] = static_cast<std::int64_t>(k);
  const std::string hit =
      g.op("Equal", {column_of(g, slot), g.int64s("slots", {c.categories}, range)}, "one_hot_bool");
  onnx::NodeProto* cast = g.node("Cast", {hit}, {g.fresh("one_hot")});
  attr_int(cast, "to", onnx::TensorProto::FLOAT);
  return cast->output(0);
}

// floor(a / b) in double (a, b whole numbers well within 2^53: exact).
std::string floor_div(Graph& g, const std::string& a, double b) {
  return g.op1("Floor", g.op("Div", {a, g.scalar(b)}, "quotient"), "floor");
}
std::string add_c(Graph& g, const std::string& a, double b) { return g.op("Add", {a, g.scalar(b)}, "sum"); }
std::string mul_c(Graph& g, const std::string& a, double b) { return g.op("Mul", {a, g.scalar(b)}, "product"); }
std::string sub(Graph& g, const std::string& a, const std::string& b) { return g.op("Sub", {a, b}, "difference"); }
std::string add(Graph& g, const std::string& a, const std::string& b) { return g.op("Add", {a, b}, "sum"); }

// Days since 1970 of January 1 of `year` (double, whole): days_from_civil
// of H. Hinnant's date algorithms, which std::chrono implements.
std::string jan1(Graph& g, const std::string& year) {
  const std::string y = add_c(g, year, -1);  // January counts in the year before (March-based years)
  const std::string era = floor_div(g, y, 400);
  const std::string yoe = sub(g, y, mul_c(g, era, 400));
  std::string doe = mul_c(g, yoe, 365);
  doe = add(g, doe, floor_div(g, yoe, 4));
  doe = sub(g, doe, floor_div(g, yoe, 100));
  doe = add_c(g, doe, 306);  // March 1 to January 1
  return add_c(g, add(g, mul_c(g, era, 146097), doe), -719468);
}

// The datetime expansion of expand_datetime, in double like it: x (N) float
// days since 1970 -> (N, 8 or 10); all zeros where x is missing or outside
// the calendar range.
std::string expand_datetime(Graph& g, const ColumnTransform& c, const std::string& x32) {
  onnx::NodeProto* cast = g.node("Cast", {x32}, {g.fresh("days")});
  attr_int(cast, "to", onnx::TensorProto::DOUBLE);
  const std::string days = column_of(g, cast->output(0));
  const std::string valid =
      g.op("LessOrEqual", {g.op1("Abs", days, "abs_days"), g.scalar(3e6)}, "in_calendar");  // NaN: false
  const std::string safe = g.op("Where", {valid, days, g.scalar(0)}, "days_or_0");
  const std::string whole = g.op1("Floor", safe, "whole_days");
  // civil_from_days (Hinnant): year, month, day from the day number.
  const std::string z = add_c(g, whole, 719468);
  const std::string era = floor_div(g, z, 146097);
  const std::string doe = sub(g, z, mul_c(g, era, 146097));
  std::string t = sub(g, doe, floor_div(g, doe, 1460));
  t = add(g, t, floor_div(g, doe, 36524));
  t = sub(g, t, floor_div(g, doe, 146096));
  const std::string yoe = floor_div(g, t, 365);
  const std::string doy_march =
      sub(g, doe, add(g, mul_c(g, yoe, 365), sub(g, floor_div(g, yoe, 4), floor_div(g, yoe, 100))));
  const std::string mp = floor_div(g, add_c(g, mul_c(g, doy_march, 5), 2), 153);
  // month 1..12: mp + 3 below 10, else mp - 9; January and February belong to the next year.
  const std::string late = g.op("GreaterOrEqual", {mp, g.scalar(10)}, "jan_feb");
  const std::string month = g.op("Where", {late, add_c(g, mp, -9), add_c(g, mp, 3)}, "month");
  onnx::NodeProto* late_d = g.node("Cast", {late}, {g.fresh("jan_feb_1")});
  attr_int(late_d, "to", onnx::TensorProto::DOUBLE);
  const std::string year = add(g, add(g, yoe, mul_c(g, era, 400)), late_d->output(0));
  const std::string start = jan1(g, year);
  const std::string day_of_year = sub(g, whole, start);
  const std::string year_days = sub(g, jan1(g, add_c(g, year, 1)), start);
  const std::string shifted = add_c(g, whole, 3);  // 1970-01-01 was a Thursday: Monday 0
  const std::string weekday = sub(g, shifted, mul_c(g, floor_div(g, shifted, 7), 7));

  std::vector<std::string> parts;
  parts.push_back(mul_c(g, add_c(g, year, -c.year_mean), 1.0 / c.year_scale));
  auto angle_pair = [&](const std::string& angle) {
    parts.push_back(g.op1("Sin", angle, "sin"));
    parts.push_back(g.op1("Cos", angle, "cos"));
  };
  angle_pair(mul_c(g, add_c(g, month, -1), kTwoPi / 12.0));
  angle_pair(mul_c(g, weekday, kTwoPi / 7.0));
  angle_pair(g.op("Div", {mul_c(g, day_of_year, kTwoPi), year_days}, "year_angle"));
  if (c.hour) angle_pair(mul_c(g, sub(g, safe, whole), kTwoPi));
  parts.push_back(mul_c(g, add_c(g, safe, -c.mean), 1.0 / c.scale));
  onnx::NodeProto* concat = g.node("Concat", parts, {g.fresh("datetime")});
  attr_int(concat, "axis", 1);
  onnx::NodeProto* to32 = g.node("Cast", {concat->output(0)}, {g.fresh("datetime_f32")});
  attr_int(to32, "to", onnx::TensorProto::FLOAT);
  return g.op("Where", {valid, to32->output(0), g.scalar_f(0.0f)}, "datetime_or_0");
}

// The graph inputs (one per feature column) and the transformed features,
// (N, F).
std::string preprocess(Graph& g, onnx::GraphProto& graph, const ModelFile& model, json& inputs) {
  std::vector<std::string> parts;
  for (const ColumnTransform& c : model.features.columns()) {
    json info = {{"name", c.column}};
    if (c.one_hot) {
      value_info(graph.add_input(), c.column, onnx::TensorProto::STRING, {-1});
      parts.push_back(one_hot(g, c, c.column));
      info["kind"] = "categorical";
    } else if (c.datetime) {
      value_info(graph.add_input(), c.column, onnx::TensorProto::FLOAT, {-1});
      parts.push_back(expand_datetime(g, c, c.column));
      info["kind"] = "datetime";
    } else if (c.width > 1) {
      // A column of several values (an IDX image): its shape in the
      // dataset, (N, C, H, W) for an image.
      Shape dims = {c.width};
      for (const ColumnSchema& d : model.dataset_columns)
        if (d.name == c.column && !d.shape.empty() && product(d.shape) == c.width) dims = d.shape;
      info["kind"] = dims.size() == 3 ? "image" : "vector";
      info["shape"] = dims;
      dims.insert(dims.begin(), -1);
      value_info(graph.add_input(), c.column, onnx::TensorProto::FLOAT, dims);
      const std::string flat = g.op("Reshape", {c.column, g.int64s("shape", {2}, {-1, c.width})}, "flat");
      parts.push_back(standardize(g, c, flat));
    } else {
      value_info(graph.add_input(), c.column, onnx::TensorProto::FLOAT, {-1});
      const std::string z = standardize(g, c, column_of(g, c.column));
      parts.push_back(c.robust ? smooth_clip(g, z) : z);
      info["kind"] = "numeric";
    }
    inputs.push_back(std::move(info));
  }
  std::string x = parts[0];
  if (parts.size() > 1) {
    onnx::NodeProto* concat = g.node("Concat", parts, {g.fresh("features")});
    attr_int(concat, "axis", 1);
    x = concat->output(0);
  }
  return x;
}

void write_graph(Graph& g, onnx::GraphProto& graph, const ModelFile& model);

}  // namespace

std::string export_onnx(const ModelFile& model, const std::string& ref) {
  onnx::ModelProto m;
  m.set_ir_version(8);  // ONNX 1.10 to 1.13, which know opset 17
  m.set_producer_name("anneal");
  m.set_producer_version(version());
  m.set_model_version(1);
  m.set_doc_string("anneal model " + ref);
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  auto* ml = m.add_opset_import();
  ml->set_domain("ai.onnx.ml");
  ml->set_version(kOnnxMlOpset);
  onnx::GraphProto& graph = *m.mutable_graph();
  graph.set_name(ref);
  Graph g(&graph);

  try {
    write_graph(g, graph, model);
  } catch (const Error& e) {
    throw Error(e.kind(), "model " + ref + ": ONNX export: " + e.what());
  }
  auto meta = [&](const std::string& key, const std::string& value) {
    auto* p = m.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  };
  meta("anneal.model", ref);
  meta("anneal.inputs", g.inputs.dump());
  meta("anneal.outputs", g.outputs.dump());
  meta("anneal.precision", model.int8 ? "int8" : precision_name(model.precision));
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw failure("model " + ref + ": ONNX export: protobuf could not serialize it");
  return bytes;
}

namespace {

// The class probabilities `p` (N, K) of a calibrated model rescaled by its
// temperature as apply_temperature() (anneal/calibration.h) rescales them:
// Softmax(Log(Max(p, least normal float)) / T) over the classes.
std::string calibrated(Graph& g, const std::string& p, double temperature) {
  const std::string floor = g.scalar_f(std::numeric_limits<float>::min());
  const std::string scores = g.op1("Log", g.op("Max", {p, floor}, "p_floor"), "log_p");
  const std::string scaled = g.op("Div", {scores, g.scalar_f(static_cast<float>(temperature))}, "log_p_over_t");
  onnx::NodeProto* n = g.node("Softmax", {scaled}, {g.fresh("calibrated")});
  attr_int(n, "axis", 1);
  return n->output(0);
}

// The graph's inputs, nodes and outputs (g.inputs, g.outputs: their
// descriptions for the metadata).
void write_graph(Graph& g, onnx::GraphProto& graph, const ModelFile& model) {
  for (const ColumnTransform& c : model.features.columns())
    if (c.column.starts_with("anneal:"))
      throw usage_error("column '" + c.column + "': the export names its own tensors 'anneal:...'; rename the column");
  if (model.features.columns().empty()) throw corrupt("the model has no feature columns");
  json& inputs = g.inputs;
  json& outputs = g.outputs;
  const std::string x = preprocess(g, graph, model, inputs);
  // The class probabilities of a classifier, the standardized value of a
  // regression model.
  std::string scores = model_kind(model).write_onnx(g, model, x);
  if (model.labels.classification()) {
    const auto k = model.labels.classes();
    if (model.temperature != 1) scores = calibrated(g, scores, model.temperature);
    g.node("Identity", {scores}, {"probabilities"});
    std::string predicted;
    if (k == 2 && model.threshold) {
      // The binary model's decision threshold: class 1 when P(1) > t (t is a
      // float value, so float32 decides as anneal does).
      onnx::NodeProto* p1 = g.node("Gather", {"probabilities", g.int64s("class_1", {}, {1})}, {g.fresh("p1")});
      attr_int(p1, "axis", 1);
      const std::string above =
          g.op("Greater", {p1->output(0), g.scalar_f(static_cast<float>(*model.threshold))}, "above_threshold");
      onnx::NodeProto* cast = g.node("Cast", {above}, {g.fresh("class")});
      attr_int(cast, "to", onnx::TensorProto::INT64);
      predicted = cast->output(0);
    } else {
      onnx::NodeProto* argmax = g.node("ArgMax", {"probabilities"}, {g.fresh("class")});
      attr_int(argmax, "axis", 1);
      attr_int(argmax, "keepdims", 0);
      predicted = argmax->output(0);
    }
    std::vector<std::int64_t> indices;
    for (std::int64_t c = 0; c < k; ++c) indices.push_back(c);
    onnx::NodeProto* names = g.node("LabelEncoder", {predicted}, {"label"}, "ai.onnx.ml");
    attr_ints(names, "keys_int64s", indices);
    attr_strings(names, "values_strings", model.labels.class_names());
    attr_string(names, "default_string", "");
    value_info(graph.add_output(), "label", onnx::TensorProto::STRING, {-1});
    value_info(graph.add_output(), "probabilities", onnx::TensorProto::FLOAT, {-1, k});
    outputs = {"label", "probabilities"};
  } else {
    // LabelEncoding::decode_value: the target's own units; a log target's
    // exp(v) - 1 + shift after (in float, where anneal's expm1 is double).
    const LabelEncoding& l = model.labels;
    std::string v = g.op("Add", {g.op("Mul", {scores, g.scalar_f(static_cast<float>(l.target_scale()))}, "scaled"),
                                 g.scalar_f(static_cast<float>(l.target_mean()))},
                         "decoded");
    if (l.log_target())
      v = g.op("Add", {g.op1("Exp", v, "exp"), g.scalar_f(static_cast<float>(l.log_shift() - 1.0))}, "unlogged");
    g.node("Reshape", {v, g.int64s("shape", {1}, {-1})}, {"value"});
    value_info(graph.add_output(), "value", onnx::TensorProto::FLOAT, {-1});
    outputs = {"value"};
  }
}

}  // namespace

ExportResult export_model_onnx(Store& store, const ModelRef& ref, const std::filesystem::path& out, bool force,
                               unsigned mode) {
  ExportResult result;
  result.model = find_model(store, ref);
  if (!force && std::filesystem::exists(out))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
  const ModelFile model = load_model(store, result.model);
  const std::string bytes = export_onnx(model, result.model.ref());
  const std::filesystem::path dir = out.parent_path().empty() ? std::filesystem::path(".") : out.parent_path();
  // The caller's mode: the user's umask, owner-only from an encrypted store.
  AtomicFileWriter file(out, dir, mode);
  file.append(bytes);
  fault_point("export.written");  // the bytes are in the temporary file, OUT not yet in place
  if (!file.commit(/*replace=*/force))
    throw Error(ErrorKind::kUsage, Subject::kOutputFile, out.string() + ": file exists", Remedy::kReplaceExisting);
  result.bytes = bytes.size();
  return result;
}

}  // namespace anneal::runs
