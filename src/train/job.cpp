#include "shardtrain/train/job.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/cpu_features.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/memory.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/train/lora_run.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/tasks/task_spec.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/memory_estimate.h"
#include "shardtrain/train/preflight.h"
#if defined(SHARDTRAIN_TORCH_CUDA)
#include <cuda_runtime_api.h>
#endif
#if defined(SHARDTRAIN_HAVE_NCCL) && defined(SHARDTRAIN_TORCH_CUDA)
#include "shardtrain/comm/nccl_communicator.h"
#endif

namespace fs = std::filesystem;

namespace shardtrain {
namespace {

// The model's config.json: model.path's for a pretrained model (what
// load_hf_folder reads), else model.config, or model.path's.
std::string model_config_path(const ModelConfig& m) {
  const bool from_folder = m.init == ModelInit::kPretrained || m.config.empty();
  return from_folder ? (fs::path(m.path) / "config.json").string() : m.config;
}

void set_precision(TrainJob& job, const TrainJobOptions& options) {
  const RunConfig& config = *job.config;
  job.precision = mixed_precision_for(config.train.mixed_precision, config.parallel);
  if (job.precision.param_dtype == at::kHalf || options.force_loss_scaling)
    job.loss_scaler.emplace(make_loss_scaler(config.train.fp16));
  if (!job.precision.enabled()) return;
  log_info("mixed precision %s: parameters and gradients %s, reductions %s; fp32 master weights and AdamW state; "
           "LayerNorm, softmax and the loss in fp32%s",
           enum_name(config.train.mixed_precision), c10::toString(job.precision.param_dtype),
           c10::toString(job.precision.reduce_dtype),
           job.loss_scaler ? str_format("; loss scale %g (%s)", job.loss_scaler->scale(),
                                        job.loss_scaler->options().dynamic ? "dynamic" : "static").c_str()
                           : "");
}

void set_device_and_communicator(TrainJob& job) {
  const RunConfig& config = *job.config;
  job.host_comm = std::make_unique<MpiCommunicator>(job.comm, config.run.collective_timeout_s);
  if (config.run.device == Device::kCuda) {
#if defined(SHARDTRAIN_HAVE_NCCL) && defined(SHARDTRAIN_TORCH_CUDA)
    const int gpu = NcclCommunicator::device_for_local_rank(job.topology.local_rank);
    job.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu));
    job.communicator = std::make_unique<NcclCommunicator>(job.comm, gpu, config.run.collective_timeout_s);
    return;
#else
    throw Error("run.device = \"cuda\": this shardtrain was built without CUDA LibTorch and NCCL; use \"cpu\"");
#endif
  }
  job.communicator = std::make_unique<MpiCommunicator>(job.comm, config.run.collective_timeout_s);
}

// The tokenizer and what a checkpoint saves of it: model.vocab as the config
// resolved it (config/config_parse.cpp: model.path's own tokenizer is the folder, read
// as data/tokenizer.h says), a vocab.txt with model.lowercase, or a
// tokenizer.json. No model.vocab (a config built in code): model.path's folder.
void load_tokenizer(TrainJob& job) {
  const ModelConfig& m = job.config->model;
  const std::string source = m.vocab.empty() ? m.path : m.vocab;
  if (source.empty())
    throw Error("model.vocab is not set (a vocab.txt, a tokenizer.json or a tokenizer folder, or model.path with one)");
  TokenizerOptions options;
  options.lowercase = m.lowercase;
  job.tokenizer.emplace(Tokenizer::from_path(source, options));
  // vocab_text: what checkpoints written before tokenizer_files held (WordPiece only).
  job.vocab_text = job.tokenizer->vocab_text();
  job.tokenizer_files = job.tokenizer->saved_files();
  if (job.tokenizer->model_max_length() > 0 && job.config->data.max_length > job.tokenizer->model_max_length())
    log_warn("data.max_length = %lld is above the tokenizer's model_max_length (%lld, tokenizer_config.json)",
             static_cast<long long>(job.config->data.max_length), static_cast<long long>(job.tokenizer->model_max_length()));
}

// The folder's id2label when model.path's config.json names its labels (not
// HF's LABEL_<i>), else empty: run_ner keeps a fine-tuned model's tag order
// when the data has the same tags.
TaskLabels pretrained_labels(const ModelConfig& m) {
  TaskLabels labels;
  if (m.init != ModelInit::kPretrained || m.path.empty()) return labels;
  const EncoderConfig folder = EncoderConfig::from_file(model_config_path(m));
  labels.names = folder.id2label;
  labels.num_labels = folder.num_labels;
  labels.problem_type = folder.problem_type;
  labels.named = folder.has_label_names();
  return labels;
}

// Reads the data files (the task's spec) and settles the labels.
TrainTables read_tables(TrainJob& job) {
  const RunConfig& config = *job.config;
  TrainTables tables = task_spec(config.model.task).read_for_training(config, pretrained_labels(config.model));
  job.labels = tables.labels;
  check_score_attribute(config.checkpoint.score_attribute, config.model.task, job.labels.num_labels, config.data,
                        !config.data.eval_file.empty());
  return tables;
}

// Refuses, before the model is built, a model that cannot take the data
// (train/preflight.h), and prints the job's memory estimate and refuses a job
// that cannot fit in this node's available memory (CPU) or the GPU's free
// memory (train/memory_estimate.h).
void preflight(const TrainJob& job) {
  const RunConfig& config = *job.config;
  const std::string config_path = model_config_path(config.model);
  EncoderConfig model = EncoderConfig::from_file(config_path);
  model.task = config.model.task;
  if (job.labels.num_labels > 0) model.set_num_labels(job.labels.num_labels);
  DataConfig data = config.data;
  data.text_b = task_rules(config.model.task).second_text(config.data);
  check_model_for_data(model, data, job.tokenizer->max_token_type(!data.text_b.empty()), config_path);
  const int world = job.topology.world_size;
  if (job.topology.rank == 0) log_info("%s", describe_estimate(estimate_memory(config, model, world)).c_str());
  if (config.run.device == Device::kCpu) {
    // bf16 without bf16 instructions, or fp32 with them: rank 0 times one
    // matmul of the model's MLP shape (core/cpu_features.h; under a second).
    const bool bf16 = job.precision.param_dtype == at::kBFloat16;
    const long long rows = config.train.batch_size * config.data.max_length;
    const std::string advice =
        job.topology.rank == 0
            ? advise_cpu_precision(current_cpu_features(), bf16, rows, model.hidden_size, model.intermediate_size)
            : "";
    if (!advice.empty()) log_warn("%s", advice.c_str());
    if (const std::optional<AvailableMemory> available = available_memory())
      check_estimate_fits(config, model, world, job.topology.local_size, static_cast<double>(available->bytes),
                          "host memory available on this node (" + available->source + ")");
    return;
  }
#if defined(SHARDTRAIN_TORCH_CUDA)
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(job.device.index()) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
    check_estimate_fits(config, model, world, 1, static_cast<double>(free_bytes),
                        str_format("free memory on GPU %d (of %s)", static_cast<int>(job.device.index()),
                                   format_bytes(static_cast<double>(total_bytes)).c_str()));
#endif
}

void build_model(TrainJob& job) {
  const RunConfig& config = *job.config;
  std::vector<std::string> missing_keys;  // of the base folder, freshly initialised
  if (config.model.init == ModelInit::kPretrained) {
    HfLoadOptions load;
    load.task = config.model.task;
    if (job.labels.num_labels > 0) load.num_labels = job.labels.num_labels;
    load.hidden_dropout_prob = config.model.hidden_dropout_prob;
    load.attention_probs_dropout_prob = config.model.attention_probs_dropout_prob;
    load.init_seed = static_cast<uint64_t>(config.train.seed);
    HfModel hf = load_hf_folder(config.model.path, load);
    const std::string message = hf.report.message();
    if (!message.empty()) log_info("%s", message.c_str());
    job.model = hf.model;
    missing_keys = hf.report.missing_keys;
  } else {
    EncoderConfig bc = EncoderConfig::from_file(model_config_path(config.model));
    bc.task = config.model.task;
    if (job.labels.num_labels > 0) bc.set_num_labels(job.labels.num_labels);
    if (config.model.hidden_dropout_prob) bc.hidden_dropout_prob = *config.model.hidden_dropout_prob;
    if (config.model.attention_probs_dropout_prob)
      bc.attention_probs_dropout_prob = *config.model.attention_probs_dropout_prob;
    job.model = std::make_shared<TaskModel>(bc);
    job.model->init_weights(static_cast<uint64_t>(config.train.seed));
  }
  if (config.lora.enabled()) {
    // Before any cast or move: the identity is of the fp32 base as loaded.
    attach_lora(*job.model, config.lora, static_cast<uint64_t>(config.train.seed));
    refuse_frozen_missing_keys(*job.model, missing_keys, config.model.path, "");
    job.base_model_sha256 = frozen_base_sha256(*job.model);
    log_info("LoRA: the frozen base (%s) has sha256 %s",
             config.model.init == ModelInit::kPretrained ? config.model.path.c_str() : "random init", 
             job.base_model_sha256.c_str());
  }
  job.saved_config = job.model->config();
  if (!job.labels.names.empty()) job.saved_config.id2label = job.labels.names;
  job.labels.names = job.saved_config.id2label;
  job.labels.num_labels = job.saved_config.num_labels;
  job.labels.problem_type = job.saved_config.problem_type;
  job.labels.named = job.saved_config.has_label_names();
  if (job.tokenizer->vocab_size() > job.saved_config.vocab_size)
    throw Error(str_format("model.vocab: %lld tokens, but the model's vocab_size is %lld",
                           static_cast<long long>(job.tokenizer->vocab_size()),
                           static_cast<long long>(job.saved_config.vocab_size)));
  if (config.data.max_length > job.saved_config.max_sequence_length())
    throw Error(str_format("data.max_length = %lld exceeds the %lld positions of the %s model "
                           "(max_position_embeddings %lld); lower data.max_length",
                           static_cast<long long>(config.data.max_length),
                           static_cast<long long>(job.saved_config.max_sequence_length()),
                           job.saved_config.model_type.c_str(),
                           static_cast<long long>(job.saved_config.max_position_embeddings)));
  job.model->set_unpadded(config.model.unpadded);
  job.model->set_gradient_checkpointing(config.model.gradient_checkpointing);
  if (!job.device.is_cpu()) job.model->to(job.device);
  job.model->train();
}

void build_strategy(TrainJob& job) {
  const RunConfig& config = *job.config;
  const TrainConfig& t = config.train;
  const AdamWOptions adamw{t.lr, t.adam_beta1, t.adam_beta2, t.adam_epsilon, t.weight_decay};
  // LoRA: the frozen base in the forward's dtype (no master copy: it never changes).
  if (job.model->lora()) job.model->frozen_to(job.precision.param_dtype);
  job.strategy = make_strategy(config.parallel, job.topology, *job.model, *job.communicator, adamw, job.precision);
  if (job.model->lora() && job.topology.shards_frozen_base()) {
    job.frozen_shards = std::make_unique<FrozenShards>(
        *job.model, job.communicator->split(job.topology.replica_index, job.topology.shard_rank));
    log_info("  LoRA: the frozen base sharded over %d ranks: %.1f MB of its %.1f MB per rank (parameters only)",
             job.topology.shard_group_size, job.frozen_shards->shard_bytes() / 1e6,
             job.frozen_shards->full_bytes() / 1e6);
  } else if (job.model->lora()) {
    int64_t bytes = 0;
    for (const auto& [name, tensor] : job.model->frozen_state_dict()) bytes += tensor.numel() * tensor.element_size();
    log_info("  LoRA: the frozen base replicated, %.1f MB per rank (parameters only)", bytes / 1e6);
  }
  log_info("strategy %s (parallel.strategy = %s)", job.strategy->name().c_str(),
           enum_name(config.parallel.strategy));
  for (const std::string& note : strategy_notes(config.parallel, job.topology)) log_info("  %s", note.c_str());
  const StrategyMemory m = job.strategy->memory();
  log_info("  per rank: parameters %.1f MB, gradients %.1f MB, optimizer state %.1f MB%s", m.param_bytes / 1e6,
           m.grad_bytes / 1e6, m.optimizer_bytes / 1e6,
           m.host_bytes > 0 ? str_format(" (%.1f MB of it in host memory: optimizer offload)", m.host_bytes / 1e6).c_str()
                            : "");
  job.strategy->broadcast_parameters(0);
  job.flat_layout = flat_tensors(job.strategy->layout());
}

// a x b for the step plan, or an Error naming the key that makes it overflow
// int64 (a hostile train.max_steps or train.num_epochs).
int64_t checked_plan_product(int64_t a, int64_t b, const char* key, const char* what) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    throw Error(str_format("%s: %lld x %lld %s overflows a 64-bit count; lower %s", key, static_cast<long long>(a),
                           static_cast<long long>(b), what, key));
  return product;
}

void plan_steps(TrainJob& job) {
  const RunConfig& config = *job.config;
  const TrainConfig& t = config.train;
  SamplerOptions options;
  options.num_examples = job.train_data.size();
  options.batch_size = t.batch_size;
  options.world_size = job.topology.world_size;
  options.rank = job.topology.rank;
  options.seed = static_cast<uint64_t>(t.seed);
  options.drop_last = config.data.drop_last;
  apply_group_by_length(config.data, job.train_data.lengths(), &options);
  job.sampler.emplace(options);
  TrainPlan& p = job.plan;
  p.world_size = job.topology.world_size;
  p.batch_size = t.batch_size;
  p.accumulation = t.gradient_accumulation_steps;
  p.global_batch = t.batch_size * job.topology.world_size;
  p.batches_per_epoch = job.sampler->num_batches();
  if (p.batches_per_epoch == 0)
    throw Error(str_format("data.train_file: %lld examples are fewer than one global batch (%lld = train.batch_size x "
                           "%d ranks) and data.drop_last is on",
                           static_cast<long long>(job.train_data.size()), static_cast<long long>(p.global_batch),
                           job.topology.world_size));
  p.steps_per_epoch = p.batches_per_epoch / p.accumulation + (p.batches_per_epoch % p.accumulation != 0 ? 1 : 0);
  p.total_steps = t.max_steps > 0 ? t.max_steps : checked_plan_product(t.num_epochs, p.steps_per_epoch, "train.num_epochs",
                                                                       "optimizer steps per epoch");
  p.num_epochs = t.max_steps > 0 ? p.total_steps / p.steps_per_epoch + (p.total_steps % p.steps_per_epoch != 0 ? 1 : 0)
                                 : t.num_epochs;
  // Every example the plan feeds is counted in int64 (samples, batches).
  checked_plan_product(p.total_steps, p.examples_per_step(), t.max_steps > 0 ? "train.max_steps" : "train.num_epochs",
                       "examples per optimizer step");
  p.warmup_steps = warmup_steps_for(p.total_steps, t.warmup_steps, t.warmup_ratio);
  job.schedule.emplace(t, p.total_steps, p.warmup_steps);
}

}  // namespace

std::vector<Batch> TrainJob::next_micro_batches() {
  std::vector<Batch> micro;
  const int32_t pad_id = tokenizer->pad_id();
  std::vector<int64_t> indices;
  for (int64_t a = 0; a < plan.accumulation && sampler->next(&indices); ++a)
    micro.push_back(to_device(collate(train_data, indices, pad_id), device));
  return micro;
}

double TrainJob::epoch_position() const {
  return static_cast<double>(sampler->epoch()) +
         static_cast<double>(sampler->state().batches_consumed) / static_cast<double>(plan.batches_per_epoch);
}

DynamicLossScaler make_loss_scaler(const Fp16Config& fp16) {
  LossScalerOptions o = LossScalerOptions::deepspeed(static_cast<int>(fp16.initial_scale_power), fp16.loss_scale_window,
                                                     fp16.hysteresis, fp16.min_loss_scale,
                                                     fp16.consecutive_hysteresis);
  if (fp16.loss_scale > 0) {
    o.init_scale = fp16.loss_scale;
    o.dynamic = false;
  }
  return DynamicLossScaler(o);
}

TrainJob build_job(const RunConfig& config, MPI_Comm comm, const TrainJobOptions& options) {
  TrainJob job;
  job.config = &config;
  job.comm = comm;
  job.topology = Topology::detect(comm, config.parallel);
  set_precision(job, options);
  set_device_and_communicator(job);
  load_tokenizer(job);
  TrainTables tables = read_tables(job);
  preflight(job);
  build_model(job);
  // Tokenize across ranks.
  const TaskSpec& spec = task_spec(config.model.task);
  BuildSettings build;
  build.data = &config.data;
  build.model_type = job.saved_config.model_type;
  build.model_max_length = job.saved_config.max_sequence_length();
  job.train_data = spec.build(*tables.train, *job.tokenizer, build, comm);
  if (tables.eval) {
    build.for_eval = true;
    job.eval_data = spec.build(*tables.eval, *job.tokenizer, build, comm);
  }
  job.train_table = std::move(tables.train);
  job.eval_table = std::move(tables.eval);
  build_strategy(job);
  plan_steps(job);
  return job;
}

}  // namespace shardtrain
