// Small models, data and run configs shared by the training tests
// (test_ddp_mpi, test_zero_mpi, test_train_mpi). Collective where noted.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardtrain/core/run_config.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/parallel/strategy.h"
#include "shardtrain/train/train_step.h"
#include "shardtrain/train/trainer.h"
#include "mpi_ranks.h"

namespace shardtrain_test {

// A BERT small enough to compare strategies step by step: vocab 50, hidden 16,
// 2 layers, 3 labels, dropout off.
inline shardtrain::EncoderConfig tiny_bert_config() {
  shardtrain::EncoderConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = 0;
  c.attention_probs_dropout_prob = 0;
  c.num_labels = 3;
  c.id2label = {"a", "b", "c"};
  return c;
}

// Collective: dir/name written by rank 0 alone, write(std::ofstream&); its
// path on every rank once it is written.
template <class Write>
std::string written_by_rank0(const std::string& dir, const std::string& name, Write&& write) {
  const std::string path = dir + "/" + name;
  if (world_rank() == 0) {
    std::ofstream out(path);
    write(out);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

// Collective: the header and the first `rows` rows of a shipped file (e.g.
// data/glue/MRPC/train.tsv), written to dir/name by rank 0.
inline std::string head_of_shipped(const std::string& source, int rows, const std::string& dir,
                                   const std::string& name) {
  return written_by_rank0(dir, name, [&](std::ofstream& out) {
    std::ifstream in(std::string(SHARDTRAIN_SOURCE_DIR) + "/" + source);
    std::string line;
    for (int i = 0; i <= rows && std::getline(in, line); ++i) out << line << '\n';
  });
}

// The runs a strategy test compares with DDP's padded run: DDP packed, then
// every other strategy padded and packed (model.unpadded); name() is a run.name.
struct StrategyVariant {
  shardtrain::StrategyKind strategy;
  bool unpadded;
  std::string name() const { return std::string(shardtrain::enum_name(strategy)) + (unpadded ? "_packed" : ""); }
};
inline std::vector<StrategyVariant> variants_against_ddp() {
  using shardtrain::StrategyKind;
  std::vector<StrategyVariant> variants = {{StrategyKind::kDdp, true}};
  for (StrategyKind s : {StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kZero3, StrategyKind::kFsdp})
    for (bool unpadded : {false, true}) variants.push_back({s, unpadded});
  return variants;
}

// Collective: a run of tests/data/bert_h32.json on 96 MRPC train rows and 37
// dev rows (37: not a multiple of any batch), 2 epochs of batch 4 per rank,
// lr 1e-3, seed 7, a checkpoint per epoch, run folder dir/run.
inline shardtrain::RunConfig tiny_run_config(const std::string& dir) {
  shardtrain::RunConfig c;
  c.model.init = shardtrain::ModelInit::kRandom;
  c.model.config = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/data/bert_h32.json";
  c.model.vocab = std::string(SHARDTRAIN_SOURCE_DIR) + "/data/vocab/bert-base-cased-vocab.txt";
  c.data.train_file = head_of_shipped("data/glue/MRPC/train.tsv", 96, dir, "train.tsv");
  c.data.eval_file = head_of_shipped("data/glue/MRPC/dev.tsv", 37, dir, "dev.tsv");
  c.data.format = shardtrain::FileFormat::kTsv;
  c.data.max_length = 64;
  c.train.num_epochs = 2;
  c.train.lr = 1e-3;
  c.train.warmup_steps = 2;
  c.train.batch_size = 4;
  c.train.eval_batch_size = 5;
  c.train.seed = 7;
  c.train.log_every_steps = 1000;
  c.checkpoint.every_epochs = 1;
  c.run.storage_path = dir;
  c.run.name = "run";
  return c;
}

// Token ids, token types and labels of one micro-batch (no padding: no mask).
struct TinyInputs {
  at::Tensor ids, types, labels;
};

// One optimizer step (shardtrain::train_step) over `micro`, accumulated, with
// lr and clipping as given and the generator left alone. Returns the
// gradient norm.
inline double step_over(shardtrain::Strategy& strategy, shardtrain::TaskModel& model,
                        const std::vector<TinyInputs>& micro, double lr, double max_grad_norm) {
  std::vector<shardtrain::Batch> batches;
  for (const TinyInputs& in : micro) {
    shardtrain::Batch b;
    b.input_ids = in.ids;
    b.token_type_ids = in.types;
    b.labels = in.labels;
    b.num_real_tokens = b.num_total_tokens = in.ids.numel();
    batches.push_back(b);
  }
  shardtrain::StepOptions options;
  options.lr = lr;
  options.max_grad_norm = max_grad_norm;
  options.accumulation_steps = static_cast<int64_t>(micro.size());
  return shardtrain::train_step(strategy, model, batches, options).grad_norm;
}

// TrainOptions for tests: no live progress line.
inline shardtrain::TrainOptions quiet_train_options() {
  shardtrain::TrainOptions o;
  o.live_progress = false;
  o.config_toml = "# test\n";
  return o;
}

}  // namespace shardtrain_test
