// `predict` is evaluation: on a training checkpoint, with no data settings
// given, predict takes the run's (predict/predict_settings.h) and its metrics on
// the run's eval file are the ones the run reported last, for every task,
// with a max_length that cuts rows (sequence classification, token
// classification, multiple choice) or windows (question answering). On the
// run's ranks they are equal to the last bit (the same batches, the same
// forward); on one rank (MPI_COMM_SELF) the batches differ, and so may the
// float32 logits in their last bits (predict.h): eval_loss within 1e-6 of the
// reported one, the counted metrics equal but for an argmax that a last-bit
// tie flipped (check_same_metrics). Runs at -np 2 and -np 4.
//
// A token classifier's tags belong to their words when a word tokenizes to
// nothing (a zero-width space, a soft hyphen, BEL, a byte-order mark): such a
// word gets no tag, every other word its own, and evaluation scores the same
// words as predict's tags.
#include <torch/torch.h>

#include <doctest/doctest.h>
#include <mpi.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "support/mpi_ranks.h"
#include "support/task_fixtures.h"
#include "support/train_fixtures.h"
#include "shardtrain/config/config.h"
#include "shardtrain/predict/predict_settings.h"
#include "shardtrain/core/check.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/hf_folder.h"
#include "shardtrain/metrics/entity_metrics.h"
#include "shardtrain/tasks/token_classification.h"
#include "shardtrain/predict/predict.h"
#include "shardtrain/train/trainer.h"

using namespace shardtrain;

namespace predict_run_mpi_test {
using shardtrain_test::world_rank;

namespace {

// A run of `task` on the shipped data's small parts, one epoch, a checkpoint
// and an evaluation at its end, the resolved config saved in the checkpoint.
RunConfig run_config_for(const std::string& dir, Task task) {
  RunConfig c = shardtrain_test::tiny_run_config(dir);
  c.model.task = task;
  c.train.num_epochs = 1;
  c.train.eval_batch_size = 3;
  c.checkpoint.every_epochs = 1;
  switch (task) {
    case Task::kSequenceClassification:
      c.data.max_length = 24;  // most MRPC pairs are longer: cut
      break;
    case Task::kTokenClassification:
      c.data.train_file =
          shardtrain_test::conll_part(dir, "train.conll", "data/ner/wnut17/train.conll", 0, 40);
      c.data.eval_file = shardtrain_test::conll_part(dir, "dev.conll", "data/ner/wnut17/dev.conll", 0, 15);
      c.data.format = FileFormat::kConll;
      c.data.text_a = "tokens";
      c.data.text_b = "";
      c.data.label = "ner_tags";
      c.data.labels = {"B-corporation", "B-creative-work", "B-group", "B-location", "B-person", "B-product",
                       "I-corporation", "I-creative-work", "I-group", "I-location", "I-person", "I-product", "O"};
      c.data.max_length = 16;  // sentences lose words
      c.data.label_all_tokens = true;
      break;
    case Task::kMultipleChoice:
      c.data.train_file = shardtrain_test::choice_part(dir, "train.jsonl", 0, 24);
      c.data.eval_file = shardtrain_test::choice_part(dir, "dev.jsonl", 30, 10);
      c.data.format = FileFormat::kJsonl;
      c.data.text_a = "context";
      c.data.text_b = "";
      c.data.choices = {"endings"};
      c.data.label = "label";
      c.data.max_length = 20;  // the pairs are cut
      break;
    case Task::kQuestionAnswering:
      c.data.train_file = shardtrain_test::squad_part(dir, "train.json", 0, 0, 3);
      c.data.eval_file = shardtrain_test::squad_part(dir, "dev.json", 1, 0, 2);
      c.data.format = FileFormat::kJsonl;
      c.data.text_a = c.data.text_b = c.data.label = "";
      c.data.max_length = 48;  // several windows per question
      c.data.doc_stride = 12;
      c.data.n_best_size = 7;
      c.data.max_answer_length = 9;
      break;
  }
  return c;
}

struct Trained {
  std::string checkpoint;
  std::map<std::string, double> reported;  // the last report's eval_* metrics
};

Trained train_run(const RunConfig& config) {
  TrainOptions options = shardtrain_test::quiet_train_options();
  options.config_toml = config_to_toml(config);
  const TrainResult result = train(config, MPI_COMM_WORLD, options);
  REQUIRE(result.finished);
  REQUIRE(!result.reports.empty());
  REQUIRE(!result.last_checkpoint.empty());
  Trained trained{result.last_checkpoint, {}};
  for (const auto& [name, value] : result.reports.back().metrics)
    if (name.rfind("eval_", 0) == 0 && name != "eval_seconds") trained.reported[name] = value;
  REQUIRE(trained.reported.size() >= 2);
  return trained;
}

// predict on `comm` with nothing given but the model and the data file.
std::map<std::string, double> predict_with_run_settings(const Trained& trained, const std::string& data_path,
                                                        MPI_Comm comm, std::vector<PredictSetting>* used = nullptr) {
  PredictOptions options;
  options.model_dir = trained.checkpoint;
  options.data_path = data_path;
  const PredictModel model = load_predict_model(options, comm);
  REQUIRE(!model.run_config_toml.empty());
  const RunConfig run = parse_saved_run_config(model.run_config_toml, trained.checkpoint);
  const std::vector<PredictSetting> settings = resolve_predict_settings(&run, model.config.task, {}, options);
  if (used) *used = settings;
  return predict_file(options, model, comm).metrics();
}

// On the run's ranks: equal to the last bit. On other batches: eval_loss
// within 1e-6, and a counted metric equal unless an argmax flipped where two
// float32 logits (or QA span scores) are equal to their last bits in this
// small random model; such a flip moves a metric by about one example's
// weight, so counted metrics are held within `flip` of the reported, and any
// difference is printed.
void check_same_metrics(const std::map<std::string, double>& reported, const std::map<std::string, double>& predicted,
                        bool same_batches, double flip = 0.0) {
  for (const auto& [name, value] : reported) {
    CAPTURE(name);
    REQUIRE(predicted.count(name) == 1);
    const double got = predicted.at(name);
    if (same_batches) {
      CHECK(got == value);
    } else if (name == "eval_loss") {
      CHECK(got == doctest::Approx(value).epsilon(1e-6));
    } else {
      if (got != value && world_rank() == 0)
        MESSAGE("one rank's batches: " << name << " " << got << " against the run's " << value);
      CHECK(std::abs(got - value) <= flip);
    }
  }
}

std::string setting_value(const std::vector<PredictSetting>& settings, const std::string& flag) {
  for (const PredictSetting& s : settings)
    if (s.flag == flag) return s.value + " (" + s.origin + ")";
  return "";
}

void check_task(Task task) {
  const std::string dir = shardtrain_test::make_shared_temp_dir(std::string("predict_run_") + enum_name(task));
  const RunConfig config = run_config_for(dir, task);
  const Trained trained = train_run(config);
  std::vector<PredictSetting> used;
  check_same_metrics(trained.reported, predict_with_run_settings(trained, config.data.eval_file, MPI_COMM_WORLD, &used),
                     true);
  // One example's weight in the eval set's metrics (QA's are percentages of
  // its questions), twice: a flip moves F1 and MCC by a little more.
  const double flip = task == Task::kQuestionAnswering ? 2 * 100.0 / 10 : 2.0 / 15;
  check_same_metrics(trained.reported, predict_with_run_settings(trained, config.data.eval_file, MPI_COMM_SELF), false,
                     flip);
  CHECK(setting_value(used, "--max-length") == std::to_string(config.data.max_length) + " (run: data.max_length)");
  CHECK(setting_value(used, "--batch-size") == "3 (run: train.eval_batch_size)");
  shardtrain_test::remove_shared_dir(dir);
}

}  // namespace

TEST_CASE("predict on a checkpoint takes the run's settings: sequence classification reproduces evaluation") {
  check_task(Task::kSequenceClassification);
}

TEST_CASE("predict on a checkpoint takes the run's settings: token classification (label_all_tokens) reproduces "
          "evaluation") {
  check_task(Task::kTokenClassification);
}

TEST_CASE("predict on a checkpoint takes the run's settings: multiple choice reproduces evaluation") {
  check_task(Task::kMultipleChoice);
}

TEST_CASE("predict on a checkpoint takes the run's settings: question answering reproduces evaluation") {
  check_task(Task::kQuestionAnswering);
}

TEST_CASE("predict on a checkpoint: flags win over the run, a label column the file lacks means no metrics, and "
          "without the run's settings the metrics differ") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("predict_run_flags");
  const RunConfig config = run_config_for(dir, Task::kSequenceClassification);
  const Trained trained = train_run(config);

  PredictOptions options;
  options.model_dir = trained.checkpoint;
  options.data_path = config.data.eval_file;
  const PredictModel model = load_predict_model(options, MPI_COMM_WORLD);
  const RunConfig run = parse_saved_run_config(model.run_config_toml, trained.checkpoint);

  // predict's own defaults (max_length 128: nothing cut) are not the run's: a
  // test of the run's settings that could not fail would pass here too.
  PredictOptions defaults = options;
  defaults.data.text_a = "#1 String";
  defaults.data.text_b = "#2 String";
  defaults.data.label = "Quality";
  const std::vector<PredictSetting> plain = resolve_predict_settings(
      nullptr, Task::kSequenceClassification, {"--text-a", "--text-b", "--label"}, defaults);
  CHECK(setting_value(plain, "--max-length") == "128 (default)");
  const PredictResult uncut = predict_file(defaults, model, MPI_COMM_WORLD);
  CHECK(uncut.metrics().at("eval_loss") != trained.reported.at("eval_loss"));

  // A flag wins over the run's value.
  PredictOptions flagged = options;
  flagged.data.max_length = 40;
  const std::vector<PredictSetting> with_flag =
      resolve_predict_settings(&run, Task::kSequenceClassification, {"--max-length"}, flagged);
  CHECK(flagged.data.max_length == 40);
  CHECK(setting_value(with_flag, "--max-length") == "40 (flag)");
  CHECK(flagged.data.text_a == "#1 String");

  // A file without the run's label column: predictions, no metrics.
  const std::string unlabelled = shardtrain_test::written_by_rank0(dir, "unlabelled.tsv", [](std::ofstream& out) {
    out << "#1 String\t#2 String\nThe cat sat.\tA cat was sitting.\nIt rained.\tThe sun shone.\n";
  });
  PredictOptions bare = options;
  bare.data_path = unlabelled;
  const std::vector<PredictSetting> no_label =
      resolve_predict_settings(&run, Task::kSequenceClassification, {}, bare);
  CHECK(bare.data.label.empty());
  CHECK(setting_value(no_label, "--label").find("is not in the file: no metrics") != std::string::npos);
  const PredictResult predicted = predict_file(bare, model, MPI_COMM_WORLD);
  CHECK(predicted.num_rows == 2);
  CHECK(predicted.metrics().empty());

  // The run's format gives way to a file whose extension names another.
  const std::string as_jsonl = shardtrain_test::written_by_rank0(dir, "rows.jsonl", [](std::ofstream& out) {
    out << R"({"#1 String": "The cat sat.", "#2 String": "A cat was sitting.", "Quality": 1})" << "\n";
  });
  PredictOptions jsonl = options;
  jsonl.data_path = as_jsonl;
  const std::vector<PredictSetting> by_extension =
      resolve_predict_settings(&run, Task::kSequenceClassification, {}, jsonl);
  CHECK(jsonl.data.format == FileFormat::kJsonl);
  CHECK(setting_value(by_extension, "--format") == "jsonl (the file's extension; the run's data.format was tsv)");
  CHECK(predict_file(jsonl, model, MPI_COMM_WORLD).metrics().count("eval_accuracy") == 1);
  shardtrain_test::remove_shared_dir(dir);
}

namespace {

// A random BERT token classifier (O, B-person, I-person) with the
// bert-base-cased vocabulary, as a HF folder.
std::string token_model_folder(const std::string& dir) {
  const std::string folder = dir + "/ner_model";
  if (world_rank() == 0) {
    EncoderConfig config = EncoderConfig::from_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/data/bert_h32.json");
    config.task = Task::kTokenClassification;
    config.set_num_labels(3);
    config.id2label = {"O", "B-person", "I-person"};
    TaskModel model(config);
    model.init_weights(3);
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : model.state_dict())  // logits that differ from token to token
      if (name.find("LayerNorm") == std::string::npos) p.mul_(20.0);
    save_hf_folder(model, folder);
    std::filesystem::copy_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/vocab/bert-base-cased-vocab.txt",
                               folder + "/vocab.txt");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return folder;
}

// Words that BERT's tokenizer removes whole (its normalizer drops control and
// format characters).
const std::vector<std::string> kEmptyWords = {"\xE2\x80\x8B", "\xC2\xAD", "\x07", "\xEF\xBB\xBF"};

bool is_empty_word(const std::string& word) {
  for (const std::string& empty : kEmptyWords)
    if (word == empty) return true;
  return false;
}

// JSON Lines of sentences (tokens, ner_tags).
std::string write_sentences(const std::string& dir, const std::string& name,
                            const std::vector<std::vector<std::string>>& words,
                            const std::vector<std::vector<std::string>>& tags) {
  return shardtrain_test::written_by_rank0(dir, name, [&](std::ofstream& out) {
    for (size_t s = 0; s < words.size(); ++s) out << nlohmann::json{{"tokens", words[s]}, {"ner_tags", tags[s]}}.dump() << "\n";
  });
}

}  // namespace

TEST_CASE("token classification predict: a word that tokenizes to nothing gets no tag, every other word its own") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("predict_empty_words");
  const std::string folder = token_model_folder(dir);
  // Empty words at the start, in the middle (two in a row) and at the end.
  const std::vector<std::vector<std::string>> words = {
      {kEmptyWords[0], "the", "man", "John", "went", "to", "Paris"},
      {"the", kEmptyWords[0], "John", "went", kEmptyWords[1], kEmptyWords[2], "to", "Berlin", "today"},
      {"Mary", "and", "Peter", "met", "there", kEmptyWords[3]},
      {"no", "empty", "word", "here", "at", "all"}};
  std::vector<std::vector<std::string>> tags, clean_words, clean_tags;
  for (const auto& sentence : words) {
    std::vector<std::string> t, cw, ct;
    for (size_t w = 0; w < sentence.size(); ++w) {
      // Gold tags with entities around the empty words.
      const std::string tag = is_empty_word(sentence[w]) ? "I-person" : (w % 3 == 0 ? "B-person" : (w % 3 == 1 ? "I-person" : "O"));
      t.push_back(tag);
      if (!is_empty_word(sentence[w])) cw.push_back(sentence[w]), ct.push_back(tag);
    }
    tags.push_back(t);
    clean_words.push_back(cw);
    clean_tags.push_back(ct);
  }
  PredictOptions options;
  options.model_dir = folder;
  options.data_path = write_sentences(dir, "with_empty.jsonl", words, tags);
  options.data.label = "ner_tags";
  const PredictResult with_empty_result = predict_file(options, MPI_COMM_WORLD);
  options.data_path = write_sentences(dir, "clean.jsonl", clean_words, clean_tags);
  const PredictResult clean_result = predict_file(options, MPI_COMM_WORLD);
  const TokenPredictions& with_empty = with_empty_result.as<TokenPredictions>();
  const TokenPredictions& clean = clean_result.as<TokenPredictions>();

  // The empty words add no token: the other words' tokens, and so their
  // tags, are those of the sentence without them.
  bool some_entity = false;
  for (size_t s = 0; s < words.size(); ++s) {
    CAPTURE(s);
    size_t c = 0;
    for (size_t w = 0; w < words[s].size(); ++w) {
      CAPTURE(w);
      if (is_empty_word(words[s][w])) {
        CHECK(with_empty.word_tags[s][w] == -1);
        continue;
      }
      REQUIRE(clean.word_tags[s][c] >= 0);
      CHECK(with_empty.word_tags[s][w] == clean.word_tags[s][c]);
      some_entity = some_entity || clean.word_tags[s][c] != 0;
      ++c;
    }
    // No entity's text is, or holds, an empty word; the JSON line's tags are
    // null exactly there.
    const nlohmann::json line = nlohmann::json::parse(with_empty.json_line(static_cast<int64_t>(s)));
    for (size_t w = 0; w < words[s].size(); ++w) CHECK(line["tags"][w].is_null() == is_empty_word(words[s][w]));
    for (const auto& entity : line["entities"])
      for (int64_t w = entity["words"][0]; w < entity["words"][1].get<int64_t>(); ++w)
        CHECK_FALSE(is_empty_word(words[s][static_cast<size_t>(w)]));
  }
  CHECK(some_entity);  // the model tags more than O: a shift would show

  // Evaluation scores the words that have tokens, with predict's tags: the
  // metrics are seqeval's on predict's tags of those words, and the same as
  // on the file without the empty words.
  std::vector<std::vector<std::string>> references, predictions;
  for (size_t s = 0; s < words.size(); ++s) {
    std::vector<std::string> ref, pred;
    for (size_t w = 0; w < words[s].size(); ++w) {
      if (with_empty.word_tags[s][w] < 0) continue;
      ref.push_back(tags[s][w]);
      pred.push_back(with_empty.tag_names[static_cast<size_t>(with_empty.word_tags[s][w])]);
    }
    references.push_back(ref);
    predictions.push_back(pred);
  }
  const EntityMetrics seqeval = entity_metrics(references, predictions);
  CHECK(with_empty.metrics.at("eval_f1") == seqeval.f1);
  CHECK(with_empty.metrics.at("eval_accuracy") == seqeval.accuracy);
  CHECK(with_empty.metrics.at("eval_f1") == clean.metrics.at("eval_f1"));
  CHECK(with_empty.metrics.at("eval_loss") == clean.metrics.at("eval_loss"));
  shardtrain_test::remove_shared_dir(dir);
}

}  // namespace predict_run_mpi_test
