#include "data/tokenizer/bpe_model.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/word_cache.h"
#include "shardtrain/core/check.h"

namespace shardtrain::bpe {

// (left id, right id) -> (rank, merged id), open addressing on the packed pair.
struct BpeModel::MergeTable {
  struct Slot {
    uint64_t key = ~0ull;  // ~0 = empty
    int32_t rank = 0;
    int32_t merged = 0;
  };
  std::vector<Slot> slots;
  std::size_t mask = 0;

  void init(std::size_t count) {
    std::size_t capacity = 16;
    while (capacity < count * 2) capacity *= 2;
    slots.assign(capacity, Slot{});
    mask = capacity - 1;
  }
  static uint64_t pack(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void insert(int32_t left, int32_t right, int32_t rank, int32_t merged) {
    const uint64_t key = pack(left, right);
    std::size_t index = WordCache::mix(key) & mask;
    while (slots[index].key != ~0ull && slots[index].key != key) index = (index + 1) & mask;
    slots[index] = Slot{key, rank, merged};  // a repeated merge: the later rank wins, as in HF
  }
  const Slot* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    std::size_t index = WordCache::mix(key) & mask;
    while (true) {
      const Slot& slot = slots[index];
      if (slot.key == key) return &slot;
      if (slot.key == ~0ull) return nullptr;
      index = (index + 1) & mask;
    }
  }
};

BpeModel::BpeModel(const BpeModelSpec& spec)
    : merges_(std::make_unique<MergeTable>()),
      ignore_merges_(spec.ignore_merges),
      unk_id_(spec.unk_id),
      cache_owner_(WordCache::new_owner()) {
  std::unordered_map<std::string, int32_t> by_token;
  by_token.reserve(spec.vocab.size() * 2);
  std::string bytes;
  int32_t largest = -1;
  for (const auto& entry : spec.vocab) largest = std::max(largest, entry.second);
  token_bytes_.assign(static_cast<std::size_t>(largest + 1), -1);
  for (const auto& [token, id] : spec.vocab) {
    by_token[token] = id;
    if (byte_level::decode_token(token, bytes) && !bytes.empty()) {
      byte_vocab_[bytes] = id;
      token_bytes_[static_cast<std::size_t>(id)] = static_cast<int32_t>(bytes.size());
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = byte_vocab_.find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = it != byte_vocab_.end() ? it->second : unk_id_;
  }
  merges_->init(spec.merges.size());
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const auto l = by_token.find(left);
    const auto r = by_token.find(right);
    const auto m = by_token.find(left + right);
    if (l == by_token.end() || r == by_token.end() || m == by_token.end()) {
      const std::string& missing = l == by_token.end() ? left : r == by_token.end() ? right : left + right;
      throw Error("'" + spec.source + "': merge " + std::to_string(rank + 1) + " ('" + left + " " + right +
                  "') uses the token '" + missing + "', which is not in the vocabulary");
    }
    merges_->insert(l->second, r->second, static_cast<int32_t>(rank), m->second);
  }
}

BpeModel::~BpeModel() = default;

void BpeModel::merge_by_scan(std::vector<int32_t>& symbols, std::vector<std::pair<uint32_t, uint32_t>>* ranges) const {
  // Scan for the lowest-ranked pair, leftmost on ties; merge; repeat.
  while (symbols.size() > 1) {
    int32_t best_rank = INT32_MAX, merged = -1;
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const MergeTable::Slot* slot = merges_->find(symbols[i], symbols[i + 1]);
      if (slot != nullptr && slot->rank < best_rank) {
        best_rank = slot->rank;
        merged = slot->merged;
        best = i;
      }
    }
    if (merged < 0) break;
    symbols[best] = merged;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    if (ranges) {
      (*ranges)[best].second = (*ranges)[best + 1].second;
      ranges->erase(ranges->begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const auto it = byte_vocab_.find(std::string(word));
    if (it != byte_vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  for (const char c : word) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id >= 0) symbols.push_back(id);  // a byte without a token and no unk_token: dropped, as HF
  }
  if (symbols.size() <= 64) {
    merge_by_scan(symbols, nullptr);
    out.insert(out.end(), symbols.begin(), symbols.end());
    return;
  }
  // Long words: a linked list of symbols and a heap of candidate merges
  // ordered by (rank, position); a popped candidate is applied only if both of
  // its symbols are still the ones it was made from.
  const std::size_t n = symbols.size();
  std::vector<int32_t> next(n), previous(n);
  std::vector<bool> alive(n, true);
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    previous[i] = static_cast<int32_t>(i) - 1;
  }
  struct Candidate {
    int32_t rank;
    int32_t position;
    int32_t left;
    int32_t right;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int32_t position) {
    if (position < 0 || next[position] < 0) return;
    const int32_t left = symbols[position], right = symbols[next[position]];
    if (const MergeTable::Slot* slot = merges_->find(left, right)) heap.push({slot->rank, position, left, right});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const int32_t p = top.position;
    if (!alive[p] || next[p] < 0 || symbols[p] != top.left || symbols[next[p]] != top.right) continue;
    const int32_t q = next[p];
    symbols[p] = merges_->find(top.left, top.right)->merged;
    alive[q] = false;
    next[p] = next[q];
    if (next[q] >= 0) previous[next[q]] = p;
    push(previous[p]);
    push(p);
  }
  for (int32_t i = 0; i >= 0 && static_cast<std::size_t>(i) < n; i = next[i]) out.push_back(symbols[i]);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() > WordCache::kMaxWordBytes) {
    merge_word(word, out);
    return;
  }
  WordCache& cache = WordCache::for_thread(cache_owner_);
  const WordCache::Values hit = cache.find(word);
  if (hit.data != nullptr) {
    out.insert(out.end(), hit.data, hit.data + hit.size);
    return;
  }
  const std::size_t first = out.size();
  merge_word(word, out);
  cache.insert(word, out.data() + first, out.size() - first);
}

void BpeModel::encode_word_ranges(std::string_view word, std::vector<int32_t>& out,
                                  std::vector<std::pair<uint32_t, uint32_t>>& ranges) const {
  // Usually each id's token is its bytes, in order: read the ranges off the
  // lengths. An unk id or a dropped byte breaks that; then merge again
  // keeping each symbol's bytes (rare: byte-level vocabularies hold all 256).
  const std::size_t first = out.size();
  encode_word(word, out);
  std::size_t position = 0;
  bool consistent = true;
  for (std::size_t i = first; i < out.size() && consistent; ++i) {
    const auto id = static_cast<std::size_t>(out[i]);
    const int32_t length = id < token_bytes_.size() && out[i] != unk_id_ ? token_bytes_[id] : -1;
    // Merges join neighbours, so known lengths that add up to the word are its bytes in order.
    consistent = length > 0 && position + static_cast<std::size_t>(length) <= word.size();
    if (!consistent) break;
    ranges.emplace_back(static_cast<uint32_t>(position), static_cast<uint32_t>(position + static_cast<std::size_t>(length)));
    position += static_cast<std::size_t>(length);
  }
  if (consistent && position == word.size()) return;
  ranges.resize(ranges.size() - std::min(ranges.size(), out.size() - first));
  out.resize(first);
  std::vector<int32_t> symbols;
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  for (std::size_t b = 0; b < word.size(); ++b) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(word[b])];
    if (id < 0) continue;
    symbols.push_back(id);
    spans.emplace_back(static_cast<uint32_t>(b), static_cast<uint32_t>(b + 1));
  }
  if (ignore_merges_) {
    const auto it = byte_vocab_.find(std::string(word));
    if (it != byte_vocab_.end()) {
      out.push_back(it->second);
      ranges.emplace_back(0u, static_cast<uint32_t>(word.size()));
      return;
    }
  }
  merge_by_scan(symbols, &spans);
  out.insert(out.end(), symbols.begin(), symbols.end());
  ranges.insert(ranges.end(), spans.begin(), spans.end());
}

}  // namespace shardtrain::bpe
