#include "shardtrain/train/evaluate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/model/classifier.h"
#include "shardtrain/train/metrics.h"

namespace shardtrain {

std::vector<float> sharded_logits(SequenceClassifier& model, const TokenizedDataset& data,
                                  int64_t batch_size, int32_t pad_id, const at::Device& device, MPI_Comm comm,
                                  std::vector<int64_t>* rows) {
  int rank = 0, world = 1;
  ST_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  ST_CHECK_MPI(MPI_Comm_size(comm, &world));
  const EvalPlan plan = make_eval_plan(data.size(), batch_size, world);
  const int64_t c = model.config().num_labels;
  std::vector<float> local;
  std::vector<int64_t> local_rows;
  local.reserve(plan.per_rank_count() * c);
  const bool was_training = model.is_training();
  model.eval();
  {
    at::NoGradGuard no_grad;
    for (int64_t k = 0; k < plan.num_batches; ++k) {
      const std::vector<int64_t> indices = eval_batch(plan, rank, k);
      const Batch batch = to_device(collate(data, indices, pad_id), device);
      const at::Tensor logits = model.forward_batch(batch)
                                    .to(at::kCPU, at::kFloat)
                                    .contiguous();
      ST_ASSERT(logits.dim() == 2 && logits.size(0) == static_cast<int64_t>(indices.size()) && logits.size(1) == c,
                "sharded_logits: unexpected logits shape");
      local.insert(local.end(), logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
      local_rows.insert(local_rows.end(), indices.begin(), indices.end());
    }
  }
  model.train(was_training);
  if (rows) *rows = gather_for_metrics(local_rows, plan, comm, 1);
  return gather_for_metrics(local, plan, comm, c);
}

std::map<std::string, double> eval_metrics(const std::vector<float>& logits, const Labels& labels, int64_t num_labels) {
  std::map<std::string, double> m;
  if (num_labels == 1) {
    const RegressionMetrics r = regression_metrics(std::vector<float>(logits.begin(), logits.end()), labels.values);
    m["eval_loss"] = r.mse;
    m["eval_mse"] = r.mse;
    m["eval_pearson"] = r.pearson;
    return m;
  }
  const std::vector<int64_t>& y = labels.class_ids;
  const int64_t n = static_cast<int64_t>(y.size());
  const int64_t c = num_labels;
  ST_ASSERT(static_cast<int64_t>(logits.size()) == n * c, "eval_metrics: logits and labels differ in rows");
  std::vector<int64_t> predicted(n);
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * c;
    predicted[i] = std::max_element(row, row + c) - row;  // first maximum, like torch.argmax
    // Cross-entropy in float64: logsumexp(row) - row[label].
    double mx = row[0];
    for (int64_t j = 1; j < c; ++j) mx = std::max(mx, static_cast<double>(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(row[j] - mx);
    loss += mx + std::log(sum) - row[y[i]];
  }
  const ClassificationMetrics cm = classification_metrics(predicted, y);
  m["eval_loss"] = n > 0 ? loss / n : 0.0;
  m["eval_accuracy"] = cm.accuracy;
  m["eval_f1"] = cm.f1;
  m["eval_mcc"] = cm.mcc;
  // By the task, not by the classes this eval data happens to hold, so that a
  // score_attribute checked against reported_metric_names is always there.
  if (c > 2) m["eval_macro_f1"] = cm.f1_is_macro ? cm.f1 : macro_f1(predicted, y);
  return m;
}

std::vector<std::string> reported_metric_names(int64_t num_labels, bool with_eval) {
  std::vector<std::string> names = {"train_loss"};
  if (!with_eval) return names;
  if (num_labels == 1) {
    names.insert(names.end(), {"eval_loss", "eval_mse", "eval_pearson"});
  } else {
    names.insert(names.end(), {"eval_loss", "eval_accuracy", "eval_f1", "eval_mcc"});
    if (num_labels > 2) names.push_back("eval_macro_f1");
  }
  return names;
}

void check_score_attribute(const std::string& score_attribute, int64_t num_labels, bool with_eval) {
  if (score_attribute.empty()) return;
  const std::vector<std::string> names = reported_metric_names(num_labels, with_eval);
  if (std::find(names.begin(), names.end(), score_attribute) != names.end()) return;
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "\"" : ", \"") + name + "\"";
  const std::string task = num_labels == 1 ? "a regression task (model.num_labels = 1)"
                                           : str_format("a %lld-label classification task", static_cast<long long>(num_labels));
  throw Error("checkpoint.score_attribute = \"" + score_attribute + "\" is never reported by " + task +
              (with_eval ? "" : " without data.eval_file") + ", so checkpoints could not be ranked nor early stopping "
              "decide; use one of " + list);
}

Baseline majority_baseline(const Labels& train, const Labels& eval, int64_t num_labels) {
  ST_ASSERT(num_labels >= 2 && train.kind == LabelKind::kClass, "majority_baseline: needs class labels");
  std::vector<int64_t> counts(static_cast<size_t>(num_labels), 0);
  for (int64_t id : train.class_ids) ++counts[static_cast<size_t>(id)];
  Baseline b;
  b.class_id = std::max_element(counts.begin(), counts.end()) - counts.begin();  // the first of the most frequent
  std::vector<float> logits(eval.class_ids.size() * static_cast<size_t>(num_labels), 0.0f);
  for (size_t i = 0; i < eval.class_ids.size(); ++i) logits[i * static_cast<size_t>(num_labels) + b.class_id] = 1.0f;
  b.metrics = eval_metrics(logits, eval, num_labels);
  b.metrics.erase("eval_loss");
  return b;
}

}  // namespace shardtrain
