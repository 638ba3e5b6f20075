// The families' table, built from model/family_list.h (docs/DESIGN.md,
// "Model families").
#include <cstring>

#include "shardtrain/model/family_list.h"
#include "shardtrain/model/family_spec.h"

namespace shardtrain {

#define SHARDTRAIN_DECLARE_FAMILY(id, function) const FamilySpec& function();
SHARDTRAIN_FAMILIES(SHARDTRAIN_DECLARE_FAMILY)
#undef SHARDTRAIN_DECLARE_FAMILY

const std::vector<const FamilySpec*>& all_families() {
#define SHARDTRAIN_FAMILY_ENTRY(id, function) &function(),
  static const std::vector<const FamilySpec*> families = {SHARDTRAIN_FAMILIES(SHARDTRAIN_FAMILY_ENTRY)};
#undef SHARDTRAIN_FAMILY_ENTRY
  return families;
}

const FamilySpec& family_spec(ModelFamily family) {
  // The list's order is ModelFamily's (both come from SHARDTRAIN_FAMILIES).
  return *all_families().at(static_cast<size_t>(family));
}

const FamilySpec* family_of_model_type(const std::string& name) {
  for (const FamilySpec* spec : all_families())
    for (const ModelType& type : spec->model_types)
      if (name == type.name) return spec;
  return nullptr;
}

std::string model_type_names() {
  std::string names;
  for (const FamilySpec* spec : all_families())
    for (const ModelType& type : spec->model_types) names += std::string(names.empty() ? "" : ", ") + type.name;
  return names;
}

const char* family_name(ModelFamily family) { return family_spec(family).name; }

const char* FamilySpec::key(const char* field) const {
  for (const KeyName& k : key_names)
    if (std::strcmp(k.field, field) == 0) return k.key;
  return field;
}

const ModelType& FamilySpec::model_type(const std::string& name) const {
  for (const ModelType& type : model_types)
    if (name == type.name) return type;
  return model_types.front();
}

LayerSpec LayerSpec::common(const EncoderConfig& c) {
  LayerSpec s;
  s.num_heads = c.num_attention_heads;
  s.activation = c.hidden_act;
  s.norm_eps = c.layer_norm_eps;
  s.attention_probs_dropout = c.attention_probs_dropout_prob;
  return s;
}

LayerSpec LayerSpec::of(const EncoderConfig& c, int64_t layer) { return family_spec(c.family).layer(c, layer); }

}  // namespace shardtrain
