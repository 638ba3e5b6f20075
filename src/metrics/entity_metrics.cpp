// seqeval's default-mode chunking and scores (metrics/entity_metrics.h).
#include "shardtrain/metrics/entity_metrics.h"

#include <set>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

// seqeval: tag = chunk[0]; type = chunk[1:].split('-', maxsplit=1)[-1] or '_'.
std::pair<char, std::string> split_tag(const std::string& chunk) {
  const char tag = chunk.empty() ? 'O' : chunk[0];
  const std::string rest = chunk.size() > 1 ? chunk.substr(1) : std::string();
  const size_t dash = rest.find('-');
  std::string type = dash == std::string::npos ? rest : rest.substr(dash + 1);
  if (type.empty()) type = "_";
  return {tag, type};
}

bool end_of_chunk(char prev_tag, char tag, const std::string& prev_type, const std::string& type) {
  if (prev_tag == 'E' || prev_tag == 'S') return true;
  if (prev_tag == 'B' && (tag == 'B' || tag == 'S' || tag == 'O')) return true;
  if (prev_tag == 'I' && (tag == 'B' || tag == 'S' || tag == 'O')) return true;
  return prev_tag != 'O' && prev_tag != '.' && prev_type != type;
}

bool start_of_chunk(char prev_tag, char tag, const std::string& prev_type, const std::string& type) {
  if (tag == 'B' || tag == 'S') return true;
  if ((prev_tag == 'E' || prev_tag == 'S' || prev_tag == 'O') && (tag == 'E' || tag == 'I')) return true;
  return tag != 'O' && tag != '.' && prev_type != type;
}

double ratio(int64_t a, int64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b); }
double harmonic(double p, double r) { return p + r == 0 ? 0.0 : 2 * p * r / (p + r); }

}  // namespace

std::vector<EntityChunk> entity_chunks(const std::vector<std::string>& tags) {
  std::vector<EntityChunk> chunks;
  char prev_tag = 'O';
  std::string prev_type;
  int64_t begin = 0;
  const int64_t n = static_cast<int64_t>(tags.size());
  for (int64_t i = 0; i <= n; ++i) {  // one "O" after the end closes the last chunk
    const auto [tag, type] = i < n ? split_tag(tags[static_cast<size_t>(i)]) : std::pair<char, std::string>{'O', "_"};
    if (end_of_chunk(prev_tag, tag, prev_type, type)) chunks.emplace_back(prev_type, begin, i - 1);
    if (start_of_chunk(prev_tag, tag, prev_type, type)) begin = i;
    prev_tag = tag;
    prev_type = type;
  }
  return chunks;
}

EntityMetrics entity_metrics(const std::vector<std::vector<std::string>>& references,
                             const std::vector<std::vector<std::string>>& predictions) {
  if (references.size() != predictions.size())
    throw Error(str_format("entity_metrics: %zu reference sentences but %zu predicted", references.size(),
                           predictions.size()));
  // Chunks keyed by (type, start, end) in the concatenation of the sentences,
  // each followed by one "O" as seqeval flattens them.
  std::set<EntityChunk> truth, guess;
  int64_t offset = 0, tokens = 0, correct = 0;
  for (size_t s = 0; s < references.size(); ++s) {
    const std::vector<std::string>& ref = references[s];
    const std::vector<std::string>& pred = predictions[s];
    if (ref.size() != pred.size())
      throw Error(str_format("entity_metrics: sentence %zu has %zu reference tags but %zu predicted", s, ref.size(),
                             pred.size()));
    for (const auto& [type, b, e] : entity_chunks(ref)) truth.emplace(type, offset + b, offset + e);
    for (const auto& [type, b, e] : entity_chunks(pred)) guess.emplace(type, offset + b, offset + e);
    for (size_t t = 0; t < ref.size(); ++t) correct += ref[t] == pred[t] ? 1 : 0;
    tokens += static_cast<int64_t>(ref.size());
    offset += static_cast<int64_t>(ref.size()) + 1;
  }
  EntityMetrics m;
  for (const auto& chunk : truth) ++m.per_type[std::get<0>(chunk)].number;
  for (const auto& chunk : guess) {
    EntityScores& scores = m.per_type[std::get<0>(chunk)];
    ++scores.predicted;
    if (truth.count(chunk)) ++scores.found;
  }
  int64_t found = 0, predicted = 0, number = 0;
  for (auto& [type, scores] : m.per_type) {
    scores.precision = ratio(scores.found, scores.predicted);
    scores.recall = ratio(scores.found, scores.number);
    scores.f1 = harmonic(scores.precision, scores.recall);
    found += scores.found;
    predicted += scores.predicted;
    number += scores.number;
  }
  m.precision = ratio(found, predicted);
  m.recall = ratio(found, number);
  m.f1 = harmonic(m.precision, m.recall);
  m.accuracy = ratio(correct, tokens);
  return m;
}

}  // namespace shardtrain
