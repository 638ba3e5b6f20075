// Multi-rank data layer: parallel tokenization gives the same dataset on every
// rank and equals single-process tokenization; gather_for_metrics over real MPI
// returns every eval example exactly once, in order.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include "shardtrain/core/check.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/data/reader.h"
#include "shardtrain/data/sampler.h"
#include "support/whitespace_tokenizer.h"
#include "support/mpi_ranks.h"

using namespace shardtrain;
using shardtrain_test::WhitespaceTokenizer;

namespace {

using shardtrain_test::world_rank;
using shardtrain_test::world_size;

// True on every rank iff `values` is identical on every rank (compared with rank 0's copy).
template <class T>
bool same_on_all_ranks(const std::vector<T>& values, MPI_Datatype type) {
  int64_t size = static_cast<int64_t>(values.size());
  MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  std::vector<T> root = values;
  root.resize(size);
  MPI_Bcast(root.data(), static_cast<int>(size), type, 0, MPI_COMM_WORLD);
  int same = root == values ? 1 : 0, all_same = 0;
  MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all_same == 1;
}

ReaderOptions mrpc_options() {
  ReaderOptions options;
  options.text_a = "#1 String";
  options.text_b = "#2 String";
  options.label = "Quality";
  return options;
}

}  // namespace

TEST_CASE("parallel tokenization of MRPC equals single-process tokenization on every rank") {
  WhitespaceTokenizer tokenizer;
  for (const char* file : {"dev.tsv", "train.tsv"}) {
    CAPTURE(file);
    RawTable table = read_table(std::string(SHARDTRAIN_SOURCE_DIR "/data/glue/MRPC/") + file, mrpc_options());
    EncodeFn encode = make_encoder(tokenizer, 64);
    TokenizedDataset alone = build_dataset(table, encode, MPI_COMM_SELF);
    for (int threads : {1, 2}) {
      BuildOptions options;
      options.num_threads = threads;
      TokenizedDataset shared = build_dataset(table, encode, MPI_COMM_WORLD, options);
      CHECK(shared.size() == table.size());
      CHECK(shared.input_ids == alone.input_ids);
      CHECK(shared.token_type_ids == alone.token_type_ids);
      CHECK(shared.offsets == alone.offsets);
      CHECK(shared.labels.class_ids == table.labels.class_ids);
      CHECK(same_on_all_ranks(shared.input_ids, MPI_INT32_T));
      CHECK(same_on_all_ranks(shared.token_type_ids, MPI_UINT8_T));
      CHECK(same_on_all_ranks(shared.offsets, MPI_INT64_T));
    }
    // Each row is the row's own encoding (rows stay in input order).
    for (int64_t i : {int64_t{0}, table.size() / 2, table.size() - 1}) {
      auto e = tokenizer.encode(table.text_a[i], std::string_view(table.text_b[i]), 64);
      CHECK(std::vector<int32_t>(alone.ids(i), alone.ids(i) + alone.length(i)) == e.input_ids);
    }
  }
}

TEST_CASE("more ranks than rows, and a failing row, do not hang") {
  WhitespaceTokenizer tokenizer;
  RawTable tiny;
  tiny.path = "tiny.tsv";
  tiny.text_a = {"only one row"};
  tiny.line_numbers = {2};
  TokenizedDataset d = build_dataset(tiny, make_encoder(tokenizer, 16), MPI_COMM_WORLD);
  CHECK(d.size() == 1);
  CHECK(d.length(0) == 5);

  // The bad row sits in the last rank's slice; every rank must throw, none may wait.
  RawTable table;
  table.path = "bad.tsv";
  for (int i = 0; i < 9; ++i) {
    table.text_a.push_back(i == 8 ? "bad \x01" : "row " + std::to_string(i));
    table.line_numbers.push_back(i + 2);
  }
  std::string message;
  try {
    build_dataset(table, make_encoder(tokenizer, 16), MPI_COMM_WORLD);
  } catch (const Error& e) {
    message = e.what();
  }
  if (world_rank() == world_size() - 1)
    CHECK(message == "bad.tsv:10: tokenization failed: control character in text");
  else
    CHECK(message == "bad.tsv: tokenization failed on another rank (its message names the row)");
}

TEST_CASE("gather_for_metrics over MPI: each example exactly once, in order") {
  const int rank = world_rank(), world = world_size();
  for (int64_t n : {1, 2, 3, 5, 7, 408}) {
    CAPTURE(n);
    EvalPlan plan = make_eval_plan(n, 3, world);
    std::vector<float> predictions;     // one value per example
    std::vector<int64_t> labels_pairs;  // two values per example
    std::vector<int64_t> row_ids;
    for (const auto& batch : eval_batches(plan, rank))
      for (int64_t i : batch) {
        predictions.push_back(0.25f * static_cast<float>(i));
        labels_pairs.push_back(i);
        labels_pairs.push_back(1000 + i);
        row_ids.push_back(i);
      }
    std::vector<float> all = gather_for_metrics(predictions, plan, MPI_COMM_WORLD);
    REQUIRE(static_cast<int64_t>(all.size()) == n);
    for (int64_t i = 0; i < n; ++i) CHECK(all[i] == 0.25f * static_cast<float>(i));
    std::vector<int64_t> pairs = gather_for_metrics(labels_pairs, plan, MPI_COMM_WORLD, 2);
    for (int64_t i = 0; i < n; ++i) {
      CHECK(pairs[2 * i] == i);
      CHECK(pairs[2 * i + 1] == 1000 + i);
    }
    // Tensor form: logits [per_rank_count, 2].
    torch::Tensor ids = torch::tensor(row_ids, torch::kInt64).to(torch::kFloat32);
    torch::Tensor logits = torch::stack({ids, -ids}, 1);
    torch::Tensor gathered = gather_for_metrics(logits, plan, MPI_COMM_WORLD);
    torch::Tensor expected_ids = torch::arange(n, torch::kFloat32);
    CHECK(torch::equal(gathered, torch::stack({expected_ids, -expected_ids}, 1)));
  }
}

TEST_CASE("padding stats and a sharded epoch over MPI") {
  // Row i has i % 7 + 3 tokens; each rank collates its own batches of one epoch.
  const int rank = world_rank(), world = world_size();
  TokenizedDataset d;
  d.offsets.push_back(0);
  for (int64_t i = 0; i < 100; ++i) {
    for (int64_t t = 0; t < i % 7 + 3; ++t) {
      d.input_ids.push_back(static_cast<int32_t>(1000 + i));
      d.token_type_ids.push_back(0);
    }
    d.offsets.push_back(static_cast<int64_t>(d.input_ids.size()));
  }
  SamplerOptions o;
  o.num_examples = d.size();
  o.batch_size = 5;
  o.world_size = world;
  o.rank = rank;
  o.drop_last = true;
  DistributedSampler sampler(o);
  sampler.set_epoch(4);
  PaddingStats local;
  std::vector<int64_t> indices, seen(d.size(), 0);
  while (sampler.next(&indices)) {
    local.add(collate(d, indices, 0));
    for (int64_t i : indices) seen[i]++;
  }
  PaddingStats job = local.sum_over_ranks(MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, seen.data(), static_cast<int>(seen.size()), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  // Over all ranks each kept example is collated once, so the summed real
  // tokens are exactly the kept examples' lengths.
  int64_t expected_real = 0, kept = 0;
  for (int64_t i = 0; i < d.size(); ++i) {
    CHECK(seen[i] <= 1);
    if (seen[i]) expected_real += d.length(i), ++kept;
  }
  CHECK(kept == (d.size() / (5 * world)) * 5 * world);
  CHECK(job.real_tokens == expected_real);
  CHECK(job.total_tokens >= job.real_tokens);
  int64_t local_total = local.total_tokens, max_total = 0;
  MPI_Allreduce(&local_total, &max_total, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  CHECK(job.total_tokens <= max_total * world);
}
