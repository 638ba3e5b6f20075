#include "shardtrain/sweep/state.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/json_read.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

using Json = nlohmann::json;

constexpr const char* kStatusNames[] = {"pending", "running", "finished", "pruned", "failed"};

TrialStatus status_from(const std::string& name, const std::string& where) {
  for (int i = 0; i < 5; ++i)
    if (name == kStatusNames[i]) return static_cast<TrialStatus>(i);
  throw Error(where + ": unknown trial status '" + name + "'");
}

Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }
double number_from(const Json& j) { return j.is_number() ? j.get<double>() : NAN; }

constexpr const char* kFormat = "shardtrain sweep state 2";  // 2: paths relative to the sweep folder, base_config
constexpr const char* kFormatAbsolutePaths = "shardtrain sweep state 1";

// A state of format 1 held <sweep folder>/<id> and the checkpoint under it,
// with the folder as the sweep saw it then: both become relative to that
// folder, whatever it was (an absolute path, or one relative to the job's
// working directory). A path outside it stays as it is.
void make_paths_relative(TrialRecord& t) {
  namespace fs = std::filesystem;
  const fs::path run_dir(t.run_dir);
  if (!run_dir.has_parent_path()) return;
  const fs::path old_dir = run_dir.parent_path();
  const auto relative = [&](const std::string& path) {
    if (path.empty()) return path;
    const std::string rel = fs::path(path).lexically_relative(old_dir).string();
    return rel.empty() || rel.rfind("..", 0) == 0 ? path : rel;
  };
  t.best_checkpoint = relative(t.best_checkpoint);
  t.run_dir = relative(t.run_dir);
}

Json params_json(const TrialSpec& t) {
  Json params = Json::array();
  for (const auto& [key, value] : t.params) params.push_back(Json::array({key, value}));
  return params;
}

}  // namespace

const char* trial_status_name(TrialStatus status) { return kStatusNames[static_cast<int>(status)]; }

TrialRecord& SweepState::trial(const std::string& id) {
  for (TrialRecord& t : trials)
    if (t.spec.id == id) return t;
  throw Error("the sweep state has no trial " + id);
}

std::vector<const SweepEvent*> SweepState::events_of(const std::string& id) const {
  std::vector<const SweepEvent*> out;
  for (const SweepEvent& e : events)
    if (e.trial == id) out.push_back(&e);
  return out;
}

std::string sweep_state_path(const std::string& sweep_dir) {
  return (std::filesystem::path(sweep_dir) / "sweep_state.json").string();
}

bool sweep_state_exists(const std::string& sweep_dir) {
  std::error_code error;
  return std::filesystem::exists(sweep_state_path(sweep_dir), error);
}

void write_sweep_state(const std::string& sweep_dir, const SweepState& state) {
  Json root = Json::object();
  root["format"] = kFormat;
  root["fingerprint"] = state.fingerprint;
  root["base_config"] = state.base_config;
  root["metric"] = state.metric;
  root["mode"] = state.maximize ? "max" : "min";
  root["rungs"] = state.rungs;
  root["stop_requested"] = state.stop_requested;
  Json trials = Json::array();
  for (const TrialRecord& t : state.trials) {
    Json j = Json::object();
    j["id"] = t.spec.id;
    j["config_index"] = t.spec.config_index;
    j["repeat"] = t.spec.repeat;
    j["params"] = params_json(t.spec);
    j["status"] = trial_status_name(t.status);
    j["group"] = t.group;
    j["attempts"] = t.attempts;
    j["steps"] = t.steps;
    j["stop_reason"] = t.stop_reason;
    j["error"] = t.error;
    j["best_checkpoint"] = t.best_checkpoint;
    j["run_dir"] = t.run_dir;
    trials.push_back(j);
  }
  root["trials"] = trials;
  Json events = Json::array();
  for (const SweepEvent& e : state.events)
    events.push_back({{"trial", e.trial}, {"evaluation", e.evaluation}, {"step", e.step}, {"value", number(e.value)},
                      {"stop", e.stop}, {"pruned", e.pruned}, {"reason", e.reason}});
  root["events"] = events;
  write_file_atomic(sweep_state_path(sweep_dir), root.dump(1) + "\n");
}

SweepState read_sweep_state(const std::string& sweep_dir) {
  const std::string path = sweep_state_path(sweep_dir);
  const Json root = read_user_json_file(path, "the sweep state");
  SweepState state;
  try {
    if (root.at("format") != kFormat && root.at("format") != kFormatAbsolutePaths)
      throw Error("not a shardtrain sweep state (format '" + root.at("format").dump() + "', this shardtrain reads '" +
                  kFormat + "' and '" + kFormatAbsolutePaths + "')");
    state.fingerprint = root.at("fingerprint").get<std::string>();
    if (root.contains("base_config")) state.base_config = root.at("base_config").get<std::map<std::string, std::string>>();
    state.metric = root.at("metric").get<std::string>();
    state.maximize = root.at("mode").get<std::string>() != "min";
    state.rungs = root.at("rungs").get<std::vector<int64_t>>();
    state.stop_requested = root.at("stop_requested").get<bool>();
    for (const Json& j : root.at("trials")) {
      TrialRecord t;
      t.spec.id = j.at("id").get<std::string>();
      t.spec.config_index = j.at("config_index").get<int64_t>();
      t.spec.repeat = j.at("repeat").get<int64_t>();
      for (const Json& p : j.at("params")) t.spec.params.emplace_back(p.at(0).get<std::string>(), p.at(1).get<std::string>());
      t.status = status_from(j.at("status").get<std::string>(), path);
      t.group = j.at("group").get<int64_t>();
      t.attempts = j.at("attempts").get<int64_t>();
      t.steps = j.at("steps").get<int64_t>();
      t.stop_reason = j.at("stop_reason").get<std::string>();
      t.error = j.at("error").get<std::string>();
      t.best_checkpoint = j.at("best_checkpoint").get<std::string>();
      t.run_dir = j.at("run_dir").get<std::string>();
      make_paths_relative(t);
      state.trials.push_back(std::move(t));
    }
    for (const Json& j : root.at("events")) {
      SweepEvent e;
      e.trial = j.at("trial").get<std::string>();
      e.evaluation = j.at("evaluation").get<int64_t>();
      e.step = j.at("step").get<int64_t>();
      e.value = number_from(j.at("value"));
      e.stop = j.at("stop").get<bool>();
      e.reason = j.at("reason").get<std::string>();
      // States written before the field: ASHA's pruning reasons said so.
      e.pruned = j.contains("pruned") ? j.at("pruned").get<bool>() : e.stop && e.reason.rfind("pruned", 0) == 0;
      state.events.push_back(std::move(e));
    }
  } catch (const Json::exception& e) {
    throw Error(path + ": damaged sweep state (" + std::string(e.what()) +
                "); restore it or start the sweep under another sweep.name");
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return state;
}

std::string sweep_path(const std::string& sweep_dir, const std::string& path) {
  return (std::filesystem::path(sweep_dir) / path).string();  // an absolute `path` replaces the folder
}

int64_t check_trial_files(const std::string& sweep_dir, SweepState& state) {
  int64_t missing = 0;
  for (TrialRecord& t : state.trials) {
    t.missing.clear();
    if (t.status != TrialStatus::kFinished && t.status != TrialStatus::kPruned) continue;
    std::error_code error;
    const std::string run_dir = t.run_dir.empty() ? t.spec.id : t.run_dir;
    if (!std::filesystem::is_directory(sweep_path(sweep_dir, run_dir), error))
      t.missing = "its run folder " + run_dir + " is gone";
    else if (!t.best_checkpoint.empty() &&
             !std::filesystem::is_regular_file(sweep_path(sweep_dir, t.best_checkpoint), error))
      t.missing = "its checkpoint " + t.best_checkpoint + " is gone";
    missing += t.missing.empty() ? 0 : 1;
  }
  return missing;
}

std::vector<std::string> base_config_changes(const std::map<std::string, std::string>& recorded,
                                             const std::map<std::string, std::string>& current) {
  std::map<std::string, std::pair<std::string, std::string>> both;
  for (const auto& [key, value] : recorded) both[key] = {value, "(none)"};
  for (const auto& [key, value] : current) {
    auto found = both.find(key);
    if (found == both.end()) both[key] = {"(none)", value};
    else found->second.second = value;
  }
  std::vector<std::string> changes;
  for (const auto& [key, values] : both)
    if (values.first != values.second) changes.push_back(key + ": " + values.first + " -> " + values.second);
  return changes;
}

std::string sweep_fingerprint(const SweepSpec& spec, const std::vector<TrialSpec>& trials) {
  Json j = Json::object();
  j["metric"] = spec.metric;
  j["mode"] = spec.maximize ? "max" : "min";
  j["scheduler"] = spec.asha ? str_format("asha grace_period %lld reduction_factor %lld max_t %lld",
                                          static_cast<long long>(spec.grace_period),
                                          static_cast<long long>(spec.reduction_factor),
                                          static_cast<long long>(spec.max_t))
                             : "none";
  Json t = Json::array();
  for (const TrialSpec& trial : trials) t.push_back(Json::array({trial.id, params_json(trial)}));
  j["trials"] = t;
  return j.dump();
}

SweepStateLock::SweepStateLock(const std::string& sweep_dir, double timeout_s)
    : path_((std::filesystem::path(sweep_dir) / "sweep_state.lock").string()) {
  const std::string mine = path_ + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(mine.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error("cannot create " + mine + ": " + os_error_text(errno));
  ::close(fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (::link(mine.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    if (error != EEXIST) {
      ::unlink(mine.c_str());
      throw Error("cannot take the sweep state's lock " + path_ + ": " + os_error_text(error));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::unlink(mine.c_str());
      throw Error(str_format("the sweep state's lock %s was held for more than %.0f s (run.collective_timeout_s): "
                             "a rank holding it stopped; if no job runs in this sweep folder, remove the file",
                             path_.c_str(), timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::unlink(mine.c_str());
}

SweepStateLock::~SweepStateLock() { ::unlink(path_.c_str()); }

bool remove_stale_sweep_state_lock(const std::string& sweep_dir) {
  const std::string path = (std::filesystem::path(sweep_dir) / "sweep_state.lock").string();
  return ::unlink(path.c_str()) == 0;
}

}  // namespace shardtrain
