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
#include "shardtrain/data/multiple_choice.h"
#include "shardtrain/data/task_datasets.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/data/word_table.h"
#include "shardtrain/train/checkpoint_model.h"
#include "shardtrain/train/entity_metrics.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/job.h"
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

PredictModel load_model_files(const PredictOptions& options, MPI_Comm comm) {
  if (is_checkpoint_file(options.model_dir)) {
    CheckpointModel checkpoint = load_checkpoint_model(options.model_dir, comm);
    Tokenizer tokenizer = checkpoint_tokenizer(checkpoint.state, options.model_dir);
    HfLoadReport report;  // a checkpoint holds every parameter (load_checkpoint_model checks it)
    report.folder = options.model_dir;
    return PredictModel{std::move(checkpoint.config), std::move(checkpoint.model), std::move(tokenizer),
                        std::move(report), options.model_dir + " (attribute model_config_json)",
                        checkpoint.state.config_toml, options.model_dir};
  }
  HfLoadOptions load_options;
  load_options.init_seed = options.init_seed;
  HfModel hf = load_hf_folder(options.model_dir, load_options);
  Tokenizer tokenizer = Tokenizer::from_model_dir(options.model_dir);
  return PredictModel{std::move(hf.config), std::move(hf.model), std::move(tokenizer), std::move(hf.report),
                      options.model_dir + "/config.json", "", ""};
}

void check_gathered_rows(const PredictResult& result) {
  for (int64_t i = 0; i < result.num_rows; ++i)
    ST_ASSERT(result.rows[i] == i, "predict: gathered rows are not the input rows in order");
}

// Token classification: the file's sentences as words (run_ner's
// is_split_into_words), the predicted tag of each word's first token.
void predict_tokens(const PredictOptions& options, const PredictModel& loaded, int max_length, MPI_Comm comm,
                    PredictResult* result) {
  const EncoderConfig& config = loaded.config;
  if (!options.text_b.empty())
    throw Error("--text-b '" + options.text_b + "': a token classifier tags the words of one text; leave it out");
  WordTableOptions read;
  read.format = options.format;
  if (!options.text_a.empty()) read.words_column = options.text_a;
  if (!options.label.empty()) read.tags_column = options.label;
  read.with_tags = !options.label.empty();
  read.tag_names = config.id2label;  // a tag the model does not know is a bad row, named by line
  read.on_bad_row = options.on_bad_row;
  const WordTable table = read_word_table(options.data_path, read);
  if (table.size() == 0) throw Error(options.data_path + ": no sentences to predict");
  result->num_rows = table.size();
  result->num_bad_rows = table.num_bad_rows;
  result->line_numbers = table.line_numbers;
  result->tag_names = config.id2label;

  const double start = MPI_Wtime();
  TokenTaskOptions encode;
  encode.max_length = max_length;
  encode.add_prefix_space = token_task_prefix_space(config);
  encode.label_all_tokens = options.label_all_tokens;
  encode.with_words = true;
  TokenAlignment truncation;
  const TokenizedDataset data = build_token_dataset(table, loaded.tokenizer, encode, comm, &truncation);
  const int64_t positions = token_record_positions(data);
  const std::vector<float> records =
      sharded_records(*loaded.model, data, options.batch_size, loaded.tokenizer.pad_id(), at::kCPU, comm,
                      positions + 2, token_record(positions), &result->rows);
  result->seconds = max_over_ranks(MPI_Wtime() - start, comm, "predict: the time taken");
  check_gathered_rows(*result);
  result->truncated_rows = truncation.truncated_sentences;
  result->truncated_words = truncation.truncated_words;
  result->words = table.words;
  result->word_tags.resize(table.size());
  for (int64_t i = 0; i < table.size(); ++i) {
    // A word's tag is its first token's; a word without tokens (cut off, or
    // one the tokenizer drops whole, as a zero-width space) has none.
    std::vector<int32_t>& tags = result->word_tags[i];
    const std::vector<int32_t> first_tokens = word_first_tokens(data, i, table.words[i].size());
    const float* record = records.data() + i * (positions + 2);
    tags.assign(first_tokens.size(), -1);
    for (size_t w = 0; w < first_tokens.size(); ++w)
      if (first_tokens[w] >= 0) tags[w] = static_cast<int32_t>(record[first_tokens[w]]);
  }
  if (table.has_tags) result->task_metrics = token_metrics(records, positions, data, config.id2label);
}

// Multiple choice: each row's (context, choice) pairs, one logit per choice.
void predict_choices(const PredictOptions& options, const PredictModel& loaded, int max_length, MPI_Comm comm,
                     PredictResult* result) {
  const ChoiceColumns preset = preset_columns(options.preset);
  MultipleChoiceOptions read;
  read.format = options.format;
  read.preset = options.preset;
  read.context_column = options.text_a.empty() ? preset.context : options.text_a;
  read.prefix_column = options.text_b.empty() ? preset.prefix : options.text_b;
  read.choice_columns = options.choices.empty() ? preset.choices : options.choices;
  read.label_column = options.label;
  read.on_bad_row = options.on_bad_row;
  if (read.context_column.empty())
    throw Error("--text-a: the context column of a multiple-choice model (or --preset swag / copa)");
  if (read.choice_columns.empty())
    throw Error("--choices: the choice columns of a multiple-choice model, e.g. --choices ending0,ending1 (or one "
                "column holding a list; or --preset swag / copa)");
  const MultipleChoiceTable table = read_multiple_choice(options.data_path, read);
  if (table.size() == 0) throw Error(options.data_path + ": no rows to predict");
  result->num_rows = table.size();
  result->num_bad_rows = table.num_bad_rows;
  result->line_numbers = table.line_numbers;
  result->num_labels = table.num_choices;

  const double start = MPI_Wtime();
  const TokenizedDataset data = build_choice_dataset(table, loaded.tokenizer, max_length, comm);
  result->logits = sharded_logits(*loaded.model, data, options.batch_size, loaded.tokenizer.pad_id(), at::kCPU, comm,
                                  &result->rows);
  result->seconds = max_over_ranks(MPI_Wtime() - start, comm, "predict: the time taken");
  check_gathered_rows(*result);
  const int64_t c = table.num_choices;
  ST_ASSERT(static_cast<int64_t>(result->logits.size()) == table.size() * c,
            "predict: a multiple-choice model gave other than one logit per choice");
  result->predicted_ids.resize(table.size());
  for (int64_t i = 0; i < table.size(); ++i) {
    const float* row = result->logits.data() + i * c;
    result->predicted_ids[i] = std::max_element(row, row + c) - row;
  }
  if (table.labels.kind == LabelKind::kClass) {
    result->label_kind = LabelKind::kClass;
    result->label_ids = table.labels.class_ids;
    result->task_metrics = choice_metrics(result->logits, data);
  }
}

// Code points in UTF-8 text (the reader checked it is valid).
int64_t code_points(const std::string& text) {
  int64_t n = 0;
  for (const unsigned char byte : text) n += (byte & 0xC0) != 0x80;
  return n;
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

PredictModel load_predict_model(const PredictOptions& options, MPI_Comm comm) {
  if (options.dtype != at::kFloat && options.dtype != at::kBFloat16)
    throw Error(options.dtype == at::kHalf
                    ? "--dtype float16 needs a GPU (LibTorch's CPU kernels have no fp16 matmul); use bfloat16"
                    : std::string("--dtype ") + c10::toString(options.dtype) + ": use float32 or bfloat16");
  PredictModel loaded = load_model_files(options, comm);
  if (options.dtype != at::kFloat) loaded.model->to(options.dtype);
  return loaded;
}

void check_predict_settings(const PredictOptions& options, const PredictModel& loaded) {
  if (options.batch_size < 1)
    throw Error(str_format("--batch-size must be >= 1, got %lld", static_cast<long long>(options.batch_size)));
  check_predict_max_length(options.max_length, loaded);
  if (loaded.tokenizer.vocab_size() > loaded.config.vocab_size)
    throw Error(str_format("%s: the vocabulary has %lld tokens but the model's vocab_size is %lld (%s)",
                           options.model_dir.c_str(), static_cast<long long>(loaded.tokenizer.vocab_size()),
                           static_cast<long long>(loaded.config.vocab_size), loaded.config_source.c_str()));
}

void check_predict_max_length(int max_length, const PredictModel& loaded) {
  if (max_length < 0) throw Error(str_format("--max-length must be >= 0, got %d", max_length));
  // The positions a sequence can use (RoBERTa's start after padding_idx: 512
  // of 514), checked before any row is read, naming the flag.
  const EncoderConfig& config = loaded.config;
  if (max_length > config.max_sequence_length())
    throw Error(str_format("--max-length %d exceeds the %lld tokens the %s model takes (max_position_embeddings %lld, "
                           "%s); use --max-length %lld or less",
                           max_length, static_cast<long long>(config.max_sequence_length()),
                           config.model_type.c_str(), static_cast<long long>(config.max_position_embeddings),
                           loaded.config_source.c_str(), static_cast<long long>(config.max_sequence_length())));
}

PredictResult predict_file(const PredictOptions& options, MPI_Comm comm) {
  return predict_file(options, load_predict_model(options, comm), comm);
}

PredictResult predict_file(const PredictOptions& options, const PredictModel& loaded, MPI_Comm comm) {
  int rank = 0, world_size = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &world_size));
  const EncoderConfig& config = loaded.config;
  const Tokenizer& tokenizer = loaded.tokenizer;
  if (config.task == Task::kQuestionAnswering)
    throw Error(loaded.config_source + ": a question-answering model; its predictions are answers "
                "(train/predict_qa.h: predict_qa_file)");
  if (config.problem_type == "multi_label_classification")
    throw Error(loaded.config_source + ": problem_type multi_label_classification is not supported by predict");
  check_predict_settings(options, loaded);
  loaded.model->set_unpadded(options.unpadded);

  const bool pairs = config.task == Task::kMultipleChoice || !options.text_b.empty();
  DataConfig data;  // the one data setting the model must be able to take
  data.text_b = pairs ? "second text" : "";
  check_model_for_data(config, data, tokenizer.max_token_type(pairs), loaded.config_source);

  PredictResult result;
  result.task = config.task;
  result.num_labels = config.num_labels;
  result.world_size = world_size;
  result.load_report = loaded.report;
  // The tasks' datasets always truncate: no limit is the model's own.
  const int task_max_length =
      options.max_length > 0 ? options.max_length : static_cast<int>(config.max_sequence_length());
  if (config.task != Task::kMultipleChoice && !options.choices.empty())
    throw Error("--choices: only for a multiple-choice model (this one is " + std::string(choice_name(config.task)) +
                ", " + loaded.config_source + ")");
  if (config.task != Task::kMultipleChoice && options.preset != DataPreset::kNone)
    throw Error("--preset: only for a multiple-choice model (this one is " + std::string(choice_name(config.task)) +
                ", " + loaded.config_source + ")");
  switch (config.task) {
    case Task::kTokenClassification:
      predict_tokens(options, loaded, task_max_length, comm, &result);
      return result;
    case Task::kMultipleChoice:
      predict_choices(options, loaded, task_max_length, comm, &result);
      return result;
    default: break;
  }
  if (options.text_a.empty())
    throw Error("--text-a: the text column of a sequence classifier (a header name, JSON key or 0-based index)");
  result.regression = config.num_labels == 1 || config.problem_type == "regression";
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
  check_gathered_rows(result);

  const int64_t c = result.num_labels;
  // The metrics evaluation reports, by its own function (eval_loss too).
  Labels labels;
  labels.kind = result.label_kind;
  labels.class_ids = result.label_ids;
  labels.values = result.label_values;
  if (result.label_kind != LabelKind::kNone) result.task_metrics = eval_metrics(result.logits, labels, c);
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
  if (result.task == Task::kTokenClassification) {
    const std::vector<std::string>& words = result.words[row];
    const std::vector<int32_t>& ids = result.word_tags[row];
    std::vector<std::string> tags(ids.size(), "O");
    nlohmann::json names = nlohmann::json::array();
    for (size_t w = 0; w < ids.size(); ++w) {
      if (ids[w] < 0) {
        names.push_back(nullptr);  // cut off by max_length: no prediction, and no entity
        continue;
      }
      tags[w] = result.tag_names[ids[w]];
      names.push_back(tags[w]);
    }
    // Character offsets of the words in " ".join(words).
    std::vector<int64_t> char_start(words.size() + 1, 0);
    for (size_t w = 0; w < words.size(); ++w) char_start[w + 1] = char_start[w] + code_points(words[w]) + 1;
    nlohmann::json entities = nlohmann::json::array();
    for (const auto& [type, first, last] : entity_chunks(tags)) {
      std::string text;
      for (int64_t w = first; w <= last; ++w) text += (w > first ? " " : "") + words[w];
      entities.push_back({{"type", type},
                          {"words", {first, last + 1}},
                          {"chars", {char_start[first], char_start[last + 1] - 1}},
                          {"text", text}});
    }
    return str_format("{\"row\":%lld,\"line\":%lld,", static_cast<long long>(row),
                      static_cast<long long>(result.line_numbers[row])) +
           "\"words\":" + nlohmann::json(words).dump() + ",\"tags\":" + names.dump() +
           ",\"entities\":" + entities.dump() + "}";
  }
  std::string out = str_format("{\"row\":%lld,\"line\":%lld,\"logits\":[", static_cast<long long>(row),
                               static_cast<long long>(result.line_numbers[row]));
  const float* logits = result.logits.data() + row * result.num_labels;
  for (int64_t j = 0; j < result.num_labels; ++j) {
    if (j > 0) out += ',';
    append_float(out, logits[j]);
  }
  out += ']';
  if (result.task == Task::kMultipleChoice) {
    out += str_format(",\"choice\":%lld", static_cast<long long>(result.predicted_ids[row]));
  } else if (result.regression) {
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
