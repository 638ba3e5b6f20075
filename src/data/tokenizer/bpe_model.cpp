#include "data/tokenizer/bpe_model.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/unicode_text.h"
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

namespace {

// A character's UTF-8 bytes (1 to 4) as one integer: a hash key without a string.
uint32_t pack_character(std::string_view character) {
  uint32_t key = 0;
  for (const char c : character) key = (key << 8) | static_cast<unsigned char>(c);
  return key | (static_cast<uint32_t>(character.size()) << 29);  // "\0" and "\0\0" differ
}

// The byte length of the character starting at word[position], clipped to the word.
std::size_t character_length(std::string_view word, std::size_t position) {
  const auto length = static_cast<std::size_t>(unicode::utf8_length(static_cast<unsigned char>(word[position])));
  return std::min(length, word.size() - position);
}

}  // namespace

BpeModel::BpeModel(const BpeModelSpec& spec)
    : merges_(std::make_unique<MergeTable>()),
      ignore_merges_(spec.ignore_merges),
      byte_level_(spec.byte_level),
      byte_fallback_(spec.byte_fallback),
      fuse_unk_(spec.fuse_unk),
      unk_id_(spec.unk_id),
      cache_owner_(WordCache::new_owner()) {
  // Views of spec's strings: no copy of a 256k-token vocabulary.
  std::unordered_map<std::string_view, int32_t> by_token;
  by_token.reserve(spec.vocab.size() * 2);
  std::string bytes;
  int32_t largest = -1;
  for (const auto& entry : spec.vocab) largest = std::max(largest, entry.second);
  if (byte_level_) token_bytes_.assign(static_cast<std::size_t>(largest + 1), -1);
  if (ignore_merges_) word_vocab_.reserve(spec.vocab.size() * 2);
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  for (const auto& [token, id] : spec.vocab) {
    by_token[token] = id;
    if (!byte_level_) {
      if (ignore_merges_) word_vocab_[token] = id;
      if (!token.empty() && character_length(token, 0) == token.size()) character_ids_[pack_character(token)] = id;
      // SentencePiece's byte pieces: "<0x" two upper-case hex digits ">".
      if (byte_fallback_ && token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
        auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
        const int high = hex(token[3]), low = hex(token[4]);
        if (high >= 0 && low >= 0) byte_ids_[high * 16 + low] = id;
      }
      continue;
    }
    if (byte_level::decode_token(token, bytes) && !bytes.empty()) {
      if (ignore_merges_) word_vocab_[bytes] = id;
      token_bytes_[static_cast<std::size_t>(id)] = static_cast<int32_t>(bytes.size());
      if (bytes.size() == 1) byte_ids_[static_cast<unsigned char>(bytes[0])] = id;
    }
  }
  if (byte_level_) {
    for (int32_t& id : byte_ids_) id = id >= 0 ? id : unk_id_;
  }
  merges_->init(spec.merges.size());
  std::string joined;
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    joined.assign(left).append(right);
    const auto l = by_token.find(left);
    const auto r = by_token.find(right);
    const auto m = by_token.find(joined);
    if (l == by_token.end() || r == by_token.end() || m == by_token.end()) {
      const std::string& missing = l == by_token.end() ? left : r == by_token.end() ? right : joined;
      throw Error("'" + spec.source + "': merge " + std::to_string(rank + 1) + " ('" + left + " " + right +
                  "') uses the token '" + missing + "', which is not in the vocabulary");
    }
    merges_->insert(l->second, r->second, static_cast<int32_t>(rank), m->second);
  }
}

BpeModel::~BpeModel() = default;

void BpeModel::merge_by_scan(std::vector<int32_t>& symbols, Ranges* ranges) const {
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

void BpeModel::merge_by_heap(std::vector<int32_t>& symbols, Ranges* ranges) const {
  // A linked list of symbols and a heap of candidate merges ordered by
  // (rank, position); a popped candidate is applied only if both of its
  // symbols are still the ones it was made from.
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
    if (ranges) (*ranges)[p].second = (*ranges)[q].second;
    alive[q] = false;
    next[p] = next[q];
    if (next[q] >= 0) previous[next[q]] = p;
    push(previous[p]);
    push(p);
  }
  std::size_t kept = 0;
  for (int32_t i = 0; i >= 0 && static_cast<std::size_t>(i) < n; i = next[i], ++kept) {
    symbols[kept] = symbols[i];
    if (ranges) (*ranges)[kept] = (*ranges)[i];
  }
  symbols.resize(kept);
  if (ranges) ranges->resize(kept);
}

void BpeModel::merge_symbols(std::vector<int32_t>& symbols, Ranges* ranges) const {
  if (symbols.size() <= 64)
    merge_by_scan(symbols, ranges);
  else
    merge_by_heap(symbols, ranges);
}

int32_t BpeModel::whole_word_id(std::string_view word) const {
  if (!ignore_merges_) return -1;
  const auto it = word_vocab_.find(std::string(word));
  return it != word_vocab_.end() ? it->second : -1;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols, Ranges* ranges) const {
  if (byte_level_) {
    for (std::size_t b = 0; b < word.size(); ++b) {
      const int32_t id = byte_ids_[static_cast<unsigned char>(word[b])];
      if (id < 0) continue;  // a byte without a token and no unk_token: dropped, as HF
      symbols.push_back(id);
      if (ranges) ranges->emplace_back(static_cast<uint32_t>(b), static_cast<uint32_t>(b + 1));
    }
    return;
  }
  // HF BPE::merge_word: a symbol's range starts where the one before ended.
  uint32_t end = 0;
  auto add = [&](int32_t id, std::size_t length) {
    symbols.push_back(id);
    if (ranges) ranges->emplace_back(end, end + static_cast<uint32_t>(length));
    end += static_cast<uint32_t>(length);
  };
  std::size_t unk_length = 0;  // > 0: an unk waits, to be fused with the next unknown character
  for (std::size_t position = 0; position < word.size();) {
    const std::size_t length = character_length(word, position);
    const std::string_view character = word.substr(position, length);
    position += length;
    const auto known = character_ids_.find(pack_character(character));
    if (known != character_ids_.end()) {
      if (unk_length > 0) add(unk_id_, unk_length);
      unk_length = 0;
      add(known->second, length);
      continue;
    }
    bool all_bytes = byte_fallback_;
    for (std::size_t b = 0; all_bytes && b < length; ++b) all_bytes = byte_ids_[static_cast<unsigned char>(character[b])] >= 0;
    if (all_bytes) {  // the waiting unk stays behind these, as HF has it
      for (const char c : character) add(byte_ids_[static_cast<unsigned char>(c)], 1);
      continue;
    }
    if (unk_id_ < 0) continue;  // dropped, as HF without unk_token
    if (unk_length > 0 && !fuse_unk_) {
      add(unk_id_, unk_length);
      unk_length = 0;
    }
    unk_length += length;
  }
  if (unk_length > 0) add(unk_id_, unk_length);
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  if (const int32_t whole = whole_word_id(word); whole >= 0) {
    out.push_back(whole);
    return;
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  initial_symbols(word, symbols, nullptr);
  merge_symbols(symbols, nullptr);
  out.insert(out.end(), symbols.begin(), symbols.end());
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

void BpeModel::encode_word_ranges(std::string_view word, std::vector<int32_t>& out, Ranges& ranges) const {
  const std::size_t first = out.size();
  if (byte_level_) {
    // Usually each id's token is its bytes, in order: read the ranges off the
    // lengths. An unk id or a dropped byte breaks that; then merge again
    // keeping each symbol's bytes (rare: byte-level vocabularies hold all 256).
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
  }
  if (const int32_t whole = whole_word_id(word); whole >= 0) {
    out.push_back(whole);
    ranges.emplace_back(0u, static_cast<uint32_t>(word.size()));
    return;
  }
  std::vector<int32_t> symbols;
  Ranges spans;
  initial_symbols(word, symbols, &spans);
  merge_symbols(symbols, &spans);
  out.insert(out.end(), symbols.begin(), symbols.end());
  ranges.insert(ranges.end(), spans.begin(), spans.end());
}

}  // namespace shardtrain::bpe
