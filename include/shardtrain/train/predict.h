// Batch prediction: a HF model folder (or a training checkpoint) + a data file
// -> logits for every row, sharded over the ranks of a communicator, gathered
// back in input order.
//
// Every rank reads the file and loads the model (both small next to the work);
// the rows are tokenized across ranks (build_dataset), cut into eval shards
// (make_eval_plan: rank r takes a contiguous block of each global batch), run
// through the model in eval mode under c10::InferenceMode, and gathered with
// gather_for_metrics, which drops the padding of the last global batch, so each
// row's result appears exactly once and in input order on every rank.
//
// With the same batch size, rank r of W runs exactly the batches a single
// process would run as batches k*W + r, except the last, partial global batch,
// which W ranks split into smaller batches. Dynamic padding then gives those
// rows a different padded length, which can change fp32 logits in the last bits
// (reduction order in softmax / matmul), never the rows or their order.
//
//   PredictOptions options;
//   options.model_dir = "out/mrpc"; options.data_path = "data/glue/MRPC/dev.tsv";
//   options.text_a = "#1 String"; options.text_b = "#2 String"; options.label = "Quality";
//   PredictResult result = predict_file(options, world.comm());
//   if (world.rank() == 0) write_predictions_jsonl(result, "pred.jsonl");
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/core/choices.h"
#include "shardtrain/data/reader.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/classifier.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/train/metrics.h"

namespace shardtrain {

struct PredictOptions {
  // HF folder (config.json, model.safetensors, vocab.txt, tokenizer_config.json),
  // or a training checkpoint file (train/checkpoint_model.h: its model, config and
  // vocabulary), told apart by is_checkpoint_file().
  std::string model_dir;
  std::string data_path;
  std::string text_a;     // column name / JSON key, or 0-based index
  std::string text_b;     // "" = single text
  std::string label;      // "" = no labels (no metrics); CoNLL: any name, or the tag column's index
  // Token classification: score every sub-word token of a word, as the run's
  // data.label_all_tokens did (the metrics only; a word's tag is always its
  // first token's).
  bool label_all_tokens = false;
  // The model's forward: packed (unpadded) batches, or padded ones as HF runs
  // them (model.unpadded). Both give the same logits to fp32 rounding.
  bool unpadded = true;
  // Multiple choice: the choice columns (or one column holding a list), and
  // a preset (SWAG's, COPA's) naming the columns left empty here.
  std::vector<std::string> choices;
  DataPreset preset = DataPreset::kNone;
  FileFormat format = FileFormat::kAuto;
  BadRowPolicy on_bad_row = BadRowPolicy::kError;
  int max_length = 128;   // truncation (longest_first); 0 = none; <= max_position_embeddings
  int64_t batch_size = 32;  // per rank
  uint64_t init_seed = 42;  // for parameters the checkpoint lacks (reported)
  // The dtype the model runs in: float32, or bfloat16 (the training precision
  // of a bf16 run: 16-bit weights and matmuls, LayerNorm, softmax and the
  // logits' metrics in fp32). float16 needs a GPU (refused here).
  at::ScalarType dtype = at::kFloat;
};

// Identical on every rank after predict_file returns.
struct PredictResult {
  Task task = Task::kSequenceClassification;  // the model's (config.json architectures / the checkpoint)
  int64_t num_rows = 0;     // rows read (after skipped bad rows)
  int64_t num_bad_rows = 0;
  int64_t num_labels = 0;   // logits per row; 1 = regression
  bool regression = false;  // config num_labels == 1 / problem_type "regression"
  // num_rows * num_labels logits, row i at [i * num_labels, (i+1) * num_labels).
  std::vector<float> logits;
  // The table row each gathered result came from; 0..num_rows-1 when the
  // sharding and gathering are right (predict_file checks it, tests read it).
  std::vector<int64_t> rows;
  std::vector<int64_t> line_numbers;   // 1-based line of each row in the file
  std::vector<int64_t> predicted_ids;  // first argmax of each row's logits (classification)
  // id2label names when the config has names other than HF's defaults LABEL_<i>; else empty.
  std::vector<std::string> label_names;

  // Labels from the file (label column given), as model class ids / values.
  LabelKind label_kind = LabelKind::kNone;
  std::vector<int64_t> label_ids;
  std::vector<float> label_values;
  std::optional<ClassificationMetrics> classification;
  std::optional<RegressionMetrics> regression_metrics;

  // Token classification: each row's words and the predicted tag of each
  // (an id into tag_names; -1 for a word that max_length cut off), and the
  // rows and words that truncation cost.
  std::vector<std::vector<std::string>> words;
  std::vector<std::vector<int32_t>> word_tags;
  std::vector<std::string> tag_names;
  int64_t truncated_rows = 0, truncated_words = 0;
  // With labels in the file: the metrics train's evaluation reports, by the
  // same functions (evaluate.h: eval_metrics, token_metrics, choice_metrics),
  // eval_loss included.
  std::map<std::string, double> task_metrics;

  HfLoadReport load_report;  // missing / unexpected weights (message() empty when none)
  int world_size = 1;
  double seconds = 0;        // tokenize + forward + gather, slowest rank
};

// The model and tokenizer predict runs, from a HF folder or a training
// checkpoint file; config.task says what its predictions are.
struct PredictModel {
  EncoderConfig config;
  std::shared_ptr<SequenceClassifier> model;
  Tokenizer tokenizer;
  HfLoadReport report;
  std::string config_source;  // where the config came from, for messages
  // A training checkpoint's resolved run config (TOML, as saved); empty for a
  // HF folder. Its data settings are predict's defaults (cli's predict).
  std::string run_config_toml;
  std::string checkpoint_path;  // the checkpoint file; empty for a HF folder
};

// Collective over comm: options.model_dir loaded on every rank, in
// options.dtype and eval mode. Throws Error for a dtype other than float32 /
// bfloat16. The settings are checked by predict_file / predict_qa_file
// (check_predict_settings): a checkpoint's run may set them after the load.
PredictModel load_predict_model(const PredictOptions& options, MPI_Comm comm);
// Error naming --max-length when `max_length` is negative or exceeds the
// model's positions.
void check_predict_max_length(int max_length, const PredictModel& loaded);
// Before any row is read: Error naming --batch-size below 1, --max-length as
// above, or a vocabulary larger than the model's embedding.
void check_predict_settings(const PredictOptions& options, const PredictModel& loaded);

// Runs the model over the file on all ranks of `comm` (collective; every rank
// passes the same options). The second form takes the model load_predict_model
// gave for the same options; a question-answering model is refused
// (train/predict_qa.h). Throws shardtrain::Error (the same on every rank)
// for a bad folder, file, column, row (policy kError), a batch size < 1, a
// max_length above the model's max_position_embeddings, a vocabulary larger
// than the model's embedding, or a label the model does not know: integer
// labels must be < num_labels; string labels are looked up in the config's
// id2label.
PredictResult predict_file(const PredictOptions& options, MPI_Comm comm);
PredictResult predict_file(const PredictOptions& options, const PredictModel& model, MPI_Comm comm);

// Row i as one JSON object (no newline):
//   {"row":i,"line":L,"logits":[...],"label":id[,"label_name":"name"]}  classification
//   {"row":i,"line":L,"logits":[v],"prediction":v}                      regression
//   {"row":i,"line":L,"logits":[...],"choice":k}                        multiple choice
//   {"row":i,"line":L,"words":[...],"tags":[...],"entities":[...]}      token classification
// A token classifier's tags are names (null for a word cut off by
// max_length, and for a word with no token at all, such as a lone zero-width
// space); each entity (seqeval's chunks of the tags) is
// {"type":T,"words":[first,end),"chars":[first,end),"text":S}, its character
// span in the words joined by single spaces (Unicode code points).
// Floats are printed with 9 significant digits (they read back as the same float).
std::string prediction_json_line(const PredictResult& result, int64_t row);

// Writes every row's line to `path` through OutputFile (core/fs_util.h): a new
// file renamed into place, a symbolic link followed, a device or FIFO written
// in place, "-" standard output. Throws Error naming the file when it cannot
// be written.
void write_predictions_jsonl(const PredictResult& result, const std::string& path);

}  // namespace shardtrain
