// A model's ONNX graph from its family's recipes (model/onnx_export.h;
// docs/DESIGN.md, "ONNX export"): the embeddings, the one encoder layer and
// the heads, as src/model/'s LibTorch code computes them on a padded batch.
#include <ATen/ATen.h>
#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "model/encoder.h"
#include "model/onnx/onnx_graph.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/family_spec.h"
#include "shardtrain/model/onnx_export.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/tasks/task_rules.h"

namespace shardtrain {
namespace onnx_encoder {
namespace {

using onnx_graph::GraphBuilder;
using onnx_graph::set_int;
using onnx_graph::set_ints;
using onnx_graph::set_float;
constexpr int32_t kFloat = ::onnx::TensorProto::FLOAT;
constexpr int32_t kInt64 = ::onnx::TensorProto::INT64;

const std::set<std::string>& exportable_activations() {
  static const std::set<std::string> names = {"gelu", "gelu_python", "gelu_new", "gelu_accurate", "gelu_pytorch_tanh",
                                              "relu", "silu", "swish", "tanh", "sigmoid", "linear", "quick_gelu"};
  return names;
}

// DeBERTa-v2's relative attention, shared by every layer: the relative
// embeddings [2 span, D] (normalised as the relative unit does) and the rows
// of the position terms for each query i and key j, d(i, j) and its
// transpose, sliced from tables of the model's longest sequence to the
// batch's length: [L, L] int64.
struct Relative {
  std::string rows, index, index_t;
};

struct Emitter {
  const TaskModel& model;
  const EncoderConfig& c;
  GraphBuilder& g;
  std::map<std::pair<int64_t, int>, std::string> names;  // (unit, slot) -> HF name
  std::set<std::string> added;

  Emitter(const TaskModel& m, GraphBuilder& builder) : model(m), c(m.config()), g(builder) {
    for (const ParameterSpec& p : parameter_plan(c)) names[{p.unit, static_cast<int>(p.slot)}] = p.name;
  }
  bool has(int64_t unit, Slot s) const { return names.count({unit, static_cast<int>(s)}) != 0; }
  std::string weight(int64_t unit, Slot s, bool transposed = false) {
    const std::string& name = names.at({unit, static_cast<int>(s)});
    const std::string key = transposed ? name + ".T" : name;
    if (added.insert(key).second) {
      const at::Tensor t = model.parameter(name).to(at::kFloat);
      g.initializer(key, transposed ? t.t() : t);
    }
    return key;
  }
  std::string linear(const std::string& x, int64_t unit, Slot w) {
    const std::string y = g.node("MatMul", {x, weight(unit, w, true)});
    const Slot bias = static_cast<Slot>(static_cast<int>(w) + 1);
    return has(unit, bias) ? g.node("Add", {y, weight(unit, bias)}) : y;
  }
  // The norms run in float32 in a float16 graph, as under torch.autocast:
  // their input, weight and bias cast up, the result cast down (an epsilon
  // of 1e-12 is 0 in float16, and a mean square overflows it from |x| 256).
  std::string layer_norm(const std::string& x16, int64_t unit, Slot w, double eps) {
    return g.from_float32(layer_norm32(g.to_float32(x16), unit, w, eps));
  }
  std::string layer_norm32(const std::string& x, int64_t unit, Slot w, double eps) {
    const Slot b = static_cast<Slot>(static_cast<int>(w) + 1);
    // norm_bias = false (ModernBERT): a zero bias.
    const std::string bias = g.to_float32(
        has(unit, b) ? weight(unit, b)
                     : g.initializer(names.at({unit, static_cast<int>(w)}) + ".zero_bias",
                                     at::zeros(model.parameter(names.at({unit, static_cast<int>(w)})).sizes())));
    const std::string scale = g.to_float32(weight(unit, w));
    if (g.opset() >= 17)
      return g.node("LayerNormalization", {x, scale, bias}, [&](auto& n) {
        set_int(n, "axis", -1);
        set_float(n, "epsilon", static_cast<float>(eps));
      });
    // Before opset 17: (x - mean) / sqrt(var + eps) * w + b.
    auto mean = [&](const std::string& t) {
      return g.node("ReduceMean", {t}, [](auto& n) { set_ints(n, "axes", {-1}); });
    };
    const std::string d = g.node("Sub", {x, mean(x)});
    const std::string var = mean(g.node("Mul", {d, d}));
    const std::string denom = g.node("Sqrt", {g.node("Add", {var, g.float32_scalar(static_cast<float>(eps))})});
    return g.node("Add", {g.node("Mul", {g.node("Div", {d, denom}), scale}), bias});
  }
  // RMSNorm (EuroBERT): x / sqrt(mean(x^2) + eps) * w, in float32 as layer_norm.
  std::string rms_norm(const std::string& x16, int64_t unit, Slot w, double eps) {
    const std::string x = g.to_float32(x16);
    const std::string ms = g.node("ReduceMean", {g.node("Mul", {x, x})}, [](auto& n) { set_ints(n, "axes", {-1}); });
    const std::string denom = g.node("Sqrt", {g.node("Add", {ms, g.float32_scalar(static_cast<float>(eps))})});
    return g.from_float32(g.node("Mul", {g.node("Div", {x, denom}), g.to_float32(weight(unit, w))}));
  }
  std::string norm(NormKind kind, const std::string& x, int64_t unit, Slot w, double eps) {
    return kind == NormKind::kRmsNorm ? rms_norm(x, unit, w, eps) : layer_norm(x, unit, w, eps);
  }
  std::string activation(const std::string& name, const std::string& x) {
    if (name == "gelu" || name == "gelu_python") {  // x * 0.5 * (1 + erf(x / sqrt(2)))
      const std::string e = g.node("Erf", {g.node("Mul", {x, g.float_scalar(static_cast<float>(M_SQRT1_2))})});
      return g.node("Mul", {g.node("Mul", {x, g.float_scalar(0.5f)}), g.node("Add", {e, g.float_scalar(1.0f)})});
    }
    if (name == "gelu_new" || name == "gelu_accurate" || name == "gelu_pytorch_tanh") {
      const std::string cube = g.node("Mul", {g.node("Mul", {x, x}), x});
      const std::string inner = g.node("Add", {x, g.node("Mul", {cube, g.float_scalar(0.044715f)})});
      const std::string t =
          g.node("Tanh", {g.node("Mul", {inner, g.float_scalar(static_cast<float>(std::sqrt(2.0 / M_PI)))})});
      return g.node("Mul", {g.node("Mul", {x, g.float_scalar(0.5f)}), g.node("Add", {t, g.float_scalar(1.0f)})});
    }
    if (name == "relu") return g.node("Relu", {x});
    if (name == "silu" || name == "swish") return g.node("Mul", {x, g.node("Sigmoid", {x})});
    if (name == "quick_gelu") return g.node("Mul", {x, g.node("Sigmoid", {g.node("Mul", {x, g.float_scalar(1.702f)})})});
    if (name == "tanh") return g.node("Tanh", {x});
    if (name == "sigmoid") return g.node("Sigmoid", {x});
    if (name == "linear") return x;
    throw Error("ONNX export: activation \"" + name + "\" has no export");
  }

  // ids, types [N, L] -> [N, L, D].
  std::string embeddings(const std::string& ids, const std::string& types) {
    const EmbeddingRecipe recipe = family_spec(c.family).embeddings(c);
    std::string x = g.node("Gather", {weight(0, Slot::kWordEmbeddings), ids});
    auto add_positions = [&] {
      if (!recipe.absolute_positions) return;
      std::string positions;
      if (recipe.positions_after_padding) {  // RoBERTa: pad + running count of real tokens, pad at padding
        const std::string real = g.node("Cast", {g.node("Not", {g.node("Equal", {ids, g.int_scalar(c.pad_token_id)})})},
                                        [](auto& n) { set_int(n, "to", kInt64); });
        const std::string count = g.node("CumSum", {real, g.int_scalar(1)});
        positions = g.node("Add", {g.node("Mul", {count, real}), g.int_scalar(c.pad_token_id)});
      } else {  // 0 .. L-1
        const std::string length =
            g.node("Gather", {g.node("Shape", {ids}), g.int_scalar(1)}, [](auto& n) { set_int(n, "axis", 0); });
        positions = g.node("Range", {g.int_scalar(0), length, g.int_scalar(1)});
      }
      x = g.node("Add", {x, g.node("Gather", {weight(0, Slot::kPositionEmbeddings), positions})});
    };
    if (recipe.positions_before_types) add_positions();
    if (c.has_token_types()) x = g.node("Add", {x, g.node("Gather", {weight(0, Slot::kTokenTypeEmbeddings), types})});
    if (!recipe.positions_before_types) add_positions();
    if (recipe.norm) x = layer_norm(x, 0, Slot::kEmbeddingNormWeight, c.layer_norm_eps);
    if (recipe.projection) x = linear(x, 0, Slot::kEmbeddingProjectWeight);
    return x;
  }

  // [N, L] keep mask -> [N, 1, 1, L]: 0 where attended, finfo(float).min at
  // padding; float32 in a float16 graph too, where scores are added to it in
  // float32 (attention()).
  std::string extended_mask(const std::string& mask) {
    const std::string keep = g.node("Cast", {mask}, [](auto& n) { set_int(n, "to", kFloat); });
    const std::string padding = g.node("Sub", {g.float32_scalar(1.0f), keep});
    const std::string additive = g.node("Mul", {padding, g.float32_scalar(std::numeric_limits<float>::lowest())});
    return g.node("Unsqueeze", {additive, g.ints({1, 2})});
  }
  // ModernBERT's local layers: keys farther than half_window from the query get finfo.min.
  std::string windowed_mask(const std::string& extended, const std::string& length, int64_t half_window) {
    const std::string rows = g.node("Range", {g.int_scalar(0), length, g.int_scalar(1)});
    const std::string distance = g.node("Abs", {g.node("Sub", {g.node("Unsqueeze", {rows, g.ints({1})}),
                                                               g.node("Unsqueeze", {rows, g.ints({0})})})});
    const std::string inside = g.node("LessOrEqual", {distance, g.int_scalar(half_window)});  // [L, L]
    return g.node("Where", {inside, extended, g.float32_scalar(std::numeric_limits<float>::lowest())});  // [N, 1, L, L]
  }

  // [N, L, D] -> [N, L, H, Dh], with RoPE when `rotary` (cos, sin [L, 1, Dh]) is given.
  std::string heads(const std::string& x, int64_t H, const std::pair<std::string, std::string>* rotary) {
    std::string split = g.node("Reshape", {x, g.ints({0, 0, H, c.head_dim()})});
    if (!rotary) return split;
    g.node("Split", {split}, [](auto& n) { set_int(n, "axis", -1); }, 2);
    const std::vector<std::string> halves = g.last_outputs();
    const std::string rotated = g.node("Concat", {g.node("Neg", {halves[1]}), halves[0]}, [](auto& n) { set_int(n, "axis", -1); });
    return g.node("Add", {g.node("Mul", {split, rotary->first}), g.node("Mul", {rotated, rotary->second})});
  }

  std::string layer(int64_t i, const std::string& x, const std::string& mask, const std::pair<std::string, std::string>* rotary,
                    const Relative* relative);
  // [R, D] rows through the layer's Linear `w` -> [H, R, Dh].
  std::string position_heads(const std::string& rows, int64_t u, Slot w, int64_t H) {
    const std::string split = g.node("Reshape", {linear(rows, u, w), g.ints({0, H, c.head_dim()})});
    return g.node("Transpose", {split}, [](auto& n) { set_ints(n, "perm", {1, 0, 2}); });
  }
  // scores [N, H, L, L] plus DeBERTa's position terms (disentangled_attention.h):
  // c2p gather(qs pk^T, d), p2c gather(k pq^T, d^T)^T, pq divided by the scale.
  std::string position_scores(const LayerSpec& spec, int64_t u, const std::string& qs, const std::string& kh,
                              std::string scores, const Relative& r) {
    const std::string shape = g.node("Shape", {scores});
    auto gathered = [&](const std::string& a, const std::string& b, const std::string& index) {
      const std::string products = g.node("MatMul", {a, g.node("Transpose", {b}, [](auto& n) { set_ints(n, "perm", {0, 2, 1}); })});
      return g.node("GatherElements", {products, g.node("Expand", {index, shape})}, [](auto& n) { set_int(n, "axis", 3); });
    };
    if (spec.content_to_position) {
      const std::string pk = position_heads(r.rows, u, spec.share_att_key ? Slot::kKeyWeight : Slot::kPositionKeyWeight, spec.num_heads);
      scores = g.node("Add", {scores, gathered(qs, pk, r.index)});
    }
    if (spec.position_to_content) {
      const std::string pq = g.node("Div", {position_heads(r.rows, u, spec.share_att_key ? Slot::kQueryWeight : Slot::kPositionQueryWeight, spec.num_heads),
                                            g.float_scalar(static_cast<float>(spec.attention_scale))});
      const std::string p2c = gathered(kh, pq, r.index_t);
      scores = g.node("Add", {scores, g.node("Transpose", {p2c}, [](auto& n) { set_ints(n, "perm", {0, 1, 3, 2}); })});
    }
    return scores;
  }
  std::string head(const std::string& hidden, const std::string& mask);
};

std::string Emitter::layer(int64_t i, const std::string& x, const std::string& mask,
                           const std::pair<std::string, std::string>* rotary, const Relative* relative) {
  const LayerSpec spec = LayerSpec::of(c, i);
  const int64_t u = c.layer_unit(i), H = spec.num_heads;
  auto attention = [&](const std::string& in) {
    std::string q, k, v;
    if (has(u, Slot::kQkvWeight)) {  // ModernBERT's fused Wqkv
      g.node("Split", {linear(in, u, Slot::kQkvWeight)}, [](auto& n) { set_int(n, "axis", -1); }, 3);
      const std::vector<std::string> parts = g.last_outputs();
      q = parts[0], k = parts[1], v = parts[2];
    } else {
      q = linear(in, u, Slot::kQueryWeight), k = linear(in, u, Slot::kKeyWeight), v = linear(in, u, Slot::kValueWeight);
    }
    const std::string qh = g.node("Transpose", {heads(q, H, rotary)}, [](auto& n) { set_ints(n, "perm", {0, 2, 1, 3}); });
    // Grouped-query attention: each key/value head repeated for its H / Hkv
    // query heads, [N, L, Hkv, Dh] -> [N, L, Hkv, n, Dh] -> [N, L, H, Dh].
    const int64_t Hkv = spec.num_kv_heads > 0 ? spec.num_kv_heads : H;
    auto repeated = [&](const std::string& t) {
      if (Hkv == H) return t;
      const std::string wide = g.node("Expand", {g.node("Unsqueeze", {t, g.ints({3})}), g.ints({1, 1, 1, H / Hkv, 1})});
      return g.node("Reshape", {wide, g.ints({0, 0, H, c.head_dim()})});
    };
    const std::string kh = g.node("Transpose", {repeated(heads(k, Hkv, rotary))}, [](auto& n) { set_ints(n, "perm", {0, 2, 1, 3}); });
    const std::string vh = g.node("Transpose", {repeated(heads(v, Hkv, nullptr))}, [](auto& n) { set_ints(n, "perm", {0, 2, 1, 3}); });
    const std::string kt = g.node("Transpose", {kh}, [](auto& n) { set_ints(n, "perm", {0, 1, 3, 2}); });
    std::string scores;
    if (spec.disentangled) {  // q scaled first, then the position terms (disentangled_attention.h)
      const std::string qs = g.node("Mul", {qh, g.float_scalar(static_cast<float>(1.0 / spec.attention_scale))});
      scores = g.node("MatMul", {qs, kt});
      if (relative) scores = position_scores(spec, u, qs, kh, scores, *relative);
    } else {
      scores = g.node("Div", {g.node("MatMul", {qh, kt}), g.float_scalar(static_cast<float>(std::sqrt(static_cast<double>(c.head_dim()))))});
    }
    // In a float16 graph the mask is added and the softmax taken in float32
    // (torch.autocast's softmax): float16's -65504 plus a score below -16
    // rounds to -inf, and a row all -inf (a padding query's window of padding keys) is
    // NaN, which probs x V spreads to every row.
    const std::string probs = g.from_float32(
        g.node("Softmax", {g.node("Add", {g.to_float32(scores), mask})}, [](auto& n) { set_int(n, "axis", -1); }));
    const std::string context = g.node("Transpose", {g.node("MatMul", {probs, vh})},
                                       [](auto& n) { set_ints(n, "perm", {0, 2, 1, 3}); });
    return linear(g.node("Reshape", {context, g.ints({0, 0, c.hidden_size})}), u, Slot::kAttentionOutWeight);
  };
  auto mlp = [&](const std::string& in) {
    std::string inner = linear(in, u, Slot::kMlpInWeight);
    if (has(u, Slot::kMlpGateWeight)) {  // EuroBERT, GTE's own layout: act(gate_proj(x)) * up_proj(x)
      inner = g.node("Mul", {activation(spec.activation, linear(in, u, Slot::kMlpGateWeight)), inner});
    } else if (spec.gated_mlp) {  // [input, gate]: act(input) * gate; GTE's [up, gate]: up * act(gate)
      g.node("Split", {inner}, [](auto& n) { set_int(n, "axis", -1); }, 2);
      const std::vector<std::string> parts = g.last_outputs();
      inner = spec.gate_second_half ? g.node("Mul", {parts[0], activation(spec.activation, parts[1])})
                                    : g.node("Mul", {activation(spec.activation, parts[0]), parts[1]});
    } else {
      inner = activation(spec.activation, inner);
    }
    return linear(inner, u, Slot::kMlpOutWeight);
  };
  if (spec.pre_norm) {
    const std::string normed = has(u, Slot::kAttentionNormWeight)
                                   ? norm(spec.norm, x, u, Slot::kAttentionNormWeight, spec.norm_eps)
                                   : x;
    const std::string attended = g.node("Add", {x, attention(normed)});
    return g.node("Add", {attended, mlp(norm(spec.norm, attended, u, Slot::kMlpNormWeight, spec.norm_eps))});
  }
  const std::string attended =
      norm(spec.norm, g.node("Add", {attention(x), x}), u, Slot::kAttentionNormWeight, spec.norm_eps);
  return norm(spec.norm, g.node("Add", {mlp(attended), attended}), u, Slot::kMlpNormWeight, spec.norm_eps);
}

// The head unit on the last hidden states [N, L, D] -> [N, C] or [N, L, C].
std::string Emitter::head(const std::string& hidden, const std::string& mask) {
  const int64_t u = c.head_unit();
  const FamilySpec& family = family_spec(c.family);
  if (task_rules(c.task).head_on_tokens()) {
    const TokenHeadRecipe recipe = family.token_head(c);
    std::string x = hidden;
    if (recipe.final_norm) x = norm(recipe.final_norm_kind, x, u, Slot::kFinalNormWeight, c.layer_norm_eps);
    if (recipe.prediction_head)
      x = layer_norm(activation(recipe.activation, linear(x, u, Slot::kHeadDenseWeight)), u, Slot::kHeadNormWeight,
                     c.layer_norm_eps);
    return linear(x, u, Slot::kClassifierWeight);
  }
  const PooledHeadRecipe recipe = family.pooled_head(c);
  std::string x = recipe.final_norm ? norm(recipe.final_norm_kind, hidden, u, Slot::kFinalNormWeight, c.layer_norm_eps)
                                    : hidden;
  // The mean over the real tokens of [N, L, W] -> [N, W], summed in float32
  // (a float16 sum of L rows overflows sooner than their mean).
  auto masked_mean = [&](const std::string& t16) {
    const std::string t = g.to_float32(t16);
    const std::string keep = g.node("Unsqueeze", {g.node("Cast", {mask}, [](auto& n) { set_int(n, "to", kFloat); }), g.ints({-1})});
    const std::string sum = g.node("ReduceSum", {g.node("Mul", {t, keep}), g.ints({1})}, [](auto& n) { set_int(n, "keepdims", 0); });
    const std::string count = g.node("ReduceSum", {keep, g.ints({1})}, [](auto& n) { set_int(n, "keepdims", 0); });
    return g.from_float32(g.node("Div", {sum, count}));
  };
  if (recipe.late_pooling)  // EuroBERT: the head on every token, then the mean of the logits
    return masked_mean(linear(activation(recipe.activation, linear(x, u, Slot::kHeadDenseWeight)), u, Slot::kClassifierWeight));
  if (recipe.mean_pooling) {  // the mean of the real tokens
    x = masked_mean(x);
  } else {
    x = g.node("Gather", {x, g.int_scalar(0)}, [](auto& n) { set_int(n, "axis", 1); });
  }
  x = activation(recipe.activation, linear(x, u, Slot::kHeadDenseWeight));
  if (recipe.norm) x = layer_norm(x, u, Slot::kHeadNormWeight, c.layer_norm_eps);
  return linear(x, u, Slot::kClassifierWeight);
}

}  // namespace

bool exportable_activation(const std::string& name) { return exportable_activations().count(name) != 0; }

// The graph of `model` into `m` (inputs, nodes, outputs).
// float16: the weights and the computation between them in float16, the
// norms, the masked softmax and mean pooling in float32, the outputs cast to float32.
void build_graph(const TaskModel& model, int64_t opset, bool float16, ::onnx::ModelProto& m, OnnxExport& out) {
  const EncoderConfig& c = model.config();
  ::onnx::GraphProto* graph = m.mutable_graph();
  graph->set_name(c.architecture());
  GraphBuilder g(graph, opset, float16 ? ::onnx::TensorProto::FLOAT16 : kFloat);
  Emitter e(model, g);
  const bool choices = c.task == Task::kMultipleChoice;
  std::vector<std::string> dims = {"batch_size", "sequence_length"};
  if (choices) dims = {"batch_size", "num_choices", "sequence_length"};
  std::vector<std::string> inputs = {"input_ids", "attention_mask"};
  if (c.has_token_types()) inputs.push_back("token_type_ids");
  for (const std::string& name : inputs) g.input(name, kInt64, dims);
  out.inputs = inputs;
  // Multiple choice: [B, C, L] -> [B * C, L] rows.
  auto rows = [&](const std::string& t) { return choices ? g.node("Flatten", {t}, [](auto& n) { set_int(n, "axis", 2); }) : t; };
  const std::string ids = rows("input_ids"), mask = rows("attention_mask");
  const std::string types = c.has_token_types() ? rows("token_type_ids") : "";

  std::string hidden = e.embeddings(ids, types);
  const std::string extended = e.extended_mask(mask);
  const std::string length = g.node("Gather", {g.node("Shape", {ids}), g.int_scalar(1)}, [](auto& n) { set_int(n, "axis", 0); });
  std::string windowed;
  Relative relative;
  if (c.has_relative_unit()) {
    const int64_t ru = c.layer_unit(0) - 1;
    relative.rows = c.norm_relative_embeddings()
                        ? e.layer_norm(e.weight(ru, Slot::kRelativeEmbeddings), ru, Slot::kRelativeNormWeight, c.layer_norm_eps)
                        : e.weight(ru, Slot::kRelativeEmbeddings);
    // d(i, j) over every pair of the model's positions (RelativePositions counts from its first row).
    const detail::RelativePositions all = detail::RelativePositions::build(c, c.max_sequence_length(), at::kCPU);
    auto table = [&](const at::Tensor& index, const char* name) {
      const std::string full = g.initializer(name, index + all.first_row);
      const std::string end = g.node("Concat", {g.node("Unsqueeze", {length, g.ints({0})}), g.node("Unsqueeze", {length, g.ints({0})})},
                                     [](auto& n) { set_int(n, "axis", 0); });
      return g.node("Slice", {full, g.ints({0, 0}), end, g.ints({0, 1})});
    };
    relative.index = table(all.index, "relative_position_rows");
    relative.index_t = table(all.index_t, "relative_position_rows_transposed");
  }
  std::map<double, std::pair<std::string, std::string>> rotary;  // theta -> cos, sin [L, 1, Dh]
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerSpec spec = LayerSpec::of(c, i);
    std::string layer_mask = extended;
    if (spec.half_window >= 0) {
      if (windowed.empty()) windowed = e.windowed_mask(extended, length, spec.half_window);
      layer_mask = windowed;
    }
    const std::pair<std::string, std::string>* rope = nullptr;
    if (spec.rope_theta > 0) {
      if (!rotary.count(spec.rope_theta)) {
        // The tables of every position, sliced to the batch's length (as Rotary::for_positions computes them).
        const detail::Rotary table_rows = detail::Rotary::for_positions(
            at::arange(c.max_position_embeddings, at::kLong), c.head_dim(), spec.rope_theta, spec.rope_linear_factor);
        auto sliced = [&](const at::Tensor& t, const char* what) {
          const std::string all = g.initializer(str_format("rotary.%s.theta_%g", what, spec.rope_theta), t.unsqueeze(1));
          return g.node("Slice", {all, g.ints({0}), g.node("Unsqueeze", {length, g.ints({0})}), g.ints({0})});
        };
        rotary[spec.rope_theta] = {sliced(table_rows.cos, "cos"), sliced(table_rows.sin, "sin")};
      }
      rope = &rotary[spec.rope_theta];
    }
    hidden = e.layer(i, hidden, layer_mask, rope, relative.rows.empty() ? nullptr : &relative);
  }
  std::string logits = g.to_float32(e.head(hidden, mask));  // float32 outputs, as optimum's --fp16 writes them
  const int64_t C = task_rules(c.task).head_outputs(c.num_labels);
  if (c.task == Task::kQuestionAnswering) {
    g.node("Split", {logits}, [](auto& n) { set_int(n, "axis", -1); }, 2);
    const std::vector<std::string> parts = g.last_outputs();
    g.rename(g.node("Squeeze", {parts[0], g.ints({-1})}), "start_logits");
    g.rename(g.node("Squeeze", {parts[1], g.ints({-1})}), "end_logits");
    g.output("start_logits", kFloat, {"batch_size", "sequence_length"});
    g.output("end_logits", kFloat, {"batch_size", "sequence_length"});
    out.outputs = {"start_logits", "end_logits"};
  } else {
    std::vector<std::string> out_dims = {"batch_size", std::to_string(C)};
    if (task_rules(c.task).head_on_tokens()) out_dims = {"batch_size", "sequence_length", std::to_string(C)};
    if (choices) {
      const std::string shape = g.node("Slice", {g.node("Shape", {"input_ids"}), g.ints({0}), g.ints({2}), g.ints({0})});
      logits = g.node("Reshape", {logits, shape});
      out_dims = {"batch_size", "num_choices"};
    }
    g.rename(logits, "logits");
    g.output("logits", kFloat, out_dims);
    out.outputs = {"logits"};
  }
  out.weight_bytes = g.weight_bytes();
}

}  // namespace onnx_encoder
}  // namespace shardtrain
