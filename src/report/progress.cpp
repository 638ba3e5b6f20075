#include "shardtrain/report/progress.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/report/run_folder.h"
#include "shardtrain/report/tensorboard.h"

namespace shardtrain {
namespace {

std::string format_count(double v) {
  if (v >= 1e6) return str_format("%.2fM", v / 1e6);
  if (v >= 1e4) return str_format("%.1fk", v / 1e3);
  return str_format("%.1f", v);
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const long long s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) return str_format("%lldh%02lldm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return str_format("%lldm%02llds", s / 60, s % 60);
  return str_format("%llds", s);
}

ProgressMeter::ProgressMeter(const TrainConfig& train, int64_t total_steps, int64_t num_epochs, int64_t first_step,
                             double trained_before, bool live, RunFolder& folder, TensorBoardWriter* tensorboard,
                             double invocation_start, const ProgressWindow& resumed)
    : log_every_steps_(train.log_every_steps),
      total_steps_(total_steps),
      num_epochs_(num_epochs),
      first_step_(first_step),
      trained_before_(trained_before),
      start_(MPI_Wtime()),
      invocation_start_(invocation_start),
      folder_(folder),
      tensorboard_(tensorboard),
      window_start_(start_),
      window_loss_(resumed.loss_sum),
      window_norm_(resumed.grad_norm_sum),
      window_steps_(resumed.steps) {
  rank_ = folder.rank();
  live_ = live && rank_ == 0 && isatty(STDERR_FILENO);
}

double ProgressMeter::elapsed_total() const { return trained_before_ + (MPI_Wtime() - start_); }

void ProgressMeter::record(const StepRecord& s) {
  window_loss_ += s.loss;
  window_norm_ += s.grad_norm;
  window_tokens_ += s.tokens;
  window_samples_ += s.samples;
  ++window_steps_;
  const double now = MPI_Wtime();
  if (rank_ == 0 && s.step == first_step_ + 1) {
    log_info("first step done %.2f s after the start (job built and resumed in %.2f s, the step %.2f s)",
             now - invocation_start_, start_ - invocation_start_, now - start_);
  }
  const double steps_done_here = static_cast<double>(s.step - first_step_);
  const double eta = steps_done_here > 0 ? (now - start_) / steps_done_here * (total_steps_ - s.step) : NAN;
  const double dt = std::max(now - window_start_, 1e-9);
  const bool log_now = log_every_steps_ > 0 && s.step % log_every_steps_ == 0;
  const double loss = window_loss_ / std::max<int64_t>(window_steps_, 1);
  if (rank_ == 0 && (log_now || live_)) {
    const std::string scale =
        s.loss_scale > 0 ? str_format(" | scale %g | skipped %lld", s.loss_scale, static_cast<long long>(s.skipped_steps))
                         : "";
    const std::string line =
        str_format("step %lld/%lld | epoch %.2f/%lld | loss %.4f | lr %.3g%s | %s samples/s | %s tokens/s | ETA %s",
                   static_cast<long long>(s.step), static_cast<long long>(total_steps_), s.epoch,
                   static_cast<long long>(num_epochs_), loss, s.lr, scale.c_str(),
                   format_count(window_samples_ / dt).c_str(), format_count(window_tokens_ / dt).c_str(),
                   format_duration(eta).c_str());
    if (live_) {
      if (now - last_live_ > 0.2 || s.step == total_steps_) {
        std::fprintf(stderr, "\r%s\033[K", line.c_str());
        std::fflush(stderr);
        last_live_ = now;
      }
    } else {
      log_info("%s", line.c_str());
    }
  }
  if (!log_now) return;
  const double norm = window_norm_ / std::max<int64_t>(window_steps_, 1);
  // Collective, like the reports' writes: a row rank 0 cannot write (a full
  // disk) ends every rank with its Error now. Thrown on rank 0 alone, it let
  // the others go on into the next step's collectives until the timeout ended
  // the job, the error unsaid (docs/DESIGN.md, "Errors and hangs").
  on_rank0(folder_.comm(), str_format("writing progress.csv at step %lld", static_cast<long long>(s.step)), [&] {
    folder_.append_progress(str_format("%lld,%.6f,%.8g,%.8g,%.8g,%.6g,%.6g,%.3f,%.8g,%lld", static_cast<long long>(s.step),
                                       s.epoch, loss, s.lr, norm, window_samples_ / dt, window_tokens_ / dt,
                                       elapsed_total(), s.loss_scale, static_cast<long long>(s.skipped_steps)));
    if (tensorboard_) {
      // Hugging Face's TensorBoardCallback names.
      tensorboard_->add_scalar("train/loss", loss, s.step);
      tensorboard_->add_scalar("train/learning_rate", s.lr, s.step);
      tensorboard_->add_scalar("train/grad_norm", norm, s.step);
      tensorboard_->add_scalar("train/epoch", s.epoch, s.step);
      tensorboard_->add_scalar("train/samples_per_s", window_samples_ / dt, s.step);
      tensorboard_->add_scalar("train/tokens_per_s", window_tokens_ / dt, s.step);
      if (s.loss_scale > 0) {
        tensorboard_->add_scalar("train/loss_scale", s.loss_scale, s.step);
        tensorboard_->add_scalar("train/skipped_steps", static_cast<double>(s.skipped_steps), s.step);
      }
    }
  });
  window_start_ = now;
  window_loss_ = window_norm_ = window_tokens_ = 0;
  window_steps_ = window_samples_ = 0;
}

void ProgressMeter::end_line() {
  if (live_) std::fprintf(stderr, "\n");
}

}  // namespace shardtrain
