// Attention in blocks of query rows (TaskModel::
// set_attention_block_threshold; docs/DESIGN.md, "Unpadded batches and the
// CPU kernels"): the blocked kernel keeps no score matrix for backward and
// recomputes each block there. It must give the logits and every parameter's
// gradient of the kernel that holds all scores at once: padded and packed,
// BERT with attention dropout in training (the blocked kernel draws the same
// mask a block at a time, so a wrong offset shows as a different model), blocks
// that do not divide the sequence, ModernBERT's global layers and banded
// local layers, and bf16.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "support/padded_rows.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/encoder_config.h"

using namespace shardtrain;

namespace attention_blocks_test {
namespace {

// fp32: the same ops on the same values, only the matmul shapes differ (a
// block's rows against all of them), which BLAS may sum in another order: a few
// ulps per op, ~1e-6 after the layers; 1e-5 (absolute plus relative) leaves
// room, a block at the wrong offset or a mask misread moves values by >= 1e-3.
constexpr double kFp32Tol = 1e-5;
// bf16 (8-bit mantissa, ~4e-3 relative per rounding): the key and value
// gradients sum the blocks in fp32 where one bmm summed all rows, and each
// partial is rounded to bf16 first; 3e-2 covers that, a real error is O(1).
constexpr double kBf16Tol = 3e-2;

EncoderConfig bert_config() {
  EncoderConfig c;
  c.vocab_size = 89;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 48;
  c.max_position_embeddings = 64;
  c.hidden_dropout_prob = 0.1;
  c.attention_probs_dropout_prob = 0.1;
  c.set_num_labels(2);
  return c;
}

// The ModernBERT fixture (global every 3rd layer, window 4) with room for long rows.
EncoderConfig modernbert_config() {
  EncoderConfig c = EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) +
                                             "/tests/fixtures/family_golden/modernbert_cls_l4/config.json");
  c.max_position_embeddings = 128;
  c.hidden_dropout_prob = c.embedding_dropout = c.classifier_dropout = 0;
  c.attention_probs_dropout_prob = 0.1;
  return c;
}

using Step = shardtrain_test::StepOutputs;

// One training step from the same generator state: dropout draws the same seeds.
Step step(TaskModel& model, const Batch& batch, int64_t threshold) {
  model.set_attention_block_threshold(threshold);
  return shardtrain_test::training_step(model, batch);
}

double excess(const Step& a, const Step& b, double tol) { return shardtrain_test::excess_over(a, b, tol); }

}  // namespace
}  // namespace attention_blocks_test

using namespace attention_blocks_test;

TEST_CASE("attention blocks: BERT with attention dropout, padded and packed, equals the whole-matrix kernel") {
  const EncoderConfig config = bert_config();
  TaskModel model(config);
  model.init_weights(5);
  model.train();
  const Batch batch = shardtrain_test::padded_rows(config, {37, 5, 64, 20}, 9);
  for (bool unpadded : {false, true}) {
    CAPTURE(unpadded);
    model.set_unpadded(unpadded);
    const Step whole = step(model, batch, -1);
    // Keys per matrix: 64 (padded) or the longest row (packed, padded per
    // sequence for attention): 1 gives one-row blocks, 7 x 64 seven-row blocks
    // (64 = 9 x 7 + 1: a short last block), 0 one block per matrix.
    for (int64_t threshold : {int64_t{1}, int64_t{7 * 64}, int64_t{0}}) {
      CAPTURE(threshold);
      const Step blocked = step(model, batch, threshold);
      CHECK(excess(blocked, whole, kFp32Tol) <= 0);
    }
    // The dropout mask matters: a step without dropout's noise is far from it.
    model.eval();
    const Step no_dropout = step(model, batch, 1);
    model.train();
    CHECK(shardtrain_test::largest_difference(no_dropout, whole) > 1e-3);
  }
}

TEST_CASE("attention blocks: ModernBERT global and banded local layers, packed and padded") {
  const EncoderConfig config = modernbert_config();
  TaskModel model(config);
  model.init_weights(11);
  model.train();
  // Rows longer than the window's band (the local layers run banded) and shorter.
  const Batch batch = shardtrain_test::padded_rows(config, {120, 3, 45, 1, 90}, 4);
  for (bool unpadded : {true, false}) {
    CAPTURE(unpadded);
    model.set_unpadded(unpadded);
    const Step whole = step(model, batch, -1);
    for (int64_t threshold : {int64_t{1}, int64_t{5 * 120}}) {
      CAPTURE(threshold);
      CHECK(excess(step(model, batch, threshold), whole, kFp32Tol) <= 0);
    }
  }
}

TEST_CASE("attention blocks: bf16 activations") {
  EncoderConfig config = bert_config();
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0;
  TaskModel model(config);
  model.init_weights(6);
  model.to(at::kBFloat16);
  model.train();
  const Batch batch = shardtrain_test::padded_rows(config, {50, 12, 33}, 2);
  const Step whole = step(model, batch, -1);
  const Step blocked = step(model, batch, 3 * 50);
  CHECK(excess(blocked, whole, kBf16Tol) <= 0);
  CHECK(shardtrain_test::largest_difference(blocked, whole) < 1e-1);
}
