// SentencePiece's Unigram Viterbi, step for step (data/spm_unigram.h).
// Each line that decides a result mirrors libsentencepiece 0.1.97's
// unigram::Model (its constructor and EncodeOptimized) and
// SentencePieceProcessor::PopulateSentencePieceText: the float and double
// types of every sum, the strict ">" that keeps the first of equal
// candidates, the unknown node's score. The tokenizer checks every chunk's
// path against libsentencepiece's when it caches it (spm_chunks.cpp).
#include "data/tokenizer/spm_unigram.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace shardtrain::spm {

namespace {

// string_util::OneCharLen: a UTF-8 character's length from its lead byte.
std::size_t one_char_bytes(std::string_view text, std::size_t at) {
  static constexpr unsigned char kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return std::min<std::size_t>(kLength[static_cast<unsigned char>(text[at]) >> 4], text.size() - at);
}

constexpr float kUnknownPenalty = 10.0f;  // unigram_model.cc's kUnkPenalty

}  // namespace

Unigram::Unigram(const ModelSpec& spec) : unk_id_(spec.unk_id), byte_fallback_(spec.byte_fallback) {
  // unigram::Model's constructor: the extremes over NORMAL pieces, from FLT_MAX and FLT_MIN.
  float min_score = FLT_MAX, max_score = FLT_MIN;
  for (const Piece& piece : spec.pieces) {
    if (piece.type != PieceType::kNormal) continue;
    min_score = std::min(min_score, piece.score);
    max_score = std::max(max_score, piece.score);
  }
  unk_score_ = min_score - kUnknownPenalty;
  const std::size_t count = spec.pieces.size();
  scores_.assign(count, 0.0);
  piece_bytes_.assign(count, 0);
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), unk_id_);
  std::vector<std::pair<std::string_view, int32_t>> matched;
  for (std::size_t i = 0; i < count; ++i) {
    const Piece& piece = spec.pieces[i];
    const auto id = static_cast<int32_t>(i);
    piece_bytes_[i] = static_cast<int32_t>(piece.text.size());
    if (piece.type == PieceType::kNormal) {
      scores_[i] = static_cast<double>(piece.score);
      matched.emplace_back(piece.text, id);
    } else if (piece.type == PieceType::kUserDefined) {
      // "length * max_score_ - 0.1": a float product, then a double.
      volatile float scaled = static_cast<float>(piece.text.size()) * max_score;
      scores_[i] = static_cast<double>(scaled) - 0.1;
      matched.emplace_back(piece.text, id);
    } else if (piece.type == PieceType::kByte && piece.text.size() == 6 && piece.text.compare(0, 3, "<0x") == 0) {
      byte_ids_[std::stoi(piece.text.substr(3, 2), nullptr, 16) & 0xFF] = id;
    }
  }
  // UNUSED pieces are in SentencePiece's trie but skipped when matched: left out.
  build_trie(matched);
}

void Unigram::build_trie(std::vector<std::pair<std::string_view, int32_t>>& pieces) {
  std::stable_sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Breadth first: a node is the pieces [begin, end) sharing `depth` bytes;
  // `slot` is where its parent keeps its offset.
  struct Pending {
    std::size_t begin, end, depth, slot;
  };
  std::vector<Pending> queue{{0, pieces.size(), 0, 0}};
  std::fill(std::begin(root_children_), std::end(root_children_), 0u);
  for (std::size_t next_in_queue = 0; next_in_queue < queue.size(); ++next_in_queue) {
    const Pending node = queue[next_in_queue];
    const auto offset = static_cast<uint32_t>(trie_.size());
    if (next_in_queue > 0) trie_[node.slot] = offset;
    std::size_t next = node.begin;
    // The node's own piece: the first of equal ones (libsentencepiece refuses a repeat).
    const int32_t id = next < node.end && pieces[next].first.size() == node.depth ? pieces[next].second : -1;
    while (next < node.end && pieces[next].first.size() == node.depth) ++next;
    std::vector<std::pair<uint8_t, std::pair<std::size_t, std::size_t>>> children;
    while (next < node.end) {
      const char byte = pieces[next].first[node.depth];
      std::size_t last = next;
      while (last < node.end && pieces[last].first[node.depth] == byte) ++last;
      children.push_back({static_cast<uint8_t>(byte), {next, last}});
      next = last;
    }
    const std::size_t count = children.size(), byte_words = (count + 3) / 4;
    trie_.push_back(static_cast<uint32_t>(id));
    trie_.push_back(static_cast<uint32_t>(count));
    trie_.resize(trie_.size() + byte_words + count, 0u);
    auto* bytes = reinterpret_cast<uint8_t*>(trie_.data() + offset + 2);
    for (std::size_t c = 0; c < count; ++c) {
      bytes[c] = children[c].first;
      const std::size_t slot = offset + 2 + byte_words + c;
      queue.push_back(Pending{children[c].second.first, children[c].second.second, node.depth + 1, slot});
    }
  }
  for (std::size_t c = 0, count = trie_[1]; c < count; ++c) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(trie_.data() + 2);
    root_children_[bytes[c]] = trie_[2 + (count + 3) / 4 + c];
  }
}

void Unigram::lattice(std::string_view normalized, std::vector<Node>& nodes) const {
  nodes.clear();
  const std::size_t size = normalized.size();
  for (std::size_t begin = 0; begin < size;) {
    const std::size_t char_bytes = one_char_bytes(normalized, begin);
    bool has_single_node = false;
    uint32_t node = root_children_[static_cast<uint8_t>(normalized[begin])];
    for (std::size_t end = begin + 1; node != 0;) {
      const uint32_t* at = trie_.data() + node;
      const auto id = static_cast<int32_t>(at[0]);
      if (id >= 0) {
        nodes.push_back(Node{static_cast<int32_t>(begin), static_cast<int32_t>(end), id});
        if (end - begin == char_bytes) has_single_node = true;
      }
      const uint32_t count = at[1];
      if (end == size || count == 0) break;
      const auto* bytes = reinterpret_cast<const uint8_t*>(at + 2);
      const auto byte = static_cast<uint8_t>(normalized[end++]);
      uint32_t c = 0;
      if (count > 16) {  // "▁"'s node has a child for most first letters
        const void* hit = std::memchr(bytes, byte, count);
        c = hit ? static_cast<uint32_t>(static_cast<const uint8_t*>(hit) - bytes) : count;
      } else {
        while (c < count && bytes[c] != byte) ++c;
      }
      node = c < count ? at[2 + (count + 3) / 4 + c] : 0;
    }
    if (!has_single_node)
      nodes.push_back(Node{static_cast<int32_t>(begin), static_cast<int32_t>(begin + char_bytes), unk_id_});
    begin += char_bytes;
  }
}

float Unigram::viterbi(std::string_view normalized, const std::vector<Node>& nodes, float start,
                       std::vector<int32_t>& path) const {
  thread_local std::vector<float> best;      // best_path_score per end position
  thread_local std::vector<int32_t> from;    // starts_at (-1: no path yet)
  thread_local std::vector<int32_t> last_id;
  const std::size_t size = normalized.size();
  best.assign(size + 1, 0.0f);
  from.assign(size + 1, -1);
  last_id.assign(size + 1, -1);
  best[0] = start;
  for (const Node& node : nodes) {
    const float till = best[static_cast<std::size_t>(node.begin)];
    // A piece's score is a double (the float widened, or a user-defined
    // piece's bonus) added to the float in double; the unknown's is float + float.
    const double candidate = node.id == unk_id_ ? static_cast<double>(static_cast<float>(unk_score_ + till))
                                                : scores_[static_cast<std::size_t>(node.id)] + static_cast<double>(till);
    const auto end = static_cast<std::size_t>(node.end);
    if (from[end] < 0 || candidate > static_cast<double>(best[end])) {
      best[end] = static_cast<float>(candidate);
      from[end] = node.begin;
      last_id[end] = node.id;
    }
  }
  path.clear();
  for (std::size_t end = size; end > 0; end = static_cast<std::size_t>(from[end])) path.push_back(last_id[end]);
  std::reverse(path.begin(), path.end());
  return best[size];
}

float Unigram::advance(float start, const int32_t* path, std::size_t size) const {
  float score = start;
  for (std::size_t k = 0; k < size; ++k) {
    const int32_t id = path[k];
    score = id == unk_id_ ? unk_score_ + score
                          : static_cast<float>(scores_[static_cast<std::size_t>(id)] + static_cast<double>(score));
  }
  return score;
}

double Unigram::stable_below(std::string_view normalized, const std::vector<Node>& nodes) const {
  // The best and second-best path scores per position, in double (exact
  // enough: float rounding is 2^29 times coarser). Float Viterbi keeps a
  // path whose exact score is within C ulp(M) of the best, C the path's
  // additions (at most the characters) and M the largest running score
  // (at most |start| + C A, A the largest piece score): so the exact best
  // path wins whenever the margin exceeds C M 2^-23; 2^-21 leaves 4x room.
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  thread_local std::vector<double> first, second;
  const std::size_t size = normalized.size();
  first.assign(size + 1, -kInfinity);
  second.assign(size + 1, -kInfinity);
  first[0] = 0.0;
  double largest = 0.0;
  std::size_t num_chars = 0;
  int32_t previous_begin = -1;
  for (const Node& node : nodes) {
    if (node.begin != previous_begin) ++num_chars;
    previous_begin = node.begin;
    const double score = node.id == unk_id_ ? static_cast<double>(unk_score_) : scores_[static_cast<std::size_t>(node.id)];
    largest = std::max(largest, std::fabs(score));
    const auto end = static_cast<std::size_t>(node.end);
    for (const double before : {first[static_cast<std::size_t>(node.begin)], second[static_cast<std::size_t>(node.begin)]}) {
      if (before == -kInfinity) continue;
      const double candidate = before + score;
      if (candidate > first[end]) {
        second[end] = first[end];
        first[end] = candidate;
      } else if (candidate > second[end]) {
        second[end] = candidate;
      }
    }
  }
  if (num_chars == 0 || second[size] == -kInfinity) return kInfinity;  // one path
  const double margin = first[size] - second[size];
  const auto chars = static_cast<double>(num_chars);
  return margin * std::ldexp(1.0, 21) / chars - chars * largest;
}

double Unigram::magnitude(const std::vector<int32_t>& path) const {
  double sum = 0.0;
  for (const int32_t id : path)
    sum += std::fabs(id == unk_id_ ? static_cast<double>(unk_score_) : scores_[static_cast<std::size_t>(id)]);
  return sum;
}

void Unigram::reported_ids(std::string_view normalized, const std::vector<int32_t>& path,
                           std::vector<int32_t>& ids) const {
  ids.clear();
  std::size_t at = 0;
  bool previous_unknown = false;
  for (const int32_t id : path) {
    const bool unknown = id == unk_id_;
    const std::size_t bytes =
        unknown ? one_char_bytes(normalized, at) : static_cast<std::size_t>(piece_bytes_[static_cast<std::size_t>(id)]);
    if (unknown && byte_fallback_) {
      for (std::size_t k = at; k < at + bytes && k < normalized.size(); ++k)
        ids.push_back(byte_ids_[static_cast<unsigned char>(normalized[k])]);
    } else if (!(unknown && previous_unknown)) {
      ids.push_back(id);
    }
    previous_unknown = unknown;
    at += bytes;
  }
}

}  // namespace shardtrain::spm
