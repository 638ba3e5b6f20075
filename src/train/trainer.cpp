#include "shardtrain/train/trainer.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <cmath>

#include "shardtrain/comm/rank0.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/job.h"
#include "shardtrain/train/progress.h"
#include "shardtrain/train/run_folder.h"
#include "shardtrain/train/train_step.h"

namespace shardtrain {
namespace {

using Json = nlohmann::json;

// Where training stands: what a checkpoint records besides the tensors.
struct Position {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // epochs done (the sampler's epoch)
  int64_t resume_batches = -1; // >= 0: the first epoch continues after this many global batches
  double loss_sum = 0;         // training loss since the last report
  int64_t loss_count = 0;
  double trained_before = 0;   // seconds trained by earlier invocations
};

Position resume(TrainJob& job, const CheckpointManager& checkpoints, const std::string& path) {
  Position at;
  if (path.empty()) return at;
  const TrainConfig& t = job.config->train;
  const TrainPlan& plan = job.plan;
  const TrainState state = checkpoints.restore(path, *job.strategy, job.flat_layout, [&](const TrainState& s) {
    if (s.global_batch_size != plan.examples_per_step())
      throw Error(str_format("%s was trained with global batch %lld (batch x ranks x accumulation); this job has %lld "
                             "(train.batch_size %lld x %lld ranks x %lld): set train.batch_size so that they match to "
                             "resume, or use another run.name to start afresh",
                             path.c_str(), static_cast<long long>(s.global_batch_size),
                             static_cast<long long>(plan.examples_per_step()), static_cast<long long>(t.batch_size),
                             static_cast<long long>(plan.world_size), static_cast<long long>(plan.accumulation)));
    if (s.seed != t.seed)
      log_warn("%s was trained with train.seed %lld, this job has %lld: the data order changes from here on",
               path.c_str(), static_cast<long long>(s.seed), static_cast<long long>(t.seed));
    if (s.num_training_steps != plan.total_steps)
      log_warn("%s planned %lld optimizer steps, this job plans %lld: the learning-rate schedule follows this job",
               path.c_str(), static_cast<long long>(s.num_training_steps), static_cast<long long>(plan.total_steps));
  });
  at.step = state.step;
  at.epoch = state.epoch;
  at.resume_batches = state.batches_consumed;
  at.loss_sum = state.loss_sum;
  at.loss_count = state.loss_count;
  at.trained_before = state.train_seconds;
  log_info("resumed from %s: step %lld, epoch %lld, %lld batches into it (written by %lld ranks)", path.c_str(),
           static_cast<long long>(at.step), static_cast<long long>(at.epoch),
           static_cast<long long>(at.resume_batches), static_cast<long long>(state.world_size));
  return at;
}

// One optimizer step of the loop: train_step, then the loss and token counts
// summed over the ranks.
StepRecord run_step(TrainJob& job, const Position& at, const std::vector<Batch>& micro) {
  const TrainConfig& t = job.config->train;
  StepOptions options;
  options.lr = job.schedule->lr(at.step);
  options.max_grad_norm = t.max_grad_norm;
  options.accumulation_steps = job.plan.accumulation;
  options.dropout_seed = DropoutSeed{t.seed, at.step, job.topology.rank};
  const StepResult r = train_step(*job.strategy, *job.model, micro, options);
  at::Tensor sums = at::tensor({r.loss, static_cast<double>(r.real_tokens)}, at::kDouble);
  job.host_comm->all_reduce(sums, ReduceOp::kSum);
  StepRecord record;
  record.step = at.step + 1;
  record.epoch = job.epoch_position();
  record.loss = sums[0].item<double>() / job.plan.world_size;
  record.lr = options.lr;
  record.grad_norm = r.grad_norm;
  record.samples = static_cast<int64_t>(micro.size()) * job.plan.global_batch;
  record.tokens = sums[1].item<double>();
  if (!std::isfinite(record.loss))
    throw Error(str_format("training diverged: loss is %g at step %lld (lower train.lr or check the data)", record.loss,
                           static_cast<long long>(record.step)));
  return record;
}

// A report: eval metrics, a checkpoint when asked, a line in result.jsonl
// and in the log.
class Reporter {
 public:
  Reporter(TrainJob& job, CheckpointManager& checkpoints, RunFolder& folder, ProgressMeter& meter,
           const TrainOptions& options, TrainResult& result)
      : job_(job), checkpoints_(checkpoints), folder_(folder), meter_(meter), options_(options), result_(result) {}

  void report(Position& at, bool with_checkpoint, bool with_eval, int64_t epochs_done) {
    meter_.end_line();
    TrainReport report;
    report.epoch = epochs_done;
    report.step = at.step;
    if (at.loss_count > 0) report.metrics["train_loss"] = at.loss_sum / static_cast<double>(at.loss_count);
    at.loss_sum = 0;
    at.loss_count = 0;
    if (with_eval && job_.eval_data) {
      const double start = MPI_Wtime();
      const TrainConfig& t = job_.config->train;
      const std::vector<float> logits = sharded_logits(*job_.model, *job_.eval_data, t.eval_batch_size,
                                                       job_.tokenizer->pad_id(), job_.device, job_.comm);
      for (const auto& kv : eval_metrics(logits, job_.eval_data->labels, job_.num_labels)) report.metrics[kv.first] = kv.second;
      report.metrics["eval_seconds"] = MPI_Wtime() - start;
    }
    Json metrics = Json::object();
    for (const auto& kv : report.metrics) metrics[kv.first] = kv.second;
    if (with_checkpoint) {
      const double start = MPI_Wtime();
      report.checkpoint = checkpoints_.save(job_.flat_layout, job_.strategy->checkpoint_parts(), state_at(at, metrics));
      report.metrics["checkpoint_seconds"] = MPI_Wtime() - start;
    }
    report.metrics["time_total_s"] = meter_.elapsed_total();
    run_on_rank0(job_.comm, [&] { write(report); });
    result_.reports.push_back(report);
  }

 private:
  TrainState state_at(const Position& at, const Json& metrics) const {
    const TrainConfig& t = job_.config->train;
    TrainState state;
    state.step = at.step;
    const SamplerState position = job_.sampler->state();
    state.epoch = job_.epoch_done() ? position.epoch + 1 : position.epoch;
    state.batches_consumed = job_.epoch_done() ? 0 : position.batches_consumed;
    state.seed = t.seed;
    state.num_training_steps = job_.plan.total_steps;
    state.warmup_steps = job_.plan.warmup_steps;
    state.base_lr = t.lr;
    state.world_size = job_.plan.world_size;
    state.global_batch_size = job_.plan.examples_per_step();
    state.strategy = job_.strategy->name();
    state.config_toml = options_.config_toml;
    state.model_config_json = job_.saved_config.to_json();
    state.vocab_text = job_.vocab_text;
    state.lowercase = job_.tokenizer->options().lowercase ? 1 : 0;
    state.metrics_json = metrics.dump();
    state.train_seconds = meter_.elapsed_total();
    return state;  // loss_sum / loss_count: reported just now, so 0
  }

  // Rank 0: result.jsonl and the log line.
  void write(const TrainReport& report) {
    Json line = Json::object();
    line["epoch"] = report.epoch;
    line["step"] = report.step;
    line["training_iteration"] = folder_.num_reports() + 1;
    for (const auto& kv : report.metrics) line[kv.first] = kv.second;
    line["checkpoint"] = report.checkpoint.empty() ? Json(nullptr) : Json(report.checkpoint);
    folder_.append_result(line.dump());
    std::string summary;
    for (const char* key : {"train_loss", "eval_loss", "eval_accuracy", "eval_f1", "eval_mcc", "eval_macro_f1",
                            "eval_mse", "eval_pearson"}) {
      auto it = report.metrics.find(key);
      if (it != report.metrics.end()) summary += str_format(" %s %.4f", key, it->second);
    }
    log_info("report %lld: epoch %lld step %lld%s%s", static_cast<long long>(folder_.num_reports()),
             static_cast<long long>(report.epoch), static_cast<long long>(report.step), summary.c_str(),
             report.checkpoint.empty() ? "" : (" -> " + report.checkpoint).c_str());
  }

  TrainJob& job_;
  CheckpointManager& checkpoints_;
  RunFolder& folder_;
  ProgressMeter& meter_;
  const TrainOptions& options_;
  TrainResult& result_;
};

void log_plan(const TrainJob& job, const RunFolder& folder) {
  const TrainPlan& p = job.plan;
  log_info("training: %lld examples, %lld ranks x batch %lld x accumulation %lld = %lld per step; %lld steps "
           "(%lld per epoch, %lld epochs), warmup %lld, %lld parameters, run folder %s",
           static_cast<long long>(job.train_data.size()), static_cast<long long>(p.world_size),
           static_cast<long long>(p.batch_size), static_cast<long long>(p.accumulation),
           static_cast<long long>(p.examples_per_step()), static_cast<long long>(p.total_steps),
           static_cast<long long>(p.steps_per_epoch), static_cast<long long>(p.num_epochs),
           static_cast<long long>(p.warmup_steps), static_cast<long long>(job.strategy->layout().numel()),
           folder.dir().c_str());
}

}  // namespace

TrainResult train(const RunConfig& config, MPI_Comm comm, const TrainOptions& options) {
  const double invocation_start = MPI_Wtime();
  if (config.train.mixed_precision != Precision::kNo)
    throw Error(std::string("train.mixed_precision = \"") + choice_name(config.train.mixed_precision) +
                "\" is not implemented in this version yet; use \"no\" (fp32)");
  RunFolder folder(config.run, comm);
  CheckpointManager checkpoints(folder.dir(), config.checkpoint, comm);
  const std::string resume_path = checkpoints.resume_path(options.resume_from);
  TrainJob job = build_job(config, comm);
  Position at = resume(job, checkpoints, resume_path);
  folder.start(options.config_toml, resume_path.empty() ? std::nullopt : std::optional<int64_t>(at.step));
  log_plan(job, folder);
  TrainResult result;
  result.run_dir = folder.dir();
  result.resumed_from = resume_path;
  result.num_training_steps = job.plan.total_steps;
  ProgressMeter meter(config.train, job.plan.total_steps, job.plan.num_epochs, at.step, at.trained_before,
                      options.live_progress, folder);
  Reporter reporter(job, checkpoints, folder, meter, options, result);
  if (at.step >= job.plan.total_steps)
    log_info("%s: training already finished at step %lld of %lld; nothing to do", resume_path.c_str(),
             static_cast<long long>(at.step), static_cast<long long>(job.plan.total_steps));

  bool stopped = false;
  while (!stopped && at.step < job.plan.total_steps && at.epoch < job.plan.num_epochs) {
    if (at.resume_batches >= 0)
      job.sampler->load_state({at.epoch, at.resume_batches});
    else
      job.sampler->set_epoch(at.epoch);
    at.resume_batches = -1;
    bool epoch_end = false;
    while (at.step < job.plan.total_steps) {
      const std::vector<Batch> micro = job.next_micro_batches();
      if (micro.empty()) break;
      const StepRecord record = run_step(job, at, micro);
      at.step = record.step;
      at.loss_sum += record.loss;
      ++at.loss_count;
      meter.record(record);
      stopped = options.stop_after_step > 0 && at.step >= options.stop_after_step;
      epoch_end = job.epoch_done();
      if (stopped || epoch_end || at.step >= job.plan.total_steps) break;
      const bool eval_now = config.train.eval_every_steps > 0 && at.step % config.train.eval_every_steps == 0;
      const bool checkpoint_now = checkpoints.due(at.step, false, at.epoch, false);
      if (eval_now || checkpoint_now) reporter.report(at, checkpoint_now, eval_now, at.epoch);
    }
    if (stopped) break;
    epoch_end = job.epoch_done();
    if (epoch_end) ++at.epoch;
    const bool last = at.step >= job.plan.total_steps || at.epoch >= job.plan.num_epochs;
    reporter.report(at, checkpoints.due(at.step, epoch_end, at.epoch, last), true, epoch_end ? at.epoch : at.epoch + 1);
  }

  result.steps = at.step;
  result.finished = !stopped && at.step >= job.plan.total_steps;
  result.best_checkpoint = checkpoints.best();
  result.last_checkpoint = checkpoints.newest();
  result.final_params = job.strategy->flat_params().narrow(0, 0, job.strategy->layout().numel()).to(at::kCPU).clone();
  for (const ParamSlot& slot : job.strategy->layout().slots()) result.param_names.push_back(slot.name);
  if (result.finished)
    log_info("done: %lld steps in %s; checkpoints in %s (newest %s%s%s)", static_cast<long long>(at.step),
             format_duration(MPI_Wtime() - invocation_start).c_str(), folder.dir().c_str(),
             result.last_checkpoint.c_str(), result.best_checkpoint.empty() ? "" : ", best ",
             result.best_checkpoint.c_str());
  return result;
}

}  // namespace shardtrain
