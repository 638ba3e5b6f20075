#include "shardtrain/train/train_checkpoint.h"

#include <variant>

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
  // The attributes first (the config, the tokenizer's files: up to a few MB of
  // metadata), so that their file space lies inside the blocks the groups
  // reserve from offset 0, and the flush at commit needs no new block on a
  // full disk (docs/DESIGN.md, "Errors and hangs").
  const TrainAttributes attributes = train_state_attributes(state);
  for (const TrainAttributeField& field : train_state_fields())
    std::visit([&](const auto& value) { writer.set_attribute(field.name, value); }, attributes.at(field.name));
  write_flat_state(writer, layout, parts);
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
  // The I/O half: fetch what the file has, typed as each field expects
  // (the reader's Error names a wrong type); parse_train_state() judges it.
  TrainAttributes attributes;
  for (const TrainAttributeField& field : train_state_fields()) {
    if (!reader.has_attribute(field.name)) continue;
    switch (field.type) {
      case TrainAttributeType::kInteger: attributes[field.name] = reader.int_attribute(field.name); break;
      case TrainAttributeType::kFloat: attributes[field.name] = reader.double_attribute(field.name); break;
      case TrainAttributeType::kString: attributes[field.name] = reader.string_attribute(field.name); break;
    }
  }
  return parse_train_state(attributes, reader.path());
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
