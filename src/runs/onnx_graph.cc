#include "runs/onnx_graph.h"

namespace anneal::runs::onnx_graph {

void attr_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void attr_float(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void Graph::declare(const std::string& name, onnx::TensorProto::DataType type, const Shape& dims) {
  value_info(g_->add_value_info(), name, type, dims);
}

void attr_floats(onnx::NodeProto* n, const std::string& name, const std::vector<float>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOATS);
  for (float x : v) a->add_floats(x);
}
void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (auto x : v) a->add_ints(x);
}
void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
void attr_strings(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const auto& x : v) a->add_strings(x);
}

void value_info(onnx::ValueInfoProto* v, const std::string& name, onnx::TensorProto::DataType type, const Shape& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  auto* shape = t->mutable_shape();
  for (auto d : dims) {
    auto* dim = shape->add_dim();
    if (d < 0) dim->set_dim_param("N");
    else dim->set_dim_value(d);
  }
}

std::string two_classes(Graph& g, const std::string& p) {
  const std::string q = g.op("Sub", {g.scalar_f(1.0f), p}, "p0");
  onnx::NodeProto* n = g.node("Concat", {q, p}, {g.fresh("p01")});
  attr_int(n, "axis", 1);
  return n->output(0);
}

}  // namespace anneal::runs::onnx_graph
