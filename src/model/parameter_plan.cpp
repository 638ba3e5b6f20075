// The parameter plan of any family: its file lists the tensors
// (FamilySpec::plan, src/model/families/; docs/DESIGN.md, "Model families").
#include "shardtrain/model/parameter_plan.h"

#include "model/families/plan_builder.h"
#include "shardtrain/model/family_spec.h"

namespace shardtrain {

int64_t ParameterSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParameterSpec> parameter_plan(const EncoderConfig& config) {
  detail::PlanBuilder b(config);
  family_spec(config.family).plan(config, b);
  return b.take();
}

int64_t count_trainable(const std::vector<ParameterSpec>& plan) {
  int64_t n = 0;
  for (const auto& p : plan)
    if (p.trainable) n += p.numel();
  return n;
}

int64_t EncoderConfig::num_parameters() const { return count_trainable(parameter_plan(*this)); }

}  // namespace shardtrain
