// The training state of a checkpoint (everything but the tensors) and its
// root attributes, as pure data and functions: no MPI, HDF5 or torch, so that
// a hostile checkpoint's attributes are parsed, and fuzzed, in one process
// (tests/fuzz/fuzz_checkpoint.cpp). train/train_checkpoint.h does the I/O.
//
//   TrainAttributes attributes = ...;                 // read from the file
//   TrainState state = parse_train_state(attributes, "runs/x/checkpoint_000100.h5");
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace shardtrain {

// Value of the "kind" attribute of a training checkpoint.
inline constexpr const char* kTrainCheckpointKind = "shardtrain-train-checkpoint";

// Everything but the tensors. Attribute names are the member names.
struct TrainState {
  int64_t step = 0;              // optimizer updates done
  int64_t epoch = 0;             // sampler epoch to continue in
  int64_t batches_consumed = 0;  // global micro-batches of `epoch` already trained on
  int64_t seed = 42;
  int64_t num_training_steps = 0;
  int64_t warmup_steps = 0;
  double base_lr = 0;
  int64_t world_size = 1;        // of the job that wrote it
  int64_t global_batch_size = 0; // examples per optimizer step (batch x ranks x accumulation)
  std::string strategy = "ddp";
  std::string config_toml;       // resolved run config
  std::string model_config_json; // the model's HF config.json (num_labels, id2label, dropout, ...)
  std::string vocab_text;        // vocab.txt content (WordPiece; empty for BPE)
  int64_t lowercase = 0;         // tokenizer lowercases (uncased vocabulary)
  // Tokenizer::saved_files(): the tokenizer's files as one JSON object
  // (data/tokenizer.h). Empty in checkpoints written before it existed: those
  // rebuild the tokenizer from vocab_text and lowercase.
  std::string tokenizer_files;
  // LoRA runs (docs/DESIGN.md, "LoRA"): the adapter's settings (LoraSpec::to_json;
  // empty: full fine-tuning, /model holds every parameter) and the frozen
  // base's identity: its folder (empty: random init from `seed`) and
  // train/lora_run.h's frozen_base_sha256.
  std::string lora_json;
  std::string base_model_path;
  std::string base_model_sha256;
  std::string metrics_json = "{}";  // {"eval_f1": ..., ...} of the report this checkpoint belongs to
  // Training-loss accumulator since the last report (so a resumed run reports
  // the same train_loss), and wall time trained so far.
  double loss_sum = 0;
  int64_t loss_count = 0;
  double train_seconds = 0;
  // The progress log's window (report/progress.h, ProgressWindow): the sums of
  // the steps since the last logged row, so the first row after a resume
  // averages what an uninterrupted run's does. Older checkpoints read as 0
  // (the window restarts at the resume).
  double log_window_loss_sum = 0;
  double log_window_grad_norm_sum = 0;
  int64_t log_window_steps = 0;
  // Mixed precision (fp16): steps skipped for non-finite gradients (the
  // optimizer's step count is step - skipped_steps; the learning rate follows
  // it), and the loss scaler. loss_scale 0: no loss scaling. Checkpoints
  // written before these existed read as 0.
  int64_t skipped_steps = 0;
  double loss_scale = 0;
  int64_t loss_scale_good_steps = 0;
  int64_t loss_scale_hysteresis_left = 0;
  // Early stopping (train/early_stopping.h): the best score (NaN: none yet)
  // and its step, evaluations in a row without improvement, and whether
  // training stopped early (1) and why. Older checkpoints read as none / 0.
  double early_stopping_best = std::nan("");
  int64_t early_stopping_best_step = 0;
  int64_t early_stopping_bad_evals = 0;
  int64_t early_stopped = 0;
  std::string stop_reason;
};

// One root attribute as the file holds it, by name.
using TrainAttribute = std::variant<int64_t, double, std::string>;
using TrainAttributes = std::map<std::string, TrainAttribute>;

enum class TrainAttributeType { kInteger, kFloat, kString };

struct TrainAttributeField {
  const char* name;
  TrainAttributeType type;
};

// Every attribute a training checkpoint has ("kind" first, then TrainState's
// members), in the order they are written.
const std::vector<TrainAttributeField>& train_state_fields();

// What write_train_checkpoint() stores for `state`, "kind" included.
TrainAttributes train_state_attributes(const TrainState& state);

// The state from a checkpoint's attributes. Error naming `path` when "kind" is
// missing or not kTrainCheckpointKind, an attribute is missing or of another
// type, or a value is out of range (a negative step, epoch, position or count,
// a world size below 1, skipped steps above the step). Checkpoints written
// before the fp16 and early-stopping attributes existed read them as none / 0.
TrainState parse_train_state(const TrainAttributes& attributes, const std::string& path);

}  // namespace shardtrain
