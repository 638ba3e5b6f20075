// Pure on purpose (train/train_state.h): no MPI, HDF5 or torch include belongs here.
#include "shardtrain/train/train_state.h"

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

using Type = TrainAttributeType;

// Reads typed values out of an attribute map, naming the file in every Error.
class TrainAttributeReader {
 public:
  TrainAttributeReader(const TrainAttributes& attributes, const std::string& path)
      : attributes_(attributes), path_(path) {}
  bool has(const char* name) const { return attributes_.count(name) != 0; }
  int64_t integer(const char* name) const { return get<int64_t>(name, "an integer"); }
  double real(const char* name) const { return get<double>(name, "a floating-point number"); }
  std::string text(const char* name) const { return get<std::string>(name, "a string"); }
  // An integer that must be at least `lowest`.
  int64_t at_least(const char* name, int64_t lowest) const {
    const int64_t value = integer(name);
    if (value < lowest)
      throw Error(path_ + ": attribute " + name + " = " + std::to_string(value) + " is below " +
                  std::to_string(lowest) + "; the checkpoint is damaged: use another one");
    return value;
  }

 private:
  template <class T>
  T get(const char* name, const char* kind) const {
    const auto found = attributes_.find(name);
    if (found == attributes_.end()) throw Error(path_ + ": checkpoint has no attribute '" + name + "'");
    if (const T* value = std::get_if<T>(&found->second)) return *value;
    throw Error(path_ + ": attribute '" + name + "' is not " + kind);
  }
  const TrainAttributes& attributes_;
  const std::string& path_;
};

}  // namespace

const std::vector<TrainAttributeField>& train_state_fields() {
  static const std::vector<TrainAttributeField> fields = {
      {"kind", Type::kString},
      {"step", Type::kInteger},
      {"epoch", Type::kInteger},
      {"batches_consumed", Type::kInteger},
      {"seed", Type::kInteger},
      {"num_training_steps", Type::kInteger},
      {"warmup_steps", Type::kInteger},
      {"base_lr", Type::kFloat},
      {"world_size", Type::kInteger},
      {"global_batch_size", Type::kInteger},
      {"strategy", Type::kString},
      {"config_toml", Type::kString},
      {"model_config_json", Type::kString},
      {"vocab_text", Type::kString},
      {"lowercase", Type::kInteger},
      {"tokenizer_files", Type::kString},
      {"metrics_json", Type::kString},
      {"lora_json", Type::kString},
      {"base_model_path", Type::kString},
      {"base_model_sha256", Type::kString},
      {"loss_sum", Type::kFloat},
      {"loss_count", Type::kInteger},
      {"train_seconds", Type::kFloat},
      {"skipped_steps", Type::kInteger},
      {"loss_scale", Type::kFloat},
      {"loss_scale_good_steps", Type::kInteger},
      {"loss_scale_hysteresis_left", Type::kInteger},
      {"early_stopping_best", Type::kFloat},
      {"early_stopping_best_step", Type::kInteger},
      {"early_stopping_bad_evals", Type::kInteger},
      {"early_stopped", Type::kInteger},
      {"stop_reason", Type::kString},
      {"log_window_loss_sum", Type::kFloat},
      {"log_window_grad_norm_sum", Type::kFloat},
      {"log_window_steps", Type::kInteger},
  };
  return fields;
}

TrainAttributes train_state_attributes(const TrainState& s) {
  return {{"kind", std::string(kTrainCheckpointKind)},
          {"step", s.step},
          {"epoch", s.epoch},
          {"batches_consumed", s.batches_consumed},
          {"seed", s.seed},
          {"num_training_steps", s.num_training_steps},
          {"warmup_steps", s.warmup_steps},
          {"base_lr", s.base_lr},
          {"world_size", s.world_size},
          {"global_batch_size", s.global_batch_size},
          {"strategy", s.strategy},
          {"config_toml", s.config_toml},
          {"model_config_json", s.model_config_json},
          {"vocab_text", s.vocab_text},
          {"lowercase", s.lowercase},
          {"tokenizer_files", s.tokenizer_files},
          {"metrics_json", s.metrics_json},
          {"lora_json", s.lora_json},
          {"base_model_path", s.base_model_path},
          {"base_model_sha256", s.base_model_sha256},
          {"loss_sum", s.loss_sum},
          {"loss_count", s.loss_count},
          {"train_seconds", s.train_seconds},
          {"skipped_steps", s.skipped_steps},
          {"loss_scale", s.loss_scale},
          {"loss_scale_good_steps", s.loss_scale_good_steps},
          {"loss_scale_hysteresis_left", s.loss_scale_hysteresis_left},
          {"early_stopping_best", s.early_stopping_best},
          {"early_stopping_best_step", s.early_stopping_best_step},
          {"early_stopping_bad_evals", s.early_stopping_bad_evals},
          {"early_stopped", s.early_stopped},
          {"stop_reason", s.stop_reason},
          {"log_window_loss_sum", s.log_window_loss_sum},
          {"log_window_grad_norm_sum", s.log_window_grad_norm_sum},
          {"log_window_steps", s.log_window_steps}};
}

TrainState parse_train_state(const TrainAttributes& attributes, const std::string& path) {
  const TrainAttributeReader in(attributes, path);
  if (!in.has("kind"))
    throw Error(path + " is a shardtrain checkpoint but not a training checkpoint (no 'kind' attribute)");
  const std::string kind = in.text("kind");
  if (kind != kTrainCheckpointKind)
    throw Error(path + " is a checkpoint of kind '" + kind + "', not a training checkpoint ('" +
                kTrainCheckpointKind + "')");
  TrainState state;
  state.step = in.at_least("step", 0);
  state.epoch = in.at_least("epoch", 0);
  state.batches_consumed = in.at_least("batches_consumed", 0);
  state.seed = in.integer("seed");
  state.num_training_steps = in.at_least("num_training_steps", 0);
  state.warmup_steps = in.at_least("warmup_steps", 0);
  state.base_lr = in.real("base_lr");
  state.world_size = in.at_least("world_size", 1);
  state.global_batch_size = in.at_least("global_batch_size", 0);
  state.strategy = in.text("strategy");
  state.config_toml = in.text("config_toml");
  state.model_config_json = in.text("model_config_json");
  state.vocab_text = in.text("vocab_text");
  state.lowercase = in.integer("lowercase");
  if (in.has("tokenizer_files")) state.tokenizer_files = in.text("tokenizer_files");
  state.metrics_json = in.text("metrics_json");
  if (in.has("lora_json")) {  // checkpoints written before LoRA existed are full fine-tuning
    state.lora_json = in.text("lora_json");
    state.base_model_path = in.text("base_model_path");
    state.base_model_sha256 = in.text("base_model_sha256");
  }
  state.loss_sum = in.real("loss_sum");
  state.loss_count = in.at_least("loss_count", 0);
  state.train_seconds = in.real("train_seconds");
  if (in.has("skipped_steps")) {
    state.skipped_steps = in.integer("skipped_steps");
    state.loss_scale = in.real("loss_scale");
    state.loss_scale_good_steps = in.integer("loss_scale_good_steps");
    state.loss_scale_hysteresis_left = in.integer("loss_scale_hysteresis_left");
  }
  if (in.has("early_stopped")) {
    state.early_stopping_best = in.real("early_stopping_best");
    state.early_stopping_best_step = in.integer("early_stopping_best_step");
    state.early_stopping_bad_evals = in.at_least("early_stopping_bad_evals", 0);
    state.early_stopped = in.integer("early_stopped");
    state.stop_reason = in.text("stop_reason");
  }
  if (in.has("log_window_steps")) {
    state.log_window_loss_sum = in.real("log_window_loss_sum");
    state.log_window_grad_norm_sum = in.real("log_window_grad_norm_sum");
    state.log_window_steps = in.at_least("log_window_steps", 0);
    if (state.log_window_steps > state.step)
      throw Error(path + ": attribute log_window_steps = " + std::to_string(state.log_window_steps) +
                  " is above the step (" + std::to_string(state.step) + "); the checkpoint is damaged: use another one");
  }
  if (state.skipped_steps < 0 || state.skipped_steps > state.step)
    throw Error(path + ": attribute skipped_steps = " + std::to_string(state.skipped_steps) +
                " is not between 0 and the step (" + std::to_string(state.step) + ")");
  return state;
}

}  // namespace shardtrain
