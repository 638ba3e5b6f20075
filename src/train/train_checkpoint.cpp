#include "shardtrain/train/train_checkpoint.h"

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const FlatPart& part, const TrainState& state, MPI_Comm comm) {
  write_train_checkpoint(final_path, layout, std::vector<FlatPart>{part}, state, comm);
}

void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const std::vector<FlatPart>& parts, const TrainState& state, MPI_Comm comm) {
  CheckpointWriter writer(final_path, comm);
  write_flat_state(writer, layout, parts);
  writer.set_attribute("kind", kTrainCheckpointKind);
  writer.set_attribute("step", state.step);
  writer.set_attribute("epoch", state.epoch);
  writer.set_attribute("batches_consumed", state.batches_consumed);
  writer.set_attribute("seed", state.seed);
  writer.set_attribute("num_training_steps", state.num_training_steps);
  writer.set_attribute("warmup_steps", state.warmup_steps);
  writer.set_attribute("base_lr", state.base_lr);
  writer.set_attribute("world_size", state.world_size);
  writer.set_attribute("global_batch_size", state.global_batch_size);
  writer.set_attribute("strategy", state.strategy);
  writer.set_attribute("config_toml", state.config_toml);
  writer.set_attribute("model_config_json", state.model_config_json);
  writer.set_attribute("vocab_text", state.vocab_text);
  writer.set_attribute("lowercase", state.lowercase);
  writer.set_attribute("metrics_json", state.metrics_json);
  writer.set_attribute("loss_sum", state.loss_sum);
  writer.set_attribute("loss_count", state.loss_count);
  writer.set_attribute("train_seconds", state.train_seconds);
  writer.set_attribute("skipped_steps", state.skipped_steps);
  writer.set_attribute("loss_scale", state.loss_scale);
  writer.set_attribute("loss_scale_good_steps", state.loss_scale_good_steps);
  writer.set_attribute("loss_scale_hysteresis_left", state.loss_scale_hysteresis_left);
  writer.set_attribute("early_stopping_best", state.early_stopping_best);
  writer.set_attribute("early_stopping_best_step", state.early_stopping_best_step);
  writer.set_attribute("early_stopping_bad_evals", state.early_stopping_bad_evals);
  writer.set_attribute("early_stopped", state.early_stopped);
  writer.set_attribute("stop_reason", state.stop_reason);
  writer.commit();
}

std::vector<std::string> resume_data_order_warnings(const TrainState& state, bool group_by_length) {
  if (state.batches_consumed <= 0) return {};
  // config_to_toml writes "group_by_length = true|false" under [data] (the only key of that name).
  const std::string key = "\ngroup_by_length = ";
  const size_t at = state.config_toml.find(key);
  if (at == std::string::npos) return {};
  const bool stored = state.config_toml.compare(at + key.size(), 4, "true") == 0;
  if (stored == group_by_length) return {};
  const char* was = stored ? "true" : "false";
  return {str_format("data.group_by_length was %s when this checkpoint was written (step %lld, %lld batches into epoch "
                     "%lld) and is %s now: the rest of the epoch is batched in another order, so some of its rows are "
                     "trained on twice and others not at all; resume with data.group_by_length = %s to keep the "
                     "epoch exact",
                     was, static_cast<long long>(state.step), static_cast<long long>(state.batches_consumed),
                     static_cast<long long>(state.epoch), group_by_length ? "true" : "false", was)};
}

TrainState read_train_state(const CheckpointReader& reader) {
  const std::string& path = reader.path();
  if (!reader.has_attribute("kind"))
    throw Error(path + " is a shardtrain checkpoint but not a training checkpoint (no 'kind' attribute)");
  const std::string kind = reader.string_attribute("kind");
  if (kind != kTrainCheckpointKind)
    throw Error(path + " is a checkpoint of kind '" + kind + "', not a training checkpoint ('" +
                kTrainCheckpointKind + "')");
  TrainState state;
  state.step = reader.int_attribute("step");
  state.epoch = reader.int_attribute("epoch");
  state.batches_consumed = reader.int_attribute("batches_consumed");
  state.seed = reader.int_attribute("seed");
  state.num_training_steps = reader.int_attribute("num_training_steps");
  state.warmup_steps = reader.int_attribute("warmup_steps");
  state.base_lr = reader.double_attribute("base_lr");
  state.world_size = reader.int_attribute("world_size");
  state.global_batch_size = reader.int_attribute("global_batch_size");
  state.strategy = reader.string_attribute("strategy");
  state.config_toml = reader.string_attribute("config_toml");
  state.model_config_json = reader.string_attribute("model_config_json");
  state.vocab_text = reader.string_attribute("vocab_text");
  state.lowercase = reader.int_attribute("lowercase");
  state.metrics_json = reader.string_attribute("metrics_json");
  state.loss_sum = reader.double_attribute("loss_sum");
  state.loss_count = reader.int_attribute("loss_count");
  state.train_seconds = reader.double_attribute("train_seconds");
  if (reader.has_attribute("skipped_steps")) {
    state.skipped_steps = reader.int_attribute("skipped_steps");
    state.loss_scale = reader.double_attribute("loss_scale");
    state.loss_scale_good_steps = reader.int_attribute("loss_scale_good_steps");
    state.loss_scale_hysteresis_left = reader.int_attribute("loss_scale_hysteresis_left");
  }
  if (reader.has_attribute("early_stopped")) {
    state.early_stopping_best = reader.double_attribute("early_stopping_best");
    state.early_stopping_best_step = reader.int_attribute("early_stopping_best_step");
    state.early_stopping_bad_evals = reader.int_attribute("early_stopping_bad_evals");
    state.early_stopped = reader.int_attribute("early_stopped");
    state.stop_reason = reader.string_attribute("stop_reason");
  }
  if (state.skipped_steps < 0 || state.skipped_steps > state.step)
    throw Error(path + ": attribute skipped_steps = " + std::to_string(state.skipped_steps) +
                " is not between 0 and the step (" + std::to_string(state.step) + ")");
  return state;
}

void read_train_part(CheckpointReader& reader, const std::vector<FlatTensor>& layout, FlatPart& part) {
  std::vector<FlatPart> parts{part};  // shares part's tensors
  read_flat_state(reader, layout, parts, part.exp_avg.defined());
}

void read_train_parts(CheckpointReader& reader, const std::vector<FlatTensor>& layout, std::vector<FlatPart>& parts,
                      bool with_optimizer) {
  read_flat_state(reader, layout, parts, with_optimizer);
}

}  // namespace shardtrain
