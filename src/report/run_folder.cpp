#include "shardtrain/report/run_folder.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"

namespace fs = std::filesystem;

namespace shardtrain {
namespace {

constexpr const char* kProgressHeader =
    "step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s,loss_scale,skipped_steps";

// Keeps the lines of a report file that belong to steps <= max_step: JSON
// lines by their "step", CSV rows by their first column (the header stays).
void truncate_after_step(const std::string& path, int64_t max_step, bool jsonl) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string out, line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    bool keep = false;
    if (jsonl) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      keep = !j.is_discarded() && j.contains("step") && j["step"].is_number_integer() &&
             j["step"].get<int64_t>() <= max_step;
    } else if (first) {
      keep = true;  // CSV header
    } else {
      keep = std::strtoll(line.c_str(), nullptr, 10) <= max_step;
    }
    first = false;
    if (keep) out += line + "\n";
  }
  in.close();
  write_file_atomic(path, out);
}

int64_t count_lines(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line))
    if (!line.empty()) ++n;
  return n;
}

}  // namespace

RunFolder::RunFolder(const JobConfig& run, MPI_Comm comm) : comm_(comm) {
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
  dir_ = (fs::path(run.storage_path) / run.name).string();
  on_rank0(comm_, "creating the run folder " + dir_, [&] {
    refuse_link_loop(dir_, "run.storage_path / run.name");
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (!ec && fs::is_directory(dir_, ec)) return;
    // Name the part of the path that is in the way: run.storage_path, or the run.name inside it.
    std::error_code probe;
    if (fs::exists(run.storage_path, probe) && !fs::is_directory(run.storage_path, probe))
      throw Error("run.storage_path = '" + run.storage_path + "' is a file, not a folder; point it at a folder");
    if (fs::exists(dir_, probe) && !fs::is_directory(dir_, probe))
      throw Error("the run folder '" + dir_ + "' (run.storage_path / run.name) is a file, not a folder; choose "
                  "another run.name or move the file away");
    throw Error("run.storage_path / run.name: cannot create the run folder '" + dir_ + "': " +
                (ec ? ec.message() : std::string("it is not a folder")));
  });
  // Held until start(): a job refused by its checks, or with nothing to
  // train, appends nothing to train.log (docs/DESIGN.md, "The run folder").
  if (rank_ == 0) set_log_file(file("train.log"), /*deferred=*/true);
}

RunFolder::~RunFolder() {
  if (rank_ == 0) set_log_file("");
}

std::string RunFolder::file(const std::string& name) const { return (fs::path(dir_) / name).string(); }

void RunFolder::start(const std::string& config_toml, std::optional<int64_t> resumed_step) {
  if (rank_ == 0) commit_log_file();
  on_rank0(comm_, "writing the run folder's config.toml", [&] {
    const std::string result = file("result.jsonl"), progress = file("progress.csv");
    write_file_atomic(file("config.toml"), config_toml);
    if (!resumed_step) {
      std::remove(result.c_str());
      std::remove(progress.c_str());
    } else {
      truncate_after_step(result, *resumed_step, true);
      truncate_after_step(progress, *resumed_step, false);
    }
    if (!fs::exists(progress)) append_line(progress, kProgressHeader);
    num_reports_ = count_lines(result);
  });
}

int64_t RunFolder::count_recorded_reports() const { return count_lines(file("result.jsonl")); }

void RunFolder::append_result(const std::string& json_line) {
  append_line(file("result.jsonl"), json_line);
  ++num_reports_;
}

void RunFolder::append_progress(const std::string& csv_row) { append_line(file("progress.csv"), csv_row); }

}  // namespace shardtrain
