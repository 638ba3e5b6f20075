// Token classification's spec (tasks/token_classification.h).
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>

#include "shardtrain/core/check.h"
#include "shardtrain/core/limits.h"
#include "shardtrain/core/log.h"
#include "shardtrain/metrics/entity_metrics.h"
#include "shardtrain/tasks/token_classification.h"
#include "tasks/task_common.h"

namespace shardtrain {
namespace {

// The rows as the task's table, labelled when the reader read labels.
std::unique_ptr<TableOf<WordTable>> labelled_table(WordTable rows) {
  const bool labelled = rows.has_tags;
  return table_of(std::move(rows), labelled);
}


WordTableOptions read_options(const DataConfig& d) {
  WordTableOptions options;
  options.format = d.format;
  if (!d.text_a.empty()) options.words_column = d.text_a;
  if (!d.label.empty()) options.tags_column = d.label;
  options.on_bad_row = d.on_bad_row;
  return options;
}

// The training tags: data.labels, else the model's own named labels when they
// are the data's tags (their order kept, as run_ner keeps a fine-tuned
// model's), else the training data's sorted tags (run_ner_no_trainer.py).
void settle_tags(WordTable& train, const std::vector<std::string>& model_labels, const RunConfig& config) {
  if (!config.data.labels.empty() || train.tag_names == model_labels) return;
  std::vector<std::string> sorted_model = model_labels;
  std::sort(sorted_model.begin(), sorted_model.end());
  if (!model_labels.empty() && sorted_model == train.tag_names) {
    // train.tag_names is sorted: renumber its ids into the model's order.
    std::vector<int32_t> to_model(train.tag_names.size());
    for (size_t i = 0; i < train.tag_names.size(); ++i)
      to_model[i] = static_cast<int32_t>(std::find(model_labels.begin(), model_labels.end(), train.tag_names[i]) -
                                         model_labels.begin());
    for (auto& sentence : train.tags)
      for (int32_t& tag : sentence) tag = to_model[static_cast<size_t>(tag)];
    train.tag_names = model_labels;
    log_info("token classification: the tags in the order of %s's id2label", config.model.path.c_str());
  } else if (!model_labels.empty()) {
    log_warn("%s's id2label (%s) are not the data's tags; the model's head is trained for the data's %zu tags",
             config.model.path.c_str(), shorten(quoted_list(model_labels), 200).c_str(), train.tag_names.size());
  }
}

class TokenClassificationSpec final : public TaskSpec {
 public:
  Task task() const override { return Task::kTokenClassification; }


  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels, const TaskLabels&) const override {
    // Tokens labelled -100 are ignored.
    return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}).to(at::kLong));
  }

  TrainTables read_for_training(const RunConfig& config, const TaskLabels& model) const override {
    const DataConfig& d = config.data;
    WordTableOptions options = read_options(d);
    options.tag_names = d.labels;
    const std::vector<std::string> model_labels = d.labels.empty() && model.named ? model.names
                                                                                  : std::vector<std::string>();
    options.id_names = model_labels;  // integer tags (HF datasets' ner_tags) named by the model's id2label
    WordTable train = read_word_table(d.train_file, options);
    tasks::warn_skipped_rows(d.train_file, train.num_bad_rows);
    if (train.size() == 0) throw Error(d.train_file + ": no sentences to train on");
    settle_tags(train, model_labels, config);
    TrainTables t;
    t.labels.names = train.tag_names;
    t.labels.num_labels = static_cast<int64_t>(train.tag_names.size());
    if (config.model.num_labels > 0 && config.model.num_labels != t.labels.num_labels)
      throw Error(str_format("model.num_labels = %lld, but %s has %lld tags (%s); leave model.num_labels out",
                             static_cast<long long>(config.model.num_labels), d.train_file.c_str(),
                             static_cast<long long>(t.labels.num_labels),
                             shorten(quoted_list(train.tag_names), 200).c_str()));
    if (!d.eval_file.empty()) {
      options.tag_names = train.tag_names;
      WordTable eval = read_word_table(d.eval_file, options);
      tasks::warn_skipped_rows(d.eval_file, eval.num_bad_rows);
      if (eval.size() == 0) throw Error(d.eval_file + ": no sentences to evaluate");
      t.eval = labelled_table(std::move(eval));
    }
    t.train = labelled_table(std::move(train));
    return t;
  }

  std::unique_ptr<TaskTable> read_for_predict(const std::string& path, const DataConfig& d, const TaskLabels& model,
                                              LabelUse use) const override {
    if (!d.text_b.empty())
      throw Error("data.text_b '" + d.text_b + "': a token classifier tags the words of one text; leave it out");
    WordTableOptions read = read_options(d);
    read.with_tags = !d.label.empty() && use != LabelUse::kNone &&
                     (use == LabelUse::kRequired || word_table_has_tags(path, read));
    read.tag_names = model.names;  // a tag the model does not know is a bad row, named by line
    WordTable table = read_word_table(path, read);
    if (table.size() == 0) throw Error(path + ": no sentences to predict");
    return labelled_table(std::move(table));
  }

  bool file_has_labels(const std::string& path, const DataConfig& d) const override {
    return !d.label.empty() && word_table_has_tags(path, read_options(d));
  }

  TokenizedDataset build(const TaskTable& table, const Tokenizer& tokenizer, const BuildSettings& s,
                         MPI_Comm comm) const override {
    const WordsTable& words = dynamic_cast<const WordsTable&>(table);
    TokenTaskOptions options;
    options.max_length = static_cast<int>(s.data->max_length > 0 ? s.data->max_length : s.model_max_length);
    options.add_prefix_space = token_task_prefix_space(s.model_type);
    options.label_all_tokens = s.data->label_all_tokens;
    options.with_words = s.for_eval;
    TokenAlignment stats;
    TokenizedDataset data = build_token_dataset(words.rows, tokenizer, options, comm, &stats);
    if (stats.truncated_words > 0)
      log_warn("%s: %lld sentences longer than %s = %d tokens lost %lld words (their tags are not predicted nor "
               "scored)",
               table.path.c_str(), static_cast<long long>(stats.truncated_sentences), s.max_length_name.c_str(),
               options.max_length, static_cast<long long>(stats.truncated_words));
    return data;
  }

  int64_t record_width(const TokenizedDataset& data, const EvalSettings&) const override {
    return token_record_positions(data) + 2;
  }
  RecordFn record(const TokenizedDataset& data, const EvalSettings&) const override {
    return token_record(token_record_positions(data));
  }
  std::map<std::string, double> metrics(const std::vector<float>& records, const TokenizedDataset& data,
                                        const TaskTable&, const EvalSettings& s) const override {
    return token_metrics(records, token_record_positions(data), data, s.labels.names);
  }
  std::optional<Baseline> baseline(const TaskTable&, const TokenizedDataset& train_data, const TaskTable&,
                                   const TokenizedDataset& eval_data, const EvalSettings& s) const override {
    return outside_baseline(train_data, eval_data, s.labels.names);
  }

  std::unique_ptr<TaskPredictions> predictions(const TaskTable& table, const TokenizedDataset& data,
                                               const std::vector<float>& records,
                                               const EvalSettings& s) const override {
    const WordTable& words = dynamic_cast<const WordsTable&>(table).rows;
    auto out = std::make_unique<TokenPredictions>();
    out->words = words.words;
    out->tag_names = s.labels.names;
    out->line_numbers = table.line_numbers;
    const int64_t positions = token_record_positions(data);
    out->word_tags.resize(static_cast<size_t>(words.size()));
    for (int64_t i = 0; i < words.size(); ++i) {
      // A word's tag is its first token's; a word without tokens (cut off, or
      // one the tokenizer drops whole, as a zero-width space) has none.
      std::vector<int32_t>& tags = out->word_tags[static_cast<size_t>(i)];
      const std::vector<int32_t> first_tokens = word_first_tokens(data, i, words.words[static_cast<size_t>(i)].size());
      const float* record = records.data() + i * (positions + 2);
      tags.assign(first_tokens.size(), -1);
      for (size_t w = 0; w < first_tokens.size(); ++w)
        if (first_tokens[w] >= 0) tags[w] = static_cast<int32_t>(record[first_tokens[w]]);
    }
    if (words.has_tags) out->metrics = token_metrics(records, positions, data, s.labels.names);
    return out;
  }
};

// Code points in UTF-8 text (the reader checked it is valid).
int64_t code_points(const std::string& text) {
  int64_t n = 0;
  for (const unsigned char byte : text) n += (byte & 0xC0) != 0x80;
  return n;
}

}  // namespace

bool token_task_prefix_space(const std::string& model_type) {
  // run_ner_no_trainer.py: add_prefix_space=True for model_type bloom, gpt2, roberta.
  return model_type == "roberta";
}

std::string TokenPredictions::json_line(int64_t row) const {
  const std::vector<std::string>& sentence = words[static_cast<size_t>(row)];
  const std::vector<int32_t>& ids = word_tags[static_cast<size_t>(row)];
  std::vector<std::string> tags(ids.size(), "O");
  nlohmann::json names = nlohmann::json::array();
  for (size_t w = 0; w < ids.size(); ++w) {
    if (ids[w] < 0) {
      names.push_back(nullptr);  // no token: no prediction, and no entity
      continue;
    }
    tags[w] = tag_names[static_cast<size_t>(ids[w])];
    names.push_back(tags[w]);
  }
  // Character offsets of the words in " ".join(words).
  std::vector<int64_t> char_start(sentence.size() + 1, 0);
  for (size_t w = 0; w < sentence.size(); ++w) char_start[w + 1] = char_start[w] + code_points(sentence[w]) + 1;
  nlohmann::json entities = nlohmann::json::array();
  for (const auto& [type, first, last] : entity_chunks(tags)) {
    std::string text;
    for (int64_t w = first; w <= last; ++w) text += (w > first ? " " : "") + sentence[static_cast<size_t>(w)];
    entities.push_back({{"type", type},
                        {"words", {first, last + 1}},
                        {"chars", {char_start[static_cast<size_t>(first)], char_start[static_cast<size_t>(last) + 1] - 1}},
                        {"text", text}});
  }
  return tasks::json_line_start(row, line_numbers[static_cast<size_t>(row)]) +
         "\"words\":" + nlohmann::json(sentence).dump() + ",\"tags\":" + names.dump() +
         ",\"entities\":" + entities.dump() + "}";
}

namespace tasks {
const TaskSpec& token_classification_spec() {
  static const TokenClassificationSpec spec;
  return spec;
}
}  // namespace tasks

}  // namespace shardtrain
