// Tokenized datasets of the tasks beyond sequence classification
// (docs/DESIGN.md, "Tasks"): tables of words and tags, or of choices, turned
// into the TokenizedDataset the collator and sampler take (data/dataset.h),
// tokenized across the ranks of a communicator as build_dataset does.
//
//   WordTable train = read_word_table(...);
//   TokenAlignment stats;
//   TokenizedDataset data = build_token_dataset(train, tokenizer, {128, false, false}, comm, &stats);
//
// Token classification follows run_ner_no_trainer.py's tokenize_and_align_labels:
// the words are tokenized as pre-split words (Tokenizer::encode_words), the
// first token of each word carries the word's tag and the word's later tokens
// -100 (ignored), or with label_all_tokens the word's tag with B- turned into
// I- (b_to_i_map); special tokens get -100. Words past max_length are lost
// (counted in TokenAlignment). A table without tags (predict) marks the first
// token of every kept word with 0, so that "labelled" positions are the words.
// A word may have no token at all (a zero-width space, a control character,
// a soft hyphen: the normalizer removes it); as in HF it then has no label and
// no prediction, so labelled positions are not word indices: with_words keeps
// each token's word (word_first_tokens) for predict.
//
// Multiple choice follows run_swag_no_trainer.py: each choice of a row is the
// pair (first, second[i]) truncated longest_first to max_length, and one
// example holds the row's choices (sequences_per_example = num_choices).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "shardtrain/data/dataset.h"
#include "shardtrain/data/multiple_choice.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/data/word_table.h"

namespace shardtrain {

struct TokenTaskOptions {
  int max_length = 128;
  bool add_prefix_space = false;  // byte-level BPE: a space before every word (run_ner: RoBERTa)
  bool label_all_tokens = false;
  // Keep each token's word in the dataset's token_spans ({w, w + 1} for a
  // token of word w, {-1, -1} for a special token), for word_first_tokens.
  bool with_words = false;
};

struct TokenAlignment {
  int64_t truncated_sentences = 0;  // sentences that lost words to max_length
  int64_t truncated_words = 0;      // the words they lost
};

// Token labels for one sentence: word_ids from encode_words (-1 = special
// token), tags the word's tag ids, b_to_i from b_to_i_map(). Same length as
// word_ids.
std::vector<int32_t> align_word_labels(const std::vector<int32_t>& word_ids, const std::vector<int32_t>& tags,
                                       const std::vector<int32_t>& b_to_i, bool label_all_tokens);

// Collective over comm. `stats` (optional) gets the truncation counts of the
// whole table (the same on every rank).
TokenizedDataset build_token_dataset(const WordTable& table, const Tokenizer& tokenizer,
                                     const TokenTaskOptions& options, MPI_Comm comm, TokenAlignment* stats = nullptr);

// For each example (sentence), the token position of each kept word's first
// token: the positions whose token label is not -100, in order.
std::vector<int32_t> labelled_positions(const TokenizedDataset& data, int64_t example);

// A dataset built with TokenTaskOptions::with_words: for each of the
// example's `num_words` words, the position of its first token in the
// sequence, or -1 for a word with no token (cut off by max_length, or one
// that tokenizes to nothing).
std::vector<int32_t> word_first_tokens(const TokenizedDataset& data, int64_t example, size_t num_words);

// Collective over comm; labels are the table's right choices (or none).
TokenizedDataset build_choice_dataset(const MultipleChoiceTable& table, const Tokenizer& tokenizer, int max_length,
                                      MPI_Comm comm);

}  // namespace shardtrain
