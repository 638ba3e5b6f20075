// ONNX export (docs/DESIGN.md, "ONNX export"; docs/export.md): a model as
// one ONNX graph of standard ops, in optimum's conventions, built from the
// same family recipes (model/family_spec.h) the LibTorch forward runs, so
// that ONNX Runtime computes what `predict` computes on padded input.
//
//   OnnxExport e = export_onnx(model, "out/model.onnx");   // checked, shape-inferred, written atomically
//
// Inputs (int64): input_ids, attention_mask, and token_type_ids where the
// family has token types; [batch_size, sequence_length], multiple choice
// [batch_size, num_choices, sequence_length]. Outputs: logits
// ([batch_size, num_labels]; token classification [batch_size,
// sequence_length, num_labels]; multiple choice [batch_size, num_choices]);
// question answering start_logits and end_logits [batch_size, sequence_length].
// Outputs are float32; with `float16` the weights and the graph between them
// are float16, as optimum's --fp16 writes them (docs/export.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/model/encoder_config.h"

namespace shardtrain {

class TaskModel;

struct OnnxExportOptions {
  int64_t opset = 17;  // at least 14; 17 has LayerNormalization (earlier opsets get it decomposed)
  // float16 weights and computation (--dtype float16); the norms, the masked
  // softmax and mean pooling run in float32, as under torch.autocast, and the
  // outputs are cast to float32. A weight beyond float16's range is refused.
  bool float16 = false;
  // Graphs whose weights take more bytes than this keep them in
  // "<model>.onnx_data" (ONNX external data) instead of in the protobuf,
  // which cannot exceed 2 GiB. Tests set it low.
  int64_t external_data_threshold = (int64_t{1} << 31) - (int64_t{64} << 20);
  // Tests: a node of an op that does not exist, which the checker must refuse.
  bool invalid_node_for_tests = false;
};

struct OnnxExport {
  std::vector<std::string> inputs, outputs;
  int64_t nodes = 0, initializers = 0, weight_bytes = 0;
  bool external_data = false;
  uint64_t file_bytes = 0;  // model.onnx (and model.onnx_data)
};

// Error naming the family or the part of its architecture that has no ONNX
// export yet (DeBERTa-v2's disentangled attention), or an activation without
// one; nothing when `config` can be exported.
void check_onnx_exportable(const EncoderConfig& config);

// Builds the graph of `model` (eval; float32, or float16 with
// options.float16), runs ONNX's checker and strict
// shape inference on it and writes `path` (plus path + "_data" with external
// data) atomically. Error with the checker's message when the graph does not
// pass: nothing is written then.
OnnxExport export_onnx(const TaskModel& model, const std::string& path, const OnnxExportOptions& options = {});

}  // namespace shardtrain
