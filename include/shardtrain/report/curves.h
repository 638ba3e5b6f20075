// Training curves of one or more run folders as an SVG chart (PNG too when
// built with librsvg), for `shardtrain plot` and for curves.svg in a run folder.
//
//   write_run_curves_svg("runs/quickstart");              // runs/quickstart/curves.svg, atomically
//
//   std::vector<RunCurves> runs = {read_run_curves("runs/ddp"), read_run_curves("runs/zero3")};
//   const std::string svg = render_curves_svg(runs);      // one colour per run
//   write_curves_png(svg, "compare.png");                 // Error naming librsvg2-dev if not built in
//
// A run folder's progress.csv (a header naming the columns, shardtrain's is
// step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s; one row
// per logged step) gives the train loss and the learning rate; result.jsonl
// (one JSON object per report, with "step" and metrics) gives eval_loss and
// the eval metrics (every numeric eval_* key but eval_seconds), and the train
// loss when progress.csv has no rows. The chart has three panels against the
// optimizer step -- loss (train and eval), eval metrics, learning rate -- each
// with axes, ticks, labels, a title and a legend. With one run each series has
// its own colour; with several, each run has a colour (its name in the legend)
// and each series a dash pattern.
//
// Titles and run names are bytes from the user: invalid UTF-8 and control
// characters are drawn as U+FFFD and markup is escaped, so the SVG is always
// well-formed XML; legend names are cut to 30 characters, never inside one.
//
// Bad input is a shardtrain::Error naming the file and line: a missing folder,
// a folder with neither file, an empty progress.csv (no header), an empty or
// malformed line (wrong number of values, a value that is not a number, a
// result line that is not a JSON object with an integer "step").
#pragma once

#include <string>
#include <vector>

namespace shardtrain {

struct CurvePoint {
  double step = 0;
  double value = 0;
};

struct CurveSeries {
  std::string name;  // "train_loss", "eval_loss", "eval_accuracy", ..., "lr"
  std::vector<CurvePoint> points;
};

struct RunCurves {
  std::string name;  // shown in the legend when several runs are drawn
  std::vector<CurveSeries> loss;     // train_loss, eval_loss (those present)
  std::vector<CurveSeries> metrics;  // eval_* but eval_loss and eval_seconds, in first-seen order
  std::vector<CurveSeries> lr;       // lr
  // Drawn dashed, every series of it (a sweep's pruned trials, `plot SWEEP_DIR`).
  // When any run is dashed, dashes tell runs apart, not series: give such runs
  // one series per panel.
  bool dashed = false;
};

// Reads <run_dir>/progress.csv and <run_dir>/result.jsonl; `name` defaults to
// the folder's name. Throws shardtrain::Error as described above.
RunCurves read_run_curves(const std::string& run_dir, const std::string& name = "");

// The chart as an SVG document (deterministic: the same runs give the same text).
std::string render_curves_svg(const std::vector<RunCurves>& runs, const std::string& title = "");

// Reads `run_dir` and writes <run_dir>/curves.svg (via a temporary file and a
// rename). Throws shardtrain::Error.
void write_run_curves_svg(const std::string& run_dir);

// A value axis over data in [lo, hi] (finite, lo <= hi; from_zero: include 0):
// limits rounded out to 1, 2 or 5 x 10^k steps and at most 13 ticks, for every
// finite range -- equal or one-ulp-apart values are widened to a relative width
// of 1e-9, and a range past the largest double is stepped without overflow.
struct CurveAxis {
  double lo = 0, hi = 1, step = 0.2;
  std::vector<double> ticks;  // increasing, within [lo, hi]
};
CurveAxis curve_axis(double lo, double hi, bool from_zero);

// True when this build renders PNG (librsvg and cairo found at build time).
bool curves_png_supported();
// Renders `svg` with librsvg to a PNG file at `path` (atomically). Throws
// shardtrain::Error when the build has no librsvg (naming Debian's
// librsvg2-dev) or rendering or writing fails.
void write_curves_png(const std::string& svg, const std::string& path);

}  // namespace shardtrain
