// The tokenizers of Hugging Face's fast (Rust) `tokenizers`, id for id, read
// the way AutoTokenizer reads a model folder (docs/DESIGN.md "Tokenizers",
// docs/tokenizers.md):
//   - tokenizer.json when the folder has one: a WordPiece model (BertNormalizer,
//     BertPreTokenizer, BERT template), a BPE model (see "Byte-level BPE" and
//     "SentencePiece-style BPE" below) or a Unigram model (see "SentencePiece"
//     below); any other model type (WordLevel) is refused with an error
//     naming the file and the type;
//   - otherwise vocab.json + merges.txt: byte-level BPE with RoBERTa's
//     <s> A </s></s> B </s> template;
//   - otherwise vocab.txt: WordPiece, as below;
//   - otherwise a SentencePiece model file (spm.model, sentencepiece.bpe.model,
//     spiece.model, sentencepiece.model, tokenizer.model), see "SentencePiece".
// tokenizer_config.json adds do_lower_case, model_max_length, add_prefix_space,
// truncation_side, tokenizer_class and the special-token names.
//
// WordPiece reproduces `BertTokenizerFast` (BertNormalizer + BertPreTokenizer +
// WordPiece + BertProcessing).
//
// Pipeline for one text:
//   1. Special tokens ([CLS] [SEP] [PAD] [UNK] [MASK], as spelled in the vocab)
//      are cut out of the raw text first, wherever they occur, even inside a
//      word ("a[SEP]b" -> a [SEP] b), matched case-sensitively: they are never
//      split, lowercased or normalised (HF added tokens, normalized=false).
//   2. Each remaining segment is cleaned: NUL, U+FFFD and every "other"
//      character (general category Cc, Cf, Co) except \t \n \r are dropped;
//      \t \n \r and every White_Space character become a space.
//   3. CJK ideographs (the code point ranges of HF `_is_chinese_char`) get a
//      space on each side, so each is its own word (tokenize_chinese_chars).
//   4. When accents are stripped: NFD, then every Mn (nonspacing mark) dropped.
//   5. When lowercasing: full Unicode lowercase mapping per character.
//   6. Split on whitespace; every punctuation character (Unicode P* or ASCII
//      33-47, 58-64, 91-96, 123-126) becomes its own word.
//   7. WordPiece per word: greedy longest match first, continuation pieces
//      looked up as "##piece"; a word of more than 100 code points, or one
//      with no full segmentation, becomes a single [UNK].
//
// Invalid UTF-8: every invalid byte sequence counts as U+FFFD, which step 2
// drops. The result equals HF on the text Python gets from
// `bytes.decode("utf-8", errors="replace")`. Nothing throws on bad text.
//
// Where HF's slow (Python) BertTokenizer and the fast (Rust) one disagree,
// this follows the fast one, because that is what AutoTokenizer loads:
//   - unassigned code points (Cn) are kept (slow drops every C* character);
//   - no NFC normalisation of the input (recent slow versions apply NFC);
//   - lowercase is per character (no final-sigma rule);
//   - longest_first truncation of a pair with equal lengths cuts the FIRST
//     sequence one token more when the budget is odd (see encode()).
// Character categories come from utf8proc's Unicode tables; HF's fast
// tokenizer uses older ones (the unicode_categories crate, Unicode 8), so a
// character assigned since then may be classed differently (very rare).
// Only the five BERT special tokens are never split: added_tokens.json and
// additional_special_tokens are not read.
//
// Byte-level BPE (roberta-base, ModernBERT, GPT-2 style): added tokens are
// cut out first (those with normalized=false from the raw text, then the
// others from the normalized text; leftmost-longest, with lstrip / rstrip /
// single_word), the normalizer (NFC, NFD, NFKC, NFKD, Lowercase, or a
// Sequence of them) runs on the rest, then the ByteLevel pre-tokenizer
// (add_prefix_space, the GPT-2 regex unless use_regex is false; or Llama-3's
// Split regex before a ByteLevel without its own), then BPE by
// merge rank over raw bytes, then the post-processor template
// (RobertaProcessing, BertProcessing, TemplateProcessing). Invalid UTF-8 reads
// as U+FFFD per maximal subpart (Python errors="replace").
//
// SentencePiece-style BPE (Gemma, mmBERT, Llama-2; a tokenizer.json BPE
// model without the ByteLevel pre-tokenizer): added tokens cut out as above,
// the normalizer (Replace with a String pattern, Prepend, and the ones above),
// then no pre-tokenizer (the text between added tokens is one word) or
// Metaspace (spaces to its replacement, prepend_scheme always / first /
// never, split), then BPE over characters: a character without a token
// becomes its bytes' <0xXX> tokens (byte_fallback), else the unk token, runs
// of them one unk (fuse_unk), as HF's BPE model, whose offsets it also keeps
// where they are odd (an unk waiting to be fused goes after byte-fallback
// characters). transformers' Gemma / Llama tokenizer classes (which rebuild
// the template) and add_prefix_space in tokenizer_config.json are refused.
//
// SentencePiece (DeBERTa-v2/v3, XLM-R, CamemBERT): libsentencepiece (Debian's
// libsentencepiece-dev, in a module of its own: src/data/tokenizer/sentencepiece_module.h)
// normalizes (the model's charsmap, e.g. nmt_nfkc) and segments (Unigram or
// BPE, byte_fallback), so the ids are SentencePiece's; around it, HF's fast
// tokenizer's structure: added tokens cut out of the raw text first, then the
// layout of transformers' converter for the tokenizer class
// (tokenizer_config.json's tokenizer_class, else config.json's model_type,
// else the file name: spm.model is DeBERTa-v2, sentencepiece.bpe.model XLM-R):
//   - DebertaV2Tokenizer: the pieces' ids, [MASK] after them when the model
//     lacks it; [CLS] A [SEP] B:1 [SEP]:1; do_lower_case, split_by_punct;
//   - XLMRobertaTokenizer: fairseq's ids: <s> 0, <pad> 1, </s> 2, <unk> 3, the
//     pieces one id up, <mask> last (lstrip); <s> A </s></s> B </s>, types 0;
//   - CamembertTokenizer: <s>NOTUSED <pad> </s>NOTUSED <unk> <unk>NOTUSED,
//     the pieces four ids up (<s> 5, </s> 6), <mask> last; XLM-R's template.
// A tokenizer.json Unigram model (its vocab and scores, unk_id, byte_fallback;
// a Precompiled charsmap; Replace / Strip / Lowercase; Metaspace with
// add_prefix_space or prepend_scheme "always" / "never"; Punctuation;
// its post-processor and added tokens) is handed to libsentencepiece as a
// ModelProto. Where HF's fast tokenizer and SentencePiece differ (rare
// inputs), the ids are SentencePiece's: docs/DESIGN.md "SentencePiece". A
// damaged or unsupported model file is refused naming the file and the field.
//
// Offsets (encode_with_offsets, tokenize_with_offsets, encode_words): HF's
// return_offsets_mapping as byte spans of the UTF-8 input. A token spans from
// the original character of its first normalized character to that of its
// last, with HF's alignment rules (NormalizedString): a character the
// normalizer removes (a control character, an accent stripped after NFD, a
// mark NFC composes away) has no origin of its own, characters it inserts
// (the rest of a decomposition or lowercase mapping, the spaces around a CJK
// ideograph, BPE's prefix space) take the origin of the character before;
// byte-level BPE tokens that split one character each span the whole
// character; an added token spans what it matched (with the whitespace
// lstrip / rstrip took). RoBERTa's post-processor (RobertaProcessing, or a
// ByteLevel post-processor with trim_offsets) then trims the spaces a token
// starts or ends with ("Ġworld" spans "world"); ModernBERT's
// TemplateProcessing does not. SentencePiece: a token that starts with "▁"
// spans from the whitespace that became the "▁" (the last of a run), or from
// its first character when the "▁" is the dummy prefix; byte-fallback pieces
// span the text they spell. docs/tokenizers.md has examples.
//
// Usage:
//   auto tokenizer = shardtrain::Tokenizer::from_model_dir("models/bert-base-cased");
//   shardtrain::Encoding e = tokenizer.encode(sentence1, sentence2, 128);
//   shardtrain::Encoding q = tokenizer.encode_with_offsets(question, context, 384);  // q.offsets, q.sequence_ids
//   shardtrain::Encoding w = tokenizer.encode_words({"U.S.", "troops"}, 128, true);   // w.word_ids
//
// A Tokenizer is immutable after construction: const methods may be called
// from several threads at once. Copies share the vocabulary.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardtrain/data/tokenizer/types.h"

namespace shardtrain {

class Tokenizer {
 public:
  // Reads a vocab.txt: one token per line, id = 0-based line index (trailing
  // whitespace and a CR of CRLF files are trimmed, a UTF-8 BOM is skipped; if a
  // token repeats, the later line wins for lookups, as in HF). Throws
  // shardtrain::Error naming the file when it cannot be read, is empty, lacks
  // one of [UNK] [CLS] [SEP] [PAD], or when the options contradict each other.
  static Tokenizer from_vocab_file(const std::string& vocab_path, const TokenizerOptions& options);

  // The same from the content of a vocab.txt held in memory (e.g. the
  // vocabulary stored in a training checkpoint). `source` stands for the file in
  // error messages and is what vocab_path() returns.
  static Tokenizer from_vocab_text(const std::string& text, const TokenizerOptions& options,
                                   const std::string& source = "vocab.txt");

  // HF model folder, in AutoTokenizer's order: tokenizer.json, else vocab.json
  // + merges.txt, else vocab.txt, else a SentencePiece model (see the top of
  // this file), with tokenizer_config.json, special_tokens_map.json and
  // (SentencePiece) added_tokens.json and config.json's model_type when present.
  // For vocab.txt, tokenizer_config.json keys used: do_lower_case, strip_accents (null/true/
  // false), tokenize_chinese_chars, and unk/cls/sep/pad/mask_token (a string or
  // {"content": ...}) when they rename the special tokens. Without a
  // tokenizer_config.json, or without do_lower_case in it, HF would lowercase;
  // here the vocabulary decides instead: lowercase exactly when it holds no
  // token that lowercasing would change (outside the special tokens): the
  // HF result for uncased vocabularies and keeps cased ones usable. A warning
  // says which was chosen.
  static Tokenizer from_model_dir(const std::string& dir);

  // A folder (from_model_dir), a tokenizer.json (the folder's other files
  // are not read: `options` do not apply either), a SentencePiece model named
  // spm.model / sentencepiece.bpe.model (with the tokenizer_config.json beside
  // it, when there is one), or a vocab.txt with `options` (from_vocab_file).
  // What a config's model.vocab names.
  static Tokenizer from_path(const std::string& path, const TokenizerOptions& options);

  // What a checkpoint stores to rebuild this tokenizer: a JSON object of the
  // files it was read from, {"tokenizer.json": "...", ...} (for a vocab.txt
  // read with options, a tokenizer_config.json that records them; for a
  // SentencePiece model, a tokenizer_config.json naming the tokenizer_class
  // its layout came from). A binary file (a SentencePiece *.model) is stored
  // as {"base64": "<its bytes in base64>"} (RFC 4648, padded). The same files
  // written into a folder load as this tokenizer.
  const std::string& saved_files() const;
  // The tokenizer of saved_files() text; `source` names it in errors.
  static Tokenizer from_saved_files(const std::string& json, const std::string& source);
  // saved_files() text as file name -> the file's bytes (base64 decoded):
  // what `export` writes into a folder.
  static std::map<std::string, std::string> saved_file_contents(const std::string& json, const std::string& source);
  // Every file name saved_files() can hold, which is every tokenizer file a
  // folder read here may have: tokenizer_config.json, special_tokens_map.json,
  // added_tokens.json, tokenizer.json, vocab.json, merges.txt, vocab.txt and
  // the SentencePiece models (spm.model, sentencepiece.bpe.model,
  // spiece.model, sentencepiece.model, tokenizer.model). `export` writes no
  // other name, and --force removes those of them it did not write.
  static const std::vector<std::string>& folder_file_names();

  // WordPiece: the vocabulary as vocab.txt text (one token a line, in id
  // order); BPE, SentencePiece: empty.
  std::string vocab_text() const;

  // "wordpiece", "bpe" or "sentencepiece".
  const char* type() const;
  // Special tokens the template adds: 2 / 3 (WordPiece, DeBERTa), 2 / 4 (RoBERTa, XLM-R).
  int num_special_tokens(bool pair) const;
  // The largest token type id encode() gives a single text or a pair:
  // WordPiece 0 / 1, BPE its template's (RoBERTa's: 0 for both).
  int max_token_type(bool pair) const;
  // tokenizer_config.json model_max_length; 0 when unset or HF's "no limit"
  // sentinel (1e30).
  int64_t model_max_length() const;

  // Tokens of one text, no template special tokens; appends to out.
  void tokenize(std::string_view text, std::vector<int32_t>& out) const;

  // tokenize() with each token's span in `text` (see TokenSpan), appended to
  // `spans` one per id appended to `ids`; the ids are tokenize()'s. BPE: the
  // spans are trimmed as the post-processor trims them (RoBERTa's "Ġword" does
  // not cover its space), as HF gives them with add_special_tokens=False.
  void tokenize_with_offsets(std::string_view text, std::vector<int32_t>& ids, std::vector<TokenSpan>& spans) const;

  // [CLS] a [SEP] (b [SEP]) or the BPE template; max_length 0 = no truncation.
  // With max_length > 0 the result has at most max_length ids. A single text
  // loses tokens at its end (at its start when truncation_left()). A pair follows HF longest_first (Rust
  // truncate_encodings): with budget = max_length - 3, if both fit nothing is
  // cut; if the shorter one fits in half the budget, only the longer one is cut
  // to budget - shorter; otherwise both are cut, the originally shorter one to
  // budget / 2 and the longer to budget - budget / 2 (when both have the same
  // length, a gets budget / 2 and b the rest). (BPE: budget = max_length -
  // num_special_tokens.) Throws shardtrain::Error when max_length is negative
  // or smaller than the number of special tokens (num_special_tokens()).
  Encoding encode(std::string_view text_a, std::optional<std::string_view> text_b, int max_length) const;

  // encode() (the same ids, types and truncation) with `offsets` (spans in
  // text_a / text_b) and `sequence_ids` filled: HF's
  // tokenizer(a, b, return_offsets_mapping=True).
  Encoding encode_with_offsets(std::string_view text_a, std::optional<std::string_view> text_b,
                               int max_length) const;

  // Pre-split words, as HF's tokenizer(words, is_split_into_words=True) (what
  // run_ner uses): each word is tokenized on its own (WordPiece: normalizer
  // and punctuation split per word, so "U.S." gives U . S .; BPE: each word
  // gets the prefix space when `add_prefix_space` is true (run_ner sets it
  // for RoBERTa; it stands for AutoTokenizer's add_prefix_space=True) and
  // keeps the tokenizer's own setting when false; WordPiece ignores it). A
  // word that tokenizes to nothing gives no token. The single-text template
  // goes around the tokens; max_length > 0 truncates them as encode() does a
  // single text (at the end, or at the start when truncation_left()): count
  // the words lost from word_ids. offsets are relative to each token's word;
  // word_ids and sequence_ids are filled.
  Encoding encode_words(const std::vector<std::string_view>& words, int max_length, bool add_prefix_space) const;

  // The template around already tokenized sequences (ids from tokenize()):
  // single when `b` is null, else pair; no truncation (extractive QA builds
  // its own windows: question + a window of the context). token_type_ids and
  // sequence_ids are filled (offsets are not: a token at position p with
  // sequence_ids[p] = s is the k-th of sequence s, where k counts the tokens
  // of s before p; its span is the caller's k-th span of that sequence).
  Encoding apply_template(const std::vector<int32_t>& a, const std::vector<int32_t>* b) const;

  // Whether truncation cuts from the left (HF truncation_side "left"):
  // tokenizer_config.json's truncation_side, else tokenizer.json's
  // truncation.direction ("Left" / "Right"), else right, as AutoTokenizer.
  bool truncation_left() const;

  int32_t cls_id() const;
  int32_t sep_id() const;
  int32_t pad_id() const;
  int32_t unk_id() const;
  // -1 when the vocabulary has no mask token.
  int32_t mask_id() const;
  // Number of lines in vocab.txt (the embedding size of the model); BPE,
  // SentencePiece: 1 + the largest id of the vocabulary and the added tokens.
  int64_t vocab_size() const;
  const TokenizerOptions& options() const;
  // The file the vocabulary was read from (from_vocab_text: its `source`;
  // BPE: tokenizer.json or vocab.json; SentencePiece: the model file or
  // tokenizer.json).
  const std::string& vocab_path() const;

  // id -> token string (for debugging / export). Throws shardtrain::Error for
  // an id outside [0, vocab_size()).
  const std::string& token(int32_t id) const;
  // token string -> id, or -1 when the token is not in the vocabulary.
  int32_t token_to_id(std::string_view token) const;

  struct Vocab;  // WordPiece, defined in wordpiece_vocab.h
  struct Bpe;    // byte-level BPE, defined in bpe_tokenizer.cpp
  struct Spm;    // SentencePiece, defined in spm_tokenizer.h
  struct Loader;  // tokenizer_loader.h: folders, tokenizer.json, saved files
  struct Template;  // the post-processor (src/data/tokenizer/tokenizer_template.h)
  struct Core;      // what every engine holds (src/data/tokenizer/tokenizer_template.h)

 private:
  Tokenizer(std::shared_ptr<const Vocab> vocab, const TokenizerOptions& options);
  explicit Tokenizer(std::shared_ptr<const Bpe> bpe);
  explicit Tokenizer(std::shared_ptr<const Spm> spm);

  // tokenizer_encode.cpp: one text's ids (and spans) (`prefix_space`: BPE's
  // add_prefix_space, -1 = the tokenizer's), and encode / encode_with_offsets.
  void tokenize_text(std::string_view text, std::vector<int32_t>& ids, std::vector<TokenSpan>* spans,
                     int prefix_space) const;
  Encoding encode_texts(std::string_view text_a, std::optional<std::string_view> text_b, int max_length,
                        bool with_offsets) const;
  // BPE offset trimming of the `keep` tokens truncation kept (text_of(i): the
  // text of the i-th kept token).
  template <class TextOf>
  void trim_kept(const std::vector<int32_t>& ids, std::vector<TokenSpan>& spans, std::size_t keep, TextOf text_of,
                 bool add_prefix_space = false) const;

  std::shared_ptr<const Vocab> vocab_;  // exactly one of vocab_, bpe_ and spm_ is set
  std::shared_ptr<const Bpe> bpe_;
  std::shared_ptr<const Spm> spm_;
  const Core* core_ = nullptr;          // the one that is set
  TokenizerOptions options_;
  std::shared_ptr<const std::string> saved_files_;
  int64_t model_max_length_ = 0;
  bool truncation_left_ = false;
};

}  // namespace shardtrain
