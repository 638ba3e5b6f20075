// Private to src/model/onnx: a small builder over ONNX's GraphProto (the
// Debian libonnx protobuf classes), used by onnx_encoder.cpp to emit a
// model's graph (model/onnx_export.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardtrain::onnx_graph {

using NodeAttributes = std::function<void(::onnx::NodeProto&)>;

void set_int(::onnx::NodeProto& node, const char* name, int64_t value);
void set_ints(::onnx::NodeProto& node, const char* name, const std::vector<int64_t>& values);
void set_float(::onnx::NodeProto& node, const char* name, float value);
void set_string(::onnx::NodeProto& node, const char* name, const std::string& value);

class GraphBuilder {
 public:
  // `float_type`: the element type of the graph's weights and of the
  // tensors between them, FLOAT or FLOAT16 (--dtype float16).
  GraphBuilder(::onnx::GraphProto* graph, int64_t opset, int32_t float_type = ::onnx::TensorProto::FLOAT)
      : graph_(graph), opset_(opset), float_type_(float_type) {}
  int64_t opset() const { return opset_; }
  int32_t float_type() const { return float_type_; }
  bool half() const { return float_type_ == ::onnx::TensorProto::FLOAT16; }

  // An initializer holding `values` (contiguous CPU copy): a float tensor in
  // float_type(), an int64 one as int64.
  std::string initializer(const std::string& name, const at::Tensor& values);
  // Constants as initializers: int64 1-D, an int64 scalar, a float scalar
  // (float_type()), a float32 scalar whatever float_type() is.
  std::string ints(const std::vector<int64_t>& values);
  std::string int_scalar(int64_t value);
  std::string float_scalar(float value);
  std::string float32_scalar(float value);
  // A float_type() tensor as float32 and back: Casts in a float16 graph, the
  // tensor itself in a float32 one.
  std::string to_float32(const std::string& x);
  std::string from_float32(const std::string& x);
  // One node; returns its (first) output's name. `outputs` > 1: names in outputs_of().
  std::string node(const std::string& op, const std::vector<std::string>& inputs, const NodeAttributes& attributes = {},
                   int outputs = 1);
  std::vector<std::string> last_outputs() const { return last_outputs_; }

  // Graph inputs / outputs with symbolic dims ("batch_size") or fixed ones ("" + value).
  void input(const std::string& name, int32_t elem_type, const std::vector<std::string>& dims);
  void output(const std::string& name, int32_t elem_type, const std::vector<std::string>& dims);
  // Renames the tensor `from` (a node's output) to `to` (a graph output's name).
  void rename(const std::string& from, const std::string& to);

  int64_t weight_bytes() const { return weight_bytes_; }

 private:
  std::string fresh(const std::string& op);
  ::onnx::GraphProto* graph_;
  int64_t opset_;
  int32_t float_type_;
  int64_t counter_ = 0;
  int64_t weight_bytes_ = 0;
  std::vector<std::string> last_outputs_;
};

}  // namespace shardtrain::onnx_graph
