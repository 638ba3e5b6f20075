#include "shardtrain/predict/predict.h"

#include <filesystem>
#include <optional>

#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/peft_adapter.h"
#include "shardtrain/train/lora_run.h"
#include "shardtrain/train/checkpoint_model.h"
#include "shardtrain/train/evaluate.h"
#include "shardtrain/train/preflight.h"

namespace shardtrain {
namespace {

PredictModel load_model_files(const PredictOptions& options, MPI_Comm comm) {
  if (is_checkpoint_file(options.model_dir)) {
    if (!options.adapter.empty())
      throw Error("--adapter " + options.adapter + ": --model " + options.model_dir + " is a training checkpoint; an "
                  "adapter goes over a HF model folder (its base)");
    CheckpointModel checkpoint = load_checkpoint_model(options.model_dir, comm, options.base);
    Tokenizer tokenizer = checkpoint_tokenizer(checkpoint.state, options.model_dir);
    HfLoadReport report;  // a checkpoint holds every parameter (load_checkpoint_model checks it)
    report.folder = options.model_dir;
    return PredictModel{std::move(checkpoint.config), std::move(checkpoint.model), std::move(tokenizer),
                        std::move(report), options.model_dir + " (attribute model_config_json)",
                        checkpoint.state.config_toml, options.model_dir};
  }
  if (!options.base.empty())
    throw Error("--base " + options.base + ": --model " + options.model_dir + " is a HF folder, not a LoRA checkpoint");
  HfLoadOptions load_options;
  load_options.init_seed = options.init_seed;
  if (!options.adapter.empty()) {
    // A base folder (BertForMaskedLM, a bare BertModel) takes the adapter's task and head.
    const PeftAdapterHead head = peek_peft_adapter(options.adapter);
    load_options.task = head.task;
    load_options.num_labels = head.num_labels;
  }
  HfModel hf = load_hf_folder(options.model_dir, load_options);
  if (!options.adapter.empty()) {
    const PeftAdapter adapter = read_peft_adapter(options.adapter, hf.model->config());
    hf.model->add_lora(adapter.spec, options.init_seed);
    refuse_frozen_missing_keys(*hf.model, hf.report.missing_keys, options.model_dir, " in " + options.adapter);
    apply_peft_adapter(*hf.model, adapter, options.adapter);
    log_info("predict: LoRA adapter %s over %s (r %lld, %zu modules)", options.adapter.c_str(), options.model_dir.c_str(),
             static_cast<long long>(adapter.spec.r), adapter.spec.targets.size());
  }
  Tokenizer tokenizer = Tokenizer::from_model_dir(options.model_dir);
  return PredictModel{std::move(hf.config), std::move(hf.model), std::move(tokenizer), std::move(hf.report),
                      options.model_dir + "/config.json", "", ""};
}

void check_max_length(int64_t max_length, const PredictModel& loaded) {
  if (max_length < 0) throw Error(str_format("--max-length must be >= 0, got %lld", static_cast<long long>(max_length)));
  // The positions a sequence can use (RoBERTa's start after padding_idx: 512
  // of 514), checked before any row is read, naming the flag.
  const EncoderConfig& config = loaded.config;
  if (max_length > config.max_sequence_length())
    throw Error(str_format("--max-length %lld exceeds the %lld tokens the %s model takes (max_position_embeddings "
                           "%lld, %s); use --max-length %lld or less",
                           static_cast<long long>(max_length), static_cast<long long>(config.max_sequence_length()),
                           config.model_type.c_str(), static_cast<long long>(config.max_position_embeddings),
                           loaded.config_source.c_str(), static_cast<long long>(config.max_sequence_length())));
}

}  // namespace

DataConfig predict_data_defaults() {
  DataConfig data;
  data.text_a = data.text_b = data.label = "";
  return data;
}

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
  check_max_length(options.data.max_length, loaded);
  if (loaded.tokenizer.vocab_size() > loaded.config.vocab_size)
    throw Error(str_format("%s: the vocabulary has %lld tokens but the model's vocab_size is %lld (%s)",
                           options.model_dir.c_str(), static_cast<long long>(loaded.tokenizer.vocab_size()),
                           static_cast<long long>(loaded.config.vocab_size), loaded.config_source.c_str()));
}

PredictResult predict_file(const PredictOptions& options, MPI_Comm comm) {
  return predict_file(options, load_predict_model(options, comm), comm);
}

PredictInputs read_predict_inputs(const PredictOptions& options, const PredictModel& loaded, MPI_Comm comm) {
  const EncoderConfig& config = loaded.config;
  const TaskSpec& spec = task_spec(config.task);
  if (config.problem_type == "multi_label_classification")
    throw Error(loaded.config_source + ": problem_type multi_label_classification is not supported by predict");
  check_predict_settings(options, loaded);
  const DataConfig& data = options.data;
  DataConfig pairs = data;  // the token types the model must take
  pairs.text_b = spec.rules().second_text(data);
  check_model_for_data(config, pairs, loaded.tokenizer.max_token_type(!pairs.text_b.empty()), loaded.config_source);

  PredictInputs inputs;
  inputs.settings = EvalSettings{&data, model_labels(*loaded.model)};
  const LabelUse labels = options.labels != LabelUse::kNone ? options.labels
                          : data.label.empty()             ? LabelUse::kNone
                                                           : LabelUse::kRequired;
  inputs.table = spec.read_for_predict(options.data_path, data, inputs.settings.labels, labels);
  BuildSettings build;
  build.data = &data;
  build.model_type = config.model_type;
  build.for_eval = true;
  build.model_max_length = config.max_sequence_length();
  build.max_length_name = "--max-length";
  inputs.examples = spec.build(*inputs.table, loaded.tokenizer, build, comm);
  return inputs;
}

PredictResult predict_file(const PredictOptions& options, const PredictModel& loaded, MPI_Comm comm) {
  const TaskSpec& spec = task_spec(loaded.config.task);
  loaded.model->set_unpadded(options.unpadded);
  PredictResult result;
  result.task = loaded.config.task;
  result.load_report = loaded.report;
  ST_CHECK_MPI(MPI_Comm_size(comm, &result.world_size));
  const double start = MPI_Wtime();
  const PredictInputs inputs = read_predict_inputs(options, loaded, comm);
  const TokenizedDataset& examples = inputs.examples;
  result.num_rows = inputs.table->size();
  result.num_bad_rows = inputs.table->num_bad_rows;
  result.num_examples = examples.size();
  const std::vector<float> records =
      sharded_records(*loaded.model, examples, options.batch_size, loaded.tokenizer.pad_id(), at::kCPU, comm,
                      spec.record_width(examples, inputs.settings), spec.record(examples, inputs.settings),
                      &result.rows);
  for (int64_t i = 0; i < result.num_examples; ++i)
    ST_ASSERT(result.rows[static_cast<size_t>(i)] == i, "predict: gathered examples are not the input's in order");
  result.predictions = spec.predictions(*inputs.table, examples, records, inputs.settings);
  result.seconds = max_over_ranks(MPI_Wtime() - start, comm, "predict: the time taken");
  return result;
}

void write_predictions(const TaskPredictions& predictions, int64_t num_rows, const std::string& path,
                       const std::string& flag) {
  // core/fs_util.h: a new file renamed into place, a link followed, a device
  // or FIFO written in place, "-" standard output.
  OutputFile out(path, flag);
  std::string chunk;
  for (int64_t i = 0; i < num_rows; ++i) {
    chunk += predictions.json_line(i);
    chunk += '\n';
    if (chunk.size() > (1u << 20) || i + 1 == num_rows) {
      out.write(chunk);
      chunk.clear();
    }
  }
  out.commit();
}

std::string file_beside(const std::string& output, const std::string& name) {
  if (output == "-") return "";
  const std::filesystem::path path(output);
  return (path.has_parent_path() ? path.parent_path() / name : std::filesystem::path(name)).string();
}

}  // namespace shardtrain
