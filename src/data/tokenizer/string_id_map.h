// Private to the data layer: the WordPiece vocabulary's lookup table, an
// open-addressing map from byte strings to ids (data/tokenizer/wordpiece_vocab.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardtrain {

// Named, not anonymous: Tokenizer::Vocab (a member of an exported class) holds
// StringIdMaps, and GCC warns (-Wsubobject-linkage) when such a member's type
// has internal linkage in a file that is not the main one, as in a unity batch.
namespace wordpiece_detail {

inline uint64_t hash_bytes(const char* data, std::size_t length) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (length * 0xFF51AFD7ED558CCDull);
  while (length >= 8) {
    uint64_t chunk;
    std::memcpy(&chunk, data, 8);
    h = (h ^ chunk) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    data += 8;
    length -= 8;
  }
  uint64_t tail = 0;
  for (std::size_t k = 0; k < length; ++k) tail |= static_cast<uint64_t>(static_cast<unsigned char>(data[k])) << (8 * k);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

// Open-addressing map from byte string to id. The keys live in one arena, so a
// lookup with a string_view allocates nothing.
class StringIdMap {
 public:
  void build(const std::vector<std::pair<std::string_view, int32_t>>& entries) {
    std::size_t capacity = 16;
    while (capacity < entries.size() * 2) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    arena_.clear();
    std::size_t arena_bytes = 0;
    for (const auto& entry : entries) arena_bytes += entry.first.size();
    arena_.reserve(arena_bytes);
    for (const auto& [key, id] : entries) {
      const uint64_t h = hash_bytes(key.data(), key.size());
      std::size_t index = h & mask_;
      while (true) {
        Slot& slot = slots_[index];
        if (slot.id < 0) {
          slot = Slot{static_cast<uint32_t>(h), static_cast<uint32_t>(key.size()),
                      static_cast<uint32_t>(arena_.size()), id};
          arena_.append(key);
          break;
        }
        if (matches(slot, static_cast<uint32_t>(h), key.data(), key.size())) {
          slot.id = id;  // a repeated token: the later line wins, as in HF
          break;
        }
        index = (index + 1) & mask_;
      }
      max_key_bytes_ = std::max(max_key_bytes_, key.size());
    }
  }

  int32_t find(const char* data, std::size_t length) const {
    const uint64_t h = hash_bytes(data, length);
    std::size_t index = h & mask_;
    while (true) {
      const Slot& slot = slots_[index];
      if (slot.id < 0) return -1;
      if (matches(slot, static_cast<uint32_t>(h), data, length)) return slot.id;
      index = (index + 1) & mask_;
    }
  }

  std::size_t max_key_bytes() const { return max_key_bytes_; }

 private:
  struct Slot {
    uint32_t hash = 0;
    uint32_t length = 0;
    uint32_t offset = 0;
    int32_t id = -1;  // -1 = empty
  };
  bool matches(const Slot& slot, uint32_t h, const char* data, std::size_t length) const {
    return slot.hash == h && slot.length == length &&
           std::memcmp(arena_.data() + slot.offset, data, length) == 0;
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::string arena_;
  std::size_t max_key_bytes_ = 0;
};

}  // namespace wordpiece_detail

}  // namespace shardtrain
