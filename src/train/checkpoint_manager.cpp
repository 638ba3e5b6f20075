#include "shardtrain/train/checkpoint_manager.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include <sys/stat.h>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fatal_guard.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/parallel/strategy.h"

namespace fs = std::filesystem;

namespace shardtrain {
namespace {

std::optional<double> score_of(const std::string& metrics_json, const std::string& attribute) {
  if (attribute.empty()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(metrics_json, nullptr, false);
  if (j.is_discarded() || !j.contains(attribute) || !j[attribute].is_number()) return std::nullopt;
  return j[attribute].get<double>();
}

}  // namespace

std::string checkpoint_path(const std::string& run_dir, int64_t index) {
  char name[64];
  std::snprintf(name, sizeof(name), "checkpoint_%06lld.h5", static_cast<long long>(index));
  return run_dir + "/" + name;
}

// The one name of a checkpoint file (checkpoint_path writes it; group 1: its number).
const std::string kCheckpointName = R"(checkpoint_([0-9]+)\.h5)";

int64_t checkpoint_index(const std::string& path) {
  static const std::regex pattern(kCheckpointName);
  const std::string name = fs::path(path).filename().string();
  std::smatch match;
  if (!std::regex_match(name, match, pattern)) return -1;
  return std::stoll(match[1].str());
}

std::string latest_checkpoint(const std::string& run_dir) {
  std::error_code ec;
  std::string best;
  int64_t best_index = -1;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const int64_t index = checkpoint_index(entry.path().string());
    if (index > best_index) {
      best_index = index;
      best = entry.path().string();
    }
  }
  return best_index < 0 ? "" : run_dir + "/" + fs::path(best).filename().string();
}

int64_t highest_checkpoint_index(const std::string& run_dir) {
  // Also a checkpoint set aside (set_aside_damaged_checkpoint): it keeps its number.
  static const std::regex pattern(kCheckpointName + R"((\.damaged(-[0-9]+)?)?)");
  std::error_code ec;
  int64_t highest = 0;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::smatch match;
    if (std::regex_match(name, match, pattern)) highest = std::max<int64_t>(highest, std::stoll(match[1].str()));
  }
  return highest;
}

std::string set_aside_damaged_checkpoint(const std::string& path) {
  std::string target = path + ".damaged";
  struct stat info {};
  for (int n = 2; lstat(target.c_str(), &info) == 0; ++n) target = path + ".damaged-" + std::to_string(n);
  if (std::rename(path.c_str(), target.c_str()) != 0)
    throw Error("cannot set the damaged checkpoint " + path + " aside as " + target + ": " + os_error_text(errno));
  return target;
}

CheckpointManager::CheckpointManager(std::string run_dir, const CheckpointConfig& config, MPI_Comm comm)
    : run_dir_(std::move(run_dir)), config_(config), comm_(comm) {
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
  if (rank_ == 0) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(run_dir_, ec)) {
      const std::string path = entry.path().string();
      const int64_t index = checkpoint_index(path);
      if (index < 0) continue;
      Kept k{index, run_dir_ + "/" + entry.path().filename().string(), std::nullopt};
      // An unreadable one stays in the list unscored: resume_path() verifies
      // and sets it aside, keep-best-N ranks it last.
      try {
        CheckpointReader reader(path, MPI_COMM_SELF);
        if (reader.has_attribute("metrics_json"))
          k.score = score_of(reader.string_attribute("metrics_json"), config_.score_attribute);
      } catch (const Error&) {
      }
      kept_.push_back(k);
    }
    std::sort(kept_.begin(), kept_.end(), [](const Kept& a, const Kept& b) { return a.index < b.index; });
    next_index_ = highest_checkpoint_index(run_dir_) + 1;
  }
  next_index_ = broadcast_value<int64_t>(next_index_, comm_, "scanning the run folder's checkpoints");
}

std::string CheckpointManager::resume_path(const std::string& requested) {
  if (!requested.empty()) {
    on_rank0(comm_, "verifying the checkpoint to resume from", [&] {
      if (!fs::is_regular_file(requested)) throw Error("--resume: no checkpoint file '" + requested + "'");
      try {
        verify_checkpoint(requested);
      } catch (const Error& e) {
        throw Error(std::string("--resume: ") + e.what() + " (choose another checkpoint, or leave --resume out to "
                    "resume from the run folder's newest intact one)");
      }
    });
    return requested;
  }
  return rank0_value(comm_, "verifying the checkpoint to resume from", [&]() -> std::string {
    while (!kept_.empty()) {
      const std::string path = kept_.back().path;
      try {
        const double start = MPI_Wtime();
        const CheckpointVerification v = verify_checkpoint(path);
        log_info("%s verified: %lld datasets, %s read in %.1f s", path.c_str(), static_cast<long long>(v.num_datasets),
                 format_bytes(static_cast<double>(v.num_bytes)).c_str(), MPI_Wtime() - start);
        return path;
      } catch (const Error& e) {
        log_warn("%s; trying the next older checkpoint", e.what());
        damaged_paths_.push_back(path);
        damaged_problems_.push_back(shorten(e.what()));
        kept_.pop_back();
      }
    }
    return std::string();
  });
}

std::vector<std::string> CheckpointManager::damaged() const {
  const int64_t count = broadcast_value<int64_t>(static_cast<int64_t>(damaged_paths_.size()), comm_,
                                                 "the damaged checkpoints");
  std::vector<std::string> out;
  for (int64_t i = 0; i < count; ++i)
    out.push_back(broadcast_string(rank_ == 0 ? damaged_problems_[static_cast<size_t>(i)] : "", comm_,
                                   "the damaged checkpoints"));
  return out;
}

void CheckpointManager::set_aside_damaged() {
  on_rank0(comm_, "setting damaged checkpoints aside", [&] {
    for (const std::string& path : damaged_paths_)
      log_warn("%s set aside as %s (not deleted)", path.c_str(), set_aside_damaged_checkpoint(path).c_str());
    damaged_paths_.clear();
    damaged_problems_.clear();
  });
}

TrainState CheckpointManager::restore(const std::string& path, Strategy& strategy,
                                      const std::vector<FlatTensor>& layout,
                                      const std::function<void(const TrainState&)>& check) const {
  CheckpointReader reader(path, comm_);
  const TrainState state = read_train_state(reader);
  if (check) check(state);
  std::vector<FlatPart> parts = strategy.checkpoint_parts();
  read_flat_state(reader, layout, parts, /*with_optimizer=*/true);
  strategy.finish_load(state.step - state.skipped_steps);  // the optimizer's own step count
  return state;
}

bool CheckpointManager::due(int64_t step, bool epoch_end, int64_t epochs_done, bool last) const {
  return last || (config_.every_steps > 0 && step % config_.every_steps == 0) ||
         (epoch_end && config_.every_epochs > 0 && epochs_done % config_.every_epochs == 0);
}

std::string CheckpointManager::save(const std::vector<FlatTensor>& layout, const std::vector<FlatPart>& parts,
                                    const TrainState& state) {
  const std::string path = checkpoint_path(run_dir_, next_index_++);
  write_train_checkpoint(path, layout, parts, state, comm_);
  on_rank0(comm_, "recording checkpoint " + path, [&] {
    kept_.push_back({checkpoint_index(path), path, score_of(state.metrics_json, config_.score_attribute)});
    prune();
  });
  return path;
}

// Keeps the best num_to_keep by score (ties and unscored: newer first), and
// always the newest.
void CheckpointManager::prune() {
  if (config_.num_to_keep <= 0 || static_cast<int64_t>(kept_.size()) <= config_.num_to_keep) return;
  refuse_if_fatal_in_progress("deleting checkpoints beyond checkpoint.num_to_keep");
  const bool maximize = config_.score_order == ScoreOrder::kMax;
  std::vector<Kept> ranked = kept_;
  std::stable_sort(ranked.begin(), ranked.end(), [&](const Kept& a, const Kept& b) {
    if (a.score.has_value() != b.score.has_value()) return a.score.has_value();
    if (a.score && *a.score != *b.score) return maximize ? *a.score > *b.score : *a.score < *b.score;
    return a.index > b.index;
  });
  const int64_t newest = kept_.back().index;
  for (size_t i = static_cast<size_t>(config_.num_to_keep); i < ranked.size(); ++i) {
    if (ranked[i].index == newest) continue;
    std::error_code ec;
    fs::remove(ranked[i].path, ec);
    if (ec) log_warn("could not delete old checkpoint %s: %s", ranked[i].path.c_str(), ec.message().c_str());
    kept_.erase(std::remove_if(kept_.begin(), kept_.end(), [&](const Kept& k) { return k.index == ranked[i].index; }),
                kept_.end());
  }
}

std::string CheckpointManager::newest() const {
  return broadcast_string(rank_ == 0 && !kept_.empty() ? kept_.back().path : "", comm_, "the newest checkpoint");
}

std::string CheckpointManager::best() const {
  std::string best_path;
  if (rank_ == 0 && !config_.score_attribute.empty()) {
    const bool maximize = config_.score_order == ScoreOrder::kMax;
    const Kept* best = nullptr;
    for (const Kept& k : kept_) {
      if (!k.score) continue;
      if (!best || (maximize ? *k.score >= *best->score : *k.score <= *best->score)) best = &k;
    }
    if (best) best_path = best->path;
  }
  return broadcast_string(best_path, comm_, "the best checkpoint");
}

}  // namespace shardtrain
