// Batch prediction: a HF model folder (or a training checkpoint) + a data file
// -> the model's outputs for every row, sharded over the ranks of a
// communicator, gathered back in input order, by the same path as evaluation
// (docs/DESIGN.md, "Predict is evaluation").
//
// Every rank reads the file and loads the model (both small next to the work);
// the task's spec (tasks/task_spec.h) reads the file with the data settings,
// tokenizes its rows across the ranks, the eval plan cuts the examples into
// shards (make_eval_plan: rank r takes a contiguous block of each global
// batch), the model runs them in eval mode, and each example's record (the
// task's: logits, a tag per token, a window's n-best spans) is gathered with
// gather_for_metrics, which drops the padding of the last global batch, so
// each row's result appears exactly once and in input order on every rank.
// The task turns the records into its outputs (TaskPredictions: one JSON line
// per row, predictions.json for QA) and, when the file has labels, into the
// metrics evaluation reports, by the same functions.
//
// With the same batch size, rank r of W runs exactly the batches a single
// process would run as batches k*W + r, except the last, partial global batch,
// which W ranks split into smaller batches. Dynamic padding then gives those
// rows a different padded length, which can change fp32 logits in the last bits
// (reduction order in softmax / matmul), never the rows or their order.
//
//   PredictOptions options;
//   options.model_dir = "out/mrpc"; options.data_path = "data/glue/MRPC/dev.tsv";
//   options.data.text_a = "#1 String"; options.data.text_b = "#2 String"; options.data.label = "Quality";
//   PredictResult result = predict_file(options, world.comm());
//   if (world.rank() == 0) write_predictions(*result.predictions, "pred.jsonl", "--output");
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/tasks/task_spec.h"

namespace shardtrain {

// predict's data settings before any flag or run: no columns (a sequence
// classifier needs data.text_a; the other tasks have their own defaults),
// max_length 128 (question answering: 384, run_qa's), the rest as a run's.
DataConfig predict_data_defaults();

struct PredictOptions {
  // HF folder (config.json, model.safetensors, vocab.txt, tokenizer_config.json),
  // or a training checkpoint file (train/checkpoint_model.h: its model, config and
  // vocabulary), told apart by is_checkpoint_file().
  std::string model_dir;
  // LoRA: a PEFT adapter folder over the HF folder model_dir (model/peft_adapter.h);
  // base: a LoRA checkpoint's base folder instead of the one it recorded.
  std::string adapter;
  std::string base;
  std::string data_path;
  // The data settings, as a run's data section: the columns (text_a, text_b,
  // label, choices, preset), format, on_bad_row, max_length (0: the model's
  // positions; a sequence classifier: no truncation), label_all_tokens and
  // question answering's doc_stride, n_best_size, max_answer_length,
  // version_2_with_negative, null_score_diff_threshold.
  DataConfig data = predict_data_defaults();
  // Whether the file's labels are read and scored: kNone reads them when
  // data.label names a column (question answering: never).
  LabelUse labels = LabelUse::kNone;
  int64_t batch_size = 32;  // per rank
  uint64_t init_seed = 42;  // for parameters the checkpoint lacks (reported)
  // The dtype the model runs in: float32, or bfloat16 (the training precision
  // of a bf16 run: 16-bit weights and matmuls, LayerNorm, softmax and the
  // logits' metrics in fp32). float16 needs a GPU (refused here).
  at::ScalarType dtype = at::kFloat;
  // The model's forward: packed (unpadded) batches, or padded ones as HF runs
  // them (model.unpadded). Both give the same logits to fp32 rounding.
  bool unpadded = true;
};

// The model and tokenizer predict runs, from a HF folder or a training
// checkpoint file; config.task says what its predictions are.
struct PredictModel {
  EncoderConfig config;
  std::shared_ptr<TaskModel> model;
  Tokenizer tokenizer;
  HfLoadReport report;
  std::string config_source;  // where the config came from, for messages
  // A training checkpoint's resolved run config (TOML, as saved); empty for a
  // HF folder. Its data settings are predict's defaults (cli's predict).
  std::string run_config_toml;
  std::string checkpoint_path;  // the checkpoint file; empty for a HF folder
};

// Identical on every rank after predict_file returns.
struct PredictResult {
  Task task = Task::kSequenceClassification;  // the model's (config.json architectures / the checkpoint)
  int64_t num_rows = 0;      // rows read (after skipped bad rows)
  int64_t num_bad_rows = 0;
  int64_t num_examples = 0;  // run through the model: rows, or QA's windows
  // The example each gathered record came from; 0..num_examples-1 when the
  // sharding and gathering are right (predict_file checks it, tests read it).
  std::vector<int64_t> rows;
  // The task's outputs (tasks/<task>.h: ClassPredictions, TokenPredictions,
  // ChoicePredictions, QaPredictions) and, with labels, its metrics.
  std::unique_ptr<TaskPredictions> predictions;
  HfLoadReport load_report;  // missing / unexpected weights (message() empty when none)
  int world_size = 1;
  double seconds = 0;        // read + tokenize + forward + gather + outputs, slowest rank

  const std::map<std::string, double>& metrics() const { return predictions->metrics; }
  // The outputs as the task's own type (dynamic_cast; Error for another task's).
  template <class T>
  const T& as() const {
    const T* outputs = dynamic_cast<const T*>(predictions.get());
    if (!outputs) throw Error("predict: the outputs are not of the task asked for");
    return *outputs;
  }
};

// Collective over comm: options.model_dir loaded on every rank, in
// options.dtype and eval mode. Throws Error for a dtype other than float32 /
// bfloat16. The settings are checked by predict_file (check_predict_settings):
// a checkpoint's run may set them after the load.
PredictModel load_predict_model(const PredictOptions& options, MPI_Comm comm);

// Before any row is read: Error naming --batch-size below 1, --max-length
// negative or above the model's positions, or a vocabulary larger than the
// model's embedding.
void check_predict_settings(const PredictOptions& options, const PredictModel& loaded);

// What predict_file runs the model over: options.data_path read by the
// model's task (its labels when options.labels or data.label ask for them)
// and tokenized as evaluation tokenizes (QA's windows, the choices' rows,
// the words' first tokens), with the settings the task's records and
// predictions take (settings.data points at options.data). Collective over
// comm; Error as predict_file. For a runtime other than LibTorch to be fed
// predict's exact inputs and post-processed by the task's own functions
// (tests/onnx_task_probe.cpp).
struct PredictInputs {
  std::unique_ptr<TaskTable> table;
  TokenizedDataset examples;
  EvalSettings settings;
};
PredictInputs read_predict_inputs(const PredictOptions& options, const PredictModel& model, MPI_Comm comm);

// Runs the model over the file on all ranks of `comm` (collective; every rank
// passes the same options). The second form takes the model load_predict_model
// gave for the same options. Throws shardtrain::Error (the same on every rank)
// for a bad folder, file, column, row (policy kError), setting or label (a
// class or tag the model does not know).
PredictResult predict_file(const PredictOptions& options, MPI_Comm comm);
PredictResult predict_file(const PredictOptions& options, const PredictModel& model, MPI_Comm comm);

// Writes every row's JSON line to `path` through OutputFile (core/fs_util.h):
// a new file renamed into place, a symbolic link followed, a device or FIFO
// written in place, "-" standard output. `flag` names the path in errors.
void write_predictions(const TaskPredictions& predictions, int64_t num_rows, const std::string& path,
                       const std::string& flag);

// `name` in the folder of the output `output` ("x/answers.jsonl" ->
// "x/predictions.json"); "" for "-" (standard output has no folder).
std::string file_beside(const std::string& output, const std::string& name);

}  // namespace shardtrain
