// Token-classification data (model.task = "token_classification"): sentences
// as words, each word with a tag, as run_ner_no_trainer.py reads them.
//
// Formats:
//   conll  one word per line, columns split on tabs (or, in a line without a
//          tab, on runs of spaces); a blank or whitespace-only line ends a
//          sentence; a line whose first column is -DOCSTART- is skipped. The
//          words are column `words_column` and the tags column `tags_column`
//          when those are 0-based indices, else the first and the last
//          column. Every word line must have as many columns as most of
//          the file's word lines (ties: the earliest count), so that one bad
//          line is named, whichever it is.
//   jsonl / csv / tsv   one sentence per row: `words_column` holds a list of
//          words and `tags_column` a list of tags (names, or integer ids with
//          `tag_names` giving their names), as HF datasets writes them
//          ("tokens", "ner_tags"); in csv / tsv the lists are JSON arrays.
//
// Tags: with `tag_names` given (data.labels, the model's id2label, or the
// training data's names for the eval data) every tag must be one of them
// (integer tags: an id below their number); without, the distinct tags of
// this file, sorted, become the names (run_ner's get_label_list). A tag not in
// the names, a word list and a tag list of different lengths, an empty
// sentence or a malformed line is a bad row: an error naming the file and the
// line (CoNLL: the line of the bad tag or column), or (BadRowPolicy::kSkip)
// the sentence is dropped and counted.
//
//   WordTableOptions options;
//   options.format = FileFormat::kConll;
//   WordTable train = read_word_table("data/ner/wnut17/train.conll", options);   // 3394 sentences
//   options.tag_names = train.tag_names;
//   WordTable dev = read_word_table("data/ner/wnut17/dev.conll", options);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/core/enum_names.h"

namespace shardtrain {

struct WordTableOptions {
  FileFormat format = FileFormat::kAuto;  // kAuto: from the extension (.conll, .jsonl, .csv, .tsv)
  std::string words_column = "tokens";
  std::string tags_column = "ner_tags";
  bool with_tags = true;                  // false: a file to predict (conll: the tag column may be absent)
  std::vector<std::string> tag_names;     // fixed names in id order; empty = collected from this file
  // With tag_names empty: the names of integer tags (a model's id2label);
  // string tags ignore them. Empty: integer tags need tag_names.
  std::vector<std::string> id_names;
  BadRowPolicy on_bad_row = BadRowPolicy::kError;
};

struct WordTable {
  std::string path;
  std::vector<std::vector<std::string>> words;  // per sentence
  std::vector<std::vector<int32_t>> tags;       // per sentence, ids into tag_names; empty without tags
  std::vector<std::string> tag_names;           // id order
  std::vector<int64_t> line_numbers;            // 1-based line each sentence starts on
  int64_t num_bad_rows = 0;                     // sentences skipped under BadRowPolicy::kSkip

  bool has_tags = false;                        // tags were read (WordTableOptions::with_tags)

  int64_t size() const { return static_cast<int64_t>(words.size()); }
};

WordTable read_word_table(const std::string& path, const WordTableOptions& options);
// The same from bytes already in memory; `path` names the source.
WordTable read_word_table_from_string(const std::string& content, const std::string& path,
                                      const WordTableOptions& options);

// True when the file at `path` has the tags options.tags_column names: a
// CoNLL file whose word lines have a tag column besides the words (the
// column's index, or the last of two or more), or a tsv / csv / jsonl file
// with that column (data/reader.h's file_has_column). For predict, whose tag
// column is the run's default, not asked for.
bool word_table_has_tags(const std::string& path, const WordTableOptions& options);

// run_ner's b_to_i_label: for each tag id, the id of its I- tag when the tag
// is B-X and I-X exists, else the id itself.
std::vector<int32_t> b_to_i_map(const std::vector<std::string>& tag_names);

}  // namespace shardtrain
