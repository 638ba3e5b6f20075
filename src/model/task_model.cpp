// TaskModel: parameters from the family's plan, the unit structure
// the strategies see, and the padded and packed forwards (docs/DESIGN.md,
// "Model families"). Shapes: see model/encoder.h.
#include "shardtrain/model/task_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

#include "model/task_model_impl.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/memory.h"
#include "shardtrain/model/activation_checkpoint.h"
#include "shardtrain/tasks/task_spec.h"

namespace shardtrain {

namespace {

// splitmix64: spreads (seed, name) into independent generator seeds.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// DistilBERT's create_sinusoidal_embeddings: even columns sin, odd cos of
// pos / 10000^(2 (j / 2) / dim), computed in float64 as numpy does there.
at::Tensor sinusoidal_table(int64_t positions, int64_t dim) {
  const at::Tensor pos = at::arange(positions, at::TensorOptions().dtype(at::kDouble)).unsqueeze(1);
  const at::Tensor j = at::arange(dim, at::TensorOptions().dtype(at::kLong));
  const at::Tensor exponent = (j.div(2, "floor") * 2).to(at::kDouble) / static_cast<double>(dim);
  const at::Tensor angles = pos / at::pow(10000.0, exponent).unsqueeze(0);  // [P, dim]
  at::Tensor table = at::empty({positions, dim}, at::TensorOptions().dtype(at::kDouble));
  table.slice(1, 0, dim, 2).copy_(angles.slice(1, 0, dim, 2).sin());
  table.slice(1, 1, dim, 2).copy_(angles.slice(1, 1, dim, 2).cos());
  return table.to(at::kFloat);
}

}  // namespace

namespace detail {

// HF _init_weights for one parameter, from its own generator.
void init_parameter(const ParameterSpec& spec, at::Tensor& param, uint64_t seed) {
  switch (spec.init) {
    case InitKind::kOnes: param.fill_(1.0); return;
    case InitKind::kZeros: param.zero_(); return;
    case InitKind::kSinusoidal: param.copy_(sinusoidal_table(spec.shape[0], spec.shape[1])); return;
    case InitKind::kNormal:
    case InitKind::kTruncatedNormal:
    case InitKind::kKaimingUniform: break;
  }
  // One generator per parameter, seeded from (seed, name): a parameter's init
  // does not depend on which others are initialised or in what order.
  auto generator = at::detail::createCPUGenerator(mix(seed ^ mix(name_hash(spec.name))));
  at::Tensor values = at::empty(spec.shape, at::TensorOptions().dtype(at::kFloat));
  if (spec.init == InitKind::kKaimingUniform) {
    // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / 6), bound sqrt(3) gain / sqrt(fan_in) = 1 / sqrt(fan_in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));
    param.copy_(values.uniform_(-bound, bound, generator));
    return;
  }
  values.normal_(0.0, spec.init_std, generator);
  if (spec.init == InitKind::kTruncatedNormal) {
    // torch.nn.init.trunc_normal_ draws by inverse CDF; redrawing the values
    // outside the bounds gives the same distribution.
    const double bound = spec.init_cutoff * spec.init_std;
    for (int round = 0; round < 64; ++round) {
      const at::Tensor outside = values.abs().gt(bound);
      const int64_t count = outside.sum().item<int64_t>();
      if (count == 0) break;
      at::Tensor redraw = at::empty({count}, values.options());
      redraw.normal_(0.0, spec.init_std, generator);
      values.masked_scatter_(outside, redraw);
    }
    values.clamp_(-bound, bound);
  }
  if (spec.padding_row >= 0 && spec.zero_padding_row) values[spec.padding_row].zero_();
  param.copy_(values);
}

}  // namespace detail

at::Tensor fixed_tensor(const ParameterSpec& spec) {
  TORCH_CHECK(spec.init == InitKind::kSinusoidal, "fixed_tensor: ", spec.name, " is not a fixed tensor");
  return sinusoidal_table(spec.shape[0], spec.shape[1]);
}

TaskModel::TaskModel(const EncoderConfig& config) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.config = config;
  m.config.validate();
  m.plan = parameter_plan(m.config);
  // Sizes come from files (config.json, a checkpoint's attribute): a model
  // that cannot fit is refused before LibTorch's allocator fails on it.
  const int64_t total = count_trainable(m.plan);
  require_memory(4.0 * static_cast<double>(total),
                 str_format("the %s model (%lld parameters in fp32: vocab_size %lld, hidden size %lld, %lld layers, "
                            "intermediate size %lld, %lld labels)",
                            m.config.model_type.c_str(), static_cast<long long>(total),
                            static_cast<long long>(m.config.vocab_size), static_cast<long long>(m.config.hidden_size),
                            static_cast<long long>(m.config.num_hidden_layers),
                            static_cast<long long>(m.config.intermediate_size),
                            static_cast<long long>(m.config.num_labels)),
                 "; use a smaller model config");
  m.units.resize(static_cast<size_t>(m.config.num_units()));
  for (size_t i = 0; i < m.plan.size(); ++i) {
    const ParameterSpec& spec = m.plan[i];
    at::Tensor t = at::empty(spec.shape, at::TensorOptions().dtype(at::kFloat));
    if (spec.trainable) {
      t.set_requires_grad(true);
    } else {
      detail::init_parameter(spec, t, 0);  // fixed: computed from the config
    }
    m.tensors.push_back(t);
    m.index.emplace(spec.name, i);
    m.units[static_cast<size_t>(spec.unit)][spec.slot] = t;
  }
  for (int64_t i = 0; i < m.config.num_hidden_layers; ++i) m.layer_specs.push_back(detail::LayerSpec::of(m.config, i));
  const FamilySpec& family = family_spec(m.config.family);
  m.embedding = family.embeddings(m.config);
  m.pooled_head = family.pooled_head(m.config);
  m.token_head = family.token_head(m.config);
}

TaskModel::~TaskModel() = default;

const EncoderConfig& TaskModel::config() const { return impl_->config; }

at::Tensor TaskModel::forward(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                                       const at::Tensor& attention_mask) {
  const Impl& m = *impl_;
  TORCH_CHECK(input_ids.dim() == 2, "input_ids must be [B, L], got ", input_ids.sizes());
  const int64_t B = input_ids.size(0), L = input_ids.size(1);
  m.check_length(L);
  at::Tensor types = token_type_ids.defined() ? token_type_ids : at::zeros_like(input_ids);
  TORCH_CHECK(types.sizes() == input_ids.sizes(), "token_type_ids must match input_ids ", input_ids.sizes());
  if (attention_mask.defined())
    TORCH_CHECK(attention_mask.sizes() == input_ids.sizes(), "attention_mask must match input_ids ",
                input_ids.sizes());
  const at::Tensor positions = m.embedding.positions_after_padding
                                   ? detail::roberta_positions(input_ids, m.config.pad_token_id, nullptr)
                                   : at::arange(L, input_ids.options().dtype(at::kLong)).expand({B, L});

  m.before(0);
  at::Tensor hidden = m.after(0, detail::embed(m.config, m.embedding, m.units[0], input_ids, types, positions, m.training));
  const at::ScalarType dtype = hidden.scalar_type();
  // [B, 1, 1, L]: 0 where attended, finfo.min at padding (HF's extended mask).
  const at::Tensor keep = attention_mask.defined() ? attention_mask : at::ones({B, L}, input_ids.options());
  const at::Tensor mask = detail::extended_attention_mask(keep, dtype);
  const auto relative = m.relative_context(L, input_ids.device());
  at::Tensor windowed;  // built once for every local layer
  for (int64_t i = 0; i < m.config.num_hidden_layers; ++i) {
    const detail::LayerSpec& spec = m.layer_specs[static_cast<size_t>(i)];
    detail::AttentionContext a;
    a.relative = relative;
    if (spec.half_window >= 0) {
      if (!windowed.defined()) windowed = detail::windowed_attention_mask(mask, spec.half_window);
      a.additive_mask = windowed;
    } else {
      a.additive_mask = mask;
    }
    if (spec.rope_theta > 0)
      a.rotary = detail::Rotary::for_positions(at::arange(L, input_ids.options().dtype(at::kLong)),
                                               m.config.head_dim(), spec.rope_theta, spec.rope_linear_factor);
    hidden = m.run_layer(i, hidden, a);
  }
  const at::Tensor keep_f = keep.to(hidden.scalar_type()).unsqueeze(-1);  // [B, L, 1]
  return m.head([](const at::Tensor& h) { return h.select(1, 0); },
                [&](const at::Tensor& h) { return (h * keep_f).sum(1) / keep_f.sum(1); }, hidden);
}

at::Tensor TaskModel::forward_packed(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                                              const at::Tensor& position_ids, const at::Tensor& cu_seqlens,
                                              int64_t max_seqlen) {
  const Impl& m = *impl_;
  if (!input_ids.defined() || input_ids.dim() != 1)
    throw Error("forward_packed: input_ids must be [T] (the batch's tokens back to back)");
  const int64_t T = input_ids.size(0);
  m.check_length(max_seqlen);
  for (const at::Tensor* t : {&token_type_ids, &position_ids})
    if (t->defined() && (t->dim() != 1 || t->size(0) != T))
      throw Error(str_format("forward_packed: token_type_ids and position_ids must be [T] = [%lld] like input_ids",
                             static_cast<long long>(T)));
  // The activations take the embeddings' dtype (as in forward()).
  const at::ScalarType dtype = m.units[0][Slot::kWordEmbeddings].scalar_type();
  const auto shared_layout = std::make_shared<const detail::PackedLayout>(
      detail::PackedLayout::from_cu_seqlens(cu_seqlens, max_seqlen, dtype, input_ids.device()));
  const detail::PackedLayout& layout = *shared_layout;
  if (layout.padded_rows.size(0) != T)
    throw Error(str_format("forward_packed: cu_seqlens ends at %lld but input_ids has %lld tokens",
                           static_cast<long long>(layout.padded_rows.size(0)), static_cast<long long>(T)));
  const at::Tensor types = token_type_ids.defined() ? token_type_ids : at::zeros_like(input_ids);
  // Positions within each sequence: a token's padded row modulo Lmax.
  const at::Tensor in_sequence = layout.positions();
  const at::Tensor positions = m.embedding.positions_after_padding
                                   ? detail::roberta_positions(input_ids, m.config.pad_token_id, &layout)
                               : position_ids.defined() ? position_ids
                                                        : in_sequence;

  m.before(0);
  at::Tensor hidden = m.after(0, detail::embed(m.config, m.embedding, m.units[0], input_ids, types, positions, m.training));
  // Attention pads each sequence to Lmax: relative positions count within it.
  const auto relative = m.relative_context(max_seqlen, input_ids.device());
  at::Tensor windowed;
  detail::BandedMask banded;
  std::unordered_map<double, detail::Rotary> rotary;  // one table per theta
  for (int64_t i = 0; i < m.config.num_hidden_layers; ++i) {
    const detail::LayerSpec& spec = m.layer_specs[static_cast<size_t>(i)];
    detail::AttentionContext a;
    a.layout = shared_layout;
    a.relative = relative;
    if (spec.half_window >= 0 && m.banded_attention && detail::banded_pays(layout, spec.half_window)) {
      if (!banded.additive.defined()) banded = detail::banded_attention_mask(layout, spec.half_window, dtype);
      a.banded = banded;
    } else if (spec.half_window >= 0) {
      if (!windowed.defined()) windowed = detail::windowed_attention_mask(layout.additive_mask, spec.half_window);
      a.packed_mask = windowed;
    } else {
      a.packed_mask = layout.additive_mask;
    }
    if (spec.rope_theta > 0) {
      auto found = rotary.find(spec.rope_theta);
      if (found == rotary.end())
        found = rotary.emplace(spec.rope_theta, detail::Rotary::for_positions(in_sequence, m.config.head_dim(),
                                                                               spec.rope_theta,
                                                                               spec.rope_linear_factor)).first;
      a.rotary = found->second;
    }
    hidden = m.run_layer(i, hidden, a);
  }
  return m.head([&](const at::Tensor& h) { return h.index_select(0, layout.first_tokens); },
                [&](const at::Tensor& h) {
                  at::Tensor sums = at::zeros({layout.num_sequences, h.size(1)}, h.options());
                  return sums.index_add(0, layout.sequence_of, h) / layout.lengths.to(h.scalar_type()).unsqueeze(1);
                },
                hidden);
}

at::Tensor TaskModel::forward_batch(const Batch& batch) {
  const TaskSpec& spec = task_spec(impl_->config.task);
  at::Tensor logits;
  if (!impl_->unpadded) {
    logits = forward(batch.input_ids, batch.token_type_ids, batch.attention_mask);
  } else {
    const PackedBatch p = pack_batch(batch).to(batch.input_ids.device());
    logits = forward_packed(p.input_ids, p.token_type_ids, p.position_ids, p.cu_seqlens, p.max_seqlen);
    if (spec.rules().head_on_tokens()) {
      // [T, C] -> the padded batch's [B, L, C] (zeros at padding, which the
      // labels ignore): token p of sequence b is padded row b * L + p.
      const int64_t rows = batch.input_ids.size(0), width = batch.input_ids.size(1);
      const at::Tensor lengths = p.cu_seqlens.slice(0, 1) - p.cu_seqlens.slice(0, 0, -1);
      const at::Tensor sequence = at::repeat_interleave(at::arange(rows, p.cu_seqlens.options()), lengths);
      const at::Tensor padded_rows = sequence * width + p.position_ids;
      logits = at::zeros({rows * width, logits.size(1)}, logits.options())
                   .index_copy(0, padded_rows, logits)
                   .view({rows, width, -1});
    }
  }
  return spec.shape_logits(logits, batch);
}

at::Tensor TaskModel::forward_layer(int64_t i, const at::Tensor& hidden, const at::Tensor& additive_mask) {
  const Impl& m = *impl_;
  TORCH_CHECK(i >= 0 && i < m.config.num_hidden_layers, "forward_layer: no layer ", i);
  const detail::LayerSpec& spec = m.layer_specs[static_cast<size_t>(i)];
  detail::AttentionContext a;
  a.additive_mask = spec.half_window >= 0 ? detail::windowed_attention_mask(additive_mask, spec.half_window)
                                          : additive_mask;
  a.relative = m.relative_context(hidden.size(1), hidden.device(), /*hooked=*/false);
  if (spec.rope_theta > 0)
    a.rotary = detail::Rotary::for_positions(at::arange(hidden.size(1), at::kLong), m.config.head_dim(),
                                             spec.rope_theta, spec.rope_linear_factor);
  return detail::encoder_layer(spec, m.units[static_cast<size_t>(m.config.layer_unit(i))], hidden, a, m.training);
}

at::Tensor TaskModel::forward_embeddings(const at::Tensor& input_ids, const at::Tensor& token_type_ids,
                                                  const at::Tensor& positions) {
  return detail::embed(impl_->config, impl_->embedding, impl_->units[0], input_ids, token_type_ids, positions, impl_->training);
}

void TaskModel::set_unpadded(bool on) { impl_->unpadded = on; }
bool TaskModel::unpadded() const { return impl_->unpadded; }
void TaskModel::set_banded_attention(bool on) { impl_->banded_attention = on; }
void TaskModel::set_attention_block_threshold(int64_t score_elements) {
  const int64_t threshold = score_elements < 0 ? kAttentionBlockScores : score_elements;
  for (detail::LayerSpec& spec : impl_->layer_specs) spec.attention_block_threshold = threshold;
}
void TaskModel::set_disentangled_attention_kernel(bool on) {
  for (detail::LayerSpec& spec : impl_->layer_specs) spec.cpu_attention_kernel = on;
}
void TaskModel::set_gradient_checkpointing(bool on) { impl_->gradient_checkpointing = on; }
bool TaskModel::gradient_checkpointing() const { return impl_->gradient_checkpointing; }
void TaskModel::train(bool on) { impl_->training = on; }
bool TaskModel::is_training() const { return impl_->training; }

void TaskModel::to(at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  for (at::Tensor& t : impl_->tensors) t.set_data(t.to(dtype));
}

void TaskModel::to(const at::Device& device) {
  at::NoGradGuard no_grad;
  for (at::Tensor& t : impl_->tensors) t.set_data(t.to(device));
}

void TaskModel::zero_grad() {
  for (at::Tensor& t : impl_->tensors)
    if (t.grad().defined()) t.mutable_grad() = at::Tensor();
}

at::Tensor TaskModel::loss(const at::Tensor& logits_in, const at::Tensor& labels) const {
  const EncoderConfig& config = impl_->config;
  // The loss in float32 whatever the logits' dtype, as torch.autocast computes it.
  TaskLabels head;
  head.num_labels = config.num_labels;
  head.problem_type = config.problem_type;
  return task_spec(config.task).loss(logits_in.to(at::kFloat), labels, head);
}

void TaskModel::init_weights(uint64_t seed) { init_weights(seed, {}); }

void TaskModel::init_weights(uint64_t seed, const std::vector<std::string>& names) {
  const std::set<std::string> wanted(names.begin(), names.end());
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < impl_->plan.size(); ++i) {
    const ParameterSpec& spec = impl_->plan[i];
    if (!spec.trainable || (!wanted.empty() && !wanted.count(spec.name))) continue;
    detail::init_parameter(spec, impl_->tensors[i], seed);
  }
}

at::Tensor TaskModel::parameter(const std::string& name) const {
  const auto found = impl_->index.find(name);
  if (found == impl_->index.end()) throw Error("'" + name + "' is not a parameter of this " +
                                               impl_->config.model_type + " model");
  return impl_->tensors[found->second];
}

std::vector<at::Tensor> TaskModel::parameters() const {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < impl_->plan.size(); ++i)
    if (impl_->trained(i)) out.push_back(impl_->tensors[i]);
  return out;
}

std::vector<at::Tensor> TaskModel::unit_parameters(int64_t unit) const { return impl_->unit_tensors(unit); }

std::vector<std::pair<std::string, at::Tensor>> TaskModel::fixed_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < impl_->plan.size(); ++i)
    if (!impl_->plan[i].trainable) out.emplace_back(impl_->plan[i].name, impl_->tensors[i]);
  return out;
}

int64_t TaskModel::num_units() const { return static_cast<int64_t>(impl_->units.size()); }

int64_t TaskModel::unit_of(const std::string& name) const {
  const auto found = impl_->index.find(name);
  if (found == impl_->index.end() || !impl_->trained(found->second))
    throw Error("'" + name + "' is not a trained parameter of this " + impl_->config.model_type + " model");
  return impl_->plan[found->second].unit;
}

void TaskModel::set_unit_hooks(UnitHooks* hooks) { impl_->hooks = hooks; }
void TaskModel::set_outer_unit_hooks(UnitHooks* hooks) { impl_->outer_hooks = hooks; }

std::vector<std::pair<std::string, at::Tensor>> TaskModel::state_dict() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < impl_->plan.size(); ++i)
    if (impl_->trained(i)) out.emplace_back(impl_->plan[i].name, impl_->tensors[i]);
  return out;
}

}  // namespace shardtrain
