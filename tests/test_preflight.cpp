// Preflight (train/preflight.h) and the size bounds of model configs
// (model/bert.h): type_vocab_size against sentence pairs, the per-rank memory
// estimate against the README's strategy formulas, the refusal that names
// the keys and the bytes, and config.json sizes refused before allocating.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/model/classifier.h"
#include "shardtrain/train/preflight.h"

#include "support/mpi_ranks.h"

using namespace shardtrain;

namespace {

bool preflight_contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A small model whose parameter count is easy to state: 10,000 x 8 embeddings etc.
EncoderConfig preflight_model() {
  EncoderConfig m;
  m.vocab_size = 1000;
  m.hidden_size = 8;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 2;
  m.intermediate_size = 16;
  m.max_position_embeddings = 64;
  m.set_num_labels(2);
  return m;
}

AvailableMemory preflight_available(double bytes) {
  AvailableMemory a;
  a.bytes = static_cast<uint64_t>(bytes);
  a.source = "MemAvailable " + format_bytes(bytes);
  return a;
}

}  // namespace

TEST_CASE("sentence pairs need type_vocab_size >= 2") {
  EncoderConfig m = preflight_model();
  DataConfig pairs;  // text_b "#2 String" by default
  check_model_for_data(m, pairs, "model.json");
  m.type_vocab_size = 1;
  CHECK(shardtrain_test::error_of([&] { check_model_for_data(m, pairs, "model.json"); }) ==
        "model.json: type_vocab_size = 1, but data.text_b = '#2 String' makes sentence pairs, whose second sentence "
        "has token type 1; use a model with type_vocab_size >= 2, or set data.text_b = \"\" for single sentences");
  DataConfig single;
  single.text_b = "";
  check_model_for_data(m, single, "model.json");
}

TEST_CASE("the memory estimate follows the strategy formulas") {
  const EncoderConfig m = preflight_model();
  const double psi = static_cast<double>(m.num_parameters());
  RunConfig c;
  c.train.batch_size = 4;
  c.train.eval_batch_size = 4;
  c.data.max_length = 32;
  // One layer's activations for B = 4, L = 32, D = 8, I = 16, H = 2 (preflight.h).
  const double layer = 4 * (16.0 * 4 * 32 * 8 + 2.0 * 4 * 32 * 16 + 3.0 * 4 * 2 * 32 * 32) + 4.0 * 2 * 32 * 32;
  c.parallel.strategy = parse_choice<StrategyKind>("ddp", "parallel.strategy");
  MemoryEstimate e = estimate_rank_memory(c, m, 4);
  CHECK(e.parameters == psi);
  CHECK(e.build_bytes == 8 * psi);
  CHECK(e.state_bytes == 16 * psi);
  CHECK(e.activation_bytes == 4 * layer);  // 2 layers + 2
  CHECK(e.total_bytes == std::max(8 * psi, 16 * psi + 4 * layer) + 48 * 2);
  c.parallel.strategy = parse_choice<StrategyKind>("zero1", "parallel.strategy");
  CHECK(estimate_rank_memory(c, m, 4).state_bytes == 8 * psi + 8 * psi / 4);
  c.parallel.strategy = parse_choice<StrategyKind>("zero2", "parallel.strategy");
  CHECK(estimate_rank_memory(c, m, 4).state_bytes == 4 * psi + 12 * psi / 4);
  c.parallel.strategy = parse_choice<StrategyKind>("zero3", "parallel.strategy");
  e = estimate_rank_memory(c, m, 4);
  CHECK(e.state_bytes == 16 * psi / 4);
  // The largest unit is the embeddings: (1000 + 64 + 2) x 8 + 2 x 8.
  CHECK(e.transient_bytes == 3 * 4 * ((1000.0 + 64 + 2) * 8 + 16));
  c.parallel.strategy = parse_choice<StrategyKind>("fsdp", "parallel.strategy");
  c.parallel.fsdp.sharding_strategy = FsdpShardingStrategy::kShardGradOp;
  CHECK(estimate_rank_memory(c, m, 4).state_bytes == 4 * psi + 12 * psi / 4);
  c.parallel.fsdp.sharding_strategy = FsdpShardingStrategy::kNoShard;
  CHECK(estimate_rank_memory(c, m, 4).state_bytes == 16 * psi);
  c.parallel.strategy = parse_choice<StrategyKind>("hybrid", "parallel.strategy");
  c.parallel.ranks_per_node = 2;
  CHECK(estimate_rank_memory(c, m, 4).state_bytes == 16 * psi / 2);
}

TEST_CASE("a run that cannot fit is refused, naming the keys and the bytes") {
  const EncoderConfig m = preflight_model();
  RunConfig c;
  c.train.batch_size = 100000000000;  // --train.batch_size 1e11
  const MemoryEstimate e = estimate_rank_memory(c, m, 2);
  CHECK(e.activation_bytes > 1e15);
  const std::string message =
      shardtrain_test::error_of([&] { check_memory_fits(e, c, m, 2, preflight_available(20.0 * (1 << 30))); });
  CHECK(message.rfind("this run needs about ", 0) == 0);
  CHECK(preflight_contains(message, " of host memory per rank (x 2 ranks on this node = "));
  CHECK(preflight_contains(message, "but 20.0 GiB are available (MemAvailable 20.0 GiB): activations "));
  CHECK(preflight_contains(message, "(train.batch_size 100000000000 x data.max_length 128, train.eval_batch_size 32)"));
  CHECK(preflight_contains(message, "To fit: lower train.batch_size"));
  CHECK(preflight_contains(message, "; or run fewer ranks per node."));
  // The same run fits when the batch does.
  c.train.batch_size = 16;
  check_memory_fits(estimate_rank_memory(c, m, 2), c, m, 2, preflight_available(20.0 * (1 << 30)));
  // A huge model names its sizes and the strategy.
  EncoderConfig big = m;
  big.vocab_size = 2000000000;
  big.hidden_size = 1024;
  big.num_attention_heads = 16;
  const std::string model_message = shardtrain_test::error_of([&] {
    check_memory_fits(estimate_rank_memory(c, big, 1), c, big, 1, preflight_available(20.0 * (1 << 30)));
  });
  CHECK(preflight_contains(model_message, "model state "));
  CHECK(preflight_contains(model_message, "vocab_size 2000000000, hidden_size 1024, 2 layers, 2 labels; "
                                          "parallel.strategy \"ddp\")"));
  CHECK(preflight_contains(model_message, "shard it (parallel.strategy = \"zero2\" or \"zero3\")"));
  // Unknown available memory: nothing to refuse with.
  check_memory_fits(estimate_rank_memory(c, big, 1), c, big, 1, std::nullopt);
}

TEST_CASE("sizes in config.json are bounded before anything is allocated") {
  const std::string base = R"({"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                                "intermediate_size": 16, "max_position_embeddings": 16)";
  CHECK(shardtrain_test::error_of([&] { EncoderConfig::from_json(base + R"(, "vocab_size": 1e12})", "c.json"); }) ==
        "c.json: key \"vocab_size\": 1000000000000 is more than 2147483647 (token ids are 32-bit)");
  CHECK(shardtrain_test::error_of([&] { EncoderConfig::from_json(base + R"(, "vocab_size": 100, "num_labels": 1000000000})", "c.json"); }) ==
        "c.json: key \"num_labels\": 1000000000 is more than 1048576 labels");
  CHECK(preflight_contains(
      shardtrain_test::error_of([&] {
        EncoderConfig::from_json(R"({"vocab_size": 2000000000, "hidden_size": 1048576, "num_attention_heads": 1})", "c.json");
      }),
      "c.json: key \"hidden_size\": this config makes a model of about 2.15e+15 parameters"));
  EncoderConfig m = preflight_model();
  CHECK(shardtrain_test::error_of([&] { m.set_num_labels(1000000000); }) ==
        "num_labels = 1000000000 is more than the 1048576 labels a classifier may have");
  // Valid but too large for this machine: refused by the model, before LibTorch allocates.
  EncoderConfig big = preflight_model();
  big.vocab_size = 2000000000;
  big.hidden_size = 2048;
  big.num_attention_heads = 16;
  const std::string message = shardtrain_test::error_of([&] { SequenceClassifier model(big); });
  CHECK(message.rfind("the bert model (", 0) == 0);
  CHECK(preflight_contains(message, "parameters in fp32: vocab_size 2000000000, hidden size 2048"));
  CHECK(preflight_contains(message, "of host memory, but "));
}
