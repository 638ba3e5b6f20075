// Writes a small training checkpoint, the fixture test_cli.sh runs inspect,
// export and predict --model CKPT on (tests/CMakeLists.txt passes its path in
// SHARDTRAIN_TRAIN_CHECKPOINT_PROBE):
//   train_checkpoint_probe OUT.h5 VOCAB.txt          a TaskModel
//       (vocab_size = lines of VOCAB.txt, hidden 16, 2 layers, 2 heads,
//       intermediate 32, labels not_equivalent / equivalent, weights ~ N(0, 0.4)
//       from seed 1234, LayerNorm weights 1) with AdamW moments, each rank
//       writing an uneven part; TrainState: step 12, epoch 1, 5 batches
//       consumed, seed 42, 30 steps, 3 warmup, lr 3e-5, strategy zero1, metrics
//       eval_accuracy 0.6875 / eval_f1 0.8, config TOML "[train]\nlr = 3e-05\n
//       num_epochs = 3\n", the vocabulary, lowercase 0
//   train_checkpoint_probe OUT.h5 VOCAB.txt --bert-base   the same with
//       bert-base-cased's shape (108M parameters), to time checkpoint I/O
//   train_checkpoint_probe OUT.h5 --plain            a shardtrain checkpoint that
//       is not a training checkpoint (no "kind")
// Any number of ranks. Prints "train checkpoint probe: wrote OUT.h5".
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/optim/param_layout.h"
#include "shardtrain/train/train_checkpoint.h"

using namespace shardtrain;

int main(int argc, char** argv) {
  World world(&argc, &argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: train_checkpoint_probe OUT.h5 VOCAB.txt | OUT.h5 --plain\n");
    return 2;
  }
  const std::string out = argv[1], second = argv[2];
  try {
    if (second == "--plain") {
      CheckpointWriter writer(out, world.comm());
      writer.set_attribute("step", 1);
      writer.commit();
    } else {
      std::ifstream file(second, std::ios::binary);
      if (!file) throw Error("cannot read " + second);
      std::stringstream buffer;
      buffer << file.rdbuf();
      const std::string vocab = buffer.str();
      int64_t lines = 0;
      for (char c : vocab) lines += c == '\n';
      if (!vocab.empty() && vocab.back() != '\n') ++lines;

      const bool bert_base = argc > 3 && std::string(argv[3]) == "--bert-base";
      EncoderConfig config = bert_base_cased_config(2);
      config.vocab_size = lines;
      if (!bert_base) {
        config.hidden_size = 16;
        config.num_hidden_layers = 2;
        config.num_attention_heads = 2;
        config.intermediate_size = 32;
      }
      config.id2label = {"not_equivalent", "equivalent"};
      TaskModel model(config);
      const auto named = model.state_dict();
      at::NoGradGuard no_grad;
      at::manual_seed(1234);
      std::vector<at::Tensor> tensors;
      for (const auto& [name, param] : named) {
        if (name.find("LayerNorm.weight") != std::string::npos)
          param.fill_(1.0);
        else
          param.normal_(0.0, 0.4);
        tensors.push_back(param);
      }
      const ParamLayout layout(named);
      const int64_t n = layout.numel();
      const at::Tensor params = layout.flatten(tensors, n);
      const at::Tensor exp_avg = at::randn({n}) * 1e-3;
      const at::Tensor exp_avg_sq = at::randn({n}).abs() * 1e-6;
      // Uneven parts: rank r of W owns a share proportional to r + 1.
      const int64_t rank = world.rank(), size = world.size();
      const int64_t total_weight = size * (size + 1) / 2;
      const int64_t begin = n * (rank * (rank + 1) / 2) / total_weight;
      const int64_t end = rank + 1 == size ? n : n * ((rank + 1) * (rank + 2) / 2) / total_weight;
      FlatPart part;
      part.begin = begin;
      part.params = params.narrow(0, begin, end - begin);
      part.exp_avg = exp_avg.narrow(0, begin, end - begin);
      part.exp_avg_sq = exp_avg_sq.narrow(0, begin, end - begin);

      TrainState state;
      state.step = 12;
      state.epoch = 1;
      state.batches_consumed = 5;
      state.seed = 42;
      state.num_training_steps = 30;
      state.warmup_steps = 3;
      state.base_lr = 3e-5;
      state.world_size = size;
      state.global_batch_size = 16 * size;
      state.strategy = "zero1";
      state.config_toml = "[train]\nlr = 3e-05\nnum_epochs = 3\n";
      state.model_config_json = config.to_json();
      state.vocab_text = vocab;
      state.lowercase = 0;
      state.metrics_json = R"({"eval_accuracy":0.6875,"eval_f1":0.8})";
      state.loss_sum = 6.5;
      state.loss_count = 4;
      state.train_seconds = 12.5;
      const double start = MPI_Wtime();
      write_train_checkpoint(out, flat_tensors(layout), part, state, world.comm());
      if (world.rank() == 0)
        std::printf("train checkpoint probe: %lld parameters written by %lld ranks in %.3f s\n",
                    static_cast<long long>(n), static_cast<long long>(size), MPI_Wtime() - start);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "train checkpoint probe: error: %s\n", e.what());
    return 1;
  }
  if (world.rank() == 0) std::printf("train checkpoint probe: wrote %s\n", out.c_str());
  return 0;
}
