// `shardtrain plot RUN_DIR [RUN_DIR ...] --output FILE.svg|.png`: the training
// curves of one or more run folders in one chart (report/curves.h), one colour
// per run. A sweep folder (sweep_state.json) stands for its trials: sweep.metric
// and the loss per trial, pruned trials dashed. Rank 0 reads and writes alone;
// every rank reports the same error.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/sweep/state.h"
#include "shardtrain/report/curves.h"

namespace shardtrain {
namespace {

struct PlotFlags {
  std::vector<std::string> run_dirs;
  std::string output;
  std::string title;
};

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

// A sweep folder: each trial that trained, as a run with one series per
// panel (sweep.metric, and the training loss or eval_loss), pruned ones dashed.
std::vector<RunCurves> sweep_curves(const std::string& dir) {
  const SweepState state = read_sweep_state(dir);
  std::vector<RunCurves> runs;
  for (const TrialRecord& t : state.trials) {
    const std::filesystem::path run_dir = std::filesystem::path(dir) / t.spec.id;
    std::error_code error;
    if (!std::filesystem::exists(run_dir / "progress.csv", error) &&
        !std::filesystem::exists(run_dir / "result.jsonl", error))
      continue;  // not started
    RunCurves run = read_run_curves(run_dir.string(), t.spec.id);
    run.dashed = t.status == TrialStatus::kPruned;
    const std::string loss = state.metric == "eval_loss" ? "eval_loss" : "train_loss";
    auto keep = [](std::vector<CurveSeries>& series, const std::string& name) {
      series.erase(std::remove_if(series.begin(), series.end(), [&](const CurveSeries& s) { return s.name != name; }),
                   series.end());
    };
    keep(run.loss, loss);
    keep(run.metrics, state.metric);
    runs.push_back(std::move(run));
  }
  if (runs.empty()) throw Error(dir + ": no trial of this sweep has trained yet (nothing to plot)");
  return runs;
}

void plot(const PlotFlags& flags) {
  refuse_link_loop(flags.output, "--output");
  const std::string ext = lower_extension(flags.output);
  if (ext != ".svg" && ext != ".png")
    throw Error("--output " + flags.output + ": the file name must end in .svg or .png");
  if (ext == ".png" && !curves_png_supported()) write_curves_png("", flags.output);  // throws, naming the package

  // Runs are named by their folder; two folders of one name keep the path as given.
  std::vector<RunCurves> runs;
  std::string title = flags.title;
  for (const std::string& dir : flags.run_dirs) {
    if (!sweep_state_exists(dir)) {
      runs.push_back(read_run_curves(dir));
      continue;
    }
    std::vector<RunCurves> trials = sweep_curves(dir);
    if (title.empty() && flags.run_dirs.size() == 1)
      title = "sweep " + std::filesystem::path(dir).filename().string() + " (pruned trials dashed)";
    runs.insert(runs.end(), trials.begin(), trials.end());
  }
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t j = 0; j < runs.size(); ++j)
      if (i != j && runs[i].name == runs[j].name) runs[i].name = flags.run_dirs[i];

  const std::string svg = render_curves_svg(runs, title);
  if (ext == ".svg") write_file_atomic(flags.output, svg);
  else write_curves_png(svg, flags.output);
  log_info("plot: wrote %s (%zu run%s)", flags.output.c_str(), runs.size(), runs.size() == 1 ? "" : "s");
}

}  // namespace

void add_plot_command(CLI::App& root, World& world) {
  auto flags = std::make_shared<PlotFlags>();
  CLI::App* command = root.add_subcommand(
      "plot", "Draw the training curves of run folders (loss, eval metrics, learning rate by step) as SVG or PNG");
  command->add_option("run_dirs", flags->run_dirs, "run folders (<run.storage_path>/<run.name>), one colour each; or sweep folders (each trial a run, pruned ones dashed)")
      ->required();
  command->add_option("--output,-o", flags->output, "the chart: FILE.svg, or FILE.png (needs librsvg at build time)")
      ->required();
  command->add_option("--title", flags->title, "title above the chart (default: the run names)");
  command->callback([flags, &world]() { on_rank0(world.comm(), "plot: rank 0 draws " + flags->output, [&] { plot(*flags); }); });
}

}  // namespace shardtrain
