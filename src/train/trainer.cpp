#include "shardtrain/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/data/reader.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/bert.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/optim/schedule.h"
#include "shardtrain/parallel/make_strategy.h"
#include "shardtrain/train/metrics.h"
#include "shardtrain/train/train_checkpoint.h"
#if defined(SHARDTRAIN_HAVE_NCCL) && defined(SHARDTRAIN_TORCH_CUDA)
#include "shardtrain/comm/nccl_communicator.h"
#endif

namespace fs = std::filesystem;

namespace shardtrain {
namespace {

using Json = nlohmann::json;

// ---- small collective helpers --------------------------------------------------

void broadcast_string(std::string& s, MPI_Comm comm) {
  int64_t n = static_cast<int64_t>(s.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm);
  s.resize(static_cast<size_t>(n));
  if (n > 0) MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
}

// Runs `f` on rank 0 only; an Error there is rethrown on every rank, so all
// ranks leave together (run_cli then prints it once).
template <class F>
void on_rank0(int rank, MPI_Comm comm, F&& f) {
  std::string error;
  if (rank == 0) {
    try {
      f();
    } catch (const Error& e) {
      error = e.what();
      if (error.empty()) error = "error";
    }
  }
  broadcast_string(error, comm);
  if (!error.empty()) throw Error(error);
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + ": cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `content` to path via a temporary file and rename.
void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write '" + tmp + "'");
    out << content;
    if (!out.flush()) throw Error("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot rename '" + tmp + "' to '" + path + "'");
}

void append_line(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  if (!out) throw Error("cannot append to '" + path + "'");
  out << line << '\n';
}

// Keeps the lines of a report file that belong to steps <= max_step: JSON
// lines by their "step", CSV rows by their first column (the header stays).
void truncate_after_step(const std::string& path, int64_t max_step, bool jsonl) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string out, line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    bool keep = false;
    if (jsonl) {
      Json j = Json::parse(line, nullptr, false);
      keep = !j.is_discarded() && j.contains("step") && j["step"].is_number_integer() &&
             j["step"].get<int64_t>() <= max_step;
    } else if (first) {
      keep = true;  // CSV header
    } else {
      keep = std::strtoll(line.c_str(), nullptr, 10) <= max_step;
    }
    first = false;
    if (keep) out += line + "\n";
  }
  in.close();
  write_file_atomic(path, out);
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const long long s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) return str_format("%lldh%02lldm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return str_format("%lldm%02llds", s / 60, s % 60);
  return str_format("%llds", s);
}

std::string format_count(double v) {
  if (v >= 1e6) return str_format("%.2fM", v / 1e6);
  if (v >= 1e4) return str_format("%.1fk", v / 1e3);
  return str_format("%.1f", v);
}

// This rank's place among the ranks of `comm` on its node (MPI's shared-memory split).
struct NodePlace {
  int rank = 0;  // local rank: picks the GPU
  int size = 1;  // ranks on this node: hybrid sharding's default group
};

NodePlace node_place(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  ST_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  NodePlace place;
  MPI_Comm_rank(node, &place.rank);
  MPI_Comm_size(node, &place.size);
  MPI_Comm_free(&node);
  return place;
}

// ---- data --------------------------------------------------------------------

ReaderOptions reader_options(const DataConfig& d, LabelMode mode) {
  ReaderOptions r;
  r.format = parse_file_format(d.format);
  r.text_a = d.text_a;
  r.text_b = d.text_b;
  r.label = d.label;
  r.on_bad_row = parse_bad_row_policy(d.on_bad_row);
  r.label_mode = mode;
  return r;
}

void check_labels(const RawTable& table, int64_t num_labels, const std::string& key) {
  if (table.labels.kind != LabelKind::kClass) return;
  for (size_t i = 0; i < table.labels.class_ids.size(); ++i) {
    const int64_t id = table.labels.class_ids[i];
    if (id < 0 || id >= num_labels)
      throw Error(str_format("%s:%lld: label %lld is outside the model's %lld classes (%s; set model.num_labels)",
                             table.path.c_str(), static_cast<long long>(table.line_numbers[i]),
                             static_cast<long long>(id), static_cast<long long>(num_labels), key.c_str()));
  }
}

// ---- evaluation --------------------------------------------------------------

struct EvalContext {
  BertForSequenceClassification* model = nullptr;
  const TokenizedDataset* dataset = nullptr;
  int64_t batch_size = 32;
  int32_t pad_id = 0;
  int64_t num_labels = 2;
  bool regression = false;
  at::Device device = at::kCPU;
};

Batch to_device(Batch b, const at::Device& device) {
  if (device.is_cpu()) return b;
  b.input_ids = b.input_ids.to(device);
  b.token_type_ids = b.token_type_ids.to(device);
  b.attention_mask = b.attention_mask.to(device);
  if (b.labels.defined()) b.labels = b.labels.to(device);
  return b;
}

// Sharded eval; every rank returns the same metrics, each example counted once.
std::map<std::string, double> evaluate(const EvalContext& e, MPI_Comm comm) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const TokenizedDataset& data = *e.dataset;
  const EvalPlan plan = make_eval_plan(data.size(), e.batch_size, world);
  const int64_t c = e.num_labels;
  std::vector<float> local;
  local.reserve(plan.per_rank_count() * c);
  e.model->eval();
  {
    at::NoGradGuard no_grad;
    for (int64_t k = 0; k < plan.num_batches; ++k) {
      const Batch batch = to_device(collate(data, eval_batch(plan, rank, k), e.pad_id), e.device);
      const at::Tensor logits = e.model->forward(batch.input_ids, batch.token_type_ids, batch.attention_mask)
                                    .to(at::kCPU, at::kFloat)
                                    .contiguous();
      local.insert(local.end(), logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
    }
  }
  e.model->train();
  const std::vector<float> logits = gather_for_metrics(local, plan, comm, c);
  const int64_t n = data.size();
  std::map<std::string, double> m;
  if (e.regression) {
    const std::vector<float>& y = data.labels.values;
    std::vector<float> pred(logits.begin(), logits.end());
    const RegressionMetrics r = regression_metrics(pred, y);
    m["eval_loss"] = r.mse;
    m["eval_mse"] = r.mse;
    m["eval_pearson"] = r.pearson;
    return m;
  }
  const std::vector<int64_t>& y = data.labels.class_ids;
  std::vector<int64_t> pred(n);
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * c;
    pred[i] = std::max_element(row, row + c) - row;
    // Cross-entropy in float64: logsumexp(row) - row[label].
    double mx = row[0];
    for (int64_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<double>(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(row[j] - mx);
    loss += mx + std::log(sum) - row[y[i]];
  }
  const ClassificationMetrics cm = classification_metrics(pred, y);
  m["eval_loss"] = n > 0 ? loss / n : 0.0;
  m["eval_accuracy"] = cm.accuracy;
  m["eval_f1"] = cm.f1;
  m["eval_mcc"] = cm.mcc;
  if (cm.f1_is_macro) m["eval_macro_f1"] = cm.f1;
  return m;
}

// ---- checkpoints kept --------------------------------------------------------

struct KeptCheckpoint {
  int64_t index = 0;
  std::string path;
  std::optional<double> score;
};

int64_t checkpoint_index_of(const std::string& path) {
  static const std::regex pattern(R"(checkpoint_(\d+)\.h5$)");
  std::smatch match;
  const std::string name = fs::path(path).filename().string();
  if (!std::regex_search(name, match, pattern)) return -1;
  return std::stoll(match[1].str());
}

std::optional<double> score_of(const std::string& metrics_json, const std::string& attribute) {
  if (attribute.empty()) return std::nullopt;
  Json j = Json::parse(metrics_json, nullptr, false);
  if (j.is_discarded() || !j.contains(attribute) || !j[attribute].is_number()) return std::nullopt;
  return j[attribute].get<double>();
}

// Rank 0: the run folder's complete checkpoints, oldest first, with their scores.
std::vector<KeptCheckpoint> scan_checkpoints(const std::string& run_dir, const std::string& attribute) {
  std::vector<KeptCheckpoint> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string path = entry.path().string();
    const int64_t index = checkpoint_index_of(path);
    if (index < 0) continue;
    KeptCheckpoint k;
    k.index = index;
    k.path = path;
    try {
      CheckpointReader reader(path, MPI_COMM_SELF);
      if (reader.has_attribute("metrics_json")) k.score = score_of(reader.string_attribute("metrics_json"), attribute);
    } catch (const Error& e) {
      log_warn("%s: not a readable checkpoint, left alone (%s)", path.c_str(), e.what());
      continue;
    }
    out.push_back(k);
  }
  std::sort(out.begin(), out.end(), [](const KeptCheckpoint& a, const KeptCheckpoint& b) { return a.index < b.index; });
  return out;
}

// Which checkpoints to delete: keep the best num_to_keep by score (ties and
// unscored: newer first), and always the newest.
std::vector<std::string> checkpoints_to_delete(const std::vector<KeptCheckpoint>& all, int64_t num_to_keep,
                                               bool maximize) {
  if (num_to_keep <= 0 || static_cast<int64_t>(all.size()) <= num_to_keep) return {};
  std::vector<KeptCheckpoint> ranked = all;
  std::stable_sort(ranked.begin(), ranked.end(), [&](const KeptCheckpoint& a, const KeptCheckpoint& b) {
    if (a.score.has_value() != b.score.has_value()) return a.score.has_value();
    if (a.score && *a.score != *b.score) return maximize ? *a.score > *b.score : *a.score < *b.score;
    return a.index > b.index;
  });
  std::vector<std::string> doomed;
  const int64_t newest = all.back().index;
  for (size_t i = static_cast<size_t>(num_to_keep); i < ranked.size(); ++i)
    if (ranked[i].index != newest) doomed.push_back(ranked[i].path);
  return doomed;
}

const KeptCheckpoint* best_of(const std::vector<KeptCheckpoint>& all, bool maximize) {
  const KeptCheckpoint* best = nullptr;
  for (const KeptCheckpoint& k : all) {
    if (!k.score) continue;
    if (!best || (maximize ? *k.score >= *best->score : *k.score <= *best->score)) best = &k;
  }
  return best;
}

}  // namespace

// -----------------------------------------------------------------------------

TrainResult train(const RunConfig& config, MPI_Comm comm, const TrainOptions& options) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const TrainConfig& t = config.train;
  const double invocation_start = MPI_Wtime();

  if (t.mixed_precision != "no")
    throw Error("train.mixed_precision = \"" + t.mixed_precision +
                "\" is not implemented in this version yet; use \"no\" (fp32)");
  if (t.batch_size < 1) throw Error("train.batch_size must be >= 1");
  if (t.eval_batch_size < 1) throw Error("train.eval_batch_size must be >= 1");
  if (t.gradient_accumulation_steps < 1) throw Error("train.gradient_accumulation_steps must be >= 1");
  if (t.max_steps <= 0 && t.num_epochs < 1) throw Error("train.num_epochs must be >= 1 (or set train.max_steps)");
  if (config.data.train_file.empty()) throw Error("data.train_file is not set");

  // ---- run folder ----
  TrainResult result;
  const std::string run_dir = (fs::path(config.run.storage_path) / config.run.name).string();
  result.run_dir = run_dir;
  on_rank0(rank, comm, [&] {
    std::error_code ec;
    fs::create_directories(run_dir, ec);
    if (ec || !fs::is_directory(run_dir))
      throw Error("run.storage_path: cannot create the run folder '" + run_dir + "': " + ec.message());
  });
  if (rank == 0) set_log_file((fs::path(run_dir) / "train.log").string());
  const std::string result_path = (fs::path(run_dir) / "result.jsonl").string();
  const std::string progress_path = (fs::path(run_dir) / "progress.csv").string();

  std::string resume_path = options.resume_from;
  if (resume_path.empty() && rank == 0) resume_path = latest_checkpoint(run_dir);
  broadcast_string(resume_path, comm);
  if (!options.resume_from.empty())
    on_rank0(rank, comm, [&] {
      if (!fs::is_regular_file(options.resume_from))
        throw Error("--resume: no checkpoint file '" + options.resume_from + "'");
    });

  // ---- device and communicator ----
  at::Device device = at::kCPU;
  std::unique_ptr<Communicator> communicator;
  if (config.run.device == "cuda") {
#if defined(SHARDTRAIN_HAVE_NCCL) && defined(SHARDTRAIN_TORCH_CUDA)
    const int gpu = NcclCommunicator::device_for_local_rank(node_place(comm).rank);
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(gpu));
    communicator = std::make_unique<NcclCommunicator>(comm, gpu, config.run.collective_timeout_s);
#else
    throw Error("run.device = \"cuda\": this shardtrain was built without CUDA LibTorch and NCCL; use \"cpu\"");
#endif
  } else {
    communicator = std::make_unique<MpiCommunicator>(comm, config.run.collective_timeout_s);
  }

  // ---- tokenizer and data ----
  const std::string default_vocab = config.model.path.empty() ? "" : (fs::path(config.model.path) / "vocab.txt").string();
  const bool from_folder = !config.model.path.empty() && (config.model.vocab.empty() || config.model.vocab == default_vocab);
  const std::string vocab_path = from_folder ? default_vocab : config.model.vocab;
  if (vocab_path.empty()) throw Error("model.vocab is not set (a vocab.txt, or model.path with one)");
  TokenizerOptions tokenizer_options;
  tokenizer_options.lowercase = config.model.lowercase;
  const Tokenizer tokenizer =
      from_folder ? Tokenizer::from_model_dir(config.model.path) : Tokenizer::from_vocab_file(vocab_path, tokenizer_options);
  const std::string vocab_text = read_file(vocab_path, "model.vocab");

  const bool regression = config.model.num_labels == 1;
  const LabelMode label_mode = regression ? LabelMode::kRegression : LabelMode::kAuto;
  const RawTable train_table = read_table(config.data.train_file, reader_options(config.data, label_mode));
  if (train_table.labels.kind == LabelKind::kNone) throw Error("data.label: the training data needs a label column");
  if (train_table.num_bad_rows > 0)
    log_warn("%s: skipped %lld bad rows (data.on_bad_row = skip)", config.data.train_file.c_str(),
             static_cast<long long>(train_table.num_bad_rows));
  std::optional<RawTable> eval_table;
  if (!config.data.eval_file.empty()) {
    ReaderOptions r = reader_options(config.data, label_mode);
    r.label_names = train_table.labels.names;
    eval_table = read_table(config.data.eval_file, r);
    if (eval_table->size() == 0) throw Error(config.data.eval_file + ": no rows to evaluate");
  }
  const int64_t num_labels =
      config.model.num_labels > 0
          ? config.model.num_labels
          : std::max<int64_t>({train_table.labels.num_classes(), eval_table ? eval_table->labels.num_classes() : 0, 2});
  check_labels(train_table, num_labels, "model.num_labels");
  if (eval_table) check_labels(*eval_table, num_labels, "model.num_labels");

  // ---- model ----
  std::shared_ptr<BertForSequenceClassification> model;
  if (config.model.init == "pretrained") {
    if (config.model.path.empty()) throw Error("model.init = \"pretrained\" needs model.path (a HF model folder)");
    HfLoadOptions load;
    load.num_labels = num_labels;
    load.hidden_dropout_prob = config.model.hidden_dropout_prob;
    load.attention_probs_dropout_prob = config.model.attention_probs_dropout_prob;
    load.init_seed = static_cast<uint64_t>(t.seed);
    HfModel hf = load_hf_folder(config.model.path, load);
    const std::string message = hf.report.message();
    if (!message.empty()) log_info("%s", message.c_str());
    model = hf.model;
  } else {
    const std::string config_path = !config.model.config.empty()
                                        ? config.model.config
                                        : (config.model.path.empty() ? "" : (fs::path(config.model.path) / "config.json").string());
    if (config_path.empty()) throw Error("model.init = \"random\" needs model.config (a HF config.json) or model.path");
    BertConfig bc = BertConfig::from_file(config_path);
    bc.num_labels = num_labels;
    bc.id2label.clear();
    for (int64_t i = 0; i < num_labels; ++i) bc.id2label.push_back("LABEL_" + std::to_string(i));
    if (config.model.hidden_dropout_prob) bc.hidden_dropout_prob = *config.model.hidden_dropout_prob;
    if (config.model.attention_probs_dropout_prob)
      bc.attention_probs_dropout_prob = *config.model.attention_probs_dropout_prob;
    model = std::make_shared<BertForSequenceClassification>(bc);
    model->init_weights(static_cast<uint64_t>(t.seed));
  }
  BertConfig saved_config = model->config();
  if (!train_table.labels.names.empty()) saved_config.id2label = train_table.labels.names;
  if (tokenizer.vocab_size() > saved_config.vocab_size)
    throw Error(str_format("model.vocab: %lld tokens, but the model's vocab_size is %lld", 
                           static_cast<long long>(tokenizer.vocab_size()),
                           static_cast<long long>(saved_config.vocab_size)));
  if (config.data.max_length > saved_config.max_position_embeddings)
    throw Error(str_format("data.max_length = %lld exceeds the model's max_position_embeddings (%lld)",
                           static_cast<long long>(config.data.max_length),
                           static_cast<long long>(saved_config.max_position_embeddings)));
  if (!device.is_cpu()) model->to(device);
  model->train();

  // Tokenize across ranks.
  BuildOptions build;
  const EncodeFn encode = make_encoder(tokenizer, static_cast<int>(config.data.max_length));
  const TokenizedDataset train_data = build_dataset(train_table, encode, comm, build);
  std::optional<TokenizedDataset> eval_data;
  if (eval_table) eval_data = build_dataset(*eval_table, encode, comm, build);

  // ---- strategy, sampler, schedule ----
  AdamWOptions adamw;
  adamw.lr = t.lr;
  adamw.beta1 = t.adam_beta1;
  adamw.beta2 = t.adam_beta2;
  adamw.eps = t.adam_epsilon;
  adamw.weight_decay = t.weight_decay;
  const int node_size = node_place(comm).size;
  std::unique_ptr<Strategy> strategy = make_strategy(config.parallel, *model, *communicator, adamw, node_size);
  log_info("strategy %s (parallel.strategy = %s)", strategy->name().c_str(), config.parallel.strategy.c_str());
  for (const std::string& note : strategy_notes(config.parallel, world, node_size)) log_info("  %s", note.c_str());
  {
    const StrategyMemory m = strategy->memory();
    log_info("  per rank: parameters %.1f MB, gradients %.1f MB, optimizer state %.1f MB%s", m.param_bytes / 1e6,
             m.grad_bytes / 1e6, m.optimizer_bytes / 1e6,
             m.host_bytes > 0 ? str_format(" (%.1f MB of it in host memory: optimizer offload)", m.host_bytes / 1e6).c_str()
                              : "");
  }
  strategy->broadcast_parameters(0);
  const std::vector<FlatTensor> flat_layout = flat_tensors(strategy->layout());

  SamplerOptions sampler_options;
  sampler_options.num_examples = train_data.size();
  sampler_options.batch_size = t.batch_size;
  sampler_options.world_size = world;
  sampler_options.rank = rank;
  sampler_options.seed = static_cast<uint64_t>(t.seed);
  sampler_options.drop_last = config.data.drop_last;
  DistributedSampler sampler(sampler_options);
  const int64_t batches_per_epoch = sampler.num_batches();
  const int64_t global_batch = t.batch_size * world;
  if (batches_per_epoch == 0)
    throw Error(str_format("data.train_file: %lld examples are fewer than one global batch (%lld = train.batch_size x "
                           "%d ranks) and data.drop_last is on",
                           static_cast<long long>(train_data.size()), static_cast<long long>(global_batch), world));
  const int64_t accumulation = t.gradient_accumulation_steps;
  const int64_t steps_per_epoch = (batches_per_epoch + accumulation - 1) / accumulation;
  const int64_t total_steps = t.max_steps > 0 ? t.max_steps : t.num_epochs * steps_per_epoch;
  const int64_t num_epochs = t.max_steps > 0 ? (total_steps + steps_per_epoch - 1) / steps_per_epoch : t.num_epochs;
  const int64_t warmup = warmup_steps_for(total_steps, t.warmup_steps, t.warmup_ratio);
  const LinearWarmupDecay schedule(t.lr, warmup, total_steps);
  result.num_training_steps = total_steps;

  // ---- resume ----
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t resume_batches = 0;
  double loss_sum = 0;
  int64_t loss_count = 0;
  double trained_before = 0;
  if (!resume_path.empty()) {
    CheckpointReader reader(resume_path, comm);
    const TrainState state = read_train_state(reader);
    const int64_t saved_global = state.global_batch_size;
    if (saved_global != global_batch * accumulation)
      throw Error(str_format("%s was trained with global batch %lld (batch x ranks x accumulation); this job has %lld "
                             "(train.batch_size %lld x %d ranks x %lld): set train.batch_size so that they match to "
                             "resume, or use another run.name to start afresh",
                             resume_path.c_str(), static_cast<long long>(saved_global),
                             static_cast<long long>(global_batch * accumulation), static_cast<long long>(t.batch_size),
                             world, static_cast<long long>(accumulation)));
    if (state.seed != t.seed)
      log_warn("%s was trained with train.seed %lld, this job has %lld: the data order changes from here on",
               resume_path.c_str(), static_cast<long long>(state.seed), static_cast<long long>(t.seed));
    if (state.num_training_steps != total_steps)
      log_warn("%s planned %lld optimizer steps, this job plans %lld: the learning-rate schedule follows this job",
               resume_path.c_str(), static_cast<long long>(state.num_training_steps),
               static_cast<long long>(total_steps));
    std::vector<FlatPart> parts = strategy->checkpoint_parts();
    read_train_parts(reader, flat_layout, parts, /*with_optimizer=*/true);
    strategy->finish_load(state.step);
    step = state.step;
    epoch = state.epoch;
    resume_batches = state.batches_consumed;
    loss_sum = state.loss_sum;
    loss_count = state.loss_count;
    trained_before = state.train_seconds;
    result.resumed_from = resume_path;
    log_info("resumed from %s: step %lld, epoch %lld, %lld batches into it (written by %lld ranks)",
             resume_path.c_str(), static_cast<long long>(step), static_cast<long long>(epoch),
             static_cast<long long>(resume_batches), static_cast<long long>(state.world_size));
  }
  on_rank0(rank, comm, [&] {
    write_file_atomic((fs::path(run_dir) / "config.toml").string(), options.config_toml);
    if (result.resumed_from.empty()) {
      std::remove(result_path.c_str());
      std::remove(progress_path.c_str());
    } else {
      truncate_after_step(result_path, step, true);
      truncate_after_step(progress_path, step, false);
    }
    if (!fs::exists(progress_path))
      append_line(progress_path, "step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s");
  });

  std::vector<KeptCheckpoint> kept;
  int64_t next_index = 1;
  int64_t num_reports = 0;
  if (rank == 0) {
    kept = scan_checkpoints(run_dir, config.checkpoint.score_attribute);
    if (!kept.empty()) next_index = kept.back().index + 1;
    std::ifstream in(result_path);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) ++num_reports;
  }
  MPI_Bcast(&next_index, 1, MPI_INT64_T, 0, comm);
  const bool maximize = config.checkpoint.score_order != "min";

  log_info("training: %lld examples, %lld ranks x batch %lld x accumulation %lld = %lld per step; %lld steps "
           "(%lld per epoch, %lld epochs), warmup %lld, %lld parameters, run folder %s",
           static_cast<long long>(train_data.size()), static_cast<long long>(world),
           static_cast<long long>(t.batch_size),
           static_cast<long long>(accumulation), static_cast<long long>(global_batch * accumulation),
           static_cast<long long>(total_steps), static_cast<long long>(steps_per_epoch),
           static_cast<long long>(num_epochs), static_cast<long long>(warmup),
           static_cast<long long>(strategy->layout().numel()), run_dir.c_str());

  EvalContext eval_context;
  eval_context.model = model.get();
  eval_context.dataset = eval_data ? &*eval_data : nullptr;
  eval_context.batch_size = t.eval_batch_size;
  eval_context.pad_id = tokenizer.pad_id();
  eval_context.num_labels = num_labels;
  eval_context.regression = regression;
  eval_context.device = device;

  // ---- reports and checkpoints ----
  const double this_start = MPI_Wtime();
  auto elapsed_total = [&] { return trained_before + (MPI_Wtime() - this_start); };
  auto make_report = [&](bool with_eval, bool with_checkpoint, int64_t epochs_done) {
    TrainReport report;
    report.epoch = epochs_done;
    report.step = step;
    if (loss_count > 0) report.metrics["train_loss"] = loss_sum / static_cast<double>(loss_count);
    if (with_eval && eval_data) {
      const double start = MPI_Wtime();
      for (const auto& kv : evaluate(eval_context, comm)) report.metrics[kv.first] = kv.second;
      report.metrics["eval_seconds"] = MPI_Wtime() - start;
    }
    loss_sum = 0;
    loss_count = 0;
    Json metrics_json = Json::object();
    for (const auto& kv : report.metrics) metrics_json[kv.first] = kv.second;
    if (with_checkpoint) {
      const std::string path = checkpoint_path(run_dir, next_index++);
      TrainState state;
      state.step = step;
      const SamplerState position = sampler.state();
      const bool epoch_end = position.batches_consumed >= batches_per_epoch;
      state.epoch = epoch_end ? position.epoch + 1 : position.epoch;
      state.batches_consumed = epoch_end ? 0 : position.batches_consumed;
      state.seed = t.seed;
      state.num_training_steps = total_steps;
      state.warmup_steps = warmup;
      state.base_lr = t.lr;
      state.world_size = world;
      state.global_batch_size = global_batch * accumulation;
      state.strategy = strategy->name();
      state.config_toml = options.config_toml;
      state.model_config_json = saved_config.to_json();
      state.vocab_text = vocab_text;
      state.lowercase = tokenizer.options().lowercase ? 1 : 0;
      state.metrics_json = metrics_json.dump();
      state.loss_sum = 0;
      state.loss_count = 0;
      state.train_seconds = elapsed_total();
      const double start = MPI_Wtime();
      write_train_checkpoint(path, flat_layout, strategy->checkpoint_parts(), state, comm);
      report.metrics["checkpoint_seconds"] = MPI_Wtime() - start;
      report.checkpoint = path;
      result.last_checkpoint = path;
      on_rank0(rank, comm, [&] {
        KeptCheckpoint k;
        k.index = checkpoint_index_of(path);
        k.path = path;
        k.score = score_of(state.metrics_json, config.checkpoint.score_attribute);
        kept.push_back(k);
        for (const std::string& doomed : checkpoints_to_delete(kept, config.checkpoint.num_to_keep, maximize)) {
          std::error_code ec;
          fs::remove(doomed, ec);
          if (ec) log_warn("could not delete old checkpoint %s: %s", doomed.c_str(), ec.message().c_str());
          kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const KeptCheckpoint& x) { return x.path == doomed; }),
                     kept.end());
        }
      });
    }
    report.metrics["time_total_s"] = elapsed_total();
    on_rank0(rank, comm, [&] {
      ++num_reports;
      Json line = Json::object();
      line["epoch"] = report.epoch;
      line["step"] = report.step;
      line["training_iteration"] = num_reports;
      for (const auto& kv : report.metrics) line[kv.first] = kv.second;
      line["checkpoint"] = report.checkpoint.empty() ? Json(nullptr) : Json(report.checkpoint);
      append_line(result_path, line.dump());
      std::string summary;
      for (const char* key : {"train_loss", "eval_loss", "eval_accuracy", "eval_f1", "eval_mcc", "eval_macro_f1",
                              "eval_mse", "eval_pearson"}) {
        auto it = report.metrics.find(key);
        if (it != report.metrics.end()) summary += str_format(" %s %.4f", key, it->second);
      }
      log_info("report %lld: epoch %lld step %lld%s%s", static_cast<long long>(num_reports),
               static_cast<long long>(report.epoch), static_cast<long long>(report.step), summary.c_str(),
               report.checkpoint.empty() ? "" : (" -> " + report.checkpoint).c_str());
    });
    result.reports.push_back(report);
  };

  // ---- progress ----
  const bool live = options.live_progress && rank == 0 && isatty(STDERR_FILENO);
  double window_start = MPI_Wtime();
  double window_loss = 0, window_norm = 0, window_tokens = 0;
  int64_t window_steps = 0, window_samples = 0;
  double last_live = 0;
  const int64_t first_step = step;
  auto progress = [&](double lr) {
    const double now = MPI_Wtime();
    const double epoch_float = static_cast<double>(sampler.epoch()) +
                               static_cast<double>(sampler.state().batches_consumed) / batches_per_epoch;
    const double steps_done_here = static_cast<double>(step - first_step);
    const double eta = steps_done_here > 0 ? (now - this_start) / steps_done_here * (total_steps - step) : NAN;
    const double dt = std::max(now - window_start, 1e-9);
    const bool log_now = t.log_every_steps > 0 && step % t.log_every_steps == 0;
    if (rank == 0 && (log_now || live)) {
      const std::string line =
          str_format("step %lld/%lld | epoch %.2f/%lld | loss %.4f | lr %.3g | %s samples/s | %s tokens/s | ETA %s",
                     static_cast<long long>(step), static_cast<long long>(total_steps), epoch_float,
                     static_cast<long long>(num_epochs), window_loss / std::max<int64_t>(window_steps, 1), lr,
                     format_count(window_samples / dt).c_str(), format_count(window_tokens / dt).c_str(),
                     format_duration(eta).c_str());
      if (live) {
        if (now - last_live > 0.2 || step == total_steps) {
          std::fprintf(stderr, "\r%s\033[K", line.c_str());
          std::fflush(stderr);
          last_live = now;
        }
      } else {
        log_info("%s", line.c_str());
      }
    }
    if (log_now) {
      if (rank == 0)
        append_line(progress_path, str_format("%lld,%.6f,%.8g,%.8g,%.8g,%.6g,%.6g,%.3f", static_cast<long long>(step),
                                              epoch_float, window_loss / std::max<int64_t>(window_steps, 1), lr,
                                              window_norm / std::max<int64_t>(window_steps, 1), window_samples / dt,
                                              window_tokens / dt, elapsed_total()));
      window_start = now;
      window_loss = window_norm = window_tokens = 0;
      window_steps = window_samples = 0;
    }
  };
  auto end_live_line = [&] {
    if (live) std::fprintf(stderr, "\n");
  };

  if (step >= total_steps) {
    log_info("%s: training already finished at step %lld of %lld; nothing to do", resume_path.c_str(),
             static_cast<long long>(step), static_cast<long long>(total_steps));
  }

  // ---- the loop ----
  const int32_t pad_id = tokenizer.pad_id();
  bool stopped = false;
  bool resumed_into_epoch = !result.resumed_from.empty();
  while (step < total_steps && epoch < num_epochs && !stopped) {
    if (resumed_into_epoch) {
      sampler.load_state({epoch, resume_batches});
      resumed_into_epoch = false;
    } else {
      sampler.set_epoch(epoch);
    }
    while (step < total_steps) {
      std::vector<std::vector<int64_t>> micro;
      for (int64_t a = 0; a < accumulation; ++a) {
        std::vector<int64_t> indices;
        if (!sampler.next(&indices)) break;
        micro.push_back(std::move(indices));
      }
      if (micro.empty()) break;
      strategy->zero_grad();
      double local[2] = {0, 0};  // loss sum over micro-steps, real tokens
      for (size_t m = 0; m < micro.size(); ++m) {
        at::manual_seed(train_rng_seed(t.seed, step, static_cast<int64_t>(m), rank));
        const Batch batch = to_device(collate(train_data, micro[m], pad_id), device);
        const at::Tensor logits = model->forward(batch.input_ids, batch.token_type_ids, batch.attention_mask);
        const at::Tensor loss = model->loss(logits, batch.labels);
        local[0] += loss.item<double>();
        local[1] += static_cast<double>(batch.num_real_tokens);
        strategy->prepare_backward(m + 1 == micro.size());
        // Accelerate divides by gradient_accumulation_steps, also for a short last group.
        (loss / static_cast<double>(accumulation)).backward();
      }
      strategy->finish_backward();
      const double lr = schedule.lr(step);
      const double norm = strategy->step(lr, t.max_grad_norm);
      ++step;
      local[0] /= static_cast<double>(micro.size());
      MPI_Allreduce(MPI_IN_PLACE, local, 2, MPI_DOUBLE, MPI_SUM, comm);
      const double step_loss = local[0] / world;
      if (!std::isfinite(step_loss))
        throw Error(str_format("training diverged: loss is %g at step %lld (lower train.lr or check the data)",
                               step_loss, static_cast<long long>(step)));
      loss_sum += step_loss;
      ++loss_count;
      window_loss += step_loss;
      window_norm += norm;
      window_tokens += local[1];
      window_samples += static_cast<int64_t>(micro.size()) * global_batch;
      ++window_steps;
      progress(lr);

      if (options.stop_after_step > 0 && step >= options.stop_after_step) {
        stopped = true;
        break;
      }
      const bool epoch_end = sampler.state().batches_consumed >= batches_per_epoch;
      if (epoch_end || step >= total_steps) break;
      const bool eval_now = t.eval_every_steps > 0 && step % t.eval_every_steps == 0;
      const bool checkpoint_now = config.checkpoint.every_steps > 0 && step % config.checkpoint.every_steps == 0;
      if (eval_now || checkpoint_now) {
        end_live_line();
        make_report(eval_now, checkpoint_now, epoch);
      }
    }
    if (stopped) break;
    const bool epoch_end = sampler.state().batches_consumed >= batches_per_epoch;
    if (epoch_end) ++epoch;
    const bool last = step >= total_steps || epoch >= num_epochs;
    const bool checkpoint_now =
        last || (epoch_end && config.checkpoint.every_epochs > 0 && epoch % config.checkpoint.every_epochs == 0) ||
        (config.checkpoint.every_steps > 0 && step % config.checkpoint.every_steps == 0);
    end_live_line();
    make_report(true, checkpoint_now, epoch_end ? epoch : epoch + 1);
  }

  result.steps = step;
  result.finished = !stopped && step >= total_steps;
  if (rank == 0 && !config.checkpoint.score_attribute.empty()) {
    if (const KeptCheckpoint* best = best_of(kept, maximize)) result.best_checkpoint = best->path;
  }
  broadcast_string(result.best_checkpoint, comm);
  if (result.last_checkpoint.empty() && rank == 0 && !kept.empty()) result.last_checkpoint = kept.back().path;
  broadcast_string(result.last_checkpoint, comm);
  result.final_params = strategy->flat_params().narrow(0, 0, strategy->layout().numel()).to(at::kCPU).clone();
  for (const ParamSlot& slot : strategy->layout().slots()) result.param_names.push_back(slot.name);
  if (result.finished)
    log_info("done: %lld steps in %s; checkpoints in %s (newest %s%s%s)", static_cast<long long>(step),
             format_duration(MPI_Wtime() - invocation_start).c_str(), run_dir.c_str(), result.last_checkpoint.c_str(),
             result.best_checkpoint.empty() ? "" : ", best ", result.best_checkpoint.c_str());
  if (rank == 0) set_log_file("");
  return result;
}

}  // namespace shardtrain
