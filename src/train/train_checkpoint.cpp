#include "shardtrain/train/train_checkpoint.h"

#include <variant>

#include "shardtrain/core/check.h"

namespace shardtrain {

void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const FlatPart& part, const TrainState& state, MPI_Comm comm) {
  write_train_checkpoint(final_path, layout, std::vector<FlatPart>{part}, state, comm);
}

void write_train_checkpoint(const std::string& final_path, const std::vector<FlatTensor>& layout,
                            const std::vector<FlatPart>& parts, const TrainState& state, MPI_Comm comm) {
  CheckpointWriter writer(final_path, comm);
  write_flat_state(writer, layout, parts);
  const TrainAttributes attributes = train_state_attributes(state);
  for (const TrainAttributeField& field : train_state_fields())
    std::visit([&](const auto& value) { writer.set_attribute(field.name, value); }, attributes.at(field.name));
  writer.commit();
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
