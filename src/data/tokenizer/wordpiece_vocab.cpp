// The WordPiece vocabulary (data/tokenizer/wordpiece_vocab.h): vocab.txt's
// lines as ids, the special tokens a BERT vocabulary must have, and whether it
// is cased.
#include "data/tokenizer/wordpiece_vocab.h"

#include <algorithm>

#include "data/tokenizer/unicode_text.h"
#include "shardtrain/core/check.h"

namespace shardtrain {

// `path` names the vocabulary in messages and vocab_path() (a file, or where
// in-memory text came from).
std::shared_ptr<Tokenizer::Vocab> wordpiece_parse_vocab(const std::string& text, const std::string& path,
                                                        const WordPieceSpecialNames& names) {
  auto vocab = std::make_shared<Tokenizer::Vocab>();
  vocab->source = path;
  std::size_t position = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) position = 3;
  while (position < text.size()) {
    std::size_t end = text.find('\n', position);
    const std::size_t next = end == std::string::npos ? text.size() : end + 1;
    if (end == std::string::npos) end = text.size();
    // HF tokenizers trims trailing whitespace of each line (this also drops CR).
    std::size_t last = end;
    while (last > position && (text[last - 1] == '\r' || text[last - 1] == ' ' || text[last - 1] == '\t')) --last;
    vocab->tokens.emplace_back(text, position, last - position);
    position = next;
  }
  if (vocab->tokens.empty()) throw Error("vocabulary file '" + path + "' is empty");
  if (vocab->tokens.size() > static_cast<std::size_t>(INT32_MAX)) {
    throw Error("vocabulary file '" + path + "' has more tokens than int32 ids can address");
  }

  std::vector<std::pair<std::string_view, int32_t>> whole, continuation;
  whole.reserve(vocab->tokens.size());
  for (std::size_t id = 0; id < vocab->tokens.size(); ++id) {
    const std::string_view token = vocab->tokens[id];
    whole.emplace_back(token, static_cast<int32_t>(id));
    if (token.size() > 2 && token.compare(0, 2, "##") == 0) {
      continuation.emplace_back(token.substr(2), static_cast<int32_t>(id));
    }
  }
  vocab->whole.build(whole);
  vocab->continuation.build(continuation);

  auto require = [&](const std::string& name, const char* role) {
    const int32_t id = vocab->whole.find(name.data(), name.size());
    if (id < 0) {
      throw Error("vocabulary file '" + path + "' has no " + role + " token '" + name +
                  "' (BERT vocabularies need [UNK], [CLS], [SEP] and [PAD])");
    }
    return id;
  };
  vocab->unk_id = require(names.unk, "unknown");
  vocab->cls_id = require(names.cls, "classifier");
  vocab->sep_id = require(names.sep, "separator");
  vocab->pad_id = require(names.pad, "padding");
  vocab->mask_id = names.mask.empty() ? -1 : vocab->whole.find(names.mask.data(), names.mask.size());

  for (const std::string* name : {&names.unk, &names.cls, &names.sep, &names.pad, &names.mask}) {
    const int32_t id = name->empty() ? -1 : vocab->whole.find(name->data(), name->size());
    if (id < 0) continue;
    vocab->specials.emplace_back(*name, id);
    vocab->special_first_byte[static_cast<unsigned char>((*name)[0])] = true;
  }
  // Longest first, so the first match at a position is the leftmost-longest one.
  std::stable_sort(vocab->specials.begin(), vocab->specials.end(),
                   [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });

  for (int c = 0; c < 128; ++c) {
    const char character = static_cast<char>(c);
    const int32_t id = vocab->whole.find(&character, 1);
    vocab->ascii_char_id[c] = id >= 0 ? id : vocab->unk_id;
  }
  vocab->post.single = {{-1, {vocab->cls_id}, 0}, {0, {}, 0}, {-1, {vocab->sep_id}, 0}};
  vocab->post.pair = {{-1, {vocab->cls_id}, 0}, {0, {}, 0}, {-1, {vocab->sep_id}, 0}, {1, {}, 1}, {-1, {vocab->sep_id}, 1}};
  return vocab;
}

int32_t wordpiece_token_id(const Tokenizer::Vocab& vocab, std::string_view token) {
  return vocab.whole.find(token.data(), token.size());
}

bool wordpiece_vocabulary_is_cased(const Tokenizer::Vocab& vocab) {
  for (const std::string& token : vocab.tokens) {
    bool special = false;
    for (const auto& entry : vocab.specials) special = special || entry.first == token;
    if (special) continue;
    const auto* bytes = reinterpret_cast<const unsigned char*>(token.data());
    std::size_t position = 0;
    while (position < token.size()) {
      std::size_t length;
      const int32_t cp = unicode::decode_utf8(bytes + position, token.size() - position, &length);
      if (cp >= 0 && unicode::changes_when_lowercased(cp)) return true;
      position += length;
    }
  }
  return false;
}

}  // namespace shardtrain
