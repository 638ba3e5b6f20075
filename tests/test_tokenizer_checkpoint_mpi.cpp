// A tokenizer survives a training checkpoint (train/checkpoint_model.h):
// the BPE tokenizer's files travel in the tokenizer_files attribute and
// rebuild the same tokenizer on every rank (a SentencePiece model as base64);
// a checkpoint without the
// attribute (written before it existed) still loads its WordPiece vocab_text.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include <string>
#include <vector>

#include "shardtrain/data/tokenizer.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/train/checkpoint_model.h"
#include "shardtrain/train/train_checkpoint.h"
#include "support/mpi_ranks.h"

namespace {

const std::string kCkptTokSourceDir = SHARDTRAIN_SOURCE_DIR;

// Writes a checkpoint with a 4-element model split over the ranks and `state`.
std::string ckpt_tok_write(const std::string& dir, int64_t index, const shardtrain::TrainState& state) {
  using namespace shardtrain;
  const std::string path = checkpoint_path(dir, index);
  const int rank = shardtrain_test::world_rank(), size = shardtrain_test::world_size();
  const std::vector<FlatTensor> layout = {FlatTensor{"w", {4 * size}, 0}};
  FlatPart part;
  part.begin = 4 * rank;
  part.params = at::arange(4 * rank, 4 * rank + 4, at::TensorOptions().dtype(at::kFloat));
  write_train_checkpoint(path, layout, part, state, MPI_COMM_WORLD);
  return path;
}

}  // namespace

TEST_CASE("checkpoint round trip: BPE and SentencePiece tokenizer_files, and old checkpoints with vocab_text only") {
  using namespace shardtrain;
  const std::string dir = shardtrain_test::make_shared_temp_dir("tokenizer_ckpt");
  const Tokenizer roberta = Tokenizer::from_model_dir(kCkptTokSourceDir + "/data/vocab/roberta-base");
  TrainState state;
  state.vocab_text = roberta.vocab_text();
  state.tokenizer_files = roberta.saved_files();
  const std::string path = ckpt_tok_write(dir, 1, state);
  {
    CheckpointReader reader(path, MPI_COMM_WORLD);
    const TrainState read = read_train_state(reader);
    CHECK(read.tokenizer_files == roberta.saved_files());
    const Tokenizer loaded = checkpoint_tokenizer(read, path);
    CHECK(std::string(loaded.type()) == "bpe");
    CHECK(loaded.vocab_path() == path + " (attribute tokenizer_files): tokenizer.json");
    const std::string a = "He said the foodservice pie business doesn't fit the company's long-term growth strategy.";
    const std::string b = "\"The foodservice pie business does not fit our long-term growth strategy.";
    CHECK(loaded.encode(a, std::string_view(b), 0).input_ids == roberta.encode(a, std::string_view(b), 0).input_ids);
    CHECK(loaded.encode(a, std::string_view(b), 0).input_ids.front() == 0);
    CHECK(loaded.pad_id() == 1);
  }

#if !defined(SHARDTRAIN_SANITIZED)  // no SentencePiece module there (src/data/tokenizer/sentencepiece_module.h)
  // A SentencePiece model (binary) travels base64 in the same attribute.
  const Tokenizer xlmr = Tokenizer::from_model_dir(kCkptTokSourceDir + "/data/vocab/sib200-xlmr-8k");
  TrainState spm_state;
  spm_state.tokenizer_files = xlmr.saved_files();
  const std::string spm_path = ckpt_tok_write(dir, 3, spm_state);
  {
    CheckpointReader reader(spm_path, MPI_COMM_WORLD);
    const Tokenizer loaded = checkpoint_tokenizer(read_train_state(reader), spm_path);
    CHECK(std::string(loaded.type()) == "sentencepiece");
    CHECK(loaded.vocab_size() == 8002);
    CHECK(loaded.vocab_path() == spm_path + " (attribute tokenizer_files): sentencepiece.bpe.model");
    const std::string zh = "\xE5\x9C\x9F\xE8\x80\xB3\xE5\x85\xB6\xE4\xB8\x89\xE9\x9D\xA2\xE7\x8E\xAF\xE6\xB5\xB7";
    CHECK(loaded.encode(zh, std::string_view("Turkey is encircled by seas"), 0).input_ids ==
          xlmr.encode(zh, std::string_view("Turkey is encircled by seas"), 0).input_ids);
  }
#endif

  // Before tokenizer_files: vocab_text + lowercase.
  TrainState old;
  old.vocab_text = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\n";
  old.lowercase = 1;
  const std::string old_path = ckpt_tok_write(dir, 2, old);
  {
    CheckpointReader reader(old_path, MPI_COMM_WORLD);
    const TrainState read = read_train_state(reader);
    CHECK(read.tokenizer_files.empty());
    const Tokenizer loaded = checkpoint_tokenizer(read, old_path);
    CHECK(std::string(loaded.type()) == "wordpiece");
    CHECK(loaded.options().lowercase);
    CHECK(loaded.encode("The CAT", std::nullopt, 0).input_ids == std::vector<int32_t>{2, 4, 5, 3});
  }
  shardtrain_test::remove_shared_dir(dir);
}
