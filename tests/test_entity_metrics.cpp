// Entity-level metrics (metrics/entity_metrics.h) against results computed by
// hand with seqeval's default-mode rules (seqeval.metrics.sequence_labeling:
// get_entities, end_of_chunk, start_of_chunk; precision_score, recall_score,
// f1_score with average="micro"; accuracy_score), and token_metrics on
// gathered records: only each word's first token counts.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/metrics/entity_metrics.h"
#include "shardtrain/tasks/token_classification.h"

using namespace shardtrain;

namespace entity_metrics_test {

using Tags = std::vector<std::string>;

// A sentence's chunks as "TYPE first-last" joined by ", " (readable in a failed CHECK).
std::string chunks_of(const Tags& tags) {
  std::string out;
  for (const auto& [type, first, last] : entity_chunks(tags))
    out += (out.empty() ? "" : ", ") + type + " " + std::to_string(first) + "-" + std::to_string(last);
  return out;
}

}  // namespace entity_metrics_test

using namespace entity_metrics_test;

TEST_CASE("entity chunks: an I- without a B- starts an entity, also after another type's I-") {
  CHECK(chunks_of({"O", "I-PER", "I-PER", "O"}) == "PER 1-2");
  // "Nested": I-LOC right after I-PER ends PER and starts LOC.
  CHECK(chunks_of({"B-PER", "I-PER", "I-LOC", "I-LOC", "O"}) == "PER 0-1, LOC 2-3");
  CHECK(chunks_of({"I-ORG"}) == "ORG 0-0");
  // A type with a dash in it (WNUT-17's creative-work) stays whole.
  CHECK(chunks_of({"B-creative-work", "I-creative-work"}) == "creative-work 0-1");
}

TEST_CASE("entity chunks: adjacent entities of one type are two, and an entity at the end is closed") {
  CHECK(chunks_of({"B-LOC", "B-LOC"}) == "LOC 0-0, LOC 1-1");
  CHECK(chunks_of({"B-LOC", "I-LOC", "B-LOC", "O"}) == "LOC 0-1, LOC 2-2");
  CHECK(chunks_of({"O", "O", "B-MISC", "I-MISC"}) == "MISC 2-3");
  // IOBES tags, which the default mode also reads: E and S end a chunk.
  CHECK(chunks_of({"B-PER", "E-PER", "S-LOC", "S-LOC"}) == "PER 0-1, LOC 2-2, LOC 3-3");
  CHECK(chunks_of({"O", "O"}).empty());
  CHECK(chunks_of({}).empty());
}

TEST_CASE("entity metrics: micro precision, recall and F1, per type, and token accuracy, as seqeval") {
  // Truth:  s1 PER(0-1) LOC(3);          s2 ORG(0-1, I- without B-) PER(3) PER(4)   -> 5 entities
  // Guess:  s1 PER(0-1);                 s2 ORG(0-1) PER(3-4)                        -> 3 entities
  // Found:  PER(0-1) of s1 and ORG(0-1) of s2                                        -> 2
  const std::vector<Tags> truth = {{"B-PER", "I-PER", "O", "B-LOC"}, {"I-ORG", "I-ORG", "O", "B-PER", "B-PER"}};
  const std::vector<Tags> guess = {{"B-PER", "I-PER", "O", "O"}, {"B-ORG", "I-ORG", "O", "B-PER", "I-PER"}};
  const EntityMetrics m = entity_metrics(truth, guess);
  CHECK(m.precision == doctest::Approx(2.0 / 3));
  CHECK(m.recall == doctest::Approx(2.0 / 5));
  CHECK(m.f1 == doctest::Approx(0.5));  // 2 (2/3)(2/5) / (2/3 + 2/5)
  CHECK(m.accuracy == doctest::Approx(6.0 / 9));  // B-LOC/O, I-ORG/B-ORG, B-PER/I-PER differ
  REQUIRE(m.per_type.size() == 3);
  const EntityScores& per = m.per_type.at("PER");
  CHECK(per.number == 3);
  CHECK(per.predicted == 2);
  CHECK(per.found == 1);
  CHECK(per.precision == doctest::Approx(0.5));
  CHECK(per.recall == doctest::Approx(1.0 / 3));
  CHECK(per.f1 == doctest::Approx(0.4));
  const EntityScores& loc = m.per_type.at("LOC");  // never predicted: zero_division gives 0
  CHECK(loc.number == 1);
  CHECK(loc.predicted == 0);
  CHECK(loc.precision == 0.0);
  CHECK(loc.recall == 0.0);
  CHECK(loc.f1 == 0.0);
  CHECK(m.per_type.at("ORG").f1 == 1.0);
}

TEST_CASE("entity metrics: an entity does not run across sentences") {
  // seqeval puts an "O" after each sentence: s1's LOC ends at its end, and
  // s2's leading I-LOC starts a new one. Joined, the truth would be a single
  // entity and F1 0.
  const EntityMetrics m = entity_metrics({{"O", "B-LOC"}, {"I-LOC", "O"}}, {{"O", "B-LOC"}, {"B-LOC", "O"}});
  CHECK(m.precision == 1.0);
  CHECK(m.recall == 1.0);
  CHECK(m.f1 == 1.0);
  CHECK(m.per_type.at("LOC").number == 2);
  // Nothing predicted and nothing true: every score 0, accuracy 1.
  const EntityMetrics none = entity_metrics({{"O", "O"}}, {{"O", "O"}});
  CHECK(none.f1 == 0.0);
  CHECK(none.accuracy == 1.0);
  CHECK(none.per_type.empty());
  CHECK_THROWS_AS(entity_metrics({{"O"}}, {{"O", "O"}}), Error);
  CHECK_THROWS_AS(entity_metrics({{"O"}}, {}), Error);
}

TEST_CASE("token metrics: each word's first token only, from gathered records") {
  // Two sentences; tags O=0, B-PER=1, I-PER=2. Labels -100 at special tokens
  // and at a word's later sub-tokens, whose predictions must not count.
  TokenizedDataset data;
  data.offsets = {0, 5, 9};
  data.input_ids.assign(9, 7);
  data.token_type_ids.assign(9, 0);
  data.token_labels = {kIgnoreLabel, 1, kIgnoreLabel, 0, kIgnoreLabel,  // [CLS] B-PER ## O [SEP]
                       kIgnoreLabel, 2, 0, kIgnoreLabel};               // [CLS] I-PER O [SEP]
  const std::vector<std::string> tag_names = {"O", "B-PER", "I-PER"};
  const int64_t positions = token_record_positions(data);
  REQUIRE(positions == 5);
  // Record: the predicted tag per position, then the loss sum and the labelled count.
  const std::vector<float> records = {0, 1, 2, 0, 2, /*loss*/ 3.0f, /*count*/ 2,
                                      1, 1, 0, 0, -1, /*loss*/ 1.0f, /*count*/ 2};
  const auto m = token_metrics(records, positions, data, tag_names);
  // Truth PER(s1 0), PER(s2 0; I- without B-); guess PER(s1 0) (the "##"
  // token's I-PER is not read), PER(s2 0): both found.
  CHECK(m.at("eval_precision") == 1.0);
  CHECK(m.at("eval_recall") == 1.0);
  CHECK(m.at("eval_accuracy") == doctest::Approx(3.0 / 4));  // I-PER predicted B-PER
  CHECK(m.at("eval_PER_f1") == 1.0);
  CHECK(m.at("eval_loss") == doctest::Approx(4.0 / 4));
  // A guess that misses s1's entity end: B-PER then I-PER on "O" makes PER(0-1).
  std::vector<float> wrong = records;
  wrong[3] = 2;
  const auto w = token_metrics(wrong, positions, data, tag_names);
  CHECK(w.at("eval_precision") == doctest::Approx(0.5));
  CHECK(w.at("eval_recall") == doctest::Approx(0.5));
  CHECK(w.at("eval_accuracy") == doctest::Approx(2.0 / 4));
}
