// The reports of the training loop (train/reporter.h).
#include "train/reporter.h"
#include "shardtrain/core/fs_util.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/signals.h"
#include "shardtrain/report/curves.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/preemption.h"

namespace shardtrain::train_detail {

using Json = nlohmann::json;

void Reporter::report(Position& at, bool with_checkpoint, bool with_eval, int64_t epochs_done, bool last) {
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

bool Reporter::stop_for_preemption(const Position& at) {
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

void Reporter::update_early_stopping(Position& at, TrainReport& report, bool last) {
  early_.load(at.early);
  const int stop = early_.update(report.metrics, at.step) ? 1 : 0;
  at.early = early_.state();
  at.early.stopped = false;
  if (!broadcast_value<int>(stop, job_.comm, "early stopping: the decision") || last) return;
  at.early.stopped = true;
  at.stop_reason = "early stopping: " + early_.reason();
  report.stop_reason = at.stop_reason;
}

TrainState Reporter::state_at(const Position& at, const Json& metrics) const {
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
  if (const LoraSpec* lora = job_.model->lora()) {
    state.lora_json = lora->to_json().dump();
    state.base_model_path =
        job_.config->model.init == ModelInit::kPretrained ? real_path(job_.config->model.path) : std::string();
    state.base_model_sha256 = job_.base_model_sha256;
  }
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

void Reporter::write(const TrainReport& report) {
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

}  // namespace shardtrain::train_detail
