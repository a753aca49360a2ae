// The ONNX graph under construction, and the helpers that write its nodes,
// attributes and values: shared by the export (onnx_export.cc: the
// preprocessing and the outputs) and the model kinds that write their
// scores into it (ModelKind::write_onnx). Internal to src/runs/, the only
// code that links the ONNX schema (anneal/onnx_export.h).
#pragma once

#include <onnx.pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anneal::runs::onnx_graph {

using Shape = std::vector<std::int64_t>;

inline std::int64_t product(const Shape& s) {
  std::int64_t p = 1;
  for (auto d : s) p *= d;
  return p;
}

// The graph under construction: nodes, initializers and fresh names.
// Intermediate names start with "anneal:" and a counter; a feature column
// with such a name is refused (write_graph), so none can clash.
class Graph {
 public:
  explicit Graph(onnx::GraphProto* g) : g_(g) {}

  nlohmann::json inputs = nlohmann::json::array();   // what each graph input is (metadata "anneal.inputs")
  nlohmann::json outputs = nlohmann::json::array();  // the graph outputs' names

  std::string fresh(const std::string& hint) { return "anneal:" + std::to_string(next_++) + ":" + hint; }

  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& domain = "") {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    if (!domain.empty()) n->set_domain(domain);
    n->set_name(outputs.empty() ? op : outputs[0]);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
  }
  // A node with one output, named after `hint`; returns the output.
  std::string op(const std::string& op, const std::vector<std::string>& inputs, const std::string& hint) {
    std::string out = fresh(hint);
    node(op, inputs, {out});
    return out;
  }
  std::string op1(const std::string& op, const std::string& input, const std::string& hint) {
    return this->op(op, {input}, hint);
  }

  std::string floats(const std::string& hint, const Shape& dims, const std::vector<float>& values) {
    onnx::TensorProto* t = initializer(hint, dims, onnx::TensorProto::FLOAT);
    for (float v : values) t->add_float_data(v);
    return t->name();
  }
  std::string doubles(const std::string& hint, const Shape& dims, const std::vector<double>& values) {
    onnx::TensorProto* t = initializer(hint, dims, onnx::TensorProto::DOUBLE);
    for (double v : values) t->add_double_data(v);
    return t->name();
  }
  std::string int64s(const std::string& hint, const Shape& dims, const std::vector<std::int64_t>& values) {
    onnx::TensorProto* t = initializer(hint, dims, onnx::TensorProto::INT64);
    for (auto v : values) t->add_int64_data(v);
    return t->name();
  }
  // int8 or uint8 values, packed in raw_data.
  std::string bytes(const std::string& hint, const Shape& dims, bool is_signed, const std::vector<std::int8_t>& values) {
    onnx::TensorProto* t = initializer(hint, dims, is_signed ? onnx::TensorProto::INT8 : onnx::TensorProto::UINT8);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size()));
    return t->name();
  }
  std::string scalar(double v) { return doubles("const", {}, {v}); }
  // Declares the type and shape of an intermediate value, for operators
  // ONNX's shape inference knows no rule for (ai.onnx.ml's tree ensembles
  // in the ONNX 1.12 Debian ships); dims -1: the batch, "N".
  void declare(const std::string& name, onnx::TensorProto::DataType type, const Shape& dims);
  std::string scalar_f(float v) { return floats("const", {}, {v}); }

 private:
  onnx::TensorProto* initializer(const std::string& hint, const Shape& dims, onnx::TensorProto::DataType type) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(fresh(hint));
    t->set_data_type(type);
    for (auto d : dims) t->add_dims(d);
    return t;
  }

  onnx::GraphProto* g_;
  std::uint64_t next_ = 0;
};

void attr_int(onnx::NodeProto* n, const std::string& name, std::int64_t v);
void attr_float(onnx::NodeProto* n, const std::string& name, float v);
void attr_floats(onnx::NodeProto* n, const std::string& name, const std::vector<float>& v);
void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v);
void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v);
void attr_strings(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v);

// A graph input or output: `type` elements, dims (-1: the batch, "N").
void value_info(onnx::ValueInfoProto* v, const std::string& name, onnx::TensorProto::DataType type, const Shape& dims);

// P(class 1) (N, 1) -> (N, 2): 1 - p, p.
std::string two_classes(Graph& g, const std::string& p);

}  // namespace anneal::runs::onnx_graph
