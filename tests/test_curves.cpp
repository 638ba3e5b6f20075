// Training curves (report/curves.h): reading a run folder's progress.csv and
// result.jsonl, the errors that name file:line, and the SVG's structure (three
// panels, axes, legend, one colour per run). tests/check_curves_render.py
// renders the SVG with rsvg-convert and checks the pixels (CTest curves_render).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/report/curves.h"
#include "support/scratch_dir.h"

namespace test_curves_test {

namespace fs = std::filesystem;
using namespace shardtrain;

const char* kHeader = "step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s\n";

struct CurvesScratch : shardtrain_test::ScratchDir {
  CurvesScratch() : ScratchDir("curves") {}
  // A run folder `name` with the given file contents (nullptr: no such file).
  std::string run(const std::string& name, const char* progress, const char* results) const {
    const std::string path = dir + "/" + name;
    fs::create_directories(path);
    if (progress) std::ofstream(path + "/progress.csv") << progress;
    if (results) std::ofstream(path + "/result.jsonl") << results;
    return path;
  }
};

std::string curves_error(const std::string& run_dir) {
  try {
    read_run_curves(run_dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const std::string kProgress = std::string(kHeader) +
                              "10,0.290000,0.69,2e-05,1.5,300,9000,3.5\n"
                              "20,0.580000,0.65,1.8e-05,1.4,310,9100,6.9\n"
                              "30,0.870000,0.61,1.6e-05,nan,305,9050,10.2\n";
const char* kResults =
    "{\"epoch\":1,\"step\":34,\"training_iteration\":1,\"train_loss\":0.64,\"eval_loss\":0.62,"
    "\"eval_accuracy\":0.68,\"eval_f1\":0.81,\"eval_mcc\":0.0,\"eval_seconds\":1.2,\"time_total_s\":12.0,"
    "\"checkpoint\":\"runs/x/checkpoint_000001.h5\"}\n"
    "{\"epoch\":2,\"step\":68,\"training_iteration\":2,\"train_loss\":0.58,\"eval_loss\":0.60,"
    "\"eval_accuracy\":0.71,\"eval_f1\":0.82,\"eval_mcc\":null,\"checkpoint\":null}\n";

TEST_CASE("a run folder's curves: train loss and lr from progress.csv, eval from result.jsonl") {
  CurvesScratch s;
  const RunCurves run = read_run_curves(s.run("quick", kProgress.c_str(), kResults) + "/");
  CHECK(run.name == "quick");
  REQUIRE(run.loss.size() == 2);
  CHECK(run.loss[0].name == "train_loss");  // from progress.csv: result.jsonl's train_loss is not used then
  CHECK(run.loss[0].points.size() == 3);
  CHECK(run.loss[0].points[2].step == 30);
  CHECK(run.loss[0].points[2].value == 0.61);
  CHECK(run.loss[1].name == "eval_loss");
  CHECK(run.loss[1].points.size() == 2);
  REQUIRE(run.metrics.size() == 3);  // eval_seconds is not a metric
  CHECK(run.metrics[0].name == "eval_accuracy");
  CHECK(run.metrics[2].name == "eval_mcc");
  CHECK(run.metrics[2].points.size() == 1);  // null (a NaN metric) is no point
  REQUIRE(run.lr.size() == 1);
  CHECK(run.lr[0].points[1].value == 1.8e-05);

  // Only result.jsonl: the train loss comes from its reports.
  const RunCurves reports = read_run_curves(s.run("reports_only", nullptr, kResults));
  REQUIRE(!reports.loss.empty());
  CHECK(reports.loss[0].name == "train_loss");
  CHECK(reports.loss[0].points.size() == 2);
  CHECK(reports.lr.empty());
}

TEST_CASE("bad run folders are errors naming the file and line") {
  CurvesScratch s;
  CHECK(curves_error(s.dir + "/nope") == s.dir + "/nope: no such run folder");
  CHECK(curves_error(s.run("empty_folder", nullptr, nullptr)).find("neither progress.csv nor result.jsonl") !=
        std::string::npos);
  const std::string empty = s.run("empty_csv", "", nullptr);
  CHECK(curves_error(empty).find(empty + "/progress.csv:1: empty file; expected the header line step,") == 0);
  const std::string no_step = s.run("no_step", "epoch,loss\n0.1,0.5\n", nullptr);
  CHECK(curves_error(no_step).find(no_step + "/progress.csv:1: the header 'epoch,loss' has no 'step' column") == 0);
  const std::string short_row = s.run("short_row", (std::string(kHeader) + "10,0.1,0.6,2e-5,1,1,1,1\n10,0.2\n").c_str(),
                                      nullptr);
  CHECK(curves_error(short_row) ==
        short_row + "/progress.csv:3: expected 8 comma-separated values (step,epoch,loss,lr,grad_norm,samples_per_s,"
                    "tokens_per_s,elapsed_s), got 2");
  const std::string word = s.run("word", (std::string(kHeader) + "10,0.1,abc,2e-5,1,1,1,1\n").c_str(), nullptr);
  CHECK(curves_error(word) == word + "/progress.csv:2: loss = 'abc' is not a number");
  const std::string blank = s.run("blank", (std::string(kHeader) + "\n10,0.1,0.6,2e-5,1,1,1,1\n").c_str(), nullptr);
  CHECK(curves_error(blank) == blank + "/progress.csv:2: empty line");
  const std::string fraction =
      s.run("fraction", (std::string(kHeader) + "1.5,0.1,0.6,2e-5,1,1,1,1\n").c_str(), nullptr);
  CHECK(curves_error(fraction).find("progress.csv:2: step = '1.5' is not a step number") != std::string::npos);

  const std::string torn = s.run("torn", nullptr, "{\"step\":1,\"eval_loss\":0.5}\n{\"step\":2,\"eval_lo");
  CHECK(curves_error(torn).find(torn + "/result.jsonl:2: not JSON (") == 0);
  const std::string gap = s.run("gap", nullptr, "{\"step\":1}\n\n{\"step\":2}\n");
  CHECK(curves_error(gap) == gap + "/result.jsonl:2: empty line");
  const std::string stepless = s.run("stepless", nullptr, "{\"epoch\":1,\"eval_loss\":0.5}\n");
  CHECK(curves_error(stepless) == stepless + "/result.jsonl:1: no \"step\" (an integer >= 0)");
  const std::string array = s.run("array", nullptr, "[1,2]\n");
  CHECK(curves_error(array).find("result.jsonl:1: expected a JSON object") != std::string::npos);
  // An empty result.jsonl is a run before its first report: no error.
  CHECK(curves_error(s.run("fresh", kHeader, "")) == "(no error)");
}

TEST_CASE("the SVG: three panels with axes and legends; one colour per run when several") {
  CurvesScratch s;
  const RunCurves a = read_run_curves(s.run("ddp", kProgress.c_str(), kResults));
  const std::string one = render_curves_svg({a});
  CHECK(one.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  for (const char* text : {">Loss<", ">Evaluation metrics<", ">Learning rate<", ">step<", ">learning rate<",
                           ">train loss<", ">eval loss<", ">accuracy<", ">f1<", ">mcc<", ">shardtrain: ddp<"})
    CHECK_MESSAGE(one.find(text) != std::string::npos, text);
  CHECK(count_of(one, "<polyline") == 5);  // train loss, eval loss, accuracy, f1, lr; mcc has a single point
  CHECK(count_of(one, "class=\"frame\"") == 3);
  CHECK(one.find(">0.60<") != std::string::npos);  // a loss tick label
  CHECK(render_curves_svg({a}) == one);            // deterministic

  RunCurves b = a;
  b.name = "zero3 <fp32>";
  const std::string two = render_curves_svg({a, b}, "ddp vs zero3");
  CHECK(two.find(">ddp vs zero3<") != std::string::npos);
  CHECK(two.find(">zero3 &lt;fp32&gt;<") != std::string::npos);  // escaped
  CHECK(count_of(two, "stroke=\"#1f77b4\"") > 0);                   // run 1's colour
  CHECK(count_of(two, "stroke=\"#ff7f0e\"") > 0);                   // run 2's colour
  CHECK(count_of(two, "stroke-dasharray=\"7 4\"") > 0);             // the second series of a panel is dashed

  RunCurves no_eval;
  no_eval.name = "early";
  CHECK(render_curves_svg({no_eval}).find("no eval metrics in result.jsonl") != std::string::npos);
}

TEST_CASE("curves.svg in the run folder, and PNG") {
  CurvesScratch s;
  const std::string run = s.run("run", kProgress.c_str(), kResults);
  write_run_curves_svg(run);
  CHECK(read_file(run + "/curves.svg", "test") == render_curves_svg({read_run_curves(run)}));
  CHECK_FALSE(shardtrain_test::has_temporary_of(run + "/curves.svg"));
  if (curves_png_supported()) {
    write_curves_png(read_file(run + "/curves.svg", "test"), s.dir + "/c.png");
    CHECK(read_file(s.dir + "/c.png", "test").rfind("\x89PNG\r\n\x1a\n", 0) == 0);
  } else {
    CHECK_THROWS_WITH_AS(write_curves_png("<svg/>", s.dir + "/c.png"), doctest::Contains("librsvg2-dev"), Error);
  }
}

}  // namespace test_curves_test
