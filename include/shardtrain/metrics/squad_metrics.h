// SQuAD's official metrics: evaluate-v1.1.py and evaluate-v2.0.py (what HF
// `evaluate`'s "squad" and "squad_v2" compute), on answer strings.
//
// normalize_answer: lower-case (Python's str.lower: full Unicode lowercase
// mapping, without the final-sigma rule), remove ASCII punctuation
// (string.punctuation), replace the articles a / an / the standing as words
// (regex \b(a|an|the)\b, Unicode word characters) by a space, and collapse
// whitespace (str.split, Python's whitespace). Exact match compares
// normalised strings; F1 counts the normalised tokens two answers share.
//
// v1.1: per question the best score over its gold answers; exact_match and
// f1 are 100 x the means. v2.0: gold answers that normalise to "" are
// dropped (none left: the gold is ""), and an empty prediction or gold scores
// F1 1 only when both are empty; exact, f1, total, then HasAns_* over the
// questions with answers and NoAns_* over those without, and best_exact /
// best_f1 with their thresholds: the best scores reachable by answering ""
// whenever a question's no-answer score (na_probs: run_qa's null_odds, the
// null score minus the best span's) is above a threshold, as the official
// script computes them from --na-prob-file.
//
//   std::map<std::string, double> m = squad_v1_metrics({"Denver Broncos"}, {{"Denver Broncos", "the Broncos"}});
//   // m["exact_match"] == 100, m["f1"] == 100
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {

std::string normalize_answer(std::string_view text);
// evaluate-v1.1's exact_match_score / f1_score of one prediction against one gold answer.
double squad_exact(std::string_view prediction, std::string_view gold);
double squad_f1(std::string_view prediction, std::string_view gold);
// evaluate-v2.0's compute_f1 (empty answers handled).
double squad_v2_f1(std::string_view prediction, std::string_view gold);

// predictions[i] against golds[i] (its gold answers, at least one): exact_match, f1.
std::map<std::string, double> squad_v1_metrics(const std::vector<std::string>& predictions,
                                               const std::vector<std::vector<std::string>>& golds);

// golds[i] empty: question i has no answer. na_scores[i]: its no-answer
// score (only the best_* entries use it). Keys: exact, f1, total,
// HasAns_exact, HasAns_f1, HasAns_total (with answered questions), NoAns_*
// (with unanswered ones), best_exact, best_exact_thresh, best_f1, best_f1_thresh.
std::map<std::string, double> squad_v2_metrics(const std::vector<std::string>& predictions,
                                               const std::vector<std::vector<std::string>>& golds,
                                               const std::vector<double>& na_scores);

}  // namespace shardtrain
