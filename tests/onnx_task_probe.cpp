// predict's inputs and post-processing around another runtime's logits, for
// the CTest test_onnx_tasks_cli (tests/test_onnx_tasks.sh): ONNX Runtime is
// fed exactly the batches `predict` runs and its outputs go through the same
// task functions predict calls, so what is compared with predict's output
// file is the runtime's logits and nothing re-implemented.
//
//   onnx_task_probe feeds CKPT DATA FEEDS.jsonl
//       DATA read and tokenized by read_predict_inputs (predict/predict.h)
//       with the settings `predict --model CKPT --data DATA` takes from the
//       checkpoint's run (predict_settings.h), cut into predict's batches
//       (its eval plan at one rank, collate's padding), one JSON line per
//       batch as tests/onnx/run.js reads them: input_ids, attention_mask,
//       token_type_ids, [batch, sequence] or, multiple choice, [batch,
//       choices, sequence]
//   onnx_task_probe predict CKPT DATA ORT.jsonl OUTPUT.jsonl [--libtorch] [--negate-first]
//       run.js's outputs of those batches made into what the padded forward
//       of the model returns (multiple choice: [batch * choices, 1]; QA: start
//       and end stacked, [batch, sequence, 2]), then the task's shape_logits,
//       record and predictions, as predict_file calls them: OUTPUT.jsonl in
//       predict's --output format and the task's side files beside it (QA's
//       predictions.json). --libtorch: also the checkpoint's model through
//       forward_batch on the same batches (predict's forward, packed or
//       padded as the run was), and it prints the worst |ONNX Runtime -
//       LibTorch| over the real positions and, where a class or choice is an
//       argmax, the smallest gap between the two highest ONNX logits (what a
//       difference would have to exceed to change one). --negate-first
//       negates the first example's logits, for the suite to see its
//       comparison fail.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "shardtrain/comm/world.h"
#include "shardtrain/config/config.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/predict/predict.h"
#include "shardtrain/predict/predict_settings.h"
#include "shardtrain/train/evaluate.h"

using namespace shardtrain;

namespace {

PredictOptions options_for(const std::string& checkpoint, const std::string& data) {
  PredictOptions options;
  options.model_dir = checkpoint;
  options.data_path = data;
  return options;
}

// predict's model, settings, examples and batches for CKPT and DATA (not
// moved: inputs.settings points into options).
struct PredictRun {
  PredictOptions options;
  PredictModel model;
  PredictInputs inputs;
  EvalPlan plan;

  PredictRun(const std::string& checkpoint, const std::string& data, MPI_Comm comm)
      : options(options_for(checkpoint, data)), model(load_predict_model(options, comm)) {
    // cli/cmd_predict.cpp with no flag but --model and --data: the run's settings.
    const RunConfig saved = parse_saved_run_config(model.run_config_toml, checkpoint);
    resolve_predict_settings(&saved, model.config.task, {}, options);
    if (options.dtype != at::kFloat) throw Error("onnx_task_probe: the run must be float32 (the graph is)");
    model.model->set_unpadded(options.unpadded);
    inputs = read_predict_inputs(options, model, comm);
    plan = make_eval_plan(inputs.examples.size(), options.batch_size, 1);
  }
  PredictRun(const PredictRun&) = delete;
  PredictRun& operator=(const PredictRun&) = delete;
};

Batch batch_of(const PredictRun& run, int64_t k) {
  return collate(run.inputs.examples, eval_batch(run.plan, 0, k), run.model.tokenizer.pad_id());
}

// [rows, L] as nested lists; multiple choice [rows / choices, choices, L].
nlohmann::json nested(const at::Tensor& rows_by_length, int64_t num_choices) {
  const at::Tensor t = rows_by_length.to(at::kLong).contiguous();
  const int64_t L = t.size(1);
  const int64_t* v = t.data_ptr<int64_t>();
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t r = 0; r < t.size(0); ++r) rows.push_back(std::vector<int64_t>(v + r * L, v + (r + 1) * L));
  if (num_choices == 1) return rows;
  nlohmann::json examples = nlohmann::json::array();
  for (int64_t r = 0; r < t.size(0); r += num_choices)
    examples.push_back(nlohmann::json(std::vector<nlohmann::json>(rows.begin() + r, rows.begin() + r + num_choices)));
  return examples;
}

void write_feeds(const PredictRun& run, const std::string& path) {
  OutputFile out(path, "FEEDS.jsonl");
  for (int64_t k = 0; k < run.plan.num_batches; ++k) {
    const Batch batch = batch_of(run, k);
    const nlohmann::json line = {{"input_ids", nested(batch.input_ids, batch.num_choices)},
                                 {"attention_mask", nested(batch.attention_mask, batch.num_choices)},
                                 {"token_type_ids", nested(batch.token_type_ids, batch.num_choices)}};
    out.write(line.dump() + "\n");
  }
  out.commit();
  std::printf("onnx_task_probe: %lld examples in %lld batches of up to %lld -> %s\n",
              static_cast<long long>(run.inputs.examples.size()), static_cast<long long>(run.plan.num_batches),
              static_cast<long long>(run.options.batch_size), path.c_str());
}

at::Tensor output_tensor(const nlohmann::json& line, const std::string& name) {
  if (!line.contains(name)) throw Error("onnx_task_probe: the runtime's outputs have no " + name);
  const std::vector<int64_t> dims = line[name]["dims"].get<std::vector<int64_t>>();
  std::vector<float> data = line[name]["data"].get<std::vector<float>>();
  return at::tensor(data, at::kFloat).view(dims);
}

// The runtime's outputs as the model's padded forward returns its logits
// (before the task's shape_logits).
at::Tensor forward_logits(const nlohmann::json& line, Task task) {
  switch (task) {
    case Task::kQuestionAnswering:
      return at::stack({output_tensor(line, "start_logits"), output_tensor(line, "end_logits")}, -1);
    case Task::kMultipleChoice:
      return output_tensor(line, "logits").reshape({-1, 1});  // one logit per (example, choice) row
    default:
      return output_tensor(line, "logits");
  }
}

// The smallest gap between the two highest logits of each decision predict
// makes: the last axis of [B, C] class or choice logits; of [B, L, C] tag
// logits at the tokens that carry a word's tag (those with a label when the
// file has tags, else every real token). Infinity for QA, whose last axis is
// start and end, no argmax.
double smallest_top_two_gap(const at::Tensor& logits, const Batch& batch, Task task) {
  if (task == Task::kQuestionAnswering || logits.size(-1) < 2) return std::numeric_limits<double>::infinity();
  const at::Tensor top = std::get<0>(logits.topk(2, -1));
  at::Tensor gap = top.select(-1, 0) - top.select(-1, 1);
  if (gap.dim() == 2)
    gap = gap.masked_select(batch.labels.defined() ? batch.labels.ne(kIgnoreLabel) : batch.attention_mask.ne(0));
  return gap.numel() > 0 ? gap.min().item<double>() : std::numeric_limits<double>::infinity();
}

struct ProbeFlags {
  bool libtorch = false;
  bool negate_first = false;
};

void predict_from_runtime(PredictRun& run, const std::string& ort_path, const std::string& output, ProbeFlags flags) {
  const Task task = run.model.config.task;
  const TaskSpec& spec = task_spec(task);
  const TokenizedDataset& examples = run.inputs.examples;
  const RecordFn record = spec.record(examples, run.inputs.settings);
  const int64_t width = spec.record_width(examples, run.inputs.settings);
  std::ifstream in(ort_path);
  if (!in) throw Error("onnx_task_probe: cannot read " + ort_path);
  std::vector<float> local;
  double worst = 0, gap = std::numeric_limits<double>::infinity();
  int64_t k = 0, compared = 0;
  run.model.model->eval();
  at::NoGradGuard no_grad;
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json line = nlohmann::json::parse(text);
    if (line.contains("runtime")) continue;  // run.js's last line: its versions
    if (k == run.plan.num_batches) throw Error("onnx_task_probe: " + ort_path + " has more batches than the data");
    const Batch batch = batch_of(run, k++);
    at::Tensor logits = spec.shape_logits(forward_logits(line, task), batch);
    if (flags.negate_first && k == 1) logits[0].neg_();
    if (flags.libtorch) {
      // Token-level logits compared at the real tokens: padding differs
      // (zeros from the packed forward, the graph's values; QA's -inf in both).
      const at::Tensor torch_logits = run.model.model->forward_batch(batch);
      TORCH_CHECK(torch_logits.sizes() == logits.sizes(), "onnx_task_probe: the runtime's logits are ",
                  logits.sizes(), ", LibTorch's ", torch_logits.sizes());
      at::Tensor difference = (logits - torch_logits).abs();
      if (difference.dim() == 3)
        difference = difference.masked_select(batch.attention_mask.ne(0).unsqueeze(-1).expand_as(difference));
      worst = std::max(worst, difference.max().item<double>());
      compared += difference.numel();
      gap = std::min(gap, smallest_top_two_gap(logits, batch, task));
    }
    const at::Tensor values = record(logits, batch).contiguous();
    local.insert(local.end(), values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
  }
  if (k != run.plan.num_batches)
    throw Error(str_format("onnx_task_probe: %s has %lld batches, the data %lld", ort_path.c_str(),
                           static_cast<long long>(k), static_cast<long long>(run.plan.num_batches)));
  const std::vector<float> records = gather_for_metrics(local, run.plan, MPI_COMM_SELF, width);
  const auto predictions = spec.predictions(*run.inputs.table, examples, records, run.inputs.settings);
  write_predictions(*predictions, run.inputs.table->size(), output, "OUTPUT.jsonl");
  for (const auto& [name, content] : predictions->side_files()) {
    OutputFile side(file_beside(output, name), name);
    side.write(content);
    side.commit();
  }
  std::printf("onnx_task_probe: %lld rows from the runtime's logits%s -> %s\n",
              static_cast<long long>(run.inputs.table->size()), flags.negate_first ? " (the first negated)" : "",
              output.c_str());
  if (flags.libtorch)
    std::printf("onnx_task_probe: worst |onnx - libtorch| %.3g over %lld logits%s\n", worst,
                static_cast<long long>(compared),
                std::isinf(gap) ? "" : str_format(", smallest top-two gap %.3g", gap).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  World world(&argc, &argv);
  const std::vector<std::string> args(argv + 1, argv + argc);
  ProbeFlags flags;
  std::vector<std::string> positional;
  for (const std::string& arg : args) {
    if (arg == "--libtorch") flags.libtorch = true;
    else if (arg == "--negate-first") flags.negate_first = true;
    else positional.push_back(arg);
  }
  const bool feeds = positional.size() == 4 && positional[0] == "feeds" && !flags.libtorch && !flags.negate_first;
  const bool predict = positional.size() == 5 && positional[0] == "predict";
  if (!feeds && !predict) {
    std::fprintf(stderr, "usage: onnx_task_probe feeds CKPT DATA FEEDS.jsonl\n"
                         "       onnx_task_probe predict CKPT DATA ORT.jsonl OUTPUT.jsonl [--libtorch] [--negate-first]\n");
    return 2;
  }
  try {
    PredictRun run(positional[1], positional[2], world.comm());
    if (feeds) write_feeds(run, positional[3]);
    else predict_from_runtime(run, positional[3], positional[4], flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_task_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
