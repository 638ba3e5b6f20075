// Sampler properties (coverage, drop_last, seeding, world-size invariance,
// resume, bucketing) and exact eval coverage, all as pure index math.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "shardtrain/core/check.h"
#include "shardtrain/data/sampler.h"

using namespace shardtrain;

namespace {

SamplerOptions make_options(int64_t n, int64_t batch, int world, int rank, bool drop_last = false,
                            uint64_t seed = 42) {
  SamplerOptions o;
  o.num_examples = n;
  o.batch_size = batch;
  o.world_size = world;
  o.rank = rank;
  o.drop_last = drop_last;
  o.seed = seed;
  return o;
}

// Every batch of every rank for one epoch: result[rank][k] = indices.
std::vector<std::vector<std::vector<int64_t>>> epoch_batches(SamplerOptions o, int64_t epoch) {
  std::vector<std::vector<std::vector<int64_t>>> result(o.world_size);
  for (int r = 0; r < o.world_size; ++r) {
    o.rank = r;
    DistributedSampler sampler(o);
    sampler.set_epoch(epoch);
    std::vector<int64_t> batch;
    while (sampler.next(&batch)) {
      CHECK(static_cast<int64_t>(batch.size()) == o.batch_size);
      result[r].push_back(batch);
    }
  }
  return result;
}

std::map<int64_t, int> count_all(const std::vector<std::vector<std::vector<int64_t>>>& batches) {
  std::map<int64_t, int> counts;
  for (const auto& rank : batches)
    for (const auto& batch : rank)
      for (int64_t i : batch) counts[i]++;
  return counts;
}

}  // namespace

TEST_CASE("SplitMix64 and the permutation match the reference sequence") {
  // Reference outputs of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
  SplitMix64 rng(0);
  CHECK(rng.next() == 0xe220a8397b1dcdafull);
  CHECK(rng.next() == 0x6e789e6aa1b965f4ull);
  CHECK(rng.next() == 0x06c45d188009454full);
  // Fisher-Yates from an independent Python implementation of the same rule
  // (i from n-1 down to 1, j = below(i + 1), swap).
  CHECK(seeded_permutation(10, 42) == std::vector<int64_t>{0, 9, 5, 8, 6, 4, 7, 2, 1, 3});
  CHECK(seeded_permutation(10, 43) == std::vector<int64_t>{4, 2, 5, 6, 1, 3, 9, 8, 7, 0});
  for (uint64_t bound : {1ull, 2ull, 3ull, 7ull, 1000ull}) {
    SplitMix64 g(bound);
    for (int i = 0; i < 100; ++i) CHECK(g.below(bound) < bound);
  }
}

TEST_CASE("every example once per epoch across ranks; padding repeats the permutation's start") {
  for (int64_t n : {1, 5, 7, 16, 37, 64, 100}) {
    for (int world : {1, 2, 3, 4}) {
      for (int64_t batch : {1, 3, 4}) {
        CAPTURE(n);
        CAPTURE(world);
        CAPTURE(batch);
        SamplerOptions o = make_options(n, batch, world, 0);
        auto batches = epoch_batches(o, 1);
        const int64_t g = batch * world;
        const int64_t num_batches = (n + g - 1) / g;
        for (const auto& rank : batches) CHECK(static_cast<int64_t>(rank.size()) == num_batches);
        auto counts = count_all(batches);
        CHECK(static_cast<int64_t>(counts.size()) == n);  // every example seen
        // The padding (num_batches * g - n positions) repeats the permutation from its start.
        std::vector<int64_t> perm = seeded_permutation(n, 42 + 1);
        std::map<int64_t, int> expected;
        for (int64_t p = 0; p < num_batches * g; ++p) expected[perm[p % n]]++;
        CHECK(counts == expected);
        if (n % g == 0)
          for (auto [i, c] : counts) CHECK(c == 1);
      }
    }
  }
}

TEST_CASE("drop_last drops the incomplete global batch") {
  for (int64_t n : {3, 7, 16, 37}) {
    for (int world : {1, 2, 4}) {
      const int64_t batch = 3;
      SamplerOptions o = make_options(n, batch, world, 0, /*drop_last=*/true);
      auto batches = epoch_batches(o, 0);
      const int64_t g = batch * world;
      CHECK(static_cast<int64_t>(batches[0].size()) == n / g);
      auto counts = count_all(batches);
      CHECK(static_cast<int64_t>(counts.size()) == (n / g) * g);  // no example twice
      for (auto [i, c] : counts) CHECK(c == 1);
      // The kept examples are the first (n / g) * g of the epoch's permutation.
      std::vector<int64_t> perm = seeded_permutation(n, 42);
      for (int64_t p = 0; p < (n / g) * g; ++p) CHECK(counts.count(perm[p]) == 1);
    }
  }
}

TEST_CASE("epochs differ, same seed same order, shuffle off is sequential") {
  DistributedSampler a(make_options(50, 5, 2, 1));
  DistributedSampler b(make_options(50, 5, 2, 1));
  DistributedSampler other_seed(make_options(50, 5, 2, 1, false, 7));
  a.set_epoch(0);
  std::vector<int64_t> epoch0 = a.epoch_order();
  a.set_epoch(1);
  std::vector<int64_t> epoch1 = a.epoch_order();
  CHECK(epoch0 != epoch1);
  b.set_epoch(1);
  CHECK(b.epoch_order() == epoch1);
  CHECK(b.batch(3) == a.batch(3));
  other_seed.set_epoch(1);
  CHECK(other_seed.epoch_order() != epoch1);
  // Permutation for epoch e uses seed + epoch.
  CHECK(epoch1 == seeded_permutation(50, 43));

  SamplerOptions seq = make_options(10, 2, 2, 1);
  seq.shuffle = false;
  DistributedSampler s(seq);
  CHECK(s.batch(0) == std::vector<int64_t>{1, 3});
  CHECK(s.batch(2) == std::vector<int64_t>{9, 1});  // padded: 10, 11 -> 0, 1; rank 1 takes positions 9, 11
}

TEST_CASE("world-size invariance: W=4 batch B equals W=1 batch 4B, step by step") {
  for (bool drop_last : {false, true}) {
    for (int64_t n : {37, 64, 408}) {
      const int64_t batch = 3;
      const int world = 4;
      auto sharded = epoch_batches(make_options(n, batch, world, 0, drop_last), 2);
      auto single = epoch_batches(make_options(n, batch * world, 1, 0, drop_last), 2);
      REQUIRE(sharded[0].size() == single[0].size());
      for (size_t k = 0; k < single[0].size(); ++k) {
        std::vector<int64_t> concatenated;
        for (int r = 0; r < world; ++r)
          concatenated.insert(concatenated.end(), sharded[r][k].begin(), sharded[r][k].end());
        // Same order rule: rank r's j-th example is position j*W + r of the global batch.
        for (int r = 0; r < world; ++r)
          for (int64_t j = 0; j < batch; ++j) CHECK(concatenated[r * batch + j] == single[0][k][j * world + r]);
        std::vector<int64_t> a = concatenated, b = single[0][k];
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        CHECK(a == b);
      }
    }
  }
}

TEST_CASE("resume from a saved position equals uninterrupted iteration") {
  SamplerOptions o = make_options(53, 4, 3, 2);
  DistributedSampler full(o);
  std::vector<std::vector<int64_t>> reference;
  SamplerState saved;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    full.set_epoch(epoch);
    std::vector<int64_t> batch;
    while (full.next(&batch)) {
      reference.push_back(batch);
      if (epoch == 1 && full.state().batches_consumed == 3) saved = full.state();
    }
  }
  CHECK(saved.epoch == 1);
  CHECK(saved.batches_consumed == 3);

  DistributedSampler resumed(o);
  resumed.load_state(saved);
  std::vector<std::vector<int64_t>> tail;
  std::vector<int64_t> batch;
  while (resumed.next(&batch)) tail.push_back(batch);
  resumed.set_epoch(2);
  while (resumed.next(&batch)) tail.push_back(batch);
  const int64_t per_epoch = full.num_batches();
  const size_t skip = static_cast<size_t>(per_epoch + 3);  // epoch 0 and three batches of epoch 1
  REQUIRE(tail.size() == reference.size() - skip);
  for (size_t i = 0; i < tail.size(); ++i) CHECK(tail[i] == reference[skip + i]);

  SamplerState bad{0, per_epoch + 1};
  CHECK_THROWS_AS(resumed.load_state(bad), Error);
  CHECK_THROWS_AS(DistributedSampler(make_options(10, 0, 1, 0)), Error);
  CHECK_THROWS_AS(DistributedSampler(make_options(10, 2, 2, 2)), Error);
}

TEST_CASE("length bucketing: every example kept once per window, batches homogeneous, invariant across W") {
  const int64_t n = 96;
  std::vector<int64_t> lengths(n);
  for (int64_t i = 0; i < n; ++i) lengths[i] = 5 + (i * 37) % 60;
  SamplerOptions o = make_options(n, 4, 2, 0);
  o.bucket_window_batches = 3;
  o.lengths = lengths;
  DistributedSampler bucketed(o);
  bucketed.set_epoch(1);
  DistributedSampler plain(make_options(n, 4, 2, 0));
  plain.set_epoch(1);
  const int64_t window = 3 * 8;
  for (int64_t w = 0; w < n / window; ++w) {
    std::vector<int64_t> a(bucketed.epoch_order().begin() + w * window, bucketed.epoch_order().begin() + (w + 1) * window);
    std::vector<int64_t> b(plain.epoch_order().begin() + w * window, plain.epoch_order().begin() + (w + 1) * window);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    CHECK(a == b);
  }
  // Within a window the batches are length ranges that do not overlap.
  for (int64_t w = 0; w < n / window; ++w) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int64_t k = w * 3; k < (w + 1) * 3; ++k) {
      auto batch = bucketed.global_batch(k);
      int64_t lo = INT64_MAX, hi = 0;
      for (int64_t i : batch) lo = std::min(lo, lengths[i]), hi = std::max(hi, lengths[i]);
      ranges.emplace_back(lo, hi);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i - 1].second <= ranges[i].first);
  }
  // World-size invariance holds with bucketing too (bucketing acts on global batches).
  SamplerOptions single = o;
  single.world_size = 1;
  single.batch_size = 8;
  DistributedSampler one(single);
  one.set_epoch(1);
  CHECK(one.epoch_order() == bucketed.epoch_order());
  CHECK_THROWS_AS(bucket_by_length({0, 1, 2}, {1, 2, 3}, 2, 1, 0), Error);
}

TEST_CASE("data.group_by_length: HF's window of global batches, less padding, off clears the fields") {
  // Window min(n / (4 G), 50), at least 1 (transformers' mega_batch_mult).
  struct Case {
    int64_t n, batch;
    int world;
    int64_t window;
  };
  for (const Case& c : {Case{3668, 16, 1, 50}, Case{3668, 8, 2, 50}, Case{640, 16, 1, 10}, Case{100, 16, 2, 1},
                        Case{5, 16, 1, 1}}) {
    CAPTURE(c.n);
    CAPTURE(c.batch);
    SamplerOptions o = make_options(c.n, c.batch, c.world, 0);
    DataConfig data;
    data.group_by_length = true;
    apply_group_by_length(data, std::vector<int64_t>(c.n, 7), &o);
    CHECK(o.bucket_window_batches == c.window);
    CHECK(static_cast<int64_t>(o.lengths.size()) == c.n);
    data.group_by_length = false;
    apply_group_by_length(data, {}, &o);
    CHECK(o.bucket_window_batches == 0);
    CHECK(o.lengths.empty());
  }
  DataConfig on;
  on.group_by_length = true;
  SamplerOptions o = make_options(10, 2, 1, 0);
  CHECK_THROWS_WITH_AS(apply_group_by_length(on, {1, 2, 3}, &o), "data.group_by_length: 3 lengths for 10 examples",
                       Error);

  // MRPC-like lengths: the padded tokens of an epoch (sum over batches of B x longest) shrink.
  const int64_t n = 800;
  std::vector<int64_t> lengths(n);
  SplitMix64 rng(3);
  for (int64_t& length : lengths) length = 20 + static_cast<int64_t>(rng.below(80));
  auto padded_tokens = [&](const SamplerOptions& options) {
    DistributedSampler sampler(options);
    int64_t total = 0;
    for (int64_t k = 0; k < sampler.num_batches(); ++k) {
      int64_t longest = 0;
      for (int64_t i : sampler.global_batch(k)) longest = std::max(longest, lengths[i]);
      total += longest * sampler.global_batch_size();
    }
    return total;
  };
  SamplerOptions plain = make_options(n, 8, 2, 0), grouped = plain;
  apply_group_by_length(on, lengths, &grouped);
  const int64_t real = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  const double plain_padding = 1.0 - static_cast<double>(real) / padded_tokens(plain);
  const double grouped_padding = 1.0 - static_cast<double>(real) / padded_tokens(grouped);
  MESSAGE("padding: " << plain_padding << " without, " << grouped_padding << " with group_by_length");
  CHECK(grouped_padding < 0.25 * plain_padding);
}

// ---- evaluation ----------------------------------------------------------------

TEST_CASE("eval plan: small case spelled out") {
  // 5 examples, batch 3, 2 ranks: one global step; rank 1 pads with example 0.
  EvalPlan plan = make_eval_plan(5, 3, 2);
  CHECK(plan.num_batches == 1);
  CHECK(plan.last_batch_size == 3);
  CHECK(eval_batch(plan, 0, 0) == std::vector<int64_t>{0, 1, 2});
  CHECK(eval_batch(plan, 1, 0) == std::vector<int64_t>{3, 4, 0});
  // 7 examples, batch 2, 3 ranks: steps of 6; the last step has 1 real example,
  // padded to one per rank.
  EvalPlan p2 = make_eval_plan(7, 2, 3);
  CHECK(p2.num_batches == 2);
  CHECK(p2.last_batch_size == 1);
  CHECK(eval_batch(p2, 2, 0) == std::vector<int64_t>{4, 5});
  CHECK(eval_batch(p2, 0, 1) == std::vector<int64_t>{6});
  CHECK(eval_batch(p2, 1, 1) == std::vector<int64_t>{0});
  CHECK(eval_batch(p2, 2, 1) == std::vector<int64_t>{1});
  CHECK(p2.per_rank_count() == 3);
}

TEST_CASE("exact eval coverage for awkward sizes at world sizes 1..4") {
  for (int64_t n : {1, 2, 3, 5, 7, 31, 408}) {
    for (int world = 1; world <= 4; ++world) {
      for (int64_t batch : {1, 3, 32}) {
        CAPTURE(n);
        CAPTURE(world);
        CAPTURE(batch);
        EvalPlan plan = make_eval_plan(n, batch, world);
        // Every rank runs the same number of batches with the same sizes.
        std::vector<float> gathered;         // rank-order concatenation of results
        std::vector<int64_t> tagged_index;  // the same, as example indices
        std::vector<int64_t> two_per_example;
        for (int r = 0; r < world; ++r) {
          auto batches = eval_batches(plan, r);
          CHECK(static_cast<int64_t>(batches.size()) == plan.num_batches);
          int64_t count = 0;
          for (size_t k = 0; k < batches.size(); ++k) {
            CHECK(batches[k].size() == eval_batches(plan, 0)[k].size());
            for (int64_t i : batches[k]) {
              REQUIRE(i >= 0);
              REQUIRE(i < n);
              gathered.push_back(static_cast<float>(i) * 0.5f);  // a "result" for example i
              tagged_index.push_back(i);
              two_per_example.push_back(i);
              two_per_example.push_back(-i);
              ++count;
            }
          }
          CHECK(count == plan.per_rank_count());
        }
        // Padding is less than one example per rank.
        CHECK(plan.per_rank_count() * world - n < world);
        std::vector<float> result = drop_eval_padding(plan, gathered);
        REQUIRE(static_cast<int64_t>(result.size()) == n);
        for (int64_t i = 0; i < n; ++i) CHECK(result[i] == static_cast<float>(i) * 0.5f);
        std::vector<int64_t> pairs = drop_eval_padding(plan, two_per_example, 2);
        for (int64_t i = 0; i < n; ++i) {
          CHECK(pairs[2 * i] == i);
          CHECK(pairs[2 * i + 1] == -i);
        }
        std::vector<float> by_index = dedup_by_example_index(tagged_index, gathered, n);
        CHECK(by_index == result);
      }
    }
  }
  EvalPlan empty = make_eval_plan(0, 3, 2);
  CHECK(empty.num_batches == 0);
  CHECK(drop_eval_padding(empty, std::vector<float>{}).empty());
  CHECK_THROWS_AS(drop_eval_padding(make_eval_plan(5, 3, 2), std::vector<float>(5)), Error);
  CHECK_THROWS_AS(dedup_by_example_index<float>({0, 0}, {1.f, 2.f}, 2), Error);  // example 1 missing
}
