#include "shardtrain/train/preflight.h"

#include <algorithm>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/parallel/topology.h"

namespace shardtrain {
namespace {

// How a strategy keeps its state: the README's table, with FSDP's sharding
// strategies resolved to the ZeRO stage they are (effective_strategy).
enum class Sharding { kNone, kOptimizer, kGradients, kParameters };

Sharding sharding_of(const ParallelConfig& p) {
  switch (effective_strategy(p)) {
    case StrategyKind::kZero1: return Sharding::kOptimizer;
    case StrategyKind::kZero2: return Sharding::kGradients;
    case StrategyKind::kZero3:
    case StrategyKind::kHybrid: return Sharding::kParameters;
    default: return Sharding::kNone;  // ddp, FSDP NO_SHARD
  }
}

// Parameters of the largest FSDP unit: the embeddings, one encoder layer, or the head.
double largest_unit(const EncoderConfig& m) {
  const double D = static_cast<double>(m.hidden_size), I = static_cast<double>(m.intermediate_size);
  const double embeddings =
      (static_cast<double>(m.vocab_size) + static_cast<double>(m.max_position_embeddings) +
       static_cast<double>(m.type_vocab_size)) * D + 2 * D;
  const double layer = 4 * (D * D + D) + 4 * D + (D * I + I) + (I * D + D);
  const double head = D * D + D + D * static_cast<double>(m.num_labels) + static_cast<double>(m.num_labels);
  return std::max({embeddings, layer, head});
}

// Bytes one encoder layer keeps for backward for a batch of B sequences of L tokens.
double layer_activation_bytes(const EncoderConfig& m, double B, double L) {
  const double D = static_cast<double>(m.hidden_size), I = static_cast<double>(m.intermediate_size),
               H = static_cast<double>(m.num_attention_heads);
  return 4 * (16 * B * L * D + 2 * B * L * I + 3 * B * H * L * L) + B * H * L * L;
}

std::string count_text(double value) {
  return value < 1e15 ? str_format("%lld", static_cast<long long>(value)) : str_format("%.3g", value);
}

}  // namespace

void check_model_for_data(const EncoderConfig& model, const DataConfig& data, const std::string& model_source) {
  // Families without token types (DistilBERT, ModernBERT) ignore them, and
  // RoBERTa's tokenizers give every token type 0.
  if (model.has_token_types() && model.family != ModelFamily::kRoberta && !data.text_b.empty() &&
      model.type_vocab_size < 2)
    throw Error(model_source + ": type_vocab_size = " + std::to_string(model.type_vocab_size) +
                ", but data.text_b = '" + shorten(data.text_b) +
                "' makes sentence pairs, whose second sentence has token type 1; use a model with type_vocab_size "
                ">= 2, or set data.text_b = \"\" for single sentences");
}

MemoryEstimate estimate_rank_memory(const RunConfig& config, const EncoderConfig& model, int world_size) {
  MemoryEstimate e;
  e.strategy = choice_name(config.parallel.strategy);
  // Doubles throughout: a hostile config (batch_size 1e11) must give a large
  // number, not an overflow.
  const double psi = static_cast<double>(model.num_parameters());  // bounded by EncoderConfig::validate
  e.parameters = psi;
  const double n = std::max(1, world_size);
  const double shard = effective_strategy(config.parallel) == StrategyKind::kHybrid && config.parallel.ranks_per_node > 0
                           ? static_cast<double>(config.parallel.ranks_per_node)
                           : n;
  e.build_bytes = 8 * psi;
  switch (sharding_of(config.parallel)) {
    case Sharding::kNone: e.state_bytes = 16 * psi; break;
    case Sharding::kOptimizer: e.state_bytes = 8 * psi + 8 * psi / n; break;
    case Sharding::kGradients: e.state_bytes = 4 * psi + 12 * psi / n; break;
    case Sharding::kParameters:
      e.state_bytes = 16 * psi / shard;
      e.transient_bytes = 3 * 4 * largest_unit(model);
      break;
  }
  const double L = static_cast<double>(config.data.max_length);
  const double train = (static_cast<double>(model.num_hidden_layers) + 2) *
                       layer_activation_bytes(model, static_cast<double>(config.train.batch_size), L);
  const double eval = layer_activation_bytes(model, static_cast<double>(config.train.eval_batch_size), L);
  e.activation_bytes = std::max(train, eval);
  e.label_bytes = 48 * static_cast<double>(model.num_labels);
  e.total_bytes = std::max(e.build_bytes, e.state_bytes + e.transient_bytes + e.activation_bytes) + e.label_bytes;
  return e;
}

void check_memory_fits(const MemoryEstimate& need, const RunConfig& config, const EncoderConfig& model, int ranks_on_node,
                       const std::optional<AvailableMemory>& available) {
  if (!available) return;
  const double ranks = std::max(1, ranks_on_node);
  const double node_bytes = need.total_bytes * ranks;
  if (node_bytes <= static_cast<double>(available->bytes)) return;

  // The parts, largest first, each with the keys that make it.
  struct Part {
    double bytes;
    std::string text;
    std::string advice;
  };
  const double model_bytes = std::max(need.build_bytes, need.state_bytes + need.transient_bytes);
  std::vector<Part> parts = {
      {need.activation_bytes,
       "activations " + format_bytes(need.activation_bytes) + " (train.batch_size " +
           std::to_string(config.train.batch_size) + " x data.max_length " + std::to_string(config.data.max_length) +
           ", train.eval_batch_size " + std::to_string(config.train.eval_batch_size) + ")",
       "lower train.batch_size (and raise train.gradient_accumulation_steps to keep the global batch), "
       "train.eval_batch_size or data.max_length"},
      {model_bytes,
       "model state " + format_bytes(model_bytes) + " (" + count_text(need.parameters) +
           " parameters: vocab_size " + std::to_string(model.vocab_size) + ", hidden_size " +
           std::to_string(model.hidden_size) + ", " + std::to_string(model.num_hidden_layers) + " layers, " +
           std::to_string(model.num_labels) + " labels; parallel.strategy \"" + need.strategy + "\")",
       "shard it (parallel.strategy = \"zero2\" or \"zero3\") or use a smaller model (model.config / model.path, "
       "model.num_labels)"},
      {need.label_bytes, "label names " + format_bytes(need.label_bytes) + " (model.num_labels " +
                             std::to_string(model.num_labels) + ")",
       "lower model.num_labels"},
  };
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.bytes > b.bytes; });
  std::string breakdown, advice;
  for (const Part& p : parts) {
    if (p.bytes < 0.01 * need.total_bytes) continue;
    breakdown += (breakdown.empty() ? "" : ", ") + p.text;
    advice += (advice.empty() ? "" : "; or ") + p.advice;
  }
  throw Error("this run needs about " + format_bytes(need.total_bytes) + " of host memory per rank" +
              (ranks > 1 ? " (x " + std::to_string(ranks_on_node) + " ranks on this node = " + format_bytes(node_bytes) + ")"
                         : std::string()) +
              ", but " + format_bytes(static_cast<double>(available->bytes)) + " are available (" + available->source +
              "): " + breakdown + ". To fit: " + advice + (ranks > 1 ? "; or run fewer ranks per node" : "") + ".");
}

}  // namespace shardtrain
