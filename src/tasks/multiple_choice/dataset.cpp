// Multiple choice's datasets, metrics and baseline (tasks/multiple_choice.h).
#include "shardtrain/tasks/multiple_choice.h"

#include "shardtrain/core/log.h"
#include "shardtrain/tasks/sequence_classification.h"

namespace shardtrain {

TokenizedDataset build_choice_dataset(const MultipleChoiceTable& table, const Tokenizer& tokenizer, int max_length,
                                      MPI_Comm comm) {
  const RowEncodeFn encode = [&](int64_t row, std::vector<EncodedRow>& out) {
    const std::string& first = table.first[static_cast<size_t>(row)];
    for (const std::string& second : table.second[static_cast<size_t>(row)]) {
      const Encoding e = tokenizer.encode(first, std::string_view(second), max_length);
      EncodedRow encoded;
      encoded.input_ids = e.input_ids;
      encoded.token_type_ids = e.token_type_ids;
      out.push_back(std::move(encoded));
    }
  };
  TokenizedDataset data = build_examples(table.size(), encode, table.num_choices, table.path, table.line_numbers, comm);
  data.labels = table.labels;
  return data;
}


std::map<std::string, double> choice_metrics(const std::vector<float>& logits, const TokenizedDataset& data) {
  const int64_t k = data.sequences_per_example;
  Labels labels = data.labels;
  return eval_metrics(logits, labels, k, /*with_class_metrics=*/false);
}

Baseline chance_baseline(int64_t num_choices) {
  Baseline b;
  b.name = str_format("chance (1 in %lld)", static_cast<long long>(num_choices));
  b.metrics["eval_accuracy"] = 1.0 / static_cast<double>(num_choices);
  return b;
}

}  // namespace shardtrain
