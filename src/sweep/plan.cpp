// The sweep's plan: its trials' configs (sweep/plan.h).
#include "shardtrain/sweep/plan.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "shardtrain/config/config.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/sweep/metric.h"

namespace shardtrain {
namespace {

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

RunConfig load_base(const SweepSpec& spec, const LoadOptions& load) {
  std::error_code error;
  if (std::filesystem::is_directory(spec.base, error)) {
    std::vector<std::string> tomls;
    for (const auto& entry : std::filesystem::directory_iterator(spec.base, error))
      if (entry.path().extension() == ".toml") tomls.push_back(entry.path().filename().string());
    std::sort(tomls.begin(), tomls.end());
    std::string some;
    for (size_t i = 0; i < tomls.size() && i < 5; ++i) some += (some.empty() ? "" : ", ") + tomls[i];
    throw Error("sweep.base = " + spec.base + " (" + spec.file + ") is a directory: name the run config file (TOML) "
                "every trial starts from" + (some.empty() ? std::string() : "; that folder holds " + some));
  }
  try {
    return load_run_config(spec.base, {}, load);
  } catch (const Error& e) {
    throw Error("sweep.base = " + spec.base + ": " + e.what());
  }
}

// The base's resolved values, key -> TOML text (config_to_toml's lines; an
// unset optional key is its "# key = (unset)" comment), but for the keys the
// sweep sets: run.name, run.storage_path (the sweep folder may move) and the
// space's keys (the sweep file's values win).
std::map<std::string, std::string> base_config_values(const RunConfig& base, const SweepSpec& spec) {
  std::map<std::string, std::string> values;
  std::istringstream lines(config_to_toml(base));
  std::string line, section;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const bool unset = line.rfind("# ", 0) == 0;
    const size_t equals = line.find(" = ");
    if (equals == std::string::npos) continue;
    const std::string key = section + "." + line.substr(unset ? 2 : 0, equals - (unset ? 2 : 0));
    values[key] = line.substr(equals + 3);
  }
  values.erase("run.name");
  values.erase("run.storage_path");
  for (const SpaceDimension& d : spec.space) values.erase(d.key);
  return values;
}

}  // namespace

SweepPlan make_sweep_plan(const std::string& sweep_file, int world_size) {
  SweepPlan plan;
  plan.spec = read_sweep_file(sweep_file);
  const SweepSpec& spec = plan.spec;
  if (world_size % spec.ranks_per_trial != 0)
    throw Error(str_format("sweep.ranks_per_trial = %lld does not divide the job's %d ranks (%s): start a multiple "
                           "of %lld ranks, or change sweep.ranks_per_trial",
                           static_cast<long long>(spec.ranks_per_trial), world_size, sweep_file.c_str(),
                           static_cast<long long>(spec.ranks_per_trial)));
  LoadOptions load;
  load.world_size = static_cast<int>(spec.ranks_per_trial);
  const RunConfig base = load_base(spec, load);
  if (base.data.eval_file.empty())
    throw Error("sweep.metric = '" + spec.metric + "' needs evaluations: the base config " + spec.base +
                " sets no data.eval_file");
  check_sweep_metric(spec, base);
  plan.base_config = base_config_values(base, spec);
  plan.dir = (std::filesystem::path(base.run.storage_path) / spec.name).string();
  plan.lock_timeout_s = base.run.collective_timeout_s;
  plan.trials = make_trials(spec);
  for (const TrialSpec& trial : plan.trials) {
    ConfigOverrides overrides = trial.params;
    if (spec.repeats > 1) overrides.emplace_back("train.seed", std::to_string(base.train.seed + trial.repeat));
    overrides.emplace_back("run.storage_path", plan.dir);
    overrides.emplace_back("run.name", trial.id);
    std::string params;
    for (const auto& [key, value] : trial.params) params += (params.empty() ? "" : ", ") + key + " = " + value;
    try {
      plan.configs.push_back(load_run_config(spec.base, overrides, load));
    } catch (const Error& e) {
      throw Error(trial.id + " (" + params + ") of " + sweep_file + ": " +
                  replace_all(e.what(), " (on the command line)", " (sweep.space)") + "; nothing was started");
    }
    plan.config_tomls.push_back(config_to_toml(plan.configs.back()));
  }
  return plan;
}


}  // namespace shardtrain
