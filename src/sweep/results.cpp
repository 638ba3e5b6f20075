#include "shardtrain/sweep/results.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace {

using Json = nlohmann::json;

// Best first; NaN (no value) last; ties by the order of the trials.
bool better(double a, double b, bool maximize) {
  if (std::isnan(b)) return !std::isnan(a);
  if (std::isnan(a)) return false;
  return maximize ? a > b : a < b;
}

std::string cell(double v) { return std::isnan(v) ? "-" : str_format("%.4f", v); }
std::string exact(double v) { return std::isnan(v) ? "" : shortest_text(v); }

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::vector<std::string> param_keys(const SweepState& state) {
  std::vector<std::string> keys;
  if (!state.trials.empty())
    for (const auto& kv : state.trials.front().spec.params) keys.push_back(kv.first);
  return keys;
}

double value_at(const TrialResult& r, int64_t evaluation) {
  return evaluation >= 1 && evaluation <= static_cast<int64_t>(r.values.size()) ? r.values[evaluation - 1] : NAN;
}

bool has_repeats(const SweepState& state) {
  return std::any_of(state.trials.begin(), state.trials.end(), [](const TrialRecord& t) { return t.spec.repeat > 0; });
}

// A trial whose files are gone is not shown as finished (or pruned).
const char* shown_status(const TrialRecord& t) { return t.missing.empty() ? trial_status_name(t.status) : "missing"; }

void write_if_changed(const std::string& path, const std::string& content) {
  std::error_code error;
  if (std::filesystem::is_regular_file(path, error)) {
    try {
      if (read_file(path, "sweep results") == content) return;
    } catch (const Error&) {
    }
  }
  write_file_atomic(path, content);
}

}  // namespace

SweepResults summarize_sweep(const SweepState& state) {
  SweepResults out;
  for (const TrialRecord& t : state.trials) {
    TrialResult r;
    r.trial = &t;
    r.best = NAN;
    for (const SweepEvent* e : state.events_of(t.spec.id)) {
      r.values.push_back(e->value);
      if (better(e->value, r.best, state.maximize)) {
        r.best = e->value;
        r.best_evaluation = e->evaluation;
      }
    }
    out.trials.push_back(std::move(r));
  }
  std::stable_sort(out.trials.begin(), out.trials.end(),
                   [&](const TrialResult& a, const TrialResult& b) { return better(a.best, b.best, state.maximize); });
  // The best trial has a value and its checkpoint.
  for (const TrialResult& r : out.trials)
    if (!std::isnan(r.best) && r.trial->missing.empty()) {
      out.best = &r;
      break;
    }
  std::map<int64_t, ConfigResult> configs;
  for (const TrialResult& r : out.trials) {
    ConfigResult& c = configs[r.trial->spec.config_index];
    c.config_index = r.trial->spec.config_index;
    c.seeds.push_back(&r);
  }
  for (auto& [index, c] : configs) {
    std::sort(c.seeds.begin(), c.seeds.end(),
              [](const TrialResult* a, const TrialResult* b) { return a->trial->spec.repeat < b->trial->spec.repeat; });
    double sum = 0;
    int n = 0;
    for (const TrialResult* s : c.seeds)
      if (!std::isnan(s->best)) sum += s->best, ++n;
    c.mean = n > 0 ? sum / n : NAN;
    double squares = 0;
    for (const TrialResult* s : c.seeds)
      if (!std::isnan(s->best)) squares += (s->best - c.mean) * (s->best - c.mean);
    c.std_dev = n > 1 ? std::sqrt(squares / (n - 1)) : (n == 1 ? 0.0 : NAN);
    out.configs.push_back(c);
  }
  std::stable_sort(out.configs.begin(), out.configs.end(),
                   [&](const ConfigResult& a, const ConfigResult& b) { return better(a.mean, b.mean, state.maximize); });
  return out;
}

std::string sweep_table(const SweepState& state, const SweepResults& results) {
  const std::vector<std::string> keys = param_keys(state);
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"#", "trial", "status"};
  for (const std::string& k : keys) header.push_back(k);
  for (int64_t rung : state.rungs) header.push_back(str_format("@%lld", static_cast<long long>(rung)));
  for (const char* h : {"evals", "last", "best", "checkpoint"}) header.push_back(h);
  rows.push_back(header);
  int position = 0;
  for (const TrialResult& r : results.trials) {
    const TrialRecord& t = *r.trial;
    std::vector<std::string> row = {std::to_string(++position), t.spec.id, shown_status(t)};
    for (const auto& kv : t.spec.params) row.push_back(kv.second);
    for (int64_t rung : state.rungs) row.push_back(cell(value_at(r, rung)));
    row.push_back(std::to_string(r.values.size()));
    row.push_back(cell(r.values.empty() ? NAN : r.values.back()));
    row.push_back(cell(r.best));
    row.push_back(t.best_checkpoint.empty() ? "-" : t.best_checkpoint);
    rows.push_back(row);
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  std::ostringstream out;
  out << "sweep.metric " << state.metric << " (" << (state.maximize ? "max" : "min") << "), best first"
      << (state.rungs.empty() ? "" : "; @N: the value at ASHA's rung of N evaluations") << "\n";
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) line += row[i] + std::string(width[i] - row[i].size() + 2, ' ');
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  for (const TrialResult& r : results.trials) {
    const TrialRecord& t = *r.trial;
    if (!t.missing.empty())
      out << t.spec.id << " " << trial_status_name(t.status) << ", but " << t.missing
          << ": the next `shardtrain sweep` run trains it again\n";
    else if (t.status == TrialStatus::kFailed) out << t.spec.id << " failed: " << t.error << "\n";
    else if (t.status == TrialStatus::kPruned) out << t.spec.id << " " << t.stop_reason << "\n";
  }
  if (has_repeats(state)) {
    out << "\nper configuration (mean and sample standard deviation of the seeds' best values):\n";
    for (const ConfigResult& c : results.configs) {
      std::string line = str_format("config %03lld", static_cast<long long>(c.config_index));
      for (const auto& kv : c.seeds.front()->trial->spec.params) line += "  " + kv.first + "=" + kv.second;
      line += "  mean " + cell(c.mean) + "  std " + cell(c.std_dev) + "  seeds";
      for (const TrialResult* s : c.seeds) line += " " + cell(s->best);
      out << line << "\n";
    }
  }
  if (results.best)
    out << "best: " << results.best->trial->spec.id << " " << state.metric << " " << cell(results.best->best)
        << " (evaluation " << results.best->best_evaluation << "), checkpoint "
        << (results.best->trial->best_checkpoint.empty() ? "-" : results.best->trial->best_checkpoint) << "\n";
  return out.str();
}

std::string sweep_results_csv(const SweepState& state, const SweepResults& results) {
  const std::vector<std::string> keys = param_keys(state);
  std::string out = "trial,config,repeat,status";
  for (const std::string& k : keys) out += "," + csv_field(k);
  for (int64_t rung : state.rungs) out += "," + csv_field(state.metric + "@" + std::to_string(rung));
  out += ",evaluations,last,best,best_evaluation,steps,checkpoint,stop_reason,error\n";
  for (const TrialResult& r : results.trials) {
    const TrialRecord& t = *r.trial;
    out += t.spec.id + "," + std::to_string(t.spec.config_index) + "," + std::to_string(t.spec.repeat) + "," +
           shown_status(t);
    for (const auto& kv : t.spec.params) out += "," + csv_field(kv.second);
    for (int64_t rung : state.rungs) out += "," + exact(value_at(r, rung));
    out += "," + std::to_string(r.values.size()) + "," + exact(r.values.empty() ? NAN : r.values.back()) + "," +
           exact(r.best) + "," + (r.best_evaluation > 0 ? std::to_string(r.best_evaluation) : "") + "," +
           std::to_string(t.steps) + "," + csv_field(t.best_checkpoint) + "," + csv_field(t.stop_reason) + "," +
           csv_field(t.error) + "\n";
  }
  return out;
}

std::string sweep_best_json(const SweepState& state, const SweepResults& results) {
  Json j = Json::object();
  j["metric"] = state.metric;
  j["mode"] = state.maximize ? "max" : "min";
  if (!results.best) {
    j["trial"] = nullptr;
    return j.dump(2) + "\n";
  }
  const TrialRecord& t = *results.best->trial;
  j["trial"] = t.spec.id;
  j["value"] = results.best->best;
  j["evaluation"] = results.best->best_evaluation;
  j["status"] = trial_status_name(t.status);
  Json params = Json::object();
  for (const auto& kv : t.spec.params) params[kv.first] = kv.second;
  j["params"] = params;
  // Relative to the sweep folder (this file's): true wherever the folder moves.
  j["checkpoint"] = t.best_checkpoint;
  j["run_dir"] = t.run_dir;
  j["config"] = (std::filesystem::path(t.run_dir) / "config.toml").string();
  if (has_repeats(state) && !results.configs.empty() && !std::isnan(results.configs.front().mean)) {
    const ConfigResult& c = results.configs.front();
    Json best_config = Json::object();
    best_config["config"] = c.config_index;
    Json cp = Json::object();
    for (const auto& kv : c.seeds.front()->trial->spec.params) cp[kv.first] = kv.second;
    best_config["params"] = cp;
    best_config["mean"] = c.mean;
    best_config["std"] = c.std_dev;
    Json seeds = Json::array();
    for (const TrialResult* s : c.seeds)
      seeds.push_back({{"trial", s->trial->spec.id}, {"value", std::isnan(s->best) ? Json(nullptr) : Json(s->best)}});
    best_config["seeds"] = seeds;
    j["best_config"] = best_config;
  }
  return j.dump(2) + "\n";
}

void write_sweep_results(const std::string& sweep_dir, const SweepState& state, const SweepResults& results) {
  write_if_changed((std::filesystem::path(sweep_dir) / "results.csv").string(), sweep_results_csv(state, results));
  write_if_changed((std::filesystem::path(sweep_dir) / "best.json").string(), sweep_best_json(state, results));
}

}  // namespace shardtrain
