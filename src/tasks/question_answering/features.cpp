// Extractive QA features: windows, labels and character offsets
// (tasks/question_answering.h, docs/DESIGN.md "Question answering").
#include "shardtrain/tasks/question_answering.h"

#include <algorithm>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace {

// Python's str.lstrip(): run_qa.py strips the question's leading whitespace
// (some SQuAD questions have a lot of it, which would eat the window).
std::string_view lstrip_python(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t next = i;
    if (!is_python_space(next_code_point(text, &next))) break;
    i = next;
  }
  return text.substr(i);
}

// The windows [start, stop) over n context tokens, as tokenizers'
// Encoding::truncate lays them (only the second sequence is cut).
std::vector<std::pair<int64_t, int64_t>> context_windows(int64_t n, int64_t budget, int64_t stride, bool left) {
  std::vector<std::pair<int64_t, int64_t>> windows;
  if (n <= budget) return {{0, n}};
  const int64_t step = budget - stride;
  if (!left) {
    for (int64_t start = 0;; start += step) {
      const int64_t stop = std::min(start + budget, n);
      windows.emplace_back(start, stop);
      if (stop == n) break;
    }
  } else {
    for (int64_t stop = n;; stop -= step) {
      const int64_t start = std::max<int64_t>(stop - budget, 0);
      windows.emplace_back(start, stop);
      if (start == 0) break;
    }
  }
  return windows;
}

}  // namespace

std::vector<EncodedRow> qa_question_features(const QaExample& example, const Tokenizer& tokenizer,
                                             const QaFeatureOptions& options) {
  std::vector<int32_t> question_ids, context_ids;
  std::vector<TokenSpan> byte_spans;
  tokenizer.tokenize(lstrip_python(example.question), question_ids);
  tokenizer.tokenize_with_offsets(example.context, context_ids, byte_spans);
  if (context_ids.empty()) throw Error("the context has no tokens (only whitespace or removed characters)");
  const int64_t budget =
      options.max_length - static_cast<int64_t>(question_ids.size()) - tokenizer.num_special_tokens(true);
  if (budget <= 0)
    throw Error(str_format("the question takes %zu tokens, and with %d special tokens nothing of the context fits "
                           "in data.max_length = %d; raise data.max_length",
                           question_ids.size(), tokenizer.num_special_tokens(true), options.max_length));
  if (static_cast<int64_t>(context_ids.size()) > budget && options.doc_stride >= budget)
    throw Error(str_format("the question takes %zu tokens, leaving %lld for each window of the context, not more "
                           "than data.doc_stride = %d (the windows' overlap); raise data.max_length or lower "
                           "data.doc_stride",
                           question_ids.size(), static_cast<long long>(budget), options.doc_stride));

  // Byte offsets -> characters (code points, Python's str indices):
  // chars_before[b] = the characters that start before byte b.
  const std::string& context = example.context;
  std::vector<int32_t> chars_before(context.size() + 1);
  int32_t count = 0;
  for (size_t b = 0; b < context.size(); ++b) {
    chars_before[b] = count;
    count += (static_cast<unsigned char>(context[b]) & 0xC0) != 0x80 ? 1 : 0;
  }
  chars_before[context.size()] = count;
  std::vector<std::array<int32_t, 2>> char_spans(byte_spans.size());
  for (size_t t = 0; t < byte_spans.size(); ++t)
    char_spans[t] = {chars_before[static_cast<size_t>(byte_spans[t].begin)],
                     chars_before[static_cast<size_t>(byte_spans[t].end)]};

  const bool answered = options.with_labels && !example.answer_texts.empty();
  const int64_t start_char = answered ? example.answer_starts[0] : 0;
  const int64_t end_char = answered ? start_char + utf8_char_count(example.answer_texts[0]) : 0;

  std::vector<EncodedRow> features;
  for (const auto& [start, stop] : context_windows(static_cast<int64_t>(context_ids.size()), budget,
                                                    options.doc_stride, tokenizer.truncation_left())) {
    const std::vector<int32_t> window(context_ids.begin() + start, context_ids.begin() + stop);
    Encoding e = tokenizer.apply_template(question_ids, &window);
    EncodedRow row;
    row.input_ids = std::move(e.input_ids);
    row.token_type_ids = std::move(e.token_type_ids);
    const int64_t length = static_cast<int64_t>(row.input_ids.size());
    // Context token k of the window sits at position p with sequence_ids 1.
    std::vector<std::array<int32_t, 2>> spans(static_cast<size_t>(length), {-1, -1});
    int64_t first = -1, last = -1, k = start;
    for (int64_t p = 0; p < length; ++p) {
      if (e.sequence_ids[static_cast<size_t>(p)] != 1) continue;
      spans[static_cast<size_t>(p)] = char_spans[static_cast<size_t>(k++)];
      if (first < 0) first = p;
      last = p;
    }
    ST_ASSERT(k == stop && first >= 0, "qa features: the template lost context tokens");
    if (options.with_labels) {
      const auto cls = std::find(row.input_ids.begin(), row.input_ids.end(), tokenizer.cls_id());
      const int32_t cls_index = cls == row.input_ids.end() ? 0 : static_cast<int32_t>(cls - row.input_ids.begin());
      row.span = {cls_index, cls_index};
      // prepare_train_features: the answer must lie wholly in the window.
      if (answered && spans[first][0] <= start_char && spans[last][1] >= end_char) {
        int64_t s = first;
        while (s <= last && spans[s][0] <= start_char) ++s;
        int64_t t = last;
        while (t >= first && spans[t][1] >= end_char) --t;
        row.span = {static_cast<int32_t>(s - 1), static_cast<int32_t>(t + 1)};
      }
    }
    if (options.with_offsets) row.token_spans = std::move(spans);
    features.push_back(std::move(row));
  }
  return features;
}

TokenizedDataset build_qa_features(const QaTable& table, const Tokenizer& tokenizer, const QaFeatureOptions& options,
                                   MPI_Comm comm, const BuildOptions& build) {
  const RowEncodeFn encode = [&](int64_t row, std::vector<EncodedRow>& out) {
    const QaExample& example = table.examples[static_cast<size_t>(row)];
    try {
      for (EncodedRow& feature : qa_question_features(example, tokenizer, options)) out.push_back(std::move(feature));
    } catch (const std::exception& e) {
      throw Error("question id '" + clip_for_message(example.id, 80) + "': " + e.what());
    }
  };
  return build_examples(table.size(), encode, 1, table.path, table.line_numbers, comm, build);
}

std::vector<int64_t> features_per_question(const TokenizedDataset& features, int64_t num_questions) {
  std::vector<int64_t> first(static_cast<size_t>(num_questions) + 1, 0);
  for (int64_t row : features.source_rows) {
    ST_ASSERT(row >= 0 && row < num_questions, "features_per_question: a feature of no question");
    ++first[static_cast<size_t>(row) + 1];
  }
  for (int64_t q = 0; q < num_questions; ++q) first[q + 1] += first[q];
  return first;
}

}  // namespace shardtrain
