// SQuAD's official EM / F1 (metrics/squad_metrics.h).
#include "shardtrain/metrics/squad_metrics.h"

#include <utf8proc.h>

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "shardtrain/core/check.h"
#include "shardtrain/data/qa_data.h"

namespace shardtrain {
namespace {

void append_utf8(std::string& out, int32_t cp) {
  utf8proc_uint8_t buffer[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(cp, buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Python's \w for str patterns: str.isalnum() (letters, numbers) or '_'.
bool is_word_char(int32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default: return false;
  }
}

std::vector<int32_t> code_points(std::string_view text) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < text.size();) out.push_back(next_code_point(text, &i));
  return out;
}

std::vector<std::string> answer_tokens(std::string_view text) {
  const std::string normalized = normalize_answer(text);
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start <= normalized.size()) {  // white_space_fix left single ASCII spaces
    const size_t space = normalized.find(' ', start);
    const size_t end = space == std::string::npos ? normalized.size() : space;
    if (end > start) tokens.push_back(normalized.substr(start, end - start));
    if (space == std::string::npos) break;
    start = space + 1;
  }
  return tokens;
}

// Counter(prediction) & Counter(gold): the tokens they share, with multiplicity.
int64_t shared_tokens(const std::vector<std::string>& prediction, const std::vector<std::string>& gold) {
  std::unordered_map<std::string, int64_t> counts;
  for (const std::string& token : gold) ++counts[token];
  int64_t same = 0;
  for (const std::string& token : prediction) {
    auto it = counts.find(token);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  return same;
}

double harmonic_f1(int64_t same, size_t num_prediction, size_t num_gold) {
  if (same == 0) return 0.0;
  const double precision = static_cast<double>(same) / static_cast<double>(num_prediction);
  const double recall = static_cast<double>(same) / static_cast<double>(num_gold);
  return 2 * precision * recall / (precision + recall);
}

double mean_percent(const std::vector<double>& scores, const std::vector<size_t>& which) {
  double sum = 0;
  for (size_t i : which) sum += scores[i];
  return which.empty() ? 0.0 : 100.0 * sum / static_cast<double>(which.size());
}

// evaluate-v2.0's find_best_thresh: questions by increasing no-answer score;
// answering "" for all above a threshold changes the score by what each gives up.
std::pair<double, double> best_threshold(const std::vector<std::string>& predictions, const std::vector<double>& scores,
                                         const std::vector<double>& na_scores, const std::vector<bool>& has_answer) {
  const size_t n = scores.size();
  double current = static_cast<double>(std::count(has_answer.begin(), has_answer.end(), false));
  double best = current, threshold = 0.0;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return na_scores[a] < na_scores[b]; });
  for (size_t i : order) {
    const double diff = has_answer[i] ? scores[i] : (predictions[i].empty() ? 0.0 : -1.0);
    current += diff;
    if (current > best) {
      best = current;
      threshold = na_scores[i];
    }
  }
  return {n == 0 ? 0.0 : 100.0 * best / static_cast<double>(n), threshold};
}

}  // namespace

std::string normalize_answer(std::string_view text) {
  // lower
  std::vector<int32_t> lowered;
  for (int32_t cp : code_points(text)) {
    if (cp == 0x130) {  // the one unconditional multi-character lowercase mapping
      lowered.insert(lowered.end(), {'i', 0x307});
      continue;
    }
    lowered.push_back(utf8proc_tolower(cp));
  }
  // remove_punc: string.punctuation
  static const std::string_view kPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  std::vector<int32_t> kept;
  for (int32_t cp : lowered)
    if (cp >= 0x80 || kPunctuation.find(static_cast<char>(cp)) == std::string_view::npos) kept.push_back(cp);
  // remove_articles: re.sub(r"\b(a|an|the)\b", " ", text)
  std::vector<int32_t> spaced;
  const size_t n = kept.size();
  for (size_t i = 0; i < n;) {
    size_t match = 0;
    if (i == 0 || !is_word_char(kept[i - 1])) {
      for (std::string_view article : {"a", "an", "the"}) {
        const size_t end = i + article.size();
        if (end > n) continue;
        bool same = true;
        for (size_t k = 0; k < article.size() && same; ++k) same = kept[i + k] == article[k];
        if (same && (end == n || !is_word_char(kept[end]))) {
          match = article.size();
          break;
        }
      }
    }
    if (match > 0) {
      spaced.push_back(' ');
      i += match;
    } else {
      spaced.push_back(kept[i++]);
    }
  }
  // white_space_fix: " ".join(text.split())
  std::string out;
  bool pending_space = false;
  for (int32_t cp : spaced) {
    if (is_python_space(cp)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    append_utf8(out, cp);
  }
  return out;
}

double squad_exact(std::string_view prediction, std::string_view gold) {
  return normalize_answer(prediction) == normalize_answer(gold) ? 1.0 : 0.0;
}

double squad_f1(std::string_view prediction, std::string_view gold) {
  const std::vector<std::string> p = answer_tokens(prediction), g = answer_tokens(gold);
  return harmonic_f1(shared_tokens(p, g), p.size(), g.size());
}

double squad_v2_f1(std::string_view prediction, std::string_view gold) {
  const std::vector<std::string> p = answer_tokens(prediction), g = answer_tokens(gold);
  if (p.empty() || g.empty()) return p == g ? 1.0 : 0.0;
  return harmonic_f1(shared_tokens(p, g), p.size(), g.size());
}

std::map<std::string, double> squad_v1_metrics(const std::vector<std::string>& predictions,
                                               const std::vector<std::vector<std::string>>& golds) {
  ST_ASSERT(predictions.size() == golds.size(), "squad_v1_metrics: predictions and golds differ in number");
  double exact = 0, f1 = 0;
  for (size_t i = 0; i < predictions.size(); ++i) {
    ST_ASSERT(!golds[i].empty(), "squad_v1_metrics: a question without gold answers");
    double best_exact = 0, best_f1 = 0;
    for (const std::string& gold : golds[i]) {
      best_exact = std::max(best_exact, squad_exact(predictions[i], gold));
      best_f1 = std::max(best_f1, squad_f1(predictions[i], gold));
    }
    exact += best_exact;
    f1 += best_f1;
  }
  const double n = static_cast<double>(predictions.size());
  return {{"exact_match", n > 0 ? 100.0 * exact / n : 0.0}, {"f1", n > 0 ? 100.0 * f1 / n : 0.0}};
}

std::map<std::string, double> squad_v2_metrics(const std::vector<std::string>& predictions,
                                               const std::vector<std::vector<std::string>>& golds,
                                               const std::vector<double>& na_scores) {
  const size_t n = predictions.size();
  ST_ASSERT(golds.size() == n && na_scores.size() == n, "squad_v2_metrics: inputs differ in number");
  std::vector<double> exact(n), f1(n);
  std::vector<bool> has_answer(n);
  std::vector<size_t> all(n), with, without;
  for (size_t i = 0; i < n; ++i) {
    all[i] = i;
    has_answer[i] = !golds[i].empty();
    (has_answer[i] ? with : without).push_back(i);
    std::vector<std::string> gold;
    for (const std::string& g : golds[i])
      if (!normalize_answer(g).empty()) gold.push_back(g);
    if (gold.empty()) gold.push_back("");
    for (const std::string& g : gold) {
      exact[i] = std::max(exact[i], squad_exact(predictions[i], g));
      f1[i] = std::max(f1[i], squad_v2_f1(predictions[i], g));
    }
  }
  std::map<std::string, double> m;
  m["exact"] = mean_percent(exact, all);
  m["f1"] = mean_percent(f1, all);
  m["total"] = static_cast<double>(n);
  if (!with.empty()) {
    m["HasAns_exact"] = mean_percent(exact, with);
    m["HasAns_f1"] = mean_percent(f1, with);
    m["HasAns_total"] = static_cast<double>(with.size());
  }
  if (!without.empty()) {
    m["NoAns_exact"] = mean_percent(exact, without);
    m["NoAns_f1"] = mean_percent(f1, without);
    m["NoAns_total"] = static_cast<double>(without.size());
  }
  std::tie(m["best_exact"], m["best_exact_thresh"]) = best_threshold(predictions, exact, na_scores, has_answer);
  std::tie(m["best_f1"], m["best_f1_thresh"]) = best_threshold(predictions, f1, na_scores, has_answer);
  return m;
}

}  // namespace shardtrain
