// Token classification's datasets (tasks/token_classification.h).
#include "shardtrain/tasks/token_classification.h"

#include <algorithm>

#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

std::vector<int32_t> align_word_labels(const std::vector<int32_t>& word_ids, const std::vector<int32_t>& tags,
                                       const std::vector<int32_t>& b_to_i, bool label_all_tokens) {
  std::vector<int32_t> labels(word_ids.size(), kIgnoreLabel);
  int32_t previous = -1;
  for (size_t t = 0; t < word_ids.size(); ++t) {
    const int32_t word = word_ids[t];
    if (word < 0) {  // a special token
      previous = word;
      continue;
    }
    ST_ASSERT(static_cast<size_t>(word) < tags.size(), "align_word_labels: word id beyond the tags");
    const int32_t tag = tags[static_cast<size_t>(word)];
    if (word != previous)
      labels[t] = tag;
    else if (label_all_tokens)
      labels[t] = b_to_i.empty() ? tag : b_to_i[static_cast<size_t>(tag)];
    previous = word;
  }
  return labels;
}

TokenizedDataset build_token_dataset(const WordTable& table, const Tokenizer& tokenizer,
                                     const TokenTaskOptions& options, MPI_Comm comm, TokenAlignment* stats) {
  const std::vector<int32_t> b_to_i = b_to_i_map(table.tag_names);
  std::vector<int64_t> lost_words(static_cast<size_t>(table.size()), 0);
  const RowEncodeFn encode = [&](int64_t row, std::vector<EncodedRow>& out) {
    const std::vector<std::string>& words = table.words[static_cast<size_t>(row)];
    const std::vector<std::string_view> views(words.begin(), words.end());
    const Encoding e = tokenizer.encode_words(views, options.max_length, options.add_prefix_space);
    EncodedRow encoded;
    encoded.input_ids = e.input_ids;
    encoded.token_type_ids = e.token_type_ids;
    std::vector<int32_t> tags;
    if (table.has_tags) {
      tags = table.tags[static_cast<size_t>(row)];
    } else {
      tags.assign(words.size(), 0);  // predict: mark each word's first token
    }
    encoded.token_labels = align_word_labels(e.word_ids, tags, table.has_tags ? b_to_i : std::vector<int32_t>{},
                                             table.has_tags && options.label_all_tokens);
    if (options.with_words) {
      encoded.token_spans.reserve(e.word_ids.size());
      for (int32_t w : e.word_ids) encoded.token_spans.push_back({w, w < 0 ? -1 : w + 1});
    }
    // A word with no token left was cut by max_length, unless it tokenizes
    // to nothing at all (as in HF, it then never had a token).
    std::vector<bool> kept(words.size(), false);
    for (int32_t w : e.word_ids)
      if (w >= 0) kept[static_cast<size_t>(w)] = true;
    int64_t lost = 0;
    for (size_t w = 0; w < words.size(); ++w) {
      if (kept[w]) continue;
      const Encoding single = tokenizer.encode_words({views[w]}, 0, options.add_prefix_space);
      lost += std::any_of(single.word_ids.begin(), single.word_ids.end(), [](int32_t id) { return id >= 0; }) ? 1 : 0;
    }
    lost_words[static_cast<size_t>(row)] = lost;
    out.push_back(std::move(encoded));
  };
  TokenizedDataset data = build_examples(table.size(), encode, 1, table.path, table.line_numbers, comm);
  if (stats) {
    // Each rank counted its own rows; the sums are every rank's.
    int64_t local[2] = {0, 0};
    for (int64_t lost : lost_words) {
      local[0] += lost > 0 ? 1 : 0;
      local[1] += lost;
    }
    int64_t global[2] = {local[0], local[1]};
    if (comm != MPI_COMM_NULL) {
      PhaseGuard guard(comm, "tokenizing " + table.path + ": counting truncated words");
      ST_CHECK_MPI(MPI_Allreduce(local, global, 2, MPI_INT64_T, MPI_SUM, comm));
    }
    stats->truncated_sentences = global[0];
    stats->truncated_words = global[1];
  }
  return data;
}

std::vector<int32_t> labelled_positions(const TokenizedDataset& data, int64_t example) {
  std::vector<int32_t> positions;
  const int64_t begin = data.offsets[example], end = data.offsets[example + 1];
  for (int64_t t = begin; t < end; ++t)
    if (data.token_labels[static_cast<size_t>(t)] != kIgnoreLabel) positions.push_back(static_cast<int32_t>(t - begin));
  return positions;
}

std::vector<int32_t> word_first_tokens(const TokenizedDataset& data, int64_t example, size_t num_words) {
  ST_ASSERT(data.token_spans.size() == 2 * data.input_ids.size(),
            "word_first_tokens: the dataset was built without TokenTaskOptions::with_words");
  std::vector<int32_t> first(num_words, -1);
  const int64_t begin = data.offsets[example], end = data.offsets[example + 1];
  for (int64_t t = end - 1; t >= begin; --t) {  // backwards: the first token of a word wins
    const int32_t word = data.token_spans[static_cast<size_t>(2 * t)];
    if (word < 0) continue;
    ST_ASSERT(static_cast<size_t>(word) < num_words, "word_first_tokens: a token's word beyond the sentence");
    first[static_cast<size_t>(word)] = static_cast<int32_t>(t - begin);
  }
  return first;
}

}  // namespace shardtrain
