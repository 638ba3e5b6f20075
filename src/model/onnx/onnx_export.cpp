// ONNX export: check, infer shapes, write (model/onnx_export.h).
#include "shardtrain/model/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <filesystem>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/model/task_model.h"

namespace shardtrain {
namespace onnx_encoder {
bool exportable_activation(const std::string& name);
void build_graph(const TaskModel& model, int64_t opset, bool float16, ::onnx::ModelProto& m, OnnxExport& out);
}  // namespace onnx_encoder

void check_onnx_exportable(const EncoderConfig& config) {
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const LayerSpec spec = LayerSpec::of(config, i);
    if (!onnx_encoder::exportable_activation(spec.activation))
      throw Error("ONNX export: activation \"" + spec.activation + "\" (the model config's hidden_act) has no ONNX export");
  }
  const FamilySpec& family = family_spec(config.family);
  for (const std::string& act : {family.pooled_head(config).activation, family.token_head(config).activation})
    if (!onnx_encoder::exportable_activation(act))
      throw Error("ONNX export: the head's activation \"" + act + "\" has no ONNX export");
}

namespace {

// Moves every initializer's bytes into one file beside the model
// (ONNX external data: location, offset, length), 4 KiB aligned as onnx's
// Python writer aligns them. Returns the file's content.
std::string externalize(::onnx::ModelProto& m, const std::string& data_name) {
  std::string data;
  for (::onnx::TensorProto& t : *m.mutable_graph()->mutable_initializer()) {
    if (t.raw_data().size() < 1024) continue;
    data.resize((data.size() + 4095) / 4096 * 4096, '\0');
    const size_t offset = data.size();
    data += t.raw_data();
    t.clear_raw_data();
    t.set_data_location(::onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* key, const std::string& value) {
      ::onnx::StringStringEntryProto* e = t.add_external_data();
      e->set_key(key);
      e->set_value(value);
    };
    add("location", data_name);
    add("offset", std::to_string(offset));
    add("length", std::to_string(data.size() - offset));
  }
  return data;
}

}  // namespace

OnnxExport export_onnx(const TaskModel& model, const std::string& path, const OnnxExportOptions& options) {
  if (options.opset < 14 || options.opset > 17)
    throw Error("--opset " + std::to_string(options.opset) + ": ONNX export writes opsets 14 to 17 (the ONNX library "
                "it is checked with, 1.12, knows opsets up to 17)");
  if (model.lora()) throw Error("ONNX export: merge the LoRA adapter first (TaskModel::merge_lora)");
  const EncoderConfig& config = model.config();
  check_onnx_exportable(config);
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("shardtrain");
  m.set_model_version(1);
  ::onnx::OperatorSetIdProto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(options.opset);
  OnnxExport out;
  onnx_encoder::build_graph(model, options.opset, options.float16, m, out);
  if (options.invalid_node_for_tests) {
    ::onnx::NodeProto* bad = m.mutable_graph()->add_node();
    bad->set_op_type("NoSuchOp");
    bad->add_input("input_ids");
    bad->add_output("broken");
  }
  try {
    ::onnx::checker::check_model(m);
    ::onnx::shape_inference::InferShapes(m, ::onnx::OpSchemaRegistry::Instance(),
                                         ::onnx::ShapeInferenceOptions(/*check_type=*/true, /*error_mode=*/1));
  } catch (const std::exception& e) {
    throw Error("ONNX export: the graph of the " + config.architecture() + " does not pass ONNX's checker (" +
                std::string(e.what()) + "); nothing was written");
  }
  out.nodes = m.graph().node_size();
  out.initializers = m.graph().initializer_size();
  const std::string data_name = std::filesystem::path(path).filename().string() + "_data";
  std::string data;
  if (out.weight_bytes > options.external_data_threshold) {
    data = externalize(m, data_name);
    out.external_data = true;
  }
  std::string bytes;
  if (!m.SerializeToString(&bytes))
    throw Error("ONNX export: the graph does not serialize (over protobuf's 2 GiB?); nothing was written");
  if (out.external_data) write_file_atomic(path + "_data", data);
  write_file_atomic(path, bytes);
  out.file_bytes = bytes.size() + data.size();
  return out;
}

}  // namespace shardtrain
