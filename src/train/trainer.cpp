// train(): the job built, resumed from a checkpoint or started, and the loop
// over epochs and steps, reporting through train/reporter.h.
#include "shardtrain/train/trainer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/signals.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/train/early_stopping.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/job.h"
#include "shardtrain/train/preemption.h"
#include "shardtrain/report/progress.h"
#include "shardtrain/report/run_folder.h"
#include "shardtrain/report/tensorboard.h"
#include "shardtrain/train/train_step.h"
#include "shardtrain/train/lora_run.h"
#include "train/position.h"
#include "train/reporter.h"

namespace shardtrain {
namespace {

using namespace train_detail;

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
    if (s.lora_json.empty() != (job.model->lora() == nullptr))
      throw Error(path + (s.lora_json.empty() ? " is a full fine-tuning checkpoint, and this job trains a LoRA adapter "
                                              : " is a LoRA checkpoint, and this job fine-tunes the whole model ") +
                  "([lora] r / adapter): resume it with its own [lora] settings, or use another run.name");
    if (!s.lora_json.empty()) {
      const std::string ours = job.model->lora()->to_json().dump();
      if (s.lora_json != ours)
        throw Error(path + " holds an adapter with " + s.lora_json + "; this job's [lora] gives " + ours +
                    ": resume with the checkpoint's [lora] settings, or use another run.name");
      check_base_identity(s.base_model_sha256, job.base_model_sha256, path, job.config->model.path);
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
