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
  GraphBuilder(::onnx::GraphProto* graph, int64_t opset) : graph_(graph), opset_(opset) {}
  int64_t opset() const { return opset_; }

  // A float32 (or the tensor's dtype: int64) initializer holding `values` (contiguous CPU copy).
  std::string initializer(const std::string& name, const at::Tensor& values);
  // Constants as initializers: int64 1-D, an int64 scalar, a float scalar.
  std::string ints(const std::vector<int64_t>& values);
  std::string int_scalar(int64_t value);
  std::string float_scalar(float value);
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
  int64_t counter_ = 0;
  int64_t weight_bytes_ = 0;
  std::vector<std::string> last_outputs_;
};

}  // namespace shardtrain::onnx_graph
