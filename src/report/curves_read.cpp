// Reading a run folder's curves (report/curves.h): progress.csv's train loss
// and learning rate, result.jsonl's eval loss and metrics.
#include "shardtrain/report/curves.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    fields.push_back(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return fields;
}

bool parse_number(const std::string& text, double* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return *end == '\0' && errno != ERANGE;
}

CurveSeries* series_named(std::vector<CurveSeries>& list, const std::string& name) {
  for (auto& s : list)
    if (s.name == name) return &s;
  list.push_back({name, {}});
  return &list.back();
}

void read_progress(const std::string& path, RunCurves& run) {
  const std::vector<std::string> lines = split_lines(read_file(path, "curves"));
  if (lines.empty())
    throw Error(path + ":1: empty file; expected the header line step,epoch,loss,lr,grad_norm,samples_per_s,"
                       "tokens_per_s,elapsed_s,loss_scale,skipped_steps");
  const std::vector<std::string> header = split_commas(lines[0]);
  auto column = [&](const char* name) -> int {
    const auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  };
  const int step_column = column("step"), loss_column = column("loss"), lr_column = column("lr");
  if (step_column < 0)
    throw Error(path + ":1: the header '" + lines[0] + "' has no 'step' column (shardtrain's is step,epoch,loss,lr,"
                       "grad_norm,samples_per_s,tokens_per_s,elapsed_s,loss_scale,skipped_steps)");
  CurveSeries train_loss{"train_loss", {}}, lr{"lr", {}};
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string where = path + ":" + std::to_string(i + 1);
    if (lines[i].empty()) throw Error(where + ": empty line");
    const std::vector<std::string> fields = split_commas(lines[i]);
    if (fields.size() != header.size())
      throw Error(str_format("%s: expected %zu comma-separated values (%s), got %zu", where.c_str(), header.size(),
                             lines[0].c_str(), fields.size()));
    for (size_t f = 0; f < fields.size(); ++f) {
      double value = 0;
      if (!parse_number(fields[f], &value))
        throw Error(where + ": " + header[f] + " = '" + fields[f] + "' is not a number");
    }
    double step = 0;
    parse_number(fields[step_column], &step);
    if (!(step >= 0) || !std::isfinite(step) || step != std::floor(step))
      throw Error(where + ": step = '" + fields[step_column] + "' is not a step number (an integer >= 0)");
    double value = 0;
    if (loss_column >= 0 && parse_number(fields[loss_column], &value)) train_loss.points.push_back({step, value});
    if (lr_column >= 0 && parse_number(fields[lr_column], &value)) lr.points.push_back({step, value});
  }
  if (!train_loss.points.empty()) run.loss.push_back(std::move(train_loss));
  if (!lr.points.empty()) run.lr.push_back(std::move(lr));
}

void read_results(const std::string& path, RunCurves& run, bool want_train_loss) {
  const std::vector<std::string> lines = split_lines(read_file(path, "curves"));
  std::vector<CurveSeries> loss;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = path + ":" + std::to_string(i + 1);
    if (lines[i].empty()) throw Error(where + ": empty line");
    Json line;
    try {
      line = Json::parse(lines[i]);
    } catch (const Json::exception& e) {
      throw Error(where + ": not JSON (" + e.what() + ")");
    }
    if (!line.is_object()) throw Error(where + ": expected a JSON object {\"step\": ..., metrics}");
    const auto step = line.find("step");
    if (step == line.end() || !step->is_number_integer() || step->get<int64_t>() < 0)
      throw Error(where + ": no \"step\" (an integer >= 0)");
    const double x = static_cast<double>(step->get<int64_t>());
    for (const auto& item : line.items()) {
      const std::string& key = item.key();
      if (!item.value().is_number()) continue;  // "checkpoint", or null for a metric that was NaN
      const double y = item.value().get<double>();
      if (key == "eval_loss" || (key == "train_loss" && want_train_loss))
        series_named(loss, key)->points.push_back({x, y});
      else if (key.rfind("eval_", 0) == 0 && key != "eval_seconds")
        series_named(run.metrics, key)->points.push_back({x, y});
    }
  }
  // train loss first, then eval loss, whatever order the JSON keys came in.
  std::sort(loss.begin(), loss.end(), [](const CurveSeries& a, const CurveSeries& b) { return a.name > b.name; });
  for (auto& s : loss) run.loss.push_back(std::move(s));
}

}  // namespace

RunCurves read_run_curves(const std::string& run_dir, const std::string& name) {
  std::error_code error;
  if (!fs::is_directory(run_dir, error)) throw Error(run_dir + ": no such run folder");
  const std::string progress = (fs::path(run_dir) / "progress.csv").string();
  const std::string results = (fs::path(run_dir) / "result.jsonl").string();
  const bool has_progress = fs::exists(progress, error), has_results = fs::exists(results, error);
  if (!has_progress && !has_results)
    throw Error(run_dir + ": neither progress.csv nor result.jsonl is there; is it a shardtrain run folder "
                          "(<run.storage_path>/<run.name>)?");
  RunCurves run;
  run.name = name;
  if (run.name.empty()) {
    fs::path path = fs::path(run_dir).lexically_normal();
    if (path.filename().empty()) path = path.parent_path();
    run.name = path.filename().string();
  }
  if (has_progress) read_progress(progress, run);
  if (has_results) read_results(results, run, /*want_train_loss=*/run.loss.empty());
  return run;
}

}  // namespace shardtrain
