// Preflight (train/preflight.h) and the size bounds of model configs
// (model/bert.h): type_vocab_size against sentence pairs, and config.json
// sizes refused before allocating. The memory estimate and the refusal of a
// job that cannot fit are tests/test_memory_estimate.cpp.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/model/task_model.h"
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

}  // namespace

TEST_CASE("the tokenizer's token types must fit the model's type_vocab_size") {
  EncoderConfig m = preflight_model();
  DataConfig pairs;  // text_b "#2 String" by default
  check_model_for_data(m, pairs, 1, "model.json");
  m.type_vocab_size = 1;
  CHECK(shardtrain_test::error_of([&] { check_model_for_data(m, pairs, 1, "model.json"); }) ==
        "model.json: type_vocab_size = 1, but data.text_b = '#2 String' makes sentence pairs, to which the tokenizer "
        "gives token type 1; use a model with type_vocab_size >= 2, or set data.text_b = \"\" for single sentences");
  // RoBERTa's tokenizers give pairs type 0: a one-type model takes them.
  check_model_for_data(m, pairs, 0, "model.json");
  DataConfig single;
  single.text_b = "";
  check_model_for_data(m, single, 0, "model.json");
  // A tokenizer.json whose single template gives type 1 (its type ids are read, not assumed).
  CHECK(shardtrain_test::error_of([&] { check_model_for_data(m, single, 1, "model.json"); }) ==
        "model.json: type_vocab_size = 1, but the tokenizer gives single sentences token type 1; use a model with "
        "type_vocab_size >= 2 or a tokenizer whose template gives type 0");
  // Families without type embeddings (DistilBERT, ModernBERT: type_vocab_size 0) ignore the types.
  m.type_vocab_size = 0;
  check_model_for_data(m, pairs, 1, "model.json");
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
  const std::string message = shardtrain_test::error_of([&] { TaskModel model(big); });
  CHECK(message.rfind("the bert model (", 0) == 0);
  CHECK(preflight_contains(message, "parameters in fp32: vocab_size 2000000000, hidden size 2048"));
  CHECK(preflight_contains(message, "of host memory, but "));
}
