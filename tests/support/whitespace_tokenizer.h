// Test stand-in with the shape of shardtrain's Tokenizer (encode(a, b,
// max_length), cls_id, sep_id, pad_id), so the data layer can be tested without
// the WordPiece vocabulary: words split on spaces, each word's id a stable hash.
// Only for tests of the dataset/collator plumbing; the real tokenizer has its
// own tests against the HF reference ids.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace shardtrain_test {

struct WhitespaceEncoding {
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> token_type_ids;
};

class WhitespaceTokenizer {
 public:
  int32_t cls_id() const { return 101; }
  int32_t sep_id() const { return 102; }
  int32_t pad_id() const { return 0; }

  // [CLS] a [SEP] (b [SEP]); words beyond max_length are cut from the end of
  // the longer text first. Throws for a text containing "\x01" so tests can
  // exercise error propagation.
  WhitespaceEncoding encode(std::string_view a, std::optional<std::string_view> b, int max_length) const {
    std::vector<int32_t> wa = words(a), wb = b ? words(*b) : std::vector<int32_t>{};
    const size_t specials = b ? 3 : 2;
    while (wa.size() + wb.size() + specials > static_cast<size_t>(max_length) && (!wa.empty() || !wb.empty())) {
      if (wa.size() >= wb.size()) wa.pop_back();
      else wb.pop_back();
    }
    WhitespaceEncoding e;
    e.input_ids.push_back(cls_id());
    e.input_ids.insert(e.input_ids.end(), wa.begin(), wa.end());
    e.input_ids.push_back(sep_id());
    e.token_type_ids.assign(e.input_ids.size(), 0);
    if (b) {
      e.input_ids.insert(e.input_ids.end(), wb.begin(), wb.end());
      e.input_ids.push_back(sep_id());
      e.token_type_ids.resize(e.input_ids.size(), 1);
    }
    return e;
  }

 private:
  static std::vector<int32_t> words(std::string_view text) {
    if (text.find('\x01') != std::string_view::npos) throw std::runtime_error("control character in text");
    std::vector<int32_t> ids;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find(' ', pos);
      if (end == std::string_view::npos) end = text.size();
      if (end > pos) {
        uint32_t h = 2166136261u;  // FNV-1a
        for (size_t i = pos; i < end; ++i) h = (h ^ static_cast<unsigned char>(text[i])) * 16777619u;
        ids.push_back(static_cast<int32_t>(1000 + h % 28000));
      }
      pos = end + 1;
    }
    return ids;
  }
};

}  // namespace shardtrain_test
