// Token classification (model.task = "token_classification", NER): a tag per
// word, as <Family>ForTokenClassification and run_ner_no_trainer.py
// (docs/tasks.md).
//
// Files: sentences of words and tags (data/word_table.h: CoNLL, or JSONL /
// CSV / TSV lists). The words are tokenized as pre-split words
// (Tokenizer::encode_words), as run_ner's tokenize_and_align_labels: the
// first token of each word carries the word's tag and its later tokens -100
// (ignored), or with label_all_tokens the word's tag with B- turned into I-
// (b_to_i_map); special tokens get -100. Words past max_length are lost
// (counted in TokenAlignment). A table without tags (predict) marks the first
// token of every kept word with 0, so that "labelled" positions are the words.
// A word may have no token at all (a zero-width space, a control character,
// a soft hyphen: the normalizer removes it); as in HF it then has no label and
// no prediction, so labelled positions are not word indices: with_words keeps
// each token's word (word_first_tokens) for predict.
//
// Metrics: seqeval's entity scores of the labelled tokens' tags
// (metrics/entity_metrics.h), eval_loss the mean cross-entropy over them.
//
//   WordTable train = read_word_table(...);
//   TokenAlignment stats;
//   TokenizedDataset data = build_token_dataset(train, tokenizer, {128, false, false}, comm, &stats);
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/data/dataset.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/data/word_table.h"
#include "shardtrain/tasks/task_spec.h"

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

// Whether words get byte-level BPE's prefix space, as run_ner_no_trainer.py
// decides it by the model's config.json model_type (RoBERTa).
bool token_task_prefix_space(const std::string& model_type);

// An example's record: the predicted tag of each token position up to
// token_record_positions(data) (-1 beyond the sequence), then the summed
// cross-entropy of its labelled tokens and their number.
int64_t token_record_positions(const TokenizedDataset& data);
RecordFn token_record(int64_t positions);

// The metrics of gathered token records against data's token labels, each
// example's labelled positions only: eval_loss (mean over labelled tokens),
// eval_precision, eval_recall, eval_f1, eval_accuracy and eval_<type>_f1 per
// entity type.
std::map<std::string, double> token_metrics(const std::vector<float>& records, int64_t positions,
                                            const TokenizedDataset& data, const std::vector<std::string>& tag_names);

// Tagging every word "O" (or, without an "O" tag, the training data's most
// frequent tag), scored by token_metrics.
Baseline outside_baseline(const TokenizedDataset& train, const TokenizedDataset& eval,
                          const std::vector<std::string>& tag_names);

// A file of sentences as read.
using WordsTable = TableOf<WordTable>;

// predict's outputs: each sentence's words and the predicted tag of each.
class TokenPredictions : public TaskPredictions {
 public:
  std::vector<std::vector<std::string>> words;
  // Tag ids into tag_names; -1 for a word without a token (cut off by
  // max_length, or one the tokenizer drops whole, such as a lone zero-width
  // space).
  std::vector<std::vector<int32_t>> word_tags;
  std::vector<std::string> tag_names;
  std::vector<int64_t> line_numbers;

  // {"row":i,"line":L,"words":[...],"tags":[...],"entities":[...]}: the tags
  // as names (null for a word without a tag); each entity (seqeval's chunks
  // of the tags) {"type":T,"words":[first,end),"chars":[first,end),"text":S},
  // its character span in the words joined by single spaces (code points).
  std::string json_line(int64_t row) const override;
};

}  // namespace shardtrain
