// Entity-level metrics of token classification, as seqeval's default mode
// computes them (what run_ner_no_trainer.py reports through `evaluate`'s
// "seqeval"): tags are cut into chunks by the IOB rules below, and an entity
// counts as found only when its type, start and end all match.
//
// Chunks (seqeval.metrics.sequence_labeling.get_entities, no scheme): each
// sentence is followed by an "O", so no chunk crosses sentences. A tag's
// prefix is its first character (B, I, E, S, O, ...) and its type what
// follows the first '-' after it ("B-creative-work" -> B, creative-work);
// "O" has the type "_". A chunk ends before tag t when the previous tag was E
// or S; or (B|I) is followed by B, S or O; or the type changes after a tag
// other than O and '.'. A chunk starts at t when t is B or S; or E|S|O is
// followed by E or I (E, E / E, I / S, E / S, I / O, E / O, I); or the type
// changes at a tag other than O and '.'. So an I- without a B- starts an
// entity, and B-X I-X B-X gives two.
//
// precision = found / predicted, recall = found / true, f1 = 2 p r / (p + r),
// each 0 when its denominator is 0 (zero_division); overall figures are
// micro averages (counts summed over types). accuracy = tokens whose tag
// equals the reference / all tokens.
//
//   EntityMetrics m = entity_metrics({{"B-PER", "I-PER", "O"}}, {{"B-PER", "O", "O"}});
//   // m.precision 0, m.recall 0, m.accuracy 2/3
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace shardtrain {

struct EntityScores {
  double precision = 0, recall = 0, f1 = 0;
  int64_t number = 0;     // true entities of the type (seqeval's support)
  int64_t predicted = 0;  // predicted entities of the type
  int64_t found = 0;      // predicted and true
};

struct EntityMetrics {
  double precision = 0, recall = 0, f1 = 0, accuracy = 0;
  std::map<std::string, EntityScores> per_type;  // every type of the references or the predictions
};

// One chunk: its type and its first and last token (inclusive), counted in
// the sequence that `entity_chunks` was given.
using EntityChunk = std::tuple<std::string, int64_t, int64_t>;

// The chunks of one tag sequence (one sentence), in order.
std::vector<EntityChunk> entity_chunks(const std::vector<std::string>& tags);

// references[i] and predictions[i] are sentence i's tags (equal lengths;
// Error otherwise).
EntityMetrics entity_metrics(const std::vector<std::vector<std::string>>& references,
                             const std::vector<std::vector<std::string>>& predictions);

}  // namespace shardtrain
