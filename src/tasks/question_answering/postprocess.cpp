// Extractive QA post-processing, metrics and baseline (tasks/question_answering.h).
#include "shardtrain/tasks/question_answering.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/metrics/squad_metrics.h"

namespace shardtrain {
namespace {

// A candidate answer of one question (utils_qa.py's prelim_predictions).
struct Candidate {
  int32_t start_char = 0, end_char = 0;
  float score = 0, start_logit = 0, end_logit = 0;
  bool null = false;
};

// (start + end cross-entropy) / 2 of one feature's real positions, float64.
double span_loss(const float* start, const float* end, int64_t length, int64_t start_label, int64_t end_label) {
  auto cross_entropy = [&](const float* logits, int64_t label) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t p = 0; p < length; ++p) mx = std::max(mx, static_cast<double>(logits[p]));
    double sum = 0;
    for (int64_t p = 0; p < length; ++p) sum += std::exp(logits[p] - mx);
    return mx + std::log(sum) - logits[label];
  };
  return (cross_entropy(start, start_label) + cross_entropy(end, end_label)) / 2;
}

// The n largest of values[0..length) as (position, value), largest first; equal
// values: the later position first (numpy's argsort(...)[::-1] on a stable sort).
void top_positions(const float* values, int64_t length, int64_t n, float* positions_out, float* values_out) {
  std::vector<int64_t> order(static_cast<size_t>(length));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = std::min(n, length);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return values[a] != values[b] ? values[a] > values[b] : a > b;
  });
  for (int64_t i = 0; i < n; ++i) {
    positions_out[i] = i < k ? static_cast<float>(order[i]) : -1.0f;
    values_out[i] = i < k ? values[order[i]] : 0.0f;
  }
}

}  // namespace

int64_t qa_record_width(int64_t n_best_size) { return 3 + 4 * n_best_size; }

RecordFn qa_record(int64_t n_best_size) {
  return [n_best_size](const at::Tensor& logits_in, const Batch& batch) {
    // logits [B, L, 2] -> start [B, L] and end [B, L] on the host, fp32.
    const at::Tensor logits = logits_in.to(at::kCPU, at::kFloat).contiguous();
    const at::Tensor start = logits.select(2, 0).contiguous(), end = logits.select(2, 1).contiguous();
    const at::Tensor mask = batch.attention_mask.to(at::kCPU, at::kLong).contiguous();
    const at::Tensor labels = batch.labels.defined() ? batch.labels.to(at::kCPU, at::kLong).contiguous() : at::Tensor();
    const int64_t B = logits.size(0), L = logits.size(1), n = n_best_size;
    at::Tensor out = at::zeros({B, qa_record_width(n)}, at::kFloat);
    float* record = out.data_ptr<float>();
    for (int64_t b = 0; b < B; ++b) {
      const float* s = start.data_ptr<float>() + b * L;
      const float* e = end.data_ptr<float>() + b * L;
      const int64_t length = mask.select(0, b).sum().item<int64_t>();
      float* r = record + b * qa_record_width(n);
      r[0] = s[0];
      r[1] = e[0];
      if (labels.defined())
        r[2] = static_cast<float>(span_loss(s, e, length, labels[b][0].item<int64_t>(), labels[b][1].item<int64_t>()));
      top_positions(s, length, n, r + 3, r + 3 + n);
      top_positions(e, length, n, r + 3 + 2 * n, r + 3 + 3 * n);
    }
    return out;
  };
}

std::vector<QaAnswer> postprocess_qa(const QaTable& table, const TokenizedDataset& features,
                                     const std::vector<float>& records, const QaPostprocessOptions& options) {
  const int64_t n = options.n_best_size, width = qa_record_width(n);
  ST_ASSERT(static_cast<int64_t>(records.size()) == features.size() * width, "postprocess_qa: records and features differ");
  ST_ASSERT(!features.token_spans.empty(), "postprocess_qa: the features have no offsets");
  const std::vector<int64_t> first = features_per_question(features, table.size());
  std::vector<QaAnswer> answers(static_cast<size_t>(table.size()));
  for (int64_t q = 0; q < table.size(); ++q) {
    std::vector<Candidate> candidates;
    Candidate null;
    bool have_null = false;
    for (int64_t f = first[q]; f < first[q + 1]; ++f) {
      const float* r = records.data() + f * width;
      const float feature_null = r[0] + r[1];
      if (!have_null || null.score > feature_null) {
        null = Candidate{0, 0, feature_null, r[0], r[1], true};
        have_null = true;
      }
      const int32_t* spans = features.token_spans.data() + 2 * features.offsets[f];
      const int64_t length = features.sequence_length(f);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t start = static_cast<int64_t>(r[3 + i]);
        if (start < 0 || start >= length || spans[2 * start] < 0) continue;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t end = static_cast<int64_t>(r[3 + 2 * n + j]);
          if (end < 0 || end >= length || spans[2 * end] < 0) continue;
          if (end < start || end - start + 1 > options.max_answer_length) continue;
          const float start_logit = r[3 + n + i], end_logit = r[3 + 3 * n + j];
          candidates.push_back(Candidate{spans[2 * start], spans[2 * end + 1], start_logit + end_logit, start_logit,
                                         end_logit, false});
        }
      }
    }
    const bool v2 = options.version_2_with_negative && have_null;
    if (v2) candidates.push_back(null);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
    if (static_cast<int64_t>(candidates.size()) > n) candidates.resize(static_cast<size_t>(n));
    if (v2 && std::none_of(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.null; }))
      candidates.push_back(null);

    const std::string& context = table.examples[static_cast<size_t>(q)].context;
    const std::vector<int32_t> char_starts = utf8_char_starts(context);
    auto text_of = [&](const Candidate& c) {
      if (c.null) return std::string();
      return context.substr(char_starts[c.start_char], char_starts[c.end_char] - char_starts[c.start_char]);
    };
    std::vector<std::string> texts;
    for (const Candidate& c : candidates) texts.push_back(text_of(c));
    if (candidates.empty() || (candidates.size() == 1 && texts[0].empty())) {
      candidates.insert(candidates.begin(), Candidate{-1, -1, 0.0f, 0.0f, 0.0f, false});
      texts.insert(texts.begin(), "empty");
    }
    // Probabilities: softmax of the kept scores.
    float best_score = candidates[0].score;
    for (const Candidate& c : candidates) best_score = std::max(best_score, c.score);
    double sum = 0;
    for (const Candidate& c : candidates) sum += std::exp(static_cast<double>(c.score - best_score));

    size_t chosen = 0;
    QaAnswer& answer = answers[static_cast<size_t>(q)];
    if (v2) {
      while (chosen + 1 < texts.size() && texts[chosen].empty()) ++chosen;
      const Candidate& best = candidates[chosen];
      const float diff = null.score - best.start_logit - best.end_logit;
      answer.null_score = null.score;
      answer.score_diff = diff;
      if (diff > options.null_score_diff_threshold) {
        answer.text = "";
        answer.score = null.score;
        const auto null_at = std::find_if(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.null; });
        answer.probability = std::exp(static_cast<double>(null_at->score - best_score)) / sum;
        continue;
      }
    }
    const Candidate& c = candidates[chosen];
    answer.text = texts[chosen];
    answer.score = c.score;
    answer.probability = std::exp(static_cast<double>(c.score - best_score)) / sum;
    if (c.start_char >= 0 && !c.null) {
      answer.start_char = c.start_char;
      answer.end_char = c.end_char;
    }
  }
  return answers;
}

std::map<std::string, double> qa_metrics(const QaTable& table, const std::vector<QaAnswer>& answers, bool version_2) {
  ST_ASSERT(static_cast<int64_t>(answers.size()) == table.size(), "qa_metrics: answers and questions differ");
  std::vector<std::string> predictions;
  std::vector<std::vector<std::string>> golds;
  std::vector<double> na_scores;
  for (size_t q = 0; q < answers.size(); ++q) {
    predictions.push_back(answers[q].text);
    golds.push_back(table.examples[q].answer_texts);
    na_scores.push_back(answers[q].score_diff);
  }
  const std::map<std::string, double> m =
      version_2 ? squad_v2_metrics(predictions, golds, na_scores) : squad_v1_metrics(predictions, golds);
  std::map<std::string, double> out;
  for (const auto& [name, value] : m) out["eval_" + name] = value;
  return out;
}


Baseline first_sentence_baseline(const QaTable& table, bool version_2) {
  std::vector<QaAnswer> answers(static_cast<size_t>(table.size()));
  for (size_t q = 0; q < answers.size(); ++q) {
    const std::string& context = table.examples[q].context;
    size_t end = context.size();
    for (size_t i = 0; i + 1 < context.size(); ++i)
      if ((context[i] == '.' || context[i] == '!' || context[i] == '?') &&
          (context[i + 1] == ' ' || context[i + 1] == '\n' || context[i + 1] == '\t')) {
        end = i + 1;
        break;
      }
    answers[q].text = context.substr(0, end);
    answers[q].score_diff = 0;
  }
  Baseline b;
  b.name = "first sentence of the context";
  b.metrics = qa_metrics(table, answers, version_2);
  return b;
}

}  // namespace shardtrain
