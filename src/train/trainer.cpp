#include "shardtrain/train/trainer.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <memory>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/signals.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/report/curves.h"
#include "shardtrain/train/early_stopping.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/job.h"
#include "shardtrain/train/preemption.h"
#include "shardtrain/report/progress.h"
#include "shardtrain/report/run_folder.h"
#include "shardtrain/report/tensorboard.h"
#include "shardtrain/train/train_step.h"

namespace shardtrain {
namespace {

using Json = nlohmann::json;

// Where training stands: what a checkpoint records besides the tensors.
struct Position {
  int64_t step = 0;            // optimizer steps taken (applied or skipped)
  int64_t skipped = 0;         // of those, skipped for non-finite gradients (fp16)
  int64_t epoch = 0;           // epochs done (the sampler's epoch)
  int64_t resume_batches = -1; // >= 0: the first epoch continues after this many global batches
  double loss_sum = 0;         // training loss since the last report
  int64_t loss_count = 0;
  double trained_before = 0;   // seconds trained by earlier invocations
  ProgressWindow log_window;   // the progress log's sums since its last row (report/progress.h)
  EarlyStoppingState early;    // train/early_stopping.h
  std::string stop_reason;     // early.stopped: why
};

Position resume(TrainJob& job, const CheckpointManager& checkpoints, const std::string& path) {
  Position at;
  if (path.empty()) return at;
  const TrainConfig& t = job.config->train;
  const TrainPlan& plan = job.plan;
  const TrainState state = checkpoints.restore(path, *job.strategy, job.flat_layout, [&](const TrainState& s) {
    if (!s.model_config_json.empty()) {
      const EncoderConfig stored = EncoderConfig::from_json(s.model_config_json, path + " (attribute model_config_json)");
      if (stored.task != job.saved_config.task)
        throw Error(path + " holds a " + stored.architecture() + " (model.task = \"" + enum_name(stored.task) +
                    "\"); this job trains a " + job.saved_config.architecture() + " (model.task = \"" +
                    enum_name(job.saved_config.task) + "\"): resume it with its own task, or start the new task "
                    "from an exported folder (shardtrain export, then model.path) under another run.name");
    }
    if (s.global_batch_size != plan.examples_per_step())
      throw Error(str_format("%s was trained with global batch %lld (batch x ranks x accumulation); this job has %lld "
                             "(train.batch_size %lld x %lld ranks x %lld): set train.batch_size so that they match to "
                             "resume, or use another run.name to start afresh",
                             path.c_str(), static_cast<long long>(s.global_batch_size),
                             static_cast<long long>(plan.examples_per_step()), static_cast<long long>(t.batch_size),
                             static_cast<long long>(plan.world_size), static_cast<long long>(plan.accumulation)));
    // Checked here, before the run folder changes, not when the sampler is
    // positioned in the loop (docs/DESIGN.md, "The run folder").
    if (s.batches_consumed < 0 || s.batches_consumed > plan.batches_per_epoch)
      throw Error(str_format("%s was saved %lld global batches into epoch %lld, but an epoch of data.train_file (%s: "
                             "%lld rows) now has %lld global batches of %lld: the training data changed since the "
                             "checkpoint; train on the data it was trained on to resume, or use another run.name",
                             path.c_str(), static_cast<long long>(s.batches_consumed), static_cast<long long>(s.epoch),
                             job.config->data.train_file.c_str(), static_cast<long long>(job.train_data.size()),
                             static_cast<long long>(plan.batches_per_epoch), static_cast<long long>(plan.global_batch)));
    if (s.seed != t.seed)
      log_warn("%s was trained with train.seed %lld, this job has %lld: the data order changes from here on",
               path.c_str(), static_cast<long long>(s.seed), static_cast<long long>(t.seed));
    if (s.num_training_steps != plan.total_steps && s.step >= s.num_training_steps)
      log_warn("%s is a finished run (%lld of its %lld steps), and this job plans %lld steps: %s", path.c_str(),
               static_cast<long long>(s.step), static_cast<long long>(s.num_training_steps),
               static_cast<long long>(plan.total_steps),
               plan.total_steps > s.step ? "training CONTINUES from it, with this job's learning-rate schedule; use "
                                           "another run.name to train a new model instead"
                                         : "there is nothing left to train; use another run.name to train a new "
                                           "model");
    else if (s.num_training_steps != plan.total_steps)
      log_warn("%s planned %lld optimizer steps, this job plans %lld: the learning-rate schedule follows this job",
               path.c_str(), static_cast<long long>(s.num_training_steps), static_cast<long long>(plan.total_steps));
    for (const std::string& w : resume_data_order_warnings(s, job.config->data.group_by_length))
      log_warn("%s: %s", path.c_str(), w.c_str());
  });
  at.step = state.step;
  at.skipped = state.skipped_steps;
  at.epoch = state.epoch;
  at.resume_batches = state.batches_consumed;
  at.loss_sum = state.loss_sum;
  at.loss_count = state.loss_count;
  at.trained_before = state.train_seconds;
  at.log_window = {state.log_window_loss_sum, state.log_window_grad_norm_sum, state.log_window_steps};
  if (!std::isnan(state.early_stopping_best)) at.early.best = state.early_stopping_best;
  at.early.best_step = state.early_stopping_best_step;
  at.early.bad_evals = state.early_stopping_bad_evals;
  at.early.stopped = state.early_stopped != 0;
  at.stop_reason = state.stop_reason;
  // A run stopped early goes on when this job's patience no longer stops it
  // (0 = off, or more evaluations than it waited): `--resume` it with a larger
  // train.early_stopping_patience.
  const int64_t patience = t.early_stopping_patience;
  if (at.early.stopped && (patience == 0 || at.early.bad_evals < patience)) {
    log_info("%s stopped early (%s); with train.early_stopping_patience = %lld training continues", path.c_str(),
             at.stop_reason.c_str(), static_cast<long long>(patience));
    at.early.stopped = false;
    at.stop_reason.clear();
  }
  if (job.loss_scaler && state.loss_scale > 0)
    job.loss_scaler->load_state({state.loss_scale, state.loss_scale_good_steps, state.loss_scale_hysteresis_left,
                                 state.skipped_steps});
  log_info("resumed from %s: step %lld, epoch %lld, %lld batches into it (written by %lld ranks)", path.c_str(),
           static_cast<long long>(at.step), static_cast<long long>(at.epoch),
           static_cast<long long>(at.resume_batches), static_cast<long long>(state.world_size));
  return at;
}

// One optimizer step of the loop: train_step with the learning rate of the
// updates applied so far and the loss scale, the loss scaler's update, then
// the loss and token counts summed over the ranks.
StepRecord run_step(TrainJob& job, Position& at, const std::vector<Batch>& micro, const TrainOptions& options) {
  const TrainConfig& t = job.config->train;
  StepOptions step;
  step.lr = job.schedule->lr(at.step - at.skipped);
  step.max_grad_norm = t.max_grad_norm;
  step.accumulation_steps = job.plan.accumulation;
  step.dropout_seed = DropoutSeed{t.seed, at.step, job.topology.rank};
  step.loss_scale = job.loss_scaler ? job.loss_scaler->scale() : 1.0;
  const auto& overflow = options.overflow_steps;
  step.poison_loss = job.topology.rank == options.overflow_rank &&
                     std::find(overflow.begin(), overflow.end(), at.step + 1) != overflow.end();
  // Named, not timed: the collectives inside have their own timeout
  // (docs/DESIGN.md, "Errors and hangs").
  PhaseGuard phase(job.comm, str_format("training step %lld", static_cast<long long>(at.step + 1)),
                   PhaseGuard::kNoDeadline);
  const StepResult r = train_step(*job.strategy, *job.model, micro, step);
  if (job.loss_scaler) job.loss_scaler->update(!r.applied);
  at.step += 1;
  at.skipped += r.applied ? 0 : 1;
  at::Tensor sums = at::tensor({r.loss, static_cast<double>(r.real_tokens)}, at::kDouble);
  job.host_comm->all_reduce(sums, ReduceOp::kSum);
  StepRecord record;
  record.step = at.step;
  record.epoch = job.epoch_position();
  record.loss = sums[0].item<double>() / job.plan.world_size;
  record.lr = step.lr;
  record.grad_norm = r.grad_norm;
  record.samples = static_cast<int64_t>(micro.size()) * job.plan.global_batch;
  record.tokens = sums[1].item<double>();
  record.loss_scale = job.loss_scaler ? job.loss_scaler->scale() : 0.0;
  record.skipped_steps = at.skipped;
  if (!std::isfinite(record.loss))
    throw Error(str_format("training diverged: loss is %g at step %lld (lower train.lr or check the data)", record.loss,
                           static_cast<long long>(record.step)));
  return record;
}

// A report: eval metrics, a checkpoint when asked, a line in result.jsonl,
// TensorBoard scalars, curves.svg and a line in the log.
class Reporter {
 public:
  Reporter(TrainJob& job, CheckpointManager& checkpoints, RunFolder& folder, ProgressMeter& meter,
           TensorBoardWriter* tensorboard, const TrainOptions& options, TrainResult& result)
      : job_(job), checkpoints_(checkpoints), folder_(folder), meter_(meter), tensorboard_(tensorboard),
        options_(options), result_(result), early_(job.config->train, job.config->checkpoint) {}

  // `last`: the end of training, where early stopping stops nothing.
  void report(Position& at, bool with_checkpoint, bool with_eval, int64_t epochs_done, bool last = false) {
    // Throughout: `at` and the metrics are the same on every rank.
    meter_.end_line();
    TrainReport report;
    report.epoch = epochs_done;
    report.step = at.step;
    if (at.loss_count > 0) report.metrics["train_loss"] = at.loss_sum / static_cast<double>(at.loss_count);
    at.loss_sum = 0;
    at.loss_count = 0;
    if (job_.loss_scaler) {
      report.metrics["loss_scale"] = job_.loss_scaler->scale();
      report.metrics["skipped_steps"] = static_cast<double>(at.skipped);
    }
    if (with_eval && job_.eval_data) {
      const double start = MPI_Wtime();
      PhaseGuard phase(job_.comm, str_format("evaluation at step %lld", static_cast<long long>(at.step)),
                       PhaseGuard::kNoDeadline);
      const TrainConfig& t = job_.config->train;
      const EvalSettings settings{&job_.config->data, job_.labels};
      const std::map<std::string, double> metrics =
          evaluate_task(*job_.model, *job_.eval_data, *job_.eval_table, settings, t.eval_batch_size,
                        job_.tokenizer->pad_id(), job_.device, job_.comm);
      for (const auto& kv : metrics) report.metrics[kv.first] = kv.second;
      report.metrics["eval_seconds"] = MPI_Wtime() - start;
      if (early_.enabled()) update_early_stopping(at, report, last);
      if (options_.on_evaluation && !at.early.stopped) {
        const std::string reason = options_.on_evaluation(report.metrics, at.step);
        if (!reason.empty() && !last) {
          at.early.stopped = true;
          at.stop_reason = report.stop_reason = reason;
        }
      }
    }
    with_checkpoint = with_checkpoint || at.early.stopped;  // a stopped run stays stopped when re-run
    Json metrics = Json::object();
    for (const auto& kv : report.metrics) metrics[kv.first] = kv.second;
    if (with_checkpoint) {
      const double start = MPI_Wtime();
      report.checkpoint = checkpoints_.save(job_.flat_layout, job_.strategy->checkpoint_parts(), state_at(at, metrics));
      report.metrics["checkpoint_seconds"] = saved(at, start);
    }
    report.metrics["time_total_s"] = meter_.elapsed_total();
    on_rank0(job_.comm, str_format("writing the report at step %lld", static_cast<long long>(at.step)),
             [&] { write(report); });
    result_.reports.push_back(report);
  }

  // At a step boundary, on every rank: stop for a SIGTERM that any rank got,
  // with one emergency checkpoint of this step if it fits in the grace period
  // (train/preemption.h). Not a report: result.jsonl and TensorBoard get
  // nothing, and the checkpoint keeps the loss since the last report.
  bool stop_for_preemption(const Position& at) {
    if (preemption_grace_s() <= 0) return false;  // no handler: SIGTERM kills as by default
    const PreemptionDecision d = agree_on_preemption(job_.comm, at.step, longest_checkpoint_s_, at.step > saved_step_);
    if (!d.stop) return false;
    meter_.end_line();
    log_info("SIGTERM %.1f s ago: stopping at step %lld of %lld%s", d.seconds_since_signal,
             static_cast<long long>(at.step), static_cast<long long>(job_.plan.total_steps),
             d.write_checkpoint ? " with an emergency checkpoint" : ("; no emergency checkpoint: " + d.reason).c_str());
    if (d.write_checkpoint) {
      const double start = MPI_Wtime();
      TrainState state = state_at(at, Json::object());
      state.loss_sum = at.loss_sum;
      state.loss_count = at.loss_count;
      const std::string path = checkpoints_.save(job_.flat_layout, job_.strategy->checkpoint_parts(), state);
      log_info("emergency checkpoint of step %lld in %.2f s -> %s", static_cast<long long>(at.step),
               saved(at, start), path.c_str());
    }
    result_.preempted = true;
    return true;
  }

  // Records a checkpoint of this step just written; returns its seconds.
  double saved(const Position& at, double start) {
    const double seconds = MPI_Wtime() - start;
    saved_step_ = at.step;
    longest_checkpoint_s_ = std::max(longest_checkpoint_s_, seconds);
    return seconds;
  }
  void resumed_at(int64_t step) { saved_step_ = step; }

 private:
  // The metrics are the same on every rank (gathered logits); rank 0's
  // decision is broadcast all the same, so that the ranks cannot part ways.
  void update_early_stopping(Position& at, TrainReport& report, bool last) {
    early_.load(at.early);
    const int stop = early_.update(report.metrics, at.step) ? 1 : 0;
    at.early = early_.state();
    at.early.stopped = false;
    if (!broadcast_value<int>(stop, job_.comm, "early stopping: the decision") || last) return;
    at.early.stopped = true;
    at.stop_reason = "early stopping: " + early_.reason();
    report.stop_reason = at.stop_reason;
  }

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
    state.tokenizer_files = job_.tokenizer_files;
    state.lowercase = job_.tokenizer->options().lowercase ? 1 : 0;
    state.metrics_json = metrics.dump();
    state.train_seconds = meter_.elapsed_total();
    const ProgressWindow window = meter_.window();
    state.log_window_loss_sum = window.loss_sum;
    state.log_window_grad_norm_sum = window.grad_norm_sum;
    state.log_window_steps = window.steps;
    state.skipped_steps = at.skipped;
    if (job_.loss_scaler) {
      const LossScalerState& s = job_.loss_scaler->state();
      state.loss_scale = s.scale;
      state.loss_scale_good_steps = s.good_steps;
      state.loss_scale_hysteresis_left = s.hysteresis_left;
    }
    if (at.early.best) state.early_stopping_best = *at.early.best;
    state.early_stopping_best_step = at.early.best_step;
    state.early_stopping_bad_evals = at.early.bad_evals;
    state.early_stopped = at.early.stopped ? 1 : 0;
    state.stop_reason = at.stop_reason;
    return state;  // loss_sum / loss_count: reported just now, so 0
  }

  // Rank 0: result.jsonl, TensorBoard, curves.svg and the log line.
  void write(const TrainReport& report) {
    Json line = Json::object();
    line["epoch"] = report.epoch;
    line["step"] = report.step;
    line["training_iteration"] = folder_.num_reports() + 1;
    for (const auto& kv : report.metrics) line[kv.first] = kv.second;
    line["checkpoint"] = report.checkpoint.empty() ? Json(nullptr) : Json(report.checkpoint);
    if (!report.stop_reason.empty()) line["stop_reason"] = report.stop_reason;
    folder_.append_result(line.dump());
    if (tensorboard_) {
      for (const auto& kv : report.metrics)
        if (kv.first != "eval_seconds" && kv.first != "checkpoint_seconds" && kv.first != "time_total_s" &&
            kv.first != "loss_scale" && kv.first != "skipped_steps")
          tensorboard_->add_scalar(tensorboard_tag(kv.first), kv.second, report.step);
      tensorboard_->flush();
    }
    try {
      write_run_curves_svg(folder_.dir());
    } catch (const Error& e) {
      log_warn("curves.svg not written: %s", e.what());  // a hand-edited progress.csv must not stop training
    }
    std::string summary;
    for (const char* key : {"train_loss", "eval_loss", "eval_accuracy", "eval_f1", "eval_mcc", "eval_macro_f1",
                            "eval_mse", "eval_pearson"}) {
      auto it = report.metrics.find(key);
      if (it != report.metrics.end()) summary += str_format(" %s %.4f", key, it->second);
    }
    for (const char* key : {"eval_seconds", "checkpoint_seconds"}) {
      auto it = report.metrics.find(key);
      if (it != report.metrics.end()) summary += str_format(" | %s %.2f", key, it->second);
    }
    log_info("report %lld: epoch %lld step %lld%s%s", static_cast<long long>(folder_.num_reports()),
             static_cast<long long>(report.epoch), static_cast<long long>(report.step), summary.c_str(),
             report.checkpoint.empty() ? "" : (" -> " + report.checkpoint).c_str());
    if (!report.stop_reason.empty())
      log_info("stopping at step %lld of %lld: %s", static_cast<long long>(report.step),
               static_cast<long long>(job_.plan.total_steps), report.stop_reason.c_str());
  }

  TrainJob& job_;
  CheckpointManager& checkpoints_;
  RunFolder& folder_;
  ProgressMeter& meter_;
  TensorBoardWriter* tensorboard_;
  const TrainOptions& options_;
  TrainResult& result_;
  EarlyStopping early_;
  int64_t saved_step_ = 0;            // the step of the newest checkpoint (resumed from or written)
  double longest_checkpoint_s_ = 0;   // this rank's longest checkpoint write in this job
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
  log_info("lr schedule: %s", job.schedule->describe().c_str());
}

// Rank 0: the run's TensorBoard writer, its old event files trimmed to the
// resumed step (or removed for a fresh run), so no step appears twice.
std::unique_ptr<TensorBoardWriter> open_tensorboard(const RunFolder& folder, const std::string& resumed_from,
                                                    int64_t step) {
  if (folder.rank() != 0) return nullptr;
  const std::string dir = folder.file("tensorboard");
  if (resumed_from.empty()) {
    remove_tensorboard_events(dir);
  } else {
    const TensorBoardTrim trim = trim_tensorboard_events(dir, step);
    if (trim.num_damaged_bytes > 0)
      log_warn("%s: %lld damaged bytes after the last intact TensorBoard record cut off", dir.c_str(),
               static_cast<long long>(trim.num_damaged_bytes));
  }
  return std::make_unique<TensorBoardWriter>(dir);
}

// Rank 0, before anything in the folder changes: a job with no checkpoint to
// resume from would start at step 0 and replace the records of an earlier run
// (its reports, its checkpoints that all failed to verify); that needs
// TrainOptions::restart. A progress.csv alone (a job killed before its first
// report) is replaced without asking.
void refuse_restart_over_records(const RunFolder& folder, const CheckpointManager& checkpoints,
                                 const TrainOptions& options, MPI_Comm comm) {
  const std::vector<std::string> damaged = checkpoints.damaged();
  on_rank0(comm, "checking the run folder's records", [&] {
    const int64_t reports = folder.count_recorded_reports();
    if (reports == 0 && damaged.empty()) return;
    std::string records = reports > 0 ? str_format("%lld reports in result.jsonl", static_cast<long long>(reports)) : "";
    if (!damaged.empty()) {
      records += (records.empty() ? "" : ", and ") + str_format("%zu checkpoints, every one damaged: ", damaged.size());
      for (size_t i = 0; i < damaged.size(); ++i) records += (i ? "; " : "") + damaged[i];
    }
    if (options.restart) {
      log_warn("--restart: starting again from step 0 over the records of an earlier run in %s (%s)",
               folder.dir().c_str(), records.c_str());
      return;
    }
    throw Error(folder.dir() + " holds the records of an earlier run (" + records +
                ") and no checkpoint to resume from: training would start again from step 0 and replace them. "
                "Nothing was changed. Pass --restart to start over (damaged checkpoints are set aside, not deleted), "
                "--resume another checkpoint, or use another run.name");
  });
}

}  // namespace

TrainResult train(const RunConfig& config, MPI_Comm comm, const TrainOptions& options) {
  const double invocation_start = MPI_Wtime();
  RunFolder folder(config.run, comm);
  CheckpointManager checkpoints(folder.dir(), config.checkpoint, comm);
  const std::string resume_path = checkpoints.resume_path(options.resume_from);
  if (resume_path.empty()) refuse_restart_over_records(folder, checkpoints, options, comm);
  else if (options.restart)
    throw Error("--restart: " + resume_path + " is an intact checkpoint to resume from; --restart only starts over in "
                "a run folder without one. Leave --restart out to resume, or use another run.name");
  TrainJob job = build_job(config, comm, TrainJobOptions{options.force_loss_scaling});
  Position at = resume(job, checkpoints, resume_path);
  // Every check that can refuse the job has passed: from here on the run
  // folder changes (docs/DESIGN.md, "The run folder"); with nothing to train
  // it stays as it was, config.toml included.
  const bool nothing_to_do = !resume_path.empty() && (at.early.stopped || at.step >= job.plan.total_steps ||
                                                      at.epoch >= job.plan.num_epochs);
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (!nothing_to_do) {
    checkpoints.set_aside_damaged();
    folder.start(options.config_toml, resume_path.empty() ? std::nullopt : std::optional<int64_t>(at.step));
    on_rank0(comm, "opening TensorBoard", [&] { tensorboard = open_tensorboard(folder, resume_path, at.step); });
  }
  log_plan(job, folder);
  TrainResult result;
  result.run_dir = folder.dir();
  result.resumed_from = resume_path;
  result.num_training_steps = job.plan.total_steps;
  result.nothing_to_do = nothing_to_do;
  ProgressMeter meter(config.train, job.plan.total_steps, job.plan.num_epochs, at.step, at.trained_before,
                      options.live_progress, folder, tensorboard.get(), invocation_start, at.log_window);
  Reporter reporter(job, checkpoints, folder, meter, tensorboard.get(), options, result);
  reporter.resumed_at(at.step);
  if (at.early.stopped)
    log_info("%s: training stopped at step %lld (%s); nothing to do (to go on, run it again or --resume it "
             "with a larger train.early_stopping_patience, or 0)", resume_path.c_str(), static_cast<long long>(at.step),
             at.stop_reason.c_str());
  else if (nothing_to_do)
    log_info("%s: training already finished at step %lld of %lld (epoch %lld of %lld); nothing to do",
             resume_path.c_str(), static_cast<long long>(at.step), static_cast<long long>(job.plan.total_steps),
             static_cast<long long>(at.epoch), static_cast<long long>(job.plan.num_epochs));

  bool stopped = false;  // by TrainOptions::stop_after_step or SIGTERM
  while (!stopped && !at.early.stopped && at.step < job.plan.total_steps && at.epoch < job.plan.num_epochs) {
    if (at.resume_batches >= 0)
      job.sampler->load_state({at.epoch, at.resume_batches});
    else
      job.sampler->set_epoch(at.epoch);
    at.resume_batches = -1;
    bool epoch_end = false;
    while (at.step < job.plan.total_steps) {
      const std::vector<Batch> micro = job.next_micro_batches();
      if (micro.empty()) break;
      const StepRecord record = run_step(job, at, micro, options);
      at.loss_sum += record.loss;
      ++at.loss_count;
      meter.record(record);
      stopped = options.stop_after_step > 0 && at.step >= options.stop_after_step;
      epoch_end = job.epoch_done();
      if (stopped || epoch_end || at.step >= job.plan.total_steps) break;
      const bool eval_now = config.train.eval_every_steps > 0 && at.step % config.train.eval_every_steps == 0;
      const bool checkpoint_now = checkpoints.due(at.step, false, at.epoch, false);
      if (eval_now || checkpoint_now) reporter.report(at, checkpoint_now, eval_now, at.epoch);
      if (at.early.stopped) break;
      stopped = reporter.stop_for_preemption(at);
      if (stopped) break;
    }
    if (stopped || at.early.stopped) break;
    epoch_end = job.epoch_done();
    if (epoch_end) ++at.epoch;
    const bool last = at.step >= job.plan.total_steps || at.epoch >= job.plan.num_epochs;
    reporter.report(at, checkpoints.due(at.step, epoch_end, at.epoch, last), true, at.epoch, last);
    if (!last && !at.early.stopped) stopped = reporter.stop_for_preemption(at);
  }

  result.steps = at.step;
  result.skipped_steps = at.skipped;
  result.stopped_early = at.early.stopped;
  result.stop_reason = at.stop_reason;
  result.finished = !stopped && (at.step >= job.plan.total_steps || at.early.stopped);
  if (job.eval_data)
    result.baseline = task_spec(job.config->model.task)
                          .baseline(*job.train_table, job.train_data, *job.eval_table, *job.eval_data,
                                    EvalSettings{&job.config->data, job.labels});
  result.best_checkpoint = checkpoints.best();
  result.last_checkpoint = checkpoints.newest();
  result.final_params = job.strategy->flat_params().narrow(0, 0, job.strategy->layout().numel()).to(at::kCPU).clone();
  for (const ParamSlot& slot : job.strategy->layout().slots()) result.param_names.push_back(slot.name);
  if (result.finished && !nothing_to_do)
    log_info("done: %lld steps in %s; checkpoints in %s (newest %s%s%s)", static_cast<long long>(at.step),
             format_duration(MPI_Wtime() - invocation_start).c_str(), folder.dir().c_str(),
             result.last_checkpoint.c_str(), result.best_checkpoint.empty() ? "" : ", best ",
             result.best_checkpoint.c_str());
  return result;
}

}  // namespace shardtrain
