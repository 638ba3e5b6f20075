#include "shardtrain/train/predict.h"

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/train/checkpoint_model.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/preflight.h"

namespace shardtrain {
namespace {

bool has_custom_label_names(const EncoderConfig& config) {
  for (size_t i = 0; i < config.id2label.size(); ++i)
    if (config.id2label[i] != "LABEL_" + std::to_string(i)) return true;
  return false;
}

// The file's labels as the model's class ids. Integer labels are ids already;
// string labels only mean something through the model's id2label, never through
// the reader's sorted order (a file missing one class would shift every id).
void map_labels(const RawTable& table, const EncoderConfig& config, PredictResult* result) {
  const Labels& labels = table.labels;
  result->label_kind = labels.kind;
  if (labels.kind == LabelKind::kNone) return;
  if (labels.kind == LabelKind::kRegression) {
    result->label_values = labels.values;
    return;
  }
  std::map<std::string, int64_t> by_name;
  for (size_t i = 0; i < config.id2label.size(); ++i) by_name[config.id2label[i]] = static_cast<int64_t>(i);
  result->label_ids.resize(labels.class_ids.size());
  for (size_t row = 0; row < labels.class_ids.size(); ++row) {
    const int64_t id = labels.class_ids[row];
    const std::string where = str_format("%s:%lld", table.path.c_str(), static_cast<long long>(table.line_numbers[row]));
    if (labels.names.empty()) {
      if (id >= config.num_labels)
        throw Error(str_format("%s: label %lld, but the model has %lld labels (0..%lld)", where.c_str(),
                               static_cast<long long>(id), static_cast<long long>(config.num_labels),
                               static_cast<long long>(config.num_labels - 1)));
      result->label_ids[row] = id;
      continue;
    }
    const std::string& name = labels.names[id];
    const auto found = by_name.find(name);
    if (found == by_name.end()) {
      std::string known;
      for (const auto& n : config.id2label) known += (known.empty() ? "'" : ", '") + n + "'";
      throw Error(where + ": label '" + name + "' is not one of the model's labels (id2label in config.json: " +
                  known + ")");
    }
    result->label_ids[row] = found->second;
  }
}

// The model and tokenizer from a HF folder or a training checkpoint file.
struct PredictModel {
  EncoderConfig config;
  std::shared_ptr<SequenceClassifier> model;
  Tokenizer tokenizer;
  HfLoadReport report;
  std::string config_source;  // where the config came from, for messages
};

PredictModel load_predict_model(const PredictOptions& options, MPI_Comm comm) {
  if (is_checkpoint_file(options.model_dir)) {
    CheckpointModel checkpoint = load_checkpoint_model(options.model_dir, comm);
    Tokenizer tokenizer = checkpoint_tokenizer(checkpoint.state, options.model_dir);
    HfLoadReport report;  // a checkpoint holds every parameter (load_checkpoint_model checks it)
    report.folder = options.model_dir;
    return PredictModel{std::move(checkpoint.config), std::move(checkpoint.model), std::move(tokenizer),
                        std::move(report), options.model_dir + " (attribute model_config_json)"};
  }
  HfLoadOptions load_options;
  load_options.init_seed = options.init_seed;
  HfModel hf = load_hf_folder(options.model_dir, load_options);
  Tokenizer tokenizer = Tokenizer::from_model_dir(options.model_dir);
  return PredictModel{std::move(hf.config), std::move(hf.model), std::move(tokenizer), std::move(hf.report),
                      options.model_dir + "/config.json"};
}

void append_float(std::string& out, float value) {
  if (!std::isfinite(value)) {
    out += "null";  // JSON has no NaN / Infinity
    return;
  }
  char digits[32];
  const int n = std::snprintf(digits, sizeof(digits), "%.9g", static_cast<double>(value));
  out.append(digits, static_cast<size_t>(n));
}

}  // namespace

PredictResult predict_file(const PredictOptions& options, MPI_Comm comm) {
  int rank = 0, world_size = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &world_size));
  if (options.batch_size < 1)
    throw Error(str_format("--batch-size must be >= 1, got %lld", static_cast<long long>(options.batch_size)));
  if (options.max_length < 0) throw Error(str_format("--max-length must be >= 0, got %d", options.max_length));

  if (options.dtype != at::kFloat && options.dtype != at::kBFloat16)
    throw Error(options.dtype == at::kHalf
                    ? "--dtype float16 needs a GPU (LibTorch's CPU kernels have no fp16 matmul); use bfloat16"
                    : std::string("--dtype ") + c10::toString(options.dtype) + ": use float32 or bfloat16");
  const PredictModel loaded = load_predict_model(options, comm);
  if (options.dtype != at::kFloat) loaded.model->to(options.dtype);
  const EncoderConfig& config = loaded.config;
  const Tokenizer& tokenizer = loaded.tokenizer;
  if (config.problem_type == "multi_label_classification")
    throw Error(loaded.config_source + ": problem_type multi_label_classification is not supported by predict");
  // The positions a sequence can use (RoBERTa's start after padding_idx: 512
  // of 514), checked before any row is read, naming the flag.
  if (options.max_length > config.max_sequence_length())
    throw Error(str_format("--max-length %d exceeds the %lld tokens the %s model takes (max_position_embeddings %lld, "
                           "%s); use --max-length %lld or less",
                           options.max_length, static_cast<long long>(config.max_sequence_length()),
                           config.model_type.c_str(), static_cast<long long>(config.max_position_embeddings),
                           loaded.config_source.c_str(), static_cast<long long>(config.max_sequence_length())));
  if (tokenizer.vocab_size() > config.vocab_size)
    throw Error(str_format("%s: the vocabulary has %lld tokens but the model's vocab_size is %lld (%s)",
                           options.model_dir.c_str(), static_cast<long long>(tokenizer.vocab_size()),
                           static_cast<long long>(config.vocab_size), loaded.config_source.c_str()));

  DataConfig data;  // the one data setting the model must be able to take
  data.text_b = options.text_b;
  check_model_for_data(config, data, tokenizer.max_token_type(!data.text_b.empty()), loaded.config_source);

  PredictResult result;
  result.regression = config.num_labels == 1 || config.problem_type == "regression";
  result.num_labels = config.num_labels;
  result.world_size = world_size;
  result.load_report = loaded.report;
  if (!result.regression && has_custom_label_names(config)) result.label_names = config.id2label;

  ReaderOptions reader;
  reader.format = options.format;
  reader.text_a = options.text_a;
  reader.text_b = options.text_b;
  reader.label = options.label;
  reader.label_mode = result.regression ? LabelMode::kRegression : LabelMode::kAuto;
  reader.on_bad_row = options.on_bad_row;
  const RawTable table = read_table(options.data_path, reader);
  if (table.size() == 0) throw Error(options.data_path + ": no rows to predict");
  result.num_rows = table.size();
  result.num_bad_rows = table.num_bad_rows;
  result.line_numbers = table.line_numbers;
  map_labels(table, config, &result);

  const double start = MPI_Wtime();
  const TokenizedDataset dataset = build_dataset(table, make_encoder(tokenizer, options.max_length), comm);
  result.logits = sharded_logits(*loaded.model, dataset, options.batch_size, tokenizer.pad_id(), at::kCPU, comm,
                                 &result.rows);
  result.seconds = max_over_ranks(MPI_Wtime() - start, comm, "predict: the time taken");
  for (int64_t i = 0; i < result.num_rows; ++i)
    ST_ASSERT(result.rows[i] == i, "predict: gathered rows are not the input rows in order");

  const int64_t c = result.num_labels;
  if (result.regression) {
    if (result.label_kind == LabelKind::kRegression)
      result.regression_metrics = regression_metrics(result.logits, result.label_values);
  } else {
    result.predicted_ids.resize(result.num_rows);
    for (int64_t i = 0; i < result.num_rows; ++i) {
      const float* row = result.logits.data() + i * c;
      result.predicted_ids[i] = std::max_element(row, row + c) - row;  // first maximum, like torch.argmax
    }
    if (result.label_kind == LabelKind::kClass)
      result.classification = classification_metrics(result.predicted_ids, result.label_ids);
  }
  return result;
}

std::string prediction_json_line(const PredictResult& result, int64_t row) {
  ST_ASSERT(row >= 0 && row < result.num_rows, "prediction_json_line: row out of range");
  std::string out = str_format("{\"row\":%lld,\"line\":%lld,\"logits\":[", static_cast<long long>(row),
                               static_cast<long long>(result.line_numbers[row]));
  const float* logits = result.logits.data() + row * result.num_labels;
  for (int64_t j = 0; j < result.num_labels; ++j) {
    if (j > 0) out += ',';
    append_float(out, logits[j]);
  }
  out += ']';
  if (result.regression) {
    out += ",\"prediction\":";
    append_float(out, logits[0]);
  } else {
    const int64_t id = result.predicted_ids[row];
    out += str_format(",\"label\":%lld", static_cast<long long>(id));
    if (!result.label_names.empty()) out += ",\"label_name\":" + nlohmann::json(result.label_names[id]).dump();
  }
  out += '}';
  return out;
}

void write_predictions_jsonl(const PredictResult& result, const std::string& path) {
  // core/fs_util.h: a new file renamed into place, a link followed, a device
  // or FIFO written in place, "-" standard output.
  OutputFile out(path, "--output");
  std::string chunk;
  for (int64_t i = 0; i < result.num_rows; ++i) {
    chunk += prediction_json_line(result, i);
    chunk += '\n';
    if (chunk.size() > (1u << 20) || i + 1 == result.num_rows) {
      out.write(chunk);
      chunk.clear();
    }
  }
  out.commit();
}

}  // namespace shardtrain
