// Private to the data layer: a per-thread cache from a word's bytes to the
// int32 values its tokenizer produced for it (ids, or ids with spans), so a
// repeated word costs one hash lookup (docs/DESIGN.md "Tokenizers"). Byte-level
// BPE caches a pre-tokenized word's ids, SentencePiece a space-free chunk's.
//
//   WordCache& cache = WordCache::for_thread(owner);   // owner: one per model
//   if (const auto hit = cache.find(word)) { ... hit->data() ... } else { cache.insert(word, values); }
//
// Each thread holds one cache at a time; a model that finds another model's
// cache there empties it (owners come from WordCache::new_owner()).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {

class WordCache {
 public:
  static constexpr std::size_t kSlots = 1 << 16;
  static constexpr std::size_t kMaxEntries = kSlots / 2;
  static constexpr std::size_t kMaxWordBytes = 256;  // longer words are not cached

  struct Values {
    const int32_t* data;
    std::size_t size;
  };

  static uint64_t new_owner() {
    static std::atomic<uint64_t> serial{1};
    return serial.fetch_add(1);
  }
  // This thread's cache, emptied first when another owner used it last.
  static WordCache& for_thread(uint64_t owner) {
    thread_local WordCache cache;
    if (cache.owner_ != owner) cache.reset(owner);
    return cache;
  }

  static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h;
  }
  static uint64_t hash_bytes(const char* data, std::size_t length) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ length;
    while (length >= 8) {
      uint64_t chunk;
      std::memcpy(&chunk, data, 8);
      h = mix(h ^ chunk);
      data += 8;
      length -= 8;
    }
    uint64_t tail = 0;
    for (std::size_t k = 0; k < length; ++k) tail |= static_cast<uint64_t>(static_cast<unsigned char>(data[k])) << (8 * k);
    return mix(h ^ tail ^ 0xA5A5A5A5ull);
  }

  // The values stored for `word` (non-empty), or {nullptr, 0} when absent.
  Values find(std::string_view word) const {
    const uint64_t h = hash_bytes(word.data(), word.size());
    for (std::size_t index = h & kMask;; index = (index + 1) & kMask) {
      const Slot& slot = slots_[index];
      if (slot.key_length == 0) return Values{nullptr, 0};
      if (slot.hash == static_cast<uint32_t>(h) && slot.key_length == word.size() &&
          std::memcmp(keys_.data() + slot.key_offset, word.data(), word.size()) == 0)
        return Values{values_.data() + slot.values_offset, slot.values_length};
    }
  }

  // Stores `values` for `word` (not yet stored; non-empty, at most
  // kMaxWordBytes), emptying the cache first when it is full.
  void insert(std::string_view word, const int32_t* values, std::size_t count) {
    if (full()) reset(owner_);  // (not for a large side_: see insert_side)
    const uint64_t h = hash_bytes(word.data(), word.size());
    std::size_t index = h & kMask;
    while (slots_[index].key_length != 0) index = (index + 1) & kMask;
    slots_[index] = Slot{static_cast<uint32_t>(h), static_cast<uint32_t>(keys_.size()),
                         static_cast<uint32_t>(word.size()), static_cast<uint32_t>(values_.size()),
                         static_cast<uint32_t>(count)};
    keys_.append(word.data(), word.size());
    values_.insert(values_.end(), values, values + count);
    ++entries_;
  }

  // Values kept apart from the entries, so that what every lookup reads
  // stays dense (a SentencePiece chunk's data for re-deciding its pieces):
  // call just before insert() and keep the offset among the entry's values;
  // side() finds them while the entry is there.
  uint32_t insert_side(const int32_t* values, std::size_t count) {
    if (full() || side_.size() > (1u << 28)) reset(owner_);  // now: then insert() does not
    const auto offset = static_cast<uint32_t>(side_.size());
    side_.insert(side_.end(), values, values + count);
    return offset;
  }
  const int32_t* side(uint32_t offset) const { return side_.data() + offset; }

 private:
  static constexpr std::size_t kMask = kSlots - 1;
  struct Slot {
    uint32_t hash = 0;
    uint32_t key_offset = 0;
    uint32_t key_length = 0;  // 0 = empty (words are never empty)
    uint32_t values_offset = 0;
    uint32_t values_length = 0;
  };
  void reset(uint64_t owner) {
    owner_ = owner;
    slots_.assign(kSlots, Slot{});
    keys_.clear();
    values_.clear();
    side_.clear();
    entries_ = 0;
  }

  bool full() const { return entries_ >= kMaxEntries || keys_.size() > (1u << 28); }

  uint64_t owner_ = 0;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> values_;
  std::vector<int32_t> side_;
  std::size_t entries_ = 0;
};

}  // namespace shardtrain
