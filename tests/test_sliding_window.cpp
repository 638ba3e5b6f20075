// ModernBERT's sliding-window layers in blocks (docs/DESIGN.md, "Model
// families"): the packed forward's banded attention gives the logits and
// gradients of the same model computed with the window as a mask over every
// key (HF's eager way) and of the padded forward, for sequences far longer than
// the window, shorter than it, and of one token, packed together; and a
// sequence's logits do not depend on its neighbours in the pack (no window
// reaches into the next sequence).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "support/padded_rows.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/encoder_config.h"

using namespace shardtrain;

namespace sliding_window_test {

// The golden ModernBERT fixture's shape (4 layers, global every 3rd, window 4:
// 2 keys each side), with room for long sequences and dropout off.
EncoderConfig window_config() {
  EncoderConfig c = EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) +
                                             "/tests/fixtures/family_golden/modernbert_cls_l4/config.json");
  c.max_position_embeddings = 128;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = c.embedding_dropout = c.classifier_dropout = 0;
  return c;
}

using WindowRun = shardtrain_test::StepOutputs;

WindowRun window_run(TaskModel& model, const Batch& batch, bool unpadded, bool banded) {
  model.zero_grad();
  model.set_unpadded(unpadded);
  model.set_banded_attention(banded);
  const at::Tensor logits = model.forward_batch(batch);
  model.loss(logits, batch.labels).backward();
  WindowRun run{logits.detach().clone(), {}};
  for (const auto& named : model.state_dict()) run.grads.push_back(named.second.grad().clone());
  return run;
}

}  // namespace sliding_window_test

using namespace sliding_window_test;

TEST_CASE("sliding window: banded blocks equal the masked full attention and the padded forward") {
  const EncoderConfig config = window_config();
  TaskModel model(config);
  model.init_weights(3);
  model.train();
  // 61 and 37: many blocks of 4 queries (8 keys each); 3 and 1: shorter than a block.
  const Batch batch = shardtrain_test::padded_rows(config, {61, 3, 37, 1, 12}, 17);
  const WindowRun banded = window_run(model, batch, /*unpadded=*/true, /*banded=*/true);
  const WindowRun masked = window_run(model, batch, true, false);
  const WindowRun padded = window_run(model, batch, false, false);
  MESSAGE("banded vs masked " << shardtrain_test::largest_difference(banded, masked) << ", banded vs padded " << shardtrain_test::largest_difference(banded, padded));
  CHECK(shardtrain_test::largest_difference(banded, masked) < 1e-5);
  CHECK(shardtrain_test::largest_difference(banded, padded) < 1e-5);
  // The window matters: the same weights with every layer global give other logits.
  EncoderConfig global = config;
  global.global_attn_every_n_layers = 1;
  TaskModel all_global(global);
  all_global.init_weights(3);
  all_global.train();
  CHECK((window_run(all_global, batch, true, true).logits - banded.logits).abs().max().item<double>() > 1e-4);
}

TEST_CASE("sliding window: a packed sequence's logits do not depend on its neighbours") {
  const EncoderConfig config = window_config();
  TaskModel model(config);
  model.init_weights(5);
  model.eval();
  model.set_unpadded(true);
  at::NoGradGuard no_grad;
  const Batch together = shardtrain_test::padded_rows(config, {29, 50, 2, 33}, 23);
  const at::Tensor logits = model.forward_batch(together);
  for (int64_t r = 0; r < together.size(); ++r) {
    CAPTURE(r);
    const int64_t n = together.attention_mask[r].sum().item<int64_t>();
    Batch alone;
    alone.input_ids = together.input_ids.narrow(0, r, 1).narrow(1, 0, n);
    alone.attention_mask = together.attention_mask.narrow(0, r, 1).narrow(1, 0, n);
    alone.token_type_ids = at::zeros_like(alone.input_ids);
    alone.num_real_tokens = alone.num_total_tokens = n;
    CHECK((model.forward_batch(alone)[0] - logits[r]).abs().max().item<double>() < 1e-5);
  }
}
