// Token-classification and multiple-choice data (data/word_table.h,
// data/multiple_choice.h, tasks/token_classification.h, tasks/multiple_choice.h) on hand-made cases: label
// alignment as run_ner_no_trainer.py's tokenize_and_align_labels does it
// (sub-words, label_all_tokens with B- -> I-, truncation and its counts,
// BPE's prefix space, words that tokenize to nothing), the readers' formats,
// and bad input named by file and line or skipped and counted.
//
// The expected tokens are bert-base-cased's WordPiece (greedy longest match in
// data/vocab/bert-base-cased-vocab.txt: "Pelosi" -> P ##elo ##si) and
// roberta-base's BPE ("ĠZuckerberg" is one token of vocab.json, "Zuckerberg"
// without the space is not).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/multiple_choice.h"
#include "shardtrain/tasks/token_classification.h"
#include "shardtrain/tasks/multiple_choice.h"
#include "shardtrain/data/word_table.h"
#include "support/mpi_ranks.h"
#include "support/tokenizer_fixtures.h"

using namespace shardtrain;

namespace task_data_test {

using LabelIds = std::vector<int32_t>;

WordTable conll_table(const std::string& text, const std::vector<std::string>& tag_names = {},
                BadRowPolicy policy = BadRowPolicy::kError) {
  WordTableOptions options;
  options.format = FileFormat::kConll;
  options.tag_names = tag_names;
  options.on_bad_row = policy;
  return read_word_table_from_string(text, "ner.conll", options);
}

std::vector<std::string> task_tokens(const Tokenizer& tokenizer, const TokenizedDataset& data, int64_t example) {
  std::vector<std::string> out;
  for (int64_t t = data.offsets[example]; t < data.offsets[example + 1]; ++t)
    out.push_back(tokenizer.token(data.input_ids[static_cast<size_t>(t)]));
  return out;
}

LabelIds task_labels(const TokenizedDataset& data, int64_t example) {
  return LabelIds(data.token_labels.begin() + data.offsets[example], data.token_labels.begin() + data.offsets[example + 1]);
}

MultipleChoiceTable choices_jsonl(const std::string& text, BadRowPolicy policy = BadRowPolicy::kError,
                                  int64_t num_choices = 0) {
  MultipleChoiceOptions options;
  options.context_column = "context";
  options.choice_columns = {"endings"};
  options.label_column = "label";
  options.on_bad_row = policy;
  options.num_choices = num_choices;
  return read_multiple_choice_from_string(text, "mc.jsonl", options);
}

// Tags B-LOC B-PER I-LOC I-PER O (sorted, as collected from a file): ids 0..4.
const char* const kPelosi = "Pelosi\tB-PER\nlives\tO\nin\tO\nNew\tB-LOC\nYork\tI-LOC\n\nBarack\tB-PER\nObama\tI-PER\n";

}  // namespace task_data_test

using namespace task_data_test;

TEST_CASE("align_word_labels: the first token of a word carries its tag; label_all_tokens turns B- into I-") {
  const std::vector<std::string> names = {"B-MISC", "B-PER", "I-PER", "O"};
  CHECK(b_to_i_map(names) == LabelIds{0, 2, 2, 3});  // B-MISC has no I-MISC: stays B-MISC
  const LabelIds word_ids = {-1, 0, 0, 1, 2, 2, 2, -1};
  const LabelIds tags = {1, 3, 0};  // B-PER O B-MISC
  CHECK(align_word_labels(word_ids, tags, b_to_i_map(names), false) ==
        LabelIds{kIgnoreLabel, 1, kIgnoreLabel, 3, 0, kIgnoreLabel, kIgnoreLabel, kIgnoreLabel});
  CHECK(align_word_labels(word_ids, tags, b_to_i_map(names), true) == LabelIds{kIgnoreLabel, 1, 2, 3, 0, 0, 0, kIgnoreLabel});
}

TEST_CASE("token dataset: WordPiece sub-words, label_all_tokens, and the labelled positions") {
  const Tokenizer& tokenizer = shardtrain_test::bert_cased();
  const WordTable table = conll_table(kPelosi);
  REQUIRE(table.tag_names == std::vector<std::string>{"B-LOC", "B-PER", "I-LOC", "I-PER", "O"});
  REQUIRE(table.size() == 2);
  CHECK(table.line_numbers == std::vector<int64_t>{1, 7});
  TokenAlignment stats;
  TokenizedDataset data = build_token_dataset(table, tokenizer, {32, false, false}, MPI_COMM_SELF, &stats);
  CHECK(task_tokens(tokenizer, data, 0) ==
        std::vector<std::string>{"[CLS]", "P", "##elo", "##si", "lives", "in", "New", "York", "[SEP]"});
  CHECK(task_labels(data, 0) == LabelIds{kIgnoreLabel, 1, kIgnoreLabel, kIgnoreLabel, 4, 4, 0, 2, kIgnoreLabel});
  CHECK(task_labels(data, 1) == LabelIds{kIgnoreLabel, 1, 3, kIgnoreLabel});
  CHECK(labelled_positions(data, 0) == LabelIds{1, 4, 5, 6, 7});
  CHECK(stats.truncated_sentences == 0);
  CHECK(stats.truncated_words == 0);
  // label_all_tokens: Pelosi's ##elo ##si get I-PER (3).
  data = build_token_dataset(table, tokenizer, {32, false, true}, MPI_COMM_SELF);
  CHECK(task_labels(data, 0) == LabelIds{kIgnoreLabel, 1, 3, 3, 4, 4, 0, 2, kIgnoreLabel});
}

TEST_CASE("token dataset: truncation drops the words past max_length and counts them") {
  const Tokenizer& tokenizer = shardtrain_test::bert_cased();
  const WordTable table = conll_table(kPelosi);
  TokenAlignment stats;
  // 6 tokens: [CLS] P ##elo ##si lives [SEP]; in, New, York are lost.
  TokenizedDataset data = build_token_dataset(table, tokenizer, {6, false, false}, MPI_COMM_SELF, &stats);
  CHECK(task_labels(data, 0) == LabelIds{kIgnoreLabel, 1, kIgnoreLabel, kIgnoreLabel, 4, kIgnoreLabel});
  CHECK(task_labels(data, 1) == LabelIds{kIgnoreLabel, 1, 3, kIgnoreLabel});  // Barack Obama fits
  CHECK(stats.truncated_sentences == 1);
  CHECK(stats.truncated_words == 3);
  // 4 tokens: [CLS] P ##elo [SEP]: Pelosi keeps its first token (and its
  // label); the 4 words after it are lost.
  data = build_token_dataset(table, tokenizer, {4, false, false}, MPI_COMM_SELF, &stats);
  CHECK(task_labels(data, 0) == LabelIds{kIgnoreLabel, 1, kIgnoreLabel, kIgnoreLabel});
  CHECK(stats.truncated_sentences == 1);
  CHECK(stats.truncated_words == 4);
}

TEST_CASE("token dataset: a word that tokenizes to nothing has no token and is not counted as truncated") {
  const Tokenizer& tokenizer = shardtrain_test::bert_cased();
  // U+00AD (soft hyphen, a format character) is removed by BERT's cleaning.
  const WordTable table = conll_table("Obama\tB-PER\n\xC2\xAD\tO\nlives\tO\n");
  REQUIRE(table.words.at(0).size() == 3);
  TokenAlignment stats;
  TokenizedDataset data = build_token_dataset(table, tokenizer, {32, false, false}, MPI_COMM_SELF, &stats);
  CHECK(task_tokens(tokenizer, data, 0) == std::vector<std::string>{"[CLS]", "Obama", "lives", "[SEP]"});
  CHECK(task_labels(data, 0) == LabelIds{kIgnoreLabel, 0, 1, kIgnoreLabel});  // tags B-PER O: ids 0, 1
  CHECK(stats.truncated_words == 0);
  // Cut after Obama: only "lives" is lost.
  data = build_token_dataset(table, tokenizer, {3, false, false}, MPI_COMM_SELF, &stats);
  CHECK(task_labels(data, 0) == LabelIds{kIgnoreLabel, 0, kIgnoreLabel});
  CHECK(stats.truncated_sentences == 1);
  CHECK(stats.truncated_words == 1);
}

TEST_CASE("token dataset: byte-level BPE with the prefix space (run_ner for RoBERTa) and without") {
  const Tokenizer& tokenizer = shardtrain_test::roberta_base();
  const WordTable table = conll_table("Zuckerberg\tB-PER\nin\tO\nNew\tB-LOC\nYork\tI-LOC\n");
  // Tags B-LOC B-PER I-LOC O: ids 0..3.
  TokenizedDataset data = build_token_dataset(table, tokenizer, {32, true, false}, MPI_COMM_SELF);
  CHECK(task_tokens(tokenizer, data, 0) ==
        std::vector<std::string>{"<s>", "\xC4\xA0Zuckerberg", "\xC4\xA0in", "\xC4\xA0New", "\xC4\xA0York", "</s>"});
  CHECK(task_labels(data, 0) == LabelIds{kIgnoreLabel, 1, 3, 0, 2, kIgnoreLabel});
  // Without it each word is tokenized as written: "Zuckerberg" is several
  // tokens, the first one labelled; label_all_tokens gives the rest I-PER's
  // id... here there is no I-PER, so B-PER stays (b_to_i_map).
  data = build_token_dataset(table, tokenizer, {32, false, true}, MPI_COMM_SELF);
  const std::vector<std::string> tokens = task_tokens(tokenizer, data, 0);
  REQUIRE(tokens.size() > 6);
  CHECK(tokens[1].rfind("\xC4\xA0", 0) == std::string::npos);
  CHECK(tokens[tokens.size() - 2] == "York");
  const LabelIds labels = task_labels(data, 0);
  const size_t zuckerberg = tokens.size() - 5;  // its tokens: 1 .. tokens.size() - 5
  for (size_t t = 1; t <= zuckerberg; ++t) CHECK(labels[t] == 1);
  CHECK(LabelIds(labels.end() - 4, labels.end()) == LabelIds{3, 0, 2, kIgnoreLabel});
}

TEST_CASE("word tables: CoNLL columns, -DOCSTART-, space-separated columns, JSONL names and ids") {
  // Space-separated CoNLL-2003 style: word POS chunk tag; the tag is the last column.
  WordTable t = conll_table("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n \nPeter NNP B-NP B-PER\n");
  CHECK(t.words == std::vector<std::vector<std::string>>{{"EU", "rejects"}, {"Peter"}});
  CHECK(t.tag_names == std::vector<std::string>{"B-ORG", "B-PER", "O"});
  CHECK(t.tags == std::vector<std::vector<int32_t>>{{0, 2}, {1}});
  CHECK(t.line_numbers == std::vector<int64_t>{3, 7});
  // JSON Lines as HF datasets write them: names, or ids with the names given.
  WordTableOptions options;
  t = read_word_table_from_string("{\"tokens\": [\"EU\", \"rejects\"], \"ner_tags\": [\"B-ORG\", \"O\"]}\n", "a.jsonl",
                                  options);
  CHECK(t.tags == std::vector<std::vector<int32_t>>{{0, 1}});
  options.tag_names = {"O", "B-ORG", "I-ORG"};
  t = read_word_table_from_string("{\"tokens\": [\"EU\", \"rejects\"], \"ner_tags\": [1, 0]}\n", "a.jsonl", options);
  CHECK(t.tags == std::vector<std::vector<int32_t>>{{1, 0}});
  CHECK(t.tag_names == options.tag_names);
  const std::string no_names = shardtrain_test::error_of([] {
    read_word_table_from_string("{\"tokens\": [\"EU\"], \"ner_tags\": [1]}\n", "a.jsonl", WordTableOptions{});
  });
  CHECK(no_names.find("data.labels") != std::string::npos);
  // A model's id2label names integer ids (id_names), and never string tags.
  WordTableOptions with_model;
  with_model.id_names = {"O", "B-ORG", "I-ORG"};
  t = read_word_table_from_string("{\"tokens\": [\"EU\", \"rejects\"], \"ner_tags\": [1, 0]}\n", "a.jsonl", with_model);
  CHECK(t.tags == std::vector<std::vector<int32_t>>{{1, 0}});
  CHECK(t.tag_names == with_model.id_names);
  t = read_word_table_from_string("{\"tokens\": [\"EU\"], \"ner_tags\": [\"B-ORG\"]}\n", "a.jsonl", with_model);
  CHECK(t.tag_names == std::vector<std::string>{"B-ORG"});
  const std::string beyond = shardtrain_test::error_of([&] {
    read_word_table_from_string("{\"tokens\": [\"EU\"], \"ner_tags\": [3]}\n", "a.jsonl", options);
  });
  CHECK(beyond.find("a.jsonl:1: tag id 3 is not below the 3 names of data.labels") != std::string::npos);
}

TEST_CASE("word tables: bad rows name the file and line, or are skipped and counted") {
  // A tag the training data does not have, in the eval file: the line of that tag.
  const std::vector<std::string> trained = {"B-PER", "I-PER", "O"};
  std::string error = shardtrain_test::error_of([&] { conll_table("Obama\tB-PER\n\nthe\tO\nMoon\tB-LOC\n", trained); });
  CHECK(error.find("ner.conll:4: tag 'B-LOC' is not one of the 3 tags it is trained with") != std::string::npos);
  WordTable skipped = conll_table("Obama\tB-PER\n\nthe\tO\nMoon\tB-LOC\n\nhe\tO\n", trained, BadRowPolicy::kSkip);
  CHECK(skipped.words == std::vector<std::vector<std::string>>{{"Obama"}, {"he"}});
  CHECK(skipped.num_bad_rows == 1);
  CHECK(skipped.line_numbers == std::vector<int64_t>{1, 6});
  // A line with the wrong column count.
  error = shardtrain_test::error_of([] { conll_table("Obama\tB-PER\nsaid\tO\tx\n"); });
  CHECK(error.find("ner.conll:2: 3 columns, but the file's word lines have 2") != std::string::npos);
  skipped = conll_table("Obama\tB-PER\nsaid\tO\tx\nit\tO\n\nhe\tO\n", {}, BadRowPolicy::kSkip);
  CHECK(skipped.words == std::vector<std::vector<std::string>>{{"he"}});
  CHECK(skipped.num_bad_rows == 1);
  // Under skip a bad first line does not make every later line bad.
  skipped = conll_table("Obama\tB-PER\tx\n\nhe\tO\n\nit\tO\n", {}, BadRowPolicy::kSkip);
  CHECK(skipped.words == std::vector<std::vector<std::string>>{{"he"}, {"it"}});
  CHECK(skipped.num_bad_rows == 1);
  // JSONL: words and tags of different lengths.
  error = shardtrain_test::error_of([] {
    read_word_table_from_string("{\"tokens\": [\"a\"], \"ner_tags\": [\"O\"]}\n{\"tokens\": [\"a\", \"b\"], "
                                "\"ner_tags\": [\"O\"]}\n",
                                "b.jsonl", WordTableOptions{});
  });
  CHECK(error.find("b.jsonl:2: 2 words but 1 tags") != std::string::npos);
}

TEST_CASE("multiple choice: choices from a list or columns, presets, and the dataset's pairs") {
  MultipleChoiceTable t = choices_jsonl(
      "{\"context\": \"He sat.\", \"endings\": [\"Up\", \"Down\", \"Left\"], \"label\": 2}\n"
      "{\"context\": \"She ran.\", \"endings\": [\"Far\", \"Near\", \"Home\"], \"label\": 0}\n");
  CHECK(t.num_choices == 3);
  CHECK(t.second.at(1) == std::vector<std::string>{"Far", "Near", "Home"});
  CHECK(t.labels.class_ids == std::vector<int64_t>{2, 0});
  // COPA: the question becomes a question after the premise (jiant).
  MultipleChoiceOptions copa;
  copa.preset = DataPreset::kCopa;
  copa.context_column = "premise";
  copa.prefix_column = "question";
  copa.choice_columns = {"choice1", "choice2"};
  copa.label_column = "label";
  t = read_multiple_choice_from_string(
      "{\"premise\": \"The man fell.\", \"question\": \"cause\", \"choice1\": \"He slipped.\", \"choice2\": \"He "
      "sang.\", \"label\": 0}\n",
      "copa.jsonl", copa);
  CHECK(t.first.at(0) == "The man fell. What was the cause of this?");
  CHECK(t.second.at(0) == std::vector<std::string>{"He slipped.", "He sang."});
  // SWAG-style prefix: "sent2 ending".
  MultipleChoiceOptions swag;
  swag.context_column = "sent1";
  swag.prefix_column = "sent2";
  swag.choice_columns = {"ending0", "ending1"};
  swag.label_column = "label";
  t = read_multiple_choice_from_string("sent1,sent2,ending0,ending1,label\nA man waits.,He,sits.,runs.,1\n", "s.csv",
                                       swag);
  CHECK(t.second.at(0) == std::vector<std::string>{"He sits.", "He runs."});
  // The dataset: one pair per choice, example = the row's choices.
  const Tokenizer& tokenizer = shardtrain_test::bert_cased();
  const TokenizedDataset data = build_choice_dataset(t, tokenizer, 32, MPI_COMM_SELF);
  CHECK(data.sequences_per_example == 2);
  CHECK(data.size() == 1);
  CHECK(data.labels.class_ids == std::vector<int64_t>{1});
  std::vector<std::string> second;
  for (int64_t i = data.offsets[1]; i < data.offsets[2]; ++i) second.push_back(tokenizer.token(data.input_ids[static_cast<size_t>(i)]));
  CHECK(second == std::vector<std::string>{"[CLS]", "A", "man", "waits", ".", "[SEP]", "He", "runs", ".", "[SEP]"});
}

TEST_CASE("multiple choice: bad rows name the file and line, or are skipped and counted") {
  const std::string good = "{\"context\": \"c\", \"endings\": [\"a\", \"b\", \"c\"], \"label\": 1}\n";
  const std::string two = "{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 1}\n";
  const std::string beyond = "{\"context\": \"c\", \"endings\": [\"a\", \"b\", \"c\"], \"label\": 3}\n";
  // A choice list of the wrong length.
  std::string error = shardtrain_test::error_of([&] { choices_jsonl(good + good + two); });
  CHECK(error.find("mc.jsonl:3: 2 choices, but the data has 3 per row") != std::string::npos);
  MultipleChoiceTable t = choices_jsonl(good + two + good, BadRowPolicy::kSkip);
  CHECK(t.size() == 2);
  CHECK(t.num_bad_rows == 1);
  CHECK(t.line_numbers == std::vector<int64_t>{1, 3});
  // Under skip, a short first row does not make the others bad: the usual
  // number of choices wins.
  t = choices_jsonl(two + good + good, BadRowPolicy::kSkip);
  CHECK(t.num_choices == 3);
  CHECK(t.size() == 2);
  CHECK(t.num_bad_rows == 1);
  // data.num_choices given: a row with another number is bad.
  error = shardtrain_test::error_of([&] { choices_jsonl(good, BadRowPolicy::kError, 4); });
  CHECK(error.find("mc.jsonl:1: 3 choices, but the data has 4 per row") != std::string::npos);
  // A label out of range for the choices.
  error = shardtrain_test::error_of([&] { choices_jsonl(good + beyond); });
  CHECK(error.find("mc.jsonl:2: data.label = 3, but the row has 3 choices") != std::string::npos);
  t = choices_jsonl(beyond + good, BadRowPolicy::kSkip);
  CHECK(t.size() == 1);
  CHECK(t.num_bad_rows == 1);
  error = shardtrain_test::error_of([&] { choices_jsonl("{\"context\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": -1}\n"); });
  CHECK(error.find("mc.jsonl:1: data.label: '-1' is not a choice index") != std::string::npos);
}
