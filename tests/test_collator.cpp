// Collation (padding values, masks, shapes, labels), single-process dataset
// building (flat layout, threads, error messages) and length bucketing.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <map>

#include "shardtrain/core/check.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/data/sampler.h"
#include "support/whitespace_tokenizer.h"

using namespace shardtrain;
using shardtrain_test::WhitespaceTokenizer;

namespace {

// Rows of lengths 3, 5 and 2 with hand-written ids, types and labels.
TokenizedDataset small_dataset() {
  TokenizedDataset d;
  d.input_ids = {101, 7, 102, 101, 8, 102, 9, 102, 101, 102};
  d.token_type_ids = {0, 0, 0, 0, 0, 0, 1, 1, 0, 0};
  d.offsets = {0, 3, 8, 10};
  d.labels.kind = LabelKind::kClass;
  d.labels.class_ids = {1, 0, 1};
  return d;
}

RawTable table_of(std::vector<std::string> a, std::vector<std::string> b) {
  RawTable t;
  t.path = "mem.tsv";
  t.text_a = std::move(a);
  t.has_text_b = !b.empty();
  t.text_b = std::move(b);
  for (int64_t i = 0; i < t.size(); ++i) t.line_numbers.push_back(i + 2);
  t.labels.kind = LabelKind::kClass;
  for (int64_t i = 0; i < t.size(); ++i) t.labels.class_ids.push_back(i % 2);
  return t;
}

}  // namespace

TEST_CASE("collate pads to the longest row with pad id, zero types and zero mask") {
  TokenizedDataset d = small_dataset();
  Batch batch = collate(d, {2, 1, 0}, /*pad_id=*/99);
  REQUIRE(batch.input_ids.sizes().vec() == std::vector<int64_t>{3, 5});
  CHECK((batch.input_ids.scalar_type() == torch::kInt64));
  CHECK((batch.token_type_ids.scalar_type() == torch::kInt64));
  CHECK((batch.attention_mask.scalar_type() == torch::kInt64));
  auto expect = [](const torch::Tensor& t, std::vector<int64_t> values) {
    CHECK(torch::equal(t, torch::tensor(values, torch::kInt64).view(t.sizes())));
  };
  expect(batch.input_ids, {101, 102, 99, 99, 99, 101, 8, 102, 9, 102, 101, 7, 102, 99, 99});
  expect(batch.token_type_ids, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0});
  expect(batch.attention_mask, {1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0});
  expect(batch.labels, {1, 0, 1});
  CHECK(batch.num_real_tokens == 10);
  CHECK(batch.num_total_tokens == 15);
  PaddingStats stats;
  stats.add(batch);
  CHECK(stats.padding_fraction() == doctest::Approx(5.0 / 15.0));

  Batch one = collate(d, {0}, 0);  // no padding when the batch is one row
  CHECK(one.input_ids.sizes().vec() == std::vector<int64_t>{1, 3});
  CHECK(one.attention_mask.sum().item<int64_t>() == 3);

  d.labels.kind = LabelKind::kRegression;
  d.labels.values = {0.5f, 4.0f, -1.0f};
  Batch reg = collate(d, {1, 2}, 0);
  CHECK((reg.labels.scalar_type() == torch::kFloat32));
  CHECK(torch::equal(reg.labels, torch::tensor({4.0f, -1.0f})));
  d.labels.kind = LabelKind::kNone;
  CHECK_FALSE(collate(d, {1}, 0).labels.defined());

  CHECK_THROWS_AS(collate(d, {}, 0), Error);
  CHECK_THROWS_AS(collate(d, {3}, 0), Error);
}

TEST_CASE("build_dataset: flat layout equals per-row encodings; threads change nothing") {
  WhitespaceTokenizer tokenizer;
  RawTable table = table_of({"a b c", "one", "x y z w v u", "", "hello world"},
                            {"d", "two three", "q", "only b", ""});
  EncodeFn encode = make_encoder(tokenizer, 8);
  TokenizedDataset d = build_dataset(table, encode, MPI_COMM_NULL);
  REQUIRE(d.size() == 5);
  for (int64_t i = 0; i < d.size(); ++i) {
    auto e = tokenizer.encode(table.text_a[i], std::string_view(table.text_b[i]), 8);
    REQUIRE(d.length(i) == static_cast<int64_t>(e.input_ids.size()));
    CHECK(std::vector<int32_t>(d.ids(i), d.ids(i) + d.length(i)) == e.input_ids);
    CHECK(std::vector<uint8_t>(d.types(i), d.types(i) + d.length(i)) == e.token_type_ids);
  }
  CHECK(d.length(2) == 8);  // truncated to max_length
  CHECK(d.labels.class_ids == table.labels.class_ids);
  CHECK(d.lengths() == std::vector<int64_t>{7, 6, 8, 5, 5});

  for (int threads : {2, 3, 8}) {
    BuildOptions options;
    options.num_threads = threads;
    TokenizedDataset t = build_dataset(table, encode, MPI_COMM_SELF, options);
    CHECK(t.input_ids == d.input_ids);
    CHECK(t.token_type_ids == d.token_type_ids);
    CHECK(t.offsets == d.offsets);
  }

  RawTable single = table_of({"just a", "b"}, {});
  TokenizedDataset s = build_dataset(single, make_encoder(tokenizer, 16), MPI_COMM_NULL);
  CHECK(s.input_ids == std::vector<int32_t>{101, s.input_ids[1], s.input_ids[2], 102, 101, s.input_ids[5], 102});
  for (uint8_t t : s.token_type_ids) CHECK(t == 0);

  RawTable empty = table_of({}, {});
  CHECK(build_dataset(empty, encode, MPI_COMM_NULL).size() == 0);
}

TEST_CASE("build_dataset: an encoder failure names file and line") {
  WhitespaceTokenizer tokenizer;
  RawTable table = table_of({"fine", "also fine", "bad \x01 row", "fine"}, {});
  for (int threads : {1, 2}) {
    BuildOptions options;
    options.num_threads = threads;
    try {
      build_dataset(table, make_encoder(tokenizer, 16), MPI_COMM_NULL, options);
      FAIL("expected an Error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()) == "mem.tsv:4: tokenization failed: control character in text");
    }
  }
}

TEST_CASE("length bucketing cuts padding and keeps every example once") {
  // Lengths spread like sentence pairs: 10..120 tokens.
  const int64_t n = 512, batch_size = 8;
  TokenizedDataset d;
  d.offsets.push_back(0);
  SplitMix64 rng(7);
  for (int64_t i = 0; i < n; ++i) {
    int64_t length = 10 + static_cast<int64_t>(rng.below(111));
    for (int64_t t = 0; t < length; ++t) {
      d.input_ids.push_back(1000 + static_cast<int32_t>(t));
      d.token_type_ids.push_back(0);
    }
    d.offsets.push_back(static_cast<int64_t>(d.input_ids.size()));
  }
  d.labels.kind = LabelKind::kClass;
  d.labels.class_ids.assign(n, 0);

  auto run_epoch = [&](int64_t window, std::map<int64_t, int>* seen) {
    PaddingStats stats;
    for (int rank = 0; rank < 2; ++rank) {
      SamplerOptions o;
      o.num_examples = n;
      o.batch_size = batch_size;
      o.world_size = 2;
      o.rank = rank;
      o.bucket_window_batches = window;
      o.lengths = d.lengths();
      DistributedSampler sampler(o);
      sampler.set_epoch(3);
      std::vector<int64_t> indices;
      while (sampler.next(&indices)) {
        Batch batch = collate(d, indices, 0);
        stats.add(batch);
        for (int64_t i : indices) (*seen)[i]++;
      }
    }
    return stats;
  };
  std::map<int64_t, int> seen_plain, seen_bucketed;
  PaddingStats plain = run_epoch(0, &seen_plain);
  PaddingStats bucketed = run_epoch(8, &seen_bucketed);
  MESSAGE("padding fraction: plain " << plain.padding_fraction() << ", bucketed (window 8) "
                                     << bucketed.padding_fraction());
  CHECK(plain.real_tokens == bucketed.real_tokens);  // same examples, same tokens
  // Random lengths 10..120 in batches of 8: the longest of 8 is ~108 on average
  // against a mean of 65, so ~40% padding; sorting 64 examples per window
  // leaves only the spread inside each eighth of the window.
  CHECK(plain.padding_fraction() > 0.3);
  CHECK(bucketed.padding_fraction() < 0.1);
  CHECK(static_cast<int64_t>(seen_bucketed.size()) == n);
  for (auto [i, c] : seen_bucketed) CHECK(c == 1);
  CHECK(seen_plain == seen_bucketed);
}

TEST_CASE("collate_packed: the rows' real tokens back to back, positions per row, cu_seqlens") {
  TokenizedDataset d = small_dataset();
  PackedBatch packed = collate_packed(d, {2, 1, 0});
  auto expect = [](const torch::Tensor& t, std::vector<int64_t> values) {
    CHECK((t.scalar_type() == torch::kInt64));
    CHECK(torch::equal(t, torch::tensor(values, torch::kInt64)));
  };
  expect(packed.input_ids, {101, 102, 101, 8, 102, 9, 102, 101, 7, 102});
  expect(packed.token_type_ids, {0, 0, 0, 0, 0, 1, 1, 0, 0, 0});
  expect(packed.position_ids, {0, 1, 0, 1, 2, 3, 4, 0, 1, 2});
  expect(packed.cu_seqlens, {0, 2, 7, 10});
  expect(packed.labels, {1, 0, 1});
  CHECK(packed.max_seqlen == 5);
  CHECK(packed.size() == 3);
  CHECK(packed.num_real_tokens == 10);
  CHECK(packed.num_total_tokens == 15);
  PaddingStats stats;
  stats.add(packed);
  CHECK(stats.padding_fraction() == doctest::Approx(5.0 / 15.0));
  CHECK_THROWS_WITH_AS(collate_packed(d, {}), "collate_packed: empty batch", Error);
  CHECK_THROWS_WITH_AS(collate_packed(d, {0, 3}), "collate_packed: example 3 outside a dataset of 3", Error);
}

TEST_CASE("pack_batch of a padded batch equals collate_packed; holes in the mask are refused") {
  TokenizedDataset d = small_dataset();
  const std::vector<int64_t> rows = {1, 0, 2, 0};
  const PackedBatch want = collate_packed(d, rows);
  const PackedBatch got = pack_batch(collate(d, rows, /*pad_id=*/99));
  const std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs = {
      {got.input_ids, want.input_ids}, {got.token_type_ids, want.token_type_ids},
      {got.position_ids, want.position_ids}, {got.cu_seqlens, want.cu_seqlens}, {got.labels, want.labels}};
  for (const auto& [a, b] : pairs) CHECK(torch::equal(a, b));
  CHECK(got.max_seqlen == want.max_seqlen);
  CHECK(got.num_real_tokens == want.num_real_tokens);
  CHECK(got.num_total_tokens == want.num_total_tokens);

  Batch holes = collate(d, {1, 0}, 99);
  holes.attention_mask[1][4] = 1;  // row 1: 3 real tokens, a padding one, then a "real" one
  CHECK_THROWS_WITH_AS(pack_batch(holes), doctest::Contains("row 1 has a real token after padding (position 4)"),
                       Error);
  holes.attention_mask[1].zero_();
  CHECK_THROWS_WITH_AS(pack_batch(holes), doctest::Contains("row 1 is all padding"), Error);

  Batch narrow = collate(d, {1, 0}, 99);
  narrow.attention_mask = narrow.attention_mask.narrow(1, 0, 2);  // a mask narrower than the ids
  CHECK_THROWS_WITH_AS(pack_batch(narrow), doctest::Contains("must have input_ids' shape"), Error);
  Batch unmasked = collate(d, {1, 0}, 99);
  unmasked.attention_mask = torch::Tensor();  // no mask: every token is real
  CHECK(pack_batch(unmasked).num_real_tokens == unmasked.input_ids.numel());
}
