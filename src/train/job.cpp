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
#include "shardtrain/data/reader.h"
#include "shardtrain/data/qa_features.h"
#include "shardtrain/data/task_datasets.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/parallel/make_strategy.h"
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

ReaderOptions reader_options(const DataConfig& d, LabelMode mode) {
  ReaderOptions r;
  r.format = d.format;
  r.text_a = d.text_a;
  r.text_b = d.text_b;
  r.label = d.label;
  r.label_mode = mode;
  r.on_bad_row = d.on_bad_row;
  return r;
}

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
           choice_name(config.train.mixed_precision), c10::toString(job.precision.param_dtype),
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
// resolved it (cli/config.cpp: model.path's own tokenizer is the folder, read
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

// The data files as read, by task: sequence classification's text tables,
// token classification's sentences of words, multiple choice's rows of choices.
struct Tables {
  RawTable train;
  std::optional<RawTable> eval;
  std::optional<WordTable> words_train, words_eval;
  std::optional<MultipleChoiceTable> choices_train, choices_eval;
  std::optional<QaTable> qa_train, qa_eval;
};

void warn_skipped(const std::string& path, int64_t n) {
  if (n > 0)
    log_warn("%s: skipped %lld bad rows (data.on_bad_row = skip)", path.c_str(), static_cast<long long>(n));
}

// The folder's id2label when model.path's config.json names its labels (not
// HF's LABEL_<i>), else empty: run_ner keeps a fine-tuned model's tag order
// when the data has the same tags.
std::vector<std::string> named_model_labels(const ModelConfig& m) {
  if (m.init != ModelInit::kPretrained || m.path.empty()) return {};
  const EncoderConfig folder = EncoderConfig::from_file(model_config_path(m));
  for (size_t i = 0; i < folder.id2label.size(); ++i)
    if (folder.id2label[i] != "LABEL_" + std::to_string(i)) return folder.id2label;
  return {};
}

// Token classification: the sentences, with the tags' names and order from
// data.labels, else the model's own named labels when they are the data's
// tags, else the training data's sorted tags (run_ner_no_trainer.py).
void read_word_tables(TrainJob& job, Tables& t) {
  const RunConfig& config = *job.config;
  const DataConfig& d = config.data;
  WordTableOptions options;
  options.format = d.format;
  options.words_column = d.text_a;
  options.tags_column = d.label;
  options.tag_names = d.labels;
  options.on_bad_row = d.on_bad_row;
  const std::vector<std::string> model_labels = d.labels.empty() ? named_model_labels(config.model)
                                                                 : std::vector<std::string>();
  options.id_names = model_labels;  // integer tags (HF datasets' ner_tags) named by the model's id2label
  t.words_train = read_word_table(d.train_file, options);
  WordTable& train = *t.words_train;
  warn_skipped(d.train_file, train.num_bad_rows);
  if (train.size() == 0) throw Error(d.train_file + ": no sentences to train on");
  if (d.labels.empty() && train.tag_names != model_labels) {
    std::vector<std::string> sorted_model = model_labels;
    std::sort(sorted_model.begin(), sorted_model.end());
    if (!model_labels.empty() && sorted_model == train.tag_names) {
      // train.tag_names is sorted: renumber its ids into the model's order.
      std::vector<int32_t> to_model(train.tag_names.size());
      for (size_t i = 0; i < train.tag_names.size(); ++i)
        to_model[i] = static_cast<int32_t>(std::find(model_labels.begin(), model_labels.end(), train.tag_names[i]) -
                                           model_labels.begin());
      for (auto& sentence : train.tags)
        for (int32_t& tag : sentence) tag = to_model[static_cast<size_t>(tag)];
      train.tag_names = model_labels;
      log_info("token classification: the tags in the order of %s's id2label", config.model.path.c_str());
    } else if (!model_labels.empty()) {
      log_warn("%s's id2label (%s) are not the data's tags; the model's head is trained for the data's %zu tags",
               config.model.path.c_str(), shorten(quoted_list(model_labels), 200).c_str(), train.tag_names.size());
    }
  }
  job.label_names = train.tag_names;
  job.num_labels = static_cast<int64_t>(train.tag_names.size());
  if (config.model.num_labels > 0 && config.model.num_labels != job.num_labels)
    throw Error(str_format("model.num_labels = %lld, but %s has %lld tags (%s); leave model.num_labels out",
                           static_cast<long long>(config.model.num_labels), d.train_file.c_str(),
                           static_cast<long long>(job.num_labels), shorten(quoted_list(train.tag_names), 200).c_str()));
  if (!d.eval_file.empty()) {
    options.tag_names = train.tag_names;
    t.words_eval = read_word_table(d.eval_file, options);
    warn_skipped(d.eval_file, t.words_eval->num_bad_rows);
    if (t.words_eval->size() == 0) throw Error(d.eval_file + ": no sentences to evaluate");
  }
}

MultipleChoiceOptions choice_options(const DataConfig& d) {
  MultipleChoiceOptions options;
  options.format = d.format;
  options.context_column = d.text_a;
  options.prefix_column = d.text_b;
  options.choice_columns = d.choices;
  options.label_column = d.label;
  options.preset = d.preset;
  options.on_bad_row = d.on_bad_row;
  return options;
}

void read_choice_tables(TrainJob& job, Tables& t) {
  const DataConfig& d = job.config->data;
  MultipleChoiceOptions options = choice_options(d);
  t.choices_train = read_multiple_choice(d.train_file, options);
  warn_skipped(d.train_file, t.choices_train->num_bad_rows);
  if (t.choices_train->size() == 0) throw Error(d.train_file + ": no rows to train on");
  if (!d.eval_file.empty()) {
    options.num_choices = t.choices_train->num_choices;
    t.choices_eval = read_multiple_choice(d.eval_file, options);
    warn_skipped(d.eval_file, t.choices_eval->num_bad_rows);
    if (t.choices_eval->size() == 0) throw Error(d.eval_file + ": no rows to evaluate");
  }
}

// Question answering: SQuAD JSON or flattened JSON Lines (data/qa_data.h);
// a QA head has two outputs (start, end).
void read_qa_tables(TrainJob& job, Tables& t) {
  const DataConfig& d = job.config->data;
  QaReadOptions options;
  options.allow_unanswered = d.version_2_with_negative;
  t.qa_train = read_qa_table(d.train_file, options);
  if (t.qa_train->size() == 0) throw Error(d.train_file + ": no questions to train on");
  if (!d.eval_file.empty()) {
    t.qa_eval = read_qa_table(d.eval_file, options);
    if (t.qa_eval->size() == 0) throw Error(d.eval_file + ": no questions to evaluate");
  }
  job.num_labels = 2;
  job.qa_options.n_best_size = d.n_best_size;
  job.qa_options.max_answer_length = d.max_answer_length;
  job.qa_options.version_2_with_negative = d.version_2_with_negative;
  job.qa_options.null_score_diff_threshold = d.null_score_diff_threshold;
  const std::string& score = job.config->checkpoint.score_attribute;
  if (score.empty() || score == "train_loss") return;
  const std::vector<std::string> names = qa_metric_names(d.version_2_with_negative);
  if (std::find(names.begin(), names.end(), score) == names.end())
    throw Error("checkpoint.score_attribute = \"" + score + "\" is never reported by model.task = "
                "\"question_answering\"" + (d.version_2_with_negative ? " with" : " without") +
                " data.version_2_with_negative; use one of " + quoted_list(names) + " or \"train_loss\"");
}

// Reads the data files and settles the number of labels.
Tables read_tables(TrainJob& job) {
  const RunConfig& config = *job.config;
  if (config.model.task != Task::kSequenceClassification) {
    Tables t;
    if (config.model.task == Task::kTokenClassification) {
      read_word_tables(job, t);
    } else if (config.model.task == Task::kQuestionAnswering) {
      read_qa_tables(job, t);
      return t;
    } else {
      read_choice_tables(job, t);
      job.num_labels = 0;  // the model's own (a multiple-choice head scores each choice with one logit)
    }
    check_score_attribute(config.checkpoint.score_attribute, config.model.task, job.num_labels,
                          !config.data.eval_file.empty());
    return t;
  }
  const bool regression = config.model.num_labels == 1;
  const LabelMode label_mode = regression ? LabelMode::kRegression : LabelMode::kAuto;
  // Integer labels: below model.num_labels, or (0) exactly the ids 0..K-1 of
  // the training data; the eval data never adds classes (data/reader.h).
  ReaderOptions train_options = reader_options(config.data, label_mode);
  train_options.num_classes = config.model.num_labels > 1 ? config.model.num_labels : kInferClasses;
  Tables t{read_table(config.data.train_file, train_options), std::nullopt};
  if (t.train.labels.kind == LabelKind::kNone) throw Error("data.label: the training data needs a label column");
  if (t.train.num_bad_rows > 0)
    log_warn("%s: skipped %lld bad rows (data.on_bad_row = skip)", config.data.train_file.c_str(),
             static_cast<long long>(t.train.num_bad_rows));
  job.num_labels = config.model.num_labels > 0 ? config.model.num_labels
                                                : std::max<int64_t>(t.train.labels.num_classes(), 2);
  check_score_attribute(config.checkpoint.score_attribute, config.model.task, job.num_labels,
                        !config.data.eval_file.empty());
  if (!config.data.eval_file.empty()) {
    ReaderOptions r = reader_options(config.data, label_mode);
    r.label_names = t.train.labels.names;
    r.num_classes = regression ? 0 : job.num_labels;
    r.class_source = config.model.num_labels > 0 ? "model.num_labels"
                                                 : "the training data (" + config.data.train_file + ")";
    t.eval = read_table(config.data.eval_file, r);
    if (t.eval->size() == 0) throw Error(config.data.eval_file + ": no rows to evaluate");
    if (t.eval->num_bad_rows > 0)
      log_warn("%s: skipped %lld bad rows (data.on_bad_row = skip)", config.data.eval_file.c_str(),
               static_cast<long long>(t.eval->num_bad_rows));
  }
  return t;
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
  if (job.num_labels > 0) model.set_num_labels(job.num_labels);
  // Multiple choice encodes (context, choice) pairs whatever data.text_b is.
  DataConfig data = config.data;
  if (config.model.task == Task::kMultipleChoice && data.text_b.empty()) data.text_b = data.choices.front();
  if (config.model.task == Task::kQuestionAnswering) data.text_b = "context";  // (question, context) pairs
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

void build_model(TrainJob& job, const Tables& tables) {
  const RunConfig& config = *job.config;
  if (config.model.init == ModelInit::kPretrained) {
    HfLoadOptions load;
    load.task = config.model.task;
    if (job.num_labels > 0) load.num_labels = job.num_labels;
    load.hidden_dropout_prob = config.model.hidden_dropout_prob;
    load.attention_probs_dropout_prob = config.model.attention_probs_dropout_prob;
    load.init_seed = static_cast<uint64_t>(config.train.seed);
    HfModel hf = load_hf_folder(config.model.path, load);
    const std::string message = hf.report.message();
    if (!message.empty()) log_info("%s", message.c_str());
    job.model = hf.model;
  } else {
    EncoderConfig bc = EncoderConfig::from_file(model_config_path(config.model));
    bc.task = config.model.task;
    if (job.num_labels > 0) bc.set_num_labels(job.num_labels);
    if (config.model.hidden_dropout_prob) bc.hidden_dropout_prob = *config.model.hidden_dropout_prob;
    if (config.model.attention_probs_dropout_prob)
      bc.attention_probs_dropout_prob = *config.model.attention_probs_dropout_prob;
    job.model = std::make_shared<SequenceClassifier>(bc);
    job.model->init_weights(static_cast<uint64_t>(config.train.seed));
  }
  job.saved_config = job.model->config();
  if (job.num_labels <= 0) job.num_labels = job.saved_config.num_labels;
  if (!tables.train.labels.names.empty()) job.saved_config.id2label = tables.train.labels.names;
  if (!job.label_names.empty()) job.saved_config.id2label = job.label_names;
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
  job.strategy = make_strategy(config.parallel, job.topology, *job.model, *job.communicator, adamw, job.precision);
  log_info("strategy %s (parallel.strategy = %s)", job.strategy->name().c_str(),
           choice_name(config.parallel.strategy));
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

bool token_task_prefix_space(const EncoderConfig& model) {
  // run_ner_no_trainer.py: add_prefix_space=True for model_type bloom, gpt2, roberta.
  return model.model_type == "roberta";
}

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
  const Tables tables = read_tables(job);
  preflight(job);
  build_model(job, tables);
  // Tokenize across ranks.
  const int max_length = static_cast<int>(config.data.max_length);
  switch (config.model.task) {
    case Task::kSequenceClassification: {
      const EncodeFn encode = make_encoder(*job.tokenizer, max_length);
      job.train_data = build_dataset(tables.train, encode, comm, BuildOptions{});
      if (tables.eval) job.eval_data = build_dataset(*tables.eval, encode, comm, BuildOptions{});
      break;
    }
    case Task::kTokenClassification: {
      TokenTaskOptions options;
      options.max_length = max_length;
      options.add_prefix_space = token_task_prefix_space(job.saved_config);
      options.label_all_tokens = config.data.label_all_tokens;
      const auto build = [&](const WordTable& table) {
        TokenAlignment stats;
        TokenizedDataset data = build_token_dataset(table, *job.tokenizer, options, comm, &stats);
        if (stats.truncated_words > 0)
          log_warn("%s: %lld sentences longer than data.max_length = %d tokens lost %lld words (neither trained "
                   "on nor scored)", table.path.c_str(), static_cast<long long>(stats.truncated_sentences), max_length,
                   static_cast<long long>(stats.truncated_words));
        return data;
      };
      job.train_data = build(*tables.words_train);
      if (tables.words_eval) job.eval_data = build(*tables.words_eval);
      break;
    }
    case Task::kQuestionAnswering: {
      QaFeatureOptions options;
      options.max_length = max_length;
      options.doc_stride = static_cast<int>(config.data.doc_stride);
      options.with_offsets = false;
      job.train_data = build_qa_features(*tables.qa_train, *job.tokenizer, options, comm);
      if (tables.qa_eval) {
        options.with_offsets = true;
        job.eval_data = build_qa_features(*tables.qa_eval, *job.tokenizer, options, comm);
        job.qa_eval = std::make_shared<const QaTable>(*tables.qa_eval);
      }
      if (job.topology.rank == 0)
        log_info("question answering: %lld questions -> %lld training features (windows of %d tokens, stride %d)%s",
                 static_cast<long long>(tables.qa_train->size()), static_cast<long long>(job.train_data.size()),
                 max_length, options.doc_stride,
                 job.eval_data ? str_format("; %lld eval questions -> %lld features",
                                            static_cast<long long>(tables.qa_eval->size()),
                                            static_cast<long long>(job.eval_data->size())).c_str()
                               : "");
      break;
    }
    case Task::kMultipleChoice:
      job.train_data = build_choice_dataset(*tables.choices_train, *job.tokenizer, max_length, comm);
      if (tables.choices_eval)
        job.eval_data = build_choice_dataset(*tables.choices_eval, *job.tokenizer, max_length, comm);
      break;
  }
  build_strategy(job);
  plan_steps(job);
  return job;
}

}  // namespace shardtrain
