// Training checkpoints over real MPI (np 2 and 4): a tiny BERT classifier and
// its AdamW moments written from uneven per-rank parts, read back by name and
// under another partition bit-exactly, the TrainState attributes round trip,
// layout mismatches name the file and tensor, and load_checkpoint_model gives a
// model with the same logits as the original.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "support/mpi_ranks.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/core/check.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/optim/param_layout.h"
#include "shardtrain/train/checkpoint_model.h"
#include "shardtrain/train/train_checkpoint.h"
#include "shardtrain/train/train_step.h"
#include "support/checkpoint_state.h"

using namespace shardtrain;
using namespace shardtrain_test;

// Everything in a file namespace: the *_mpi tests are compiled together (unity build).
namespace train_checkpoint_mpi_test {
using shardtrain_test::world_rank;
using shardtrain_test::world_size;

namespace {

const char* kVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\n##s\n.\n";

EncoderConfig tiny_config(int64_t num_labels = 3) {
  EncoderConfig config;
  config.vocab_size = 100;
  config.hidden_size = 32;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.intermediate_size = 48;
  config.max_position_embeddings = 40;
  config.set_num_labels(num_labels);
  if (num_labels == 3) config.id2label = {"negative", "neutral", "positive"};
  return config;
}

// A model whose weights are far from HF's init (std 0.4, LayerNorm weights
// non-1), so logits are O(1) and a swapped or zeroed tensor shows.
std::shared_ptr<TaskModel> tiny_model(const EncoderConfig& config, uint64_t seed) {
  auto model = std::make_shared<TaskModel>(config);
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& [name, param] : model->state_dict()) param.normal_(0.0, 0.4);
  model->eval();
  return model;
}

struct Flat {
  ParamLayout layout;
  at::Tensor params, exp_avg, exp_avg_sq;
};

Flat flatten(const TaskModel& model) {
  torch::NoGradGuard no_grad;
  const auto named = model.state_dict();
  ParamLayout layout(named);
  std::vector<at::Tensor> tensors;
  for (const auto& [name, param] : named) tensors.push_back(param);
  at::Tensor params = layout.flatten(tensors, layout.numel());
  const int64_t n = layout.numel();
  return Flat{layout, params, flat_state(n, 1.0) * 1e-3f, flat_state(n, 2.0).abs() * 1e-6f};
}

TrainState sample_state() {
  TrainState state;
  state.step = 123;
  state.epoch = 2;
  state.batches_consumed = 17;
  state.seed = 20260101;
  state.num_training_steps = 345;
  state.warmup_steps = 34;
  state.base_lr = 2.5e-5;
  state.world_size = 7;
  state.global_batch_size = 112;
  state.strategy = "zero2";
  state.config_toml = "[train]\nlr = 2.5e-05\n# caf\xC3\xA9 \xE2\x9C\x93\n";
  state.model_config_json = tiny_config().to_json();
  state.vocab_text = kVocab;
  state.lowercase = 1;
  state.metrics_json = R"({"eval_accuracy":0.8125,"eval_f1":0.875})";
  state.loss_sum = 12.375;
  state.loss_count = 33;
  state.train_seconds = 4567.25;
  return state;
}

FlatPart part_of(const Flat& flat, int64_t begin, int64_t end, bool with_optimizer) {
  FlatPart part;
  part.begin = begin;
  part.params = flat.params.narrow(0, begin, end - begin);
  if (with_optimizer) {
    part.exp_avg = flat.exp_avg.narrow(0, begin, end - begin);
    part.exp_avg_sq = flat.exp_avg_sq.narrow(0, begin, end - begin);
  }
  return part;
}

// Written once per process by the first case that needs it.
struct Fixture {
  std::string dir, path, model_only_path;
  EncoderConfig config = tiny_config();
  std::shared_ptr<TaskModel> model;
  std::unique_ptr<Flat> flat;
};

Fixture& fixture() {
  static Fixture f;
  if (f.model) return f;
  f.dir = make_shared_temp_dir("train_ckpt_test");
  f.path = checkpoint_path(f.dir, 1);
  f.model_only_path = checkpoint_path(f.dir, 2);
  f.model = tiny_model(f.config, 7);
  f.flat = std::make_unique<Flat>(flatten(*f.model));
  const int64_t n = f.flat->layout.numel();
  const auto cuts = uneven_cuts(n, world_size());
  const int r = world_rank();
  write_train_checkpoint(f.path, flat_tensors(f.flat->layout), part_of(*f.flat, cuts[r], cuts[r + 1], true),
                         sample_state(), MPI_COMM_WORLD);
  // Model only, cut the other way round (rank W-1 gets the small part).
  const auto even = even_cuts(n, world_size());
  write_train_checkpoint(f.model_only_path, flat_tensors(f.flat->layout),
                         part_of(*f.flat, even[r], even[r + 1], false), sample_state(), MPI_COMM_WORLD);
  return f;
}

}  // namespace

TEST_CASE("flat_tensors mirrors the parameter layout") {
  Fixture& f = fixture();
  const auto tensors = flat_tensors(f.flat->layout);
  const auto& slots = f.flat->layout.slots();
  REQUIRE(tensors.size() == slots.size());
  REQUIRE(tensors.size() == f.model->state_dict().size());
  for (size_t i = 0; i < slots.size(); ++i) {
    CHECK(tensors[i].name == slots[i].name);
    CHECK(tensors[i].shape == slots[i].shape);
    CHECK(tensors[i].offset == slots[i].offset);
  }
}

TEST_CASE("uneven parts: every tensor and both moments read back by name, bit-exact") {
  Fixture& f = fixture();
  CheckpointReader reader(f.path, MPI_COMM_WORLD);
  CHECK(reader.string_attribute("kind") == kTrainCheckpointKind);
  const auto views_exp_avg = f.flat->layout.views(f.flat->exp_avg);
  const auto views_exp_avg_sq = f.flat->layout.views(f.flat->exp_avg_sq);
  const auto named = f.model->state_dict();
  CHECK(reader.names("model").size() == named.size());
  bool ok = true;
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [name, param] = named[i];
    const at::Tensor stored = reader.read_tensor("model", name);
    if (!torch::equal(stored, param.detach())) {
      ok = false;
      MESSAGE("model tensor differs: " << name);
    }
    if (!torch::equal(reader.read_tensor("optim/exp_avg", name), views_exp_avg[i]) ||
        !torch::equal(reader.read_tensor("optim/exp_avg_sq", name), views_exp_avg_sq[i])) {
      ok = false;
      MESSAGE("optimizer state differs: " << name);
    }
  }
  CHECK(all_ranks(ok));
  CHECK(reader.int_attribute("writer_world_size") == world_size());
}

TEST_CASE("read_train_part under another partition (ZeRO shards with padding)") {
  Fixture& f = fixture();
  const ParamLayout& layout = f.flat->layout;
  const int W = world_size(), r = world_rank();
  // Padded to a multiple of W + 3 so the last shard has real padding.
  const int64_t padded = layout.padded_numel(W) + W * 3;
  const int64_t shard = padded / W;
  const int64_t begin = r * shard;
  FlatPart part;
  part.begin = begin;
  part.params = torch::full({shard}, -5.0f);
  part.exp_avg = torch::full({shard}, -5.0f);
  part.exp_avg_sq = torch::full({shard}, -5.0f);
  CheckpointReader reader(f.path, MPI_COMM_WORLD);
  read_train_part(reader, flat_tensors(layout), part);
  const int64_t real = std::max<int64_t>(0, std::min(shard, layout.numel() - begin));
  bool ok = true;
  if (real > 0) {
    ok = ok && torch::equal(part.params.narrow(0, 0, real), f.flat->params.narrow(0, begin, real));
    ok = ok && torch::equal(part.exp_avg.narrow(0, 0, real), f.flat->exp_avg.narrow(0, begin, real));
    ok = ok && torch::equal(part.exp_avg_sq.narrow(0, 0, real), f.flat->exp_avg_sq.narrow(0, begin, real));
  }
  // Padding is left alone.
  if (real < shard) ok = ok && (part.params.narrow(0, real, shard - real) == -5.0f).all().item<bool>();
  CHECK(all_ranks(ok));

  // The model-only checkpoint (written under the other cuts) into a float64
  // part: converted through float32, values equal.
  CheckpointReader model_only(f.model_only_path, MPI_COMM_WORLD);
  FlatPart doubles;
  doubles.begin = begin;
  doubles.params = torch::zeros({shard}, torch::kDouble);
  read_train_part(model_only, flat_tensors(layout), doubles);
  bool ok_double = real == 0 ||
                   torch::equal(doubles.params.narrow(0, 0, real).to(torch::kFloat), f.flat->params.narrow(0, begin, real));
  CHECK(all_ranks(ok_double));
}

TEST_CASE("TrainState round trip; a model-only checkpoint has no optimizer groups") {
  Fixture& f = fixture();
  const TrainState expected = sample_state();
  for (const std::string& path : {f.path, f.model_only_path}) {
    CheckpointReader reader(path, MPI_COMM_WORLD);
    const TrainState got = read_train_state(reader);
    CHECK(got.step == expected.step);
    CHECK(got.epoch == expected.epoch);
    CHECK(got.batches_consumed == expected.batches_consumed);
    CHECK(got.seed == expected.seed);
    CHECK(got.num_training_steps == expected.num_training_steps);
    CHECK(got.warmup_steps == expected.warmup_steps);
    CHECK(got.base_lr == expected.base_lr);
    CHECK(got.world_size == expected.world_size);
    CHECK(got.global_batch_size == expected.global_batch_size);
    CHECK(got.strategy == expected.strategy);
    CHECK(got.config_toml == expected.config_toml);
    CHECK(got.model_config_json == expected.model_config_json);
    CHECK(got.vocab_text == expected.vocab_text);
    CHECK(got.lowercase == expected.lowercase);
    CHECK(got.metrics_json == expected.metrics_json);
    CHECK(got.loss_sum == expected.loss_sum);
    CHECK(got.loss_count == expected.loss_count);
    CHECK(got.train_seconds == expected.train_seconds);
  }
  CheckpointReader model_only(f.model_only_path, MPI_COMM_WORLD);
  CHECK_FALSE(model_only.has("optim", "exp_avg"));
  FlatPart part;
  part.params = torch::zeros({f.flat->layout.numel()});
  part.exp_avg = torch::zeros({f.flat->layout.numel()});
  part.exp_avg_sq = torch::zeros({f.flat->layout.numel()});
  const std::string message = error_of([&] { read_train_part(model_only, flat_tensors(f.flat->layout), part); });
  CHECK(contains(message, f.model_only_path));
  CHECK(contains(message, "no optimizer state"));
}

TEST_CASE("a layout that does not match names the file and the tensor") {
  Fixture& f = fixture();
  CheckpointReader reader(f.path, MPI_COMM_WORLD);
  FlatPart part;
  part.params = torch::zeros({f.flat->layout.numel()});

  // Another number of labels: the classifier shapes differ.
  const auto two_labels = tiny_model(tiny_config(2), 1);
  const ParamLayout other(two_labels->state_dict());
  FlatPart other_part;
  other_part.params = torch::zeros({other.numel()});
  std::string message = error_of([&] { read_train_part(reader, flat_tensors(other), other_part); });
  CHECK(contains(message, f.path));
  CHECK(contains(message, "/model/classifier.weight"));
  CHECK(contains(message, "[3, 32]"));
  CHECK(contains(message, "[2, 32]"));

  // A renamed tensor: the checkpoint's name is not in the layout.
  auto renamed = flat_tensors(f.flat->layout);
  renamed[3].name = "bert.embeddings.LayerNorm.gamma";
  message = error_of([&] { read_train_part(reader, renamed, part); });
  CHECK(contains(message, f.path));
  CHECK(contains(message, "bert.embeddings.LayerNorm.weight"));

  // A layout with one tensor fewer: the checkpoint holds an extra one.
  auto fewer = flat_tensors(f.flat->layout);
  fewer.pop_back();
  message = error_of([&] { read_train_part(reader, fewer, part); });
  CHECK(contains(message, "/model/classifier.bias"));
  CHECK(contains(message, "is not a parameter"));

  // One tensor more: the checkpoint lacks it.
  auto more = flat_tensors(f.flat->layout);
  more.push_back(FlatTensor{"bert.embeddings.position_ids", {40}, f.flat->layout.numel()});
  FlatPart bigger;
  bigger.params = torch::zeros({f.flat->layout.numel() + 40});
  message = error_of([&] { read_train_part(reader, more, bigger); });
  CHECK(contains(message, "has no tensor /model/bert.embeddings.position_ids"));
}

TEST_CASE("load_checkpoint_model: the same logits, vocabulary and state on every rank") {
  Fixture& f = fixture();
  const CheckpointModel loaded = load_checkpoint_model(f.path, MPI_COMM_WORLD);
  CHECK(loaded.config.to_json() == f.config.to_json());
  CHECK(loaded.config.id2label == std::vector<std::string>{"negative", "neutral", "positive"});
  CHECK(loaded.vocab_text == kVocab);
  CHECK(loaded.lowercase);
  CHECK(loaded.state.step == 123);
  CHECK_FALSE(loaded.model->is_training());

  const at::Tensor input_ids = torch::tensor({{2, 5, 6, 7, 8, 5, 9, 11, 3}, {2, 6, 10, 7, 3, 9, 3, 0, 0}}, torch::kLong);
  const at::Tensor token_type_ids = torch::tensor({{0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 1, 1, 0, 0}}, torch::kLong);
  const at::Tensor mask = torch::tensor({{1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 0, 0}}, torch::kLong);
  torch::NoGradGuard no_grad;
  const at::Tensor expected = f.model->forward(input_ids, token_type_ids, mask);
  const at::Tensor got = loaded.model->forward(input_ids, token_type_ids, mask);
  // Same fp32 weights, same ops, same process: bit-identical, not just close.
  CHECK(all_ranks(torch::equal(expected, got)));
  CHECK(expected.abs().max().item<float>() > 0.1f);  // O(1) logits: the comparison means something

  // The stored vocabulary makes a working tokenizer.
  TokenizerOptions options;
  options.lowercase = loaded.lowercase;
  const Tokenizer tokenizer = Tokenizer::from_vocab_text(loaded.vocab_text, options, f.path + " (vocab_text)");
  const Encoding encoding = tokenizer.encode("The cats sat", std::string_view("on the mat."), 0);
  CHECK(encoding.input_ids == std::vector<int32_t>{2, 5, 6, 10, 7, 3, 8, 5, 9, 11, 3});
  CHECK(tokenizer.vocab_path() == f.path + " (vocab_text)");
  const std::string message = error_of([&] { Tokenizer::from_vocab_text("[PAD]\n[CLS]\n", options, "ckpt.h5 (vocab_text)"); });
  CHECK(contains(message, "ckpt.h5 (vocab_text)"));
  CHECK(contains(message, "[UNK]"));
}

TEST_CASE("errors: not a training checkpoint, missing file, ranks disagreeing on optimizer state") {
  Fixture& f = fixture();
  // A plain shardtrain checkpoint without "kind".
  const std::string plain = checkpoint_path(f.dir, 3);
  {
    CheckpointWriter writer(plain, MPI_COMM_WORLD);
    writer.set_attribute("step", 1);
    writer.commit();
  }
  {
    CheckpointReader reader(plain, MPI_COMM_WORLD);
    const std::string message = error_of([&] { read_train_state(reader); });
    CHECK(contains(message, plain));
    CHECK(contains(message, "not a training checkpoint"));
  }
  const std::string missing = f.dir + "/nope.h5";
  std::string message = error_of([&] { load_checkpoint_model(missing, MPI_COMM_WORLD); });
  CHECK(contains(message, missing));
  CHECK(contains(message, "does not exist"));

  // Rank 0 passes optimizer state, the others do not: Error on every rank
  // (instead of mismatched collectives), and no file appears.
  const std::string odd = checkpoint_path(f.dir, 4);
  const int64_t n = f.flat->layout.numel();
  const auto cuts = even_cuts(n, world_size());
  const int r = world_rank();
  message = error_of([&] {
    write_train_checkpoint(odd, flat_tensors(f.flat->layout), part_of(*f.flat, cuts[r], cuts[r + 1], r == 0),
                           sample_state(), MPI_COMM_WORLD);
  });
  CHECK(contains(message, "optimizer state"));
  CHECK(all_ranks(contains(message, odd)));
  struct stat info {};
  CHECK(stat(odd.c_str(), &info) != 0);
}

TEST_CASE("is_checkpoint_file tells checkpoints from folders and other files") {
  Fixture& f = fixture();
  CHECK(is_checkpoint_file(f.path));
  CHECK_FALSE(is_checkpoint_file(f.dir));
  CHECK_FALSE(is_checkpoint_file(f.dir + "/missing.h5"));
  const std::string text = f.dir + "/text_" + std::to_string(world_rank()) + ".h5";
  {
    std::ofstream out(text);
    out << "\x89HDF\r\n";  // a truncated signature
  }
  CHECK_FALSE(is_checkpoint_file(text));
}

TEST_CASE("train_rng_seed: deterministic and distinct over neighbouring inputs") {
  std::set<uint64_t> seen, seen_low32;
  size_t count = 0;
  for (int64_t seed : {0, 1, 42})
    for (int64_t step = 0; step < 6; ++step)
      for (int64_t micro = 0; micro < 4; ++micro)
        for (int rank = 0; rank < 8; ++rank) {
          const uint64_t value = train_rng_seed(seed, step, micro, rank);
          CHECK(value == train_rng_seed(seed, step, micro, rank));
          seen.insert(value);
          seen_low32.insert(value & 0xffffffffULL);  // all a CPU mt19937 keeps of its seed
          ++count;
        }
  CHECK(seen.size() == count);
  CHECK(seen_low32.size() == count);
  // Swapping fields gives other seeds (no symmetric mixing).
  CHECK(train_rng_seed(42, 1, 2, 3) != train_rng_seed(42, 2, 1, 3));
  CHECK(train_rng_seed(42, 1, 2, 3) != train_rng_seed(42, 3, 2, 1));
}

TEST_CASE("train checkpoint: clean up") { remove_shared_dir(fixture().dir); }

}  // namespace train_checkpoint_mpi_test
