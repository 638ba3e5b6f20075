// The ONNX graph builder (model/onnx/onnx_graph.h).
#include "model/onnx/onnx_graph.h"

#include <ATen/ATen.h>

#include "shardtrain/core/check.h"

namespace shardtrain::onnx_graph {

void set_int(::onnx::NodeProto& node, const char* name, int64_t value) {
  ::onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(value);
}

void set_ints(::onnx::NodeProto& node, const char* name, const std::vector<int64_t>& values) {
  ::onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
}

void set_float(::onnx::NodeProto& node, const char* name, float value) {
  ::onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(value);
}

void set_string(::onnx::NodeProto& node, const char* name, const std::string& value) {
  ::onnx::AttributeProto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(value);
}

std::string GraphBuilder::fresh(const std::string& op) { return "/" + op + "_" + std::to_string(counter_++); }

std::string GraphBuilder::initializer(const std::string& name, const at::Tensor& values) {
  at::Tensor t = values.detach().to(at::kCPU).contiguous();
  ::onnx::TensorProto* p = graph_->add_initializer();
  p->set_name(name);
  if (t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf) {
    // IEEE binary16 (at::kHalf) is ONNX's FLOAT16. A value beyond its range
    // would become +-inf and the logits NaN: refused by name instead.
    if (half() && t.numel() > 0 && t.to(at::kFloat).abs().max().item<float>() > 65504.0f)
      throw Error("ONNX export: --dtype float16: " + name + " holds values beyond float16's range (65504)");
    t = t.to(half() ? at::kHalf : at::kFloat).contiguous();
    p->set_data_type(float_type_);
  } else if (t.scalar_type() == at::kLong) {
    p->set_data_type(::onnx::TensorProto::INT64);
  } else {
    throw Error("ONNX export: initializer " + name + " has an unsupported dtype");
  }
  for (int64_t d : t.sizes()) p->add_dims(d);
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  p->set_raw_data(t.data_ptr(), bytes);
  weight_bytes_ += static_cast<int64_t>(bytes);
  return name;
}

std::string GraphBuilder::ints(const std::vector<int64_t>& values) {
  at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, at::kLong);
  for (size_t i = 0; i < values.size(); ++i) t[static_cast<int64_t>(i)] = values[i];
  return initializer(fresh("const_ints"), t);
}

std::string GraphBuilder::int_scalar(int64_t value) {
  return initializer(fresh("const_int"), at::full({}, value, at::kLong));
}

std::string GraphBuilder::float_scalar(float value) {
  return initializer(fresh("const_float"), at::full({}, value, at::kFloat));
}

std::string GraphBuilder::float32_scalar(float value) {
  const int32_t graph_type = float_type_;
  float_type_ = ::onnx::TensorProto::FLOAT;
  const std::string name = float_scalar(value);
  float_type_ = graph_type;
  return name;
}

std::string GraphBuilder::to_float32(const std::string& x) {
  if (!half()) return x;
  return node("Cast", {x}, [](auto& n) { set_int(n, "to", ::onnx::TensorProto::FLOAT); });
}

std::string GraphBuilder::from_float32(const std::string& x) {
  if (!half()) return x;
  return node("Cast", {x}, [this](auto& n) { set_int(n, "to", float_type_); });
}

std::string GraphBuilder::node(const std::string& op, const std::vector<std::string>& inputs,
                               const NodeAttributes& attributes, int outputs) {
  ::onnx::NodeProto* n = graph_->add_node();
  n->set_op_type(op);
  const std::string name = fresh(op);
  n->set_name(name);
  for (const std::string& in : inputs) n->add_input(in);
  last_outputs_.clear();
  for (int i = 0; i < outputs; ++i) {
    last_outputs_.push_back(name + "_out" + std::to_string(i));
    n->add_output(last_outputs_.back());
  }
  if (attributes) attributes(*n);
  return last_outputs_.front();
}

namespace {
void set_type(::onnx::ValueInfoProto* v, const std::string& name, int32_t elem_type,
              const std::vector<std::string>& dims) {
  v->set_name(name);
  ::onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  ::onnx::TensorShapeProto* shape = t->mutable_shape();
  for (const std::string& d : dims) {
    ::onnx::TensorShapeProto_Dimension* dim = shape->add_dim();
    if (!d.empty() && d.find_first_not_of("0123456789") == std::string::npos)
      dim->set_dim_value(std::stoll(d));
    else
      dim->set_dim_param(d);
  }
}
}  // namespace

void GraphBuilder::input(const std::string& name, int32_t elem_type, const std::vector<std::string>& dims) {
  set_type(graph_->add_input(), name, elem_type, dims);
}

void GraphBuilder::output(const std::string& name, int32_t elem_type, const std::vector<std::string>& dims) {
  set_type(graph_->add_output(), name, elem_type, dims);
}

void GraphBuilder::rename(const std::string& from, const std::string& to) {
  for (::onnx::NodeProto& n : *graph_->mutable_node()) {
    for (std::string& out : *n.mutable_output())
      if (out == from) out = to;
    for (std::string& in : *n.mutable_input())
      if (in == from) in = to;
  }
}

}  // namespace shardtrain::onnx_graph
