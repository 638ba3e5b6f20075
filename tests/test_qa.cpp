// Extractive question answering: the SQuAD readers and their refusals, the
// features (windows, labels, character offsets) against hand-made cases,
// post-processing against hand-computed answers, and the official EM / F1.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <limits>
#include <numeric>

#include "shardtrain/core/check.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/qa_data.h"
#include "shardtrain/tasks/question_answering.h"
#include "shardtrain/metrics/squad_metrics.h"
#include "support/mpi_ranks.h"
#include "support/tokenizer_fixtures.h"

using namespace shardtrain;

// Everything in a file namespace: the test files are compiled together (unity build).
namespace qa_test {
using shardtrain_test::bert_cased;
using shardtrain_test::error_of;
using shardtrain_test::roberta_base;

namespace {

QaExample qa_example(const std::string& question, const std::string& context, const std::string& answer,
                     size_t occurrence_byte = std::string::npos) {
  QaExample e;
  e.id = "q";
  e.question = question;
  e.context = context;
  if (!answer.empty()) {
    const size_t byte = occurrence_byte != std::string::npos ? occurrence_byte : context.find(answer);
    REQUIRE(byte != std::string::npos);
    e.answer_texts = {answer};
    e.answer_starts = {utf8_char_count(std::string_view(context).substr(0, byte))};
  }
  return e;
}

// The tokens of `feature` at [begin, end] as text (the context's characters they span).
std::string qa_span_text(const QaExample& e, const EncodedRow& feature, int32_t begin, int32_t end) {
  return utf8_substr(e.context, feature.token_spans[begin][0], feature.token_spans[end][1]);
}

const char* kQaNumbers = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen";

}  // namespace

TEST_CASE("qa reader: SQuAD JSON and HF's JSON Lines give the same questions") {
  const std::string json =
      R"({"version": "1.1", "data": [{"title": "T", "paragraphs": [{"context": "Caf\u00e9 Denver won.",
          "qas": [{"id": "a1", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 5},
                                                                  {"text": "Denver won", "answer_start": 5}]}]}]}]})";
  const std::string jsonl =
      R"({"id": "a1", "title": "T", "context": "Café Denver won.", "question": "Who won?", "answers": {"text": ["Denver", "Denver won"], "answer_start": [5, 5]}})"
      "\n";
  const QaTable a = read_qa_table_from_string(json, "dev.json", {});
  const QaTable b = read_qa_table_from_string(jsonl, "dev.jsonl", {});
  CHECK(a.squad_json);
  CHECK_FALSE(b.squad_json);
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  for (const QaTable* t : {&a, &b}) {
    const QaExample& e = t->examples[0];
    CHECK(e.id == "a1");
    CHECK(e.context == "Café Denver won.");
    CHECK(e.answer_texts == std::vector<std::string>{"Denver", "Denver won"});
    CHECK(e.answer_starts == std::vector<int64_t>{5, 5});  // characters: é is one
  }
}

TEST_CASE("qa reader: bad input is named by file and question id") {
  auto squad = [](const std::string& qas, const std::string& context = "Denver won the game.") {
    return R"({"data": [{"paragraphs": [{"context": ")" + context + R"(", "qas": [)" + qas + "]}]}]}";
  };
  const std::string good = R"({"id": "good1", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}]})";
  // answer_start pointing elsewhere
  std::string message = error_of([&] {
    read_qa_table_from_string(
        squad(R"({"id": "bad-start", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 3}]})"),
        "train.json", {});
  });
  CHECK(message.find("train.json") != std::string::npos);
  CHECK(message.find("bad-start") != std::string::npos);
  CHECK(message.find("not at the answer text") != std::string::npos);
  // empty context
  message = error_of([&] {
    read_qa_table_from_string(
        squad(R"({"id": "no-context", "question": "Who?", "answers": []})", ""), "train.json", {true, true});
  });
  CHECK(message.find("no-context") != std::string::npos);
  CHECK(message.find("context is empty") != std::string::npos);
  // duplicated id
  message = error_of([&] { read_qa_table_from_string(squad(good + "," + good), "train.json", {}); });
  CHECK(message.find("good1") != std::string::npos);
  CHECK(message.find("used twice") != std::string::npos);
  // JSON Lines: the line, too
  const std::string line =
      R"({"id": "x7", "context": "abc", "question": "q", "answers": {"text": ["b"], "answer_start": [0]}})";
  message = error_of([&] { read_qa_table_from_string(line + "\n", "dev.jsonl", {}); });
  CHECK(message.find("dev.jsonl:1") != std::string::npos);
  CHECK(message.find("x7") != std::string::npos);
  // v1 refuses unanswered questions; v2 takes them
  const std::string unanswered = R"({"id": "u1", "question": "Who?", "answers": [], "is_impossible": true})";
  message = error_of([&] { read_qa_table_from_string(squad(unanswered), "dev.json", {}); });
  CHECK(message.find("version_2_with_negative") != std::string::npos);
  CHECK(read_qa_table_from_string(squad(unanswered), "dev.json", {true, true}).size() == 1);
}

TEST_CASE("qa features: windows, and an answer split across two windows") {
  // "What ?" is 2 tokens, 3 special tokens: 8 context tokens per window.
  const QaExample e = qa_example("What?", kQaNumbers, "seven eight nine");
  QaFeatureOptions options;
  options.max_length = 13;
  options.doc_stride = 3;  // windows [0, 8), [5, 13), [10, 14) of the 14 words
  std::vector<EncodedRow> f = qa_question_features(e, bert_cased(), options);
  REQUIRE(f.size() == 3);
  CHECK(f[0].input_ids.size() == 13);
  CHECK(f[2].input_ids.size() == 2 + 3 + 4);
  CHECK(f[0].span == std::array<int32_t, 2>{0, 0});  // holds seven eight, not nine: CLS
  CHECK(f[1].span == std::array<int32_t, 2>{5, 7});  // [CLS] What ? [SEP] six seven eight nine
  CHECK(qa_span_text(e, f[1], 5, 7) == "seven eight nine");
  CHECK(f[2].span == std::array<int32_t, 2>{0, 0});
  CHECK(f[0].token_spans[0] == std::array<int32_t, 2>{-1, -1});  // CLS and the question have none
  CHECK(f[0].token_spans[2] == std::array<int32_t, 2>{-1, -1});
  CHECK(f[0].token_spans[4] == std::array<int32_t, 2>{0, 3});     // "one"
  CHECK(f[0].token_spans[12] == std::array<int32_t, 2>{-1, -1});  // the last SEP
  // With an overlap of one token no window holds the whole answer.
  options.doc_stride = 1;  // [0, 8), [7, 14)
  f = qa_question_features(e, bert_cased(), options);
  REQUIRE(f.size() == 2);
  CHECK(f[0].span == std::array<int32_t, 2>{0, 0});
  CHECK(f[1].span == std::array<int32_t, 2>{0, 0});
  // A stride that leaves no progress is refused.
  options.doc_stride = 8;
  CHECK(error_of([&] { qa_question_features(e, bert_cased(), options); }).find("data.doc_stride") !=
        std::string::npos);
}

TEST_CASE("qa features: an answer at the window's edges") {
  QaFeatureOptions options;
  options.max_length = 13;
  options.doc_stride = 3;
  // "eight" is the last context token of window 0; HF's loop would walk on to
  // [SEP], here it stays on the context's last token.
  QaExample e = qa_example("What?", kQaNumbers, "eight");
  std::vector<EncodedRow> f = qa_question_features(e, bert_cased(), options);
  CHECK(f[0].span == std::array<int32_t, 2>{11, 11});
  CHECK(qa_span_text(e, f[0], 11, 11) == "eight");
  CHECK(f[1].span == std::array<int32_t, 2>{6, 6});
  // "one": the first context token.
  e = qa_example("What?", kQaNumbers, "one");
  f = qa_question_features(e, bert_cased(), options);
  CHECK(f[0].span == std::array<int32_t, 2>{4, 4});
  CHECK(f[1].span == std::array<int32_t, 2>{0, 0});
  // Part of a token: the token that holds it.
  e = qa_example("What?", kQaNumbers, "leve");
  f = qa_question_features(e, bert_cased(), options);
  CHECK(qa_span_text(e, f[2], f[2].span[0], f[2].span[1]) == "eleven");
}

TEST_CASE("qa features: a context shorter than the question") {
  const QaExample e = qa_example("   Which number follows six in the list of the numbers one to ten?", "seven", "seven");
  const std::vector<EncodedRow> f = qa_question_features(e, bert_cased(), {});
  REQUIRE(f.size() == 1);
  const size_t n = f[0].input_ids.size();
  CHECK(f[0].span == std::array<int32_t, 2>{static_cast<int32_t>(n - 2), static_cast<int32_t>(n - 2)});
  // The question's leading spaces are stripped (Python's lstrip), as run_qa does.
  std::vector<int32_t> question;
  bert_cased().tokenize("Which number follows six in the list of the numbers one to ten?", question);
  CHECK(n == question.size() + 4);
}

TEST_CASE("qa features: unicode before the answer (characters, not bytes)") {
  const std::string context = "Café naïve 東京 😀 answer here";
  const QaExample e = qa_example("Where?", context, "answer");
  CHECK(e.answer_starts[0] == 16);  // characters; the bytes would be 25
  const std::vector<EncodedRow> f = qa_question_features(e, bert_cased(), {});
  REQUIRE(f.size() == 1);
  const auto [s, t] = f[0].span;
  CHECK(s == t);
  CHECK(f[0].token_spans[s] == std::array<int32_t, 2>{16, 22});
  CHECK(qa_span_text(e, f[0], s, t) == "answer");
  // The ideographs are one token each, one character wide.
  int64_t ideographs = 0;
  for (const auto& span : f[0].token_spans) ideographs += span == std::array<int32_t, 2>{11, 12} ? 1 : 0;
  CHECK(ideographs == 1);
}

TEST_CASE("qa features: BPE's prefix space") {
  // RoBERTa: the context's first word has no prefix space ("Paris", not
  // "ĠParis"), later words' spans leave their space out.
  const QaExample first = qa_example("What?", "Paris is the capital of France.", "Paris");
  const QaExample later = qa_example("What?", "Paris is the capital of France.", "capital");
  const Tokenizer& tokenizer = roberta_base();
  std::vector<EncodedRow> f = qa_question_features(first, tokenizer, {});
  REQUIRE(f.size() == 1);
  // <s> What ? </s> </s> Paris ...
  CHECK(f[0].span == std::array<int32_t, 2>{5, 5});
  CHECK(tokenizer.token(f[0].input_ids[5]) == "Paris");
  CHECK(f[0].token_spans[5] == std::array<int32_t, 2>{0, 5});
  f = qa_question_features(later, tokenizer, {});
  CHECK(f[0].span == std::array<int32_t, 2>{8, 8});
  CHECK(tokenizer.token(f[0].input_ids[8]) == "Ġcapital");
  CHECK(f[0].token_spans[8] == std::array<int32_t, 2>{13, 20});
}

TEST_CASE("qa features: a dataset over the table, one source row per window") {
  QaTable table;
  table.path = "t.json";
  table.examples = {qa_example("What?", kQaNumbers, "nine"), qa_example("What?", "one two", "two")};
  table.line_numbers = {1, 2};
  QaFeatureOptions options;
  options.max_length = 13;
  options.doc_stride = 3;
  const TokenizedDataset d = build_qa_features(table, bert_cased(), options, MPI_COMM_SELF);
  CHECK(d.size() == 4);
  CHECK(d.source_rows == std::vector<int64_t>{0, 0, 0, 1});
  CHECK(features_per_question(d, 2) == std::vector<int64_t>{0, 3, 4});
  CHECK(d.span_labels == std::vector<int32_t>{0, 0, 7, 7, 0, 0, 5, 5});
  CHECK(d.token_spans.size() == 2 * d.input_ids.size());
  const Batch batch = collate(d, {1, 3}, 0);
  CHECK(batch.labels.sizes() == at::IntArrayRef({2, 2}));
  CHECK(batch.labels[0][0].item<int64_t>() == 7);
}

namespace {

// One question's features, their records from hand-set logits (start and end
// per feature and position; positions past a feature's length are padding).
struct QaHandCase {
  QaTable table;
  TokenizedDataset features;
  std::vector<float> records;
};

QaHandCase qa_hand_case(const QaExample& e, const QaFeatureOptions& options,
                        const std::function<void(int64_t feature, at::Tensor& start, at::Tensor& end)>& set,
                        int64_t n_best = 20) {
  QaHandCase c;
  c.table.path = "hand.json";
  c.table.examples = {e};
  c.table.line_numbers = {1};
  c.features = build_qa_features(c.table, bert_cased(), options, MPI_COMM_SELF);
  std::vector<int64_t> all(static_cast<size_t>(c.features.size()));
  std::iota(all.begin(), all.end(), 0);
  const Batch batch = collate(c.features, all, 0);
  const int64_t B = batch.size(), L = batch.input_ids.size(1);
  at::Tensor logits = at::full({B, L, 2}, -5.0f);
  for (int64_t f = 0; f < B; ++f) {
    at::Tensor start = logits[f].select(1, 0), end = logits[f].select(1, 1);
    set(f, start, end);
  }
  logits = logits.masked_fill(batch.attention_mask.eq(0).unsqueeze(-1), -std::numeric_limits<float>::infinity());
  const at::Tensor records = qa_record(n_best)(logits, batch);
  c.records.assign(records.data_ptr<float>(), records.data_ptr<float>() + records.numel());
  return c;
}

}  // namespace

TEST_CASE("qa post-processing: the best span over every window, in the context only") {
  const QaExample e = qa_example("What?", kQaNumbers, "nine");
  QaFeatureOptions options;
  options.max_length = 13;
  options.doc_stride = 3;  // windows [0, 8), [5, 13), [10, 14); context starts at position 4
  QaHandCase c = qa_hand_case(e, options, [](int64_t f, at::Tensor& start, at::Tensor& end) {
    start[1] = 50.0f;  // the question's token: never an answer
    end[1] = 50.0f;
    if (f == 0) {  // "three four": 3 + 2
      start[6] = 3.0f;
      end[7] = 2.0f;
    }
    if (f == 1) {  // "nine ten": 4 + 4 (nine at 4 + 8 - 5 = 7); "eight" ends before the start: skipped
      start[7] = 4.0f;
      end[8] = 4.0f;
      end[6] = 6.0f;
    }
  });
  QaPostprocessOptions post;
  std::vector<QaAnswer> answers = postprocess_qa(c.table, c.features, c.records, post);
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].text == "nine ten");
  CHECK(answers[0].score == doctest::Approx(8.0));
  CHECK(answers[0].start_char == 40);
  CHECK(answers[0].end_char == 48);
  // max_answer_length 1: one-token spans only; "eight" (-5 + 6) beats "nine" (4 - 5).
  post.max_answer_length = 1;
  answers = postprocess_qa(c.table, c.features, c.records, post);
  CHECK(answers[0].text == "eight");
  CHECK(answers[0].score == doctest::Approx(1.0));
  // n_best 1: the top start and top end of a window only (the question's
  // token, outside the context): no candidate at all -> "empty".
  QaHandCase one = qa_hand_case(e, options, [](int64_t, at::Tensor& start, at::Tensor& end) {
    start[1] = 50.0f;
    end[1] = 50.0f;
  }, 1);
  post = QaPostprocessOptions{};
  post.n_best_size = 1;
  answers = postprocess_qa(one.table, one.features, one.records, post);
  CHECK(answers[0].text == "empty");
  CHECK(answers[0].start_char == -1);
}

TEST_CASE("qa post-processing: v2 null answers") {
  const QaExample e = qa_example("What?", kQaNumbers, "");
  QaFeatureOptions options;
  options.max_length = 13;
  options.doc_stride = 3;
  // Null scores per feature: 6, 2, 10 -> the minimum, 2, from feature 1.
  // The best span: "five six" in feature 0 at 2 + 1.5 = 3.5.
  const float null_start[3] = {3.0f, 1.0f, 5.0f};
  QaHandCase c = qa_hand_case(e, options, [&](int64_t f, at::Tensor& start, at::Tensor& end) {
    start[0] = null_start[f];
    end[0] = null_start[f];
    if (f == 0) {
      start[8] = 2.0f;
      end[9] = 1.5f;
    }
  });
  QaPostprocessOptions post;
  post.version_2_with_negative = true;
  std::vector<QaAnswer> answers = postprocess_qa(c.table, c.features, c.records, post);
  CHECK(answers[0].null_score == doctest::Approx(2.0));
  CHECK(answers[0].score_diff == doctest::Approx(2.0 - 3.5));
  CHECK(answers[0].text == "five six");  // -1.5 is not above the threshold 0
  post.null_score_diff_threshold = -2.0;
  answers = postprocess_qa(c.table, c.features, c.records, post);
  CHECK(answers[0].text == "");
  CHECK(answers[0].start_char == -1);
  // v1 never answers "".
  post = QaPostprocessOptions{};
  CHECK(postprocess_qa(c.table, c.features, c.records, post)[0].text == "five six");
}

TEST_CASE("squad metrics: normalisation, exact match and F1 by hand") {
  CHECK(normalize_answer("The  Cat's, hat!") == "cats hat");
  CHECK(normalize_answer("banana an apple") == "banana apple");  // "an" only as a word
  CHECK(normalize_answer("A") == "");
  CHECK(normalize_answer("Ünïcode\u00a0THE\tend") == "ünïcode end");
  CHECK(squad_exact("a Denver Broncos", "Denver Broncos.") == 1.0);
  CHECK(squad_exact("Denver", "Denver Broncos") == 0.0);
  CHECK(squad_f1("Denver Broncos team", "the Denver Broncos") == doctest::Approx(0.8));
  CHECK(squad_f1("Broncos Broncos", "Broncos") == doctest::Approx(2.0 * 0.5 * 1.0 / 1.5));
  CHECK(squad_f1("the", "a") == 0.0);  // v1: nothing left, F1 0 (EM 1)
  CHECK(squad_v2_f1("the", "a") == 1.0);  // v2: both empty
  // Several gold answers: the best of them per question; 100 x the mean.
  const auto m = squad_v1_metrics({"Denver Broncos", "Carolina", "Levi's Stadium"},
                                  {{"Broncos", "the Denver Broncos"}, {"Carolina Panthers"}, {"Santa Clara"}});
  CHECK(m.at("exact_match") == doctest::Approx(100.0 / 3));
  CHECK(m.at("f1") == doctest::Approx(100.0 * (1.0 + 2.0 / 3) / 3));
}

TEST_CASE("squad metrics: v2 HasAns, NoAns and the best threshold by hand") {
  const auto m = squad_v2_metrics({"", "x", "Denver"}, {{}, {}, {"Denver", "the"}}, {2.0, 1.0, -1.0});
  CHECK(m.at("exact") == doctest::Approx(200.0 / 3));
  CHECK(m.at("f1") == doctest::Approx(200.0 / 3));
  CHECK(m.at("total") == 3);
  CHECK(m.at("HasAns_exact") == 100.0);
  CHECK(m.at("HasAns_total") == 1);
  CHECK(m.at("NoAns_exact") == 50.0);
  CHECK(m.at("NoAns_total") == 2);
  // By increasing no-answer score: answering q2 gains 1, answering q1 loses
  // its right "" (-1), q0 answered "" anyway: best 3 of 3 at threshold -1.
  CHECK(m.at("best_exact") == 100.0);
  CHECK(m.at("best_exact_thresh") == -1.0);
  const auto none = squad_v2_metrics({"x"}, {{"y"}}, {0.0});
  CHECK(none.count("NoAns_exact") == 0);
  CHECK(none.at("best_exact") == 0.0);
}

}  // namespace qa_test
