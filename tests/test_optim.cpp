// optim layer: AdamW against PyTorch's own trajectory (tests/fixtures/optim_golden.json,
// made by make_optim_golden.py), the HF linear schedule, global-norm clipping,
// dynamic loss scaling (GradScaler and DeepSpeed rules) and the flat layout.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/optim/adamw.h"
#include "shardtrain/optim/clip.h"
#include "shardtrain/optim/loss_scaler.h"
#include "shardtrain/optim/param_layout.h"
#include "shardtrain/optim/schedule.h"

using namespace shardtrain;

namespace shardtrain {
// For doctest's failure messages (glog's stl_logging makes vectors of it printable).
std::ostream& operator<<(std::ostream& os, const ElementRange& r) { return os << '[' << r.begin << ", " << r.end << ')'; }
}  // namespace shardtrain

namespace {

nlohmann::json load_golden() {
  const std::string path = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/fixtures/optim_golden.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing " << path << " (run tests/fixtures/make_optim_golden.py)");
  return nlohmann::json::parse(in);
}

// JSON floats are float32 values widened to float64: the float cast is exact.
at::Tensor to_tensor(const nlohmann::json& values) {
  std::vector<float> v;
  for (const auto& x : values) v.push_back(static_cast<float>(x.get<double>()));
  return torch::tensor(v, torch::kFloat);
}

// Largest |a - b| / max(|b|, floor) over the elements.
double max_rel_error(const at::Tensor& a, const at::Tensor& b, double floor) {
  at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble);
  return ((ad - bd).abs() / bd.abs().clamp_min(floor)).max().item<double>();
}

ParamLayout golden_layout(const nlohmann::json& g) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (size_t i = 0; i < g["names"].size(); ++i)
    named.emplace_back(g["names"][i].get<std::string>(), torch::zeros(g["shapes"][i].get<std::vector<int64_t>>()));
  return ParamLayout(named);
}

void run_golden(AdamW::Kernel kernel) {
  const nlohmann::json g = load_golden();
  const ParamLayout layout = golden_layout(g);
  AdamWOptions options;
  options.lr = g["base_lr"].get<double>();
  options.beta1 = g["beta1"].get<double>();
  options.beta2 = g["beta2"].get<double>();
  options.eps = g["eps"].get<double>();
  options.weight_decay = g["weight_decay"].get<double>();
  AdamW adamw(layout.numel(), options);
  adamw.set_kernel(kernel);
  const LinearWarmupDecay schedule(options.lr, g["warmup_steps"].get<int64_t>(),
                                   g["num_training_steps"].get<int64_t>());
  const double max_grad_norm = g["max_grad_norm"].get<double>();

  at::Tensor params = to_tensor(g["initial_params"]);
  REQUIRE(params.numel() == layout.numel());
  const auto& steps = g["steps"];
  REQUIRE(steps.size() == 10);
  int num_clipped = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    CAPTURE(k);
    // HF: optimizer step k runs with the lr LambdaLR had after k scheduler steps.
    CHECK(schedule.lr(static_cast<int64_t>(k)) == steps[k]["lr"].get<double>());
    at::Tensor grads = to_tensor(steps[k]["grads"]);
    const double total_norm = clip_grad_norm(grads, max_grad_norm);
    // torch sums per-tensor float32 norms; we accumulate in float64.
    CHECK(std::abs(total_norm - steps[k]["total_norm"].get<double>()) <=
          1e-6 * steps[k]["total_norm"].get<double>());
    num_clipped += total_norm > max_grad_norm;
    adamw.step(params, grads, layout.decay_ranges(), schedule.lr(static_cast<int64_t>(k)));
    CHECK(adamw.step_count() == static_cast<int64_t>(k + 1));
    // fp32: one-ulp differences (FMA in torch's AVX2 add_, float32 vs float64
    // norm) stay near 1e-7 relative; 1e-6 leaves room for a few steps of growth.
    // Floors: parameters are randn (|p| ~ 1, floor 1e-3); exp_avg_sq relative to
    // 1e-3 of its max |value|; exp_avg normwise (floor = its max |value|):
    // m = 0.9 m + 0.1 g cancels when g changes sign, so an element's own
    // magnitude is no yardstick (elementwise relative errors there reach 4e-5
    // from the float32-vs-float64 clip norm alone).
    at::Tensor ref_p = to_tensor(steps[k]["params"]);
    at::Tensor ref_m = to_tensor(steps[k]["exp_avg"]);
    at::Tensor ref_v = to_tensor(steps[k]["exp_avg_sq"]);
    CHECK(max_rel_error(params, ref_p, 1e-3) <= 1e-6);
    CHECK(max_rel_error(adamw.exp_avg(), ref_m, ref_m.abs().max().item<double>()) <= 1e-6);
    CHECK(max_rel_error(adamw.exp_avg_sq(), ref_v, 1e-3 * ref_v.abs().max().item<double>()) <= 1e-6);
  }
  // The fixture exercises both sides of the clipping threshold.
  CHECK(num_clipped >= 3);
  CHECK(num_clipped <= 7);
}

at::Tensor randn(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randn({n}, gen, at::TensorOptions().dtype(at::kFloat));
}

}  // namespace

TEST_CASE("AdamW fused CPU kernel reproduces torch.optim.AdamW + linear schedule + clip_grad_norm_") {
  run_golden(AdamW::Kernel::kFusedCpu);
}

TEST_CASE("AdamW ATen-op kernel reproduces torch.optim.AdamW + linear schedule + clip_grad_norm_") {
  run_golden(AdamW::Kernel::kAtenOps);
}

TEST_CASE("golden layout: HF no_decay groups") {
  const nlohmann::json g = load_golden();
  const ParamLayout layout = golden_layout(g);
  CHECK(layout.slot("bert.embeddings.word_embeddings.weight").decay);
  CHECK_FALSE(layout.slot("bert.embeddings.LayerNorm.weight").decay);
  CHECK_FALSE(layout.slot("bert.embeddings.LayerNorm.bias").decay);
  CHECK(layout.slot("bert.encoder.layer.0.attention.self.query.weight").decay);
  CHECK_FALSE(layout.slot("classifier.bias").decay);
  // word_embeddings [0,28) | LN.w 28..32 | LN.b 32..36 | query.w [36,52) | query.b | classifier.w [56,64) | bias
  CHECK(layout.decay_ranges() == std::vector<ElementRange>{{0, 28}, {36, 52}, {56, 64}});
}

TEST_CASE("fused and ATen kernels agree on a large buffer; chunking does not change bits") {
  const int64_t n = 200003;
  const std::vector<ElementRange> decay = {{0, 70001}, {70100, 150000}, {150001, 200003}};
  AdamWOptions options;
  options.weight_decay = 0.05;
  AdamW fused(n, options), aten(n, options), halves_a(100000, options), halves_b(n - 100000, options);
  fused.set_kernel(AdamW::Kernel::kFusedCpu);
  aten.set_kernel(AdamW::Kernel::kAtenOps);
  at::Tensor p_fused = randn(n, 1), p_aten = p_fused.clone(), p_halves = p_fused.clone();
  ParamLayout fake({{"w", torch::zeros({n})}});  // only for decay_ranges_in's clipping rule
  for (int step = 0; step < 5; ++step) {
    at::Tensor grads = randn(n, 100 + step) * 1e-3;
    const double lr = 1e-3 * (step + 1);
    fused.step(p_fused, grads, decay, lr);
    aten.step(p_aten, grads, decay, lr);
    // The same update applied to two halves separately, ranges rebased.
    std::vector<ElementRange> first, second;
    for (const ElementRange& r : decay) {
      if (r.begin < 100000) first.push_back({r.begin, std::min<int64_t>(r.end, 100000)});
      if (r.end > 100000) second.push_back({std::max<int64_t>(r.begin, 100000) - 100000, r.end - 100000});
    }
    halves_a.step(p_halves.narrow(0, 0, 100000), grads.narrow(0, 0, 100000).contiguous(), first, lr);
    halves_b.step(p_halves.narrow(0, 100000, n - 100000), grads.narrow(0, 100000, n - 100000).contiguous(), second,
                  lr);
  }
  CHECK(torch::equal(p_fused, p_halves));
  CHECK(torch::equal(fused.exp_avg().narrow(0, 0, 100000), halves_a.exp_avg()));
  // See adamw.h: the kernels differ only by torch's FMA rounding in add_.
  // Floor 1e-2: |p| ~ 1 (randn); near-zero elements carry absolute rounding of the updates.
  CHECK(max_rel_error(p_aten, p_fused, 1e-2) <= 1e-6);
  CHECK(max_rel_error(aten.exp_avg_sq(), fused.exp_avg_sq(), 1e-3 * fused.exp_avg_sq().abs().max().item<double>()) <=
        1e-6);
  // Weight decay really happened only inside the ranges: element 70050 (no decay)
  // vs a no-decay rerun is unaffected by weight_decay.
  AdamWOptions no_wd = options;
  no_wd.weight_decay = 0.0;
  AdamW plain(n, no_wd);
  at::Tensor p_plain = randn(n, 1);
  for (int step = 0; step < 5; ++step) plain.step(p_plain, randn(n, 100 + step) * 1e-3, decay, 1e-3 * (step + 1));
  CHECK(torch::equal(p_plain.narrow(0, 70001, 99), p_fused.narrow(0, 70001, 99)));
  CHECK_FALSE(torch::equal(p_plain.narrow(0, 0, 70001), p_fused.narrow(0, 0, 70001)));
}

TEST_CASE("AdamW grad_scale = clip coefficient equals scale_grads then step, bit for bit, grads untouched") {
  const int64_t n = 100003;
  const std::vector<ElementRange> decay = {{0, 40000}, {50000, 100003}};
  for (AdamW::Kernel kernel : {AdamW::Kernel::kFusedCpu, AdamW::Kernel::kAtenOps}) {
    AdamWOptions options;
    AdamW scaled_first(n, options), fused_scale(n, options);
    scaled_first.set_kernel(kernel);
    fused_scale.set_kernel(kernel);
    at::Tensor p_first = randn(n, 3), p_fused = p_first.clone();
    for (int step = 0; step < 4; ++step) {
      const at::Tensor grads = randn(n, 60 + step);
      const double norm = std::sqrt(local_sq_norm(grads));
      const double coefficient = clip_coefficient(norm, 0.5 + step);  // clips: norm ~ 316
      REQUIRE(coefficient < 1.0);
      at::Tensor clipped = grads.clone();
      scale_grads(clipped, coefficient);
      scaled_first.step(p_first, clipped, decay, 1e-3);
      const at::Tensor before = grads.clone();
      fused_scale.step(p_fused, grads, decay, 1e-3, coefficient);
      CHECK(torch::equal(grads, before));
    }
    CHECK(torch::equal(p_first, p_fused));
    CHECK(torch::equal(scaled_first.exp_avg(), fused_scale.exp_avg()));
    CHECK(torch::equal(scaled_first.exp_avg_sq(), fused_scale.exp_avg_sq()));
  }
}

TEST_CASE("AdamW state round trip through load_state continues bit-exactly") {
  const int64_t n = 5000;
  AdamWOptions options;
  AdamW reference(n, options);
  at::Tensor p_ref = randn(n, 7);
  const std::vector<ElementRange> decay = {{0, 4000}};
  for (int step = 0; step < 3; ++step) reference.step(p_ref, randn(n, 50 + step), decay, 1e-3);
  AdamW resumed(n, options);
  resumed.load_state(reference.exp_avg().clone(), reference.exp_avg_sq().clone(), reference.step_count());
  at::Tensor p_resumed = p_ref.clone();
  for (int step = 3; step < 5; ++step) {
    reference.step(p_ref, randn(n, 50 + step), decay, 1e-3);
    resumed.step(p_resumed, randn(n, 50 + step), decay, 1e-3);
  }
  CHECK(resumed.step_count() == 5);
  CHECK(torch::equal(p_ref, p_resumed));
  CHECK(torch::equal(reference.exp_avg_sq(), resumed.exp_avg_sq()));
  CHECK_THROWS_AS(resumed.load_state(torch::zeros({n - 1}), torch::zeros({n}), 1), Error);
  CHECK_THROWS_AS(AdamW(10, AdamWOptions{1e-3, 1.0}), Error);
}

TEST_CASE("AdamW step in spans (optimizer offload) is bit-identical to the whole step, for both kernels") {
  const int64_t n = 30011;
  // Spans in a scrambled order, not aligned with the decay ranges.
  const std::vector<std::pair<int64_t, int64_t>> spans = {{20000, 10011}, {0, 7}, {7, 12000}, {12007, 7993}};
  const std::vector<ElementRange> decay = {{0, 5}, {100, 12003}, {12010, 25000}, {29000, 30011}};
  AdamWOptions options;
  options.weight_decay = 0.05;
  for (AdamW::Kernel kernel : {AdamW::Kernel::kFusedCpu, AdamW::Kernel::kAtenOps}) {
    AdamW whole(n, options), pieces(n, options);
    whole.set_kernel(kernel);
    pieces.set_kernel(kernel);
    at::Tensor p_whole = randn(n, 3), p_pieces = p_whole.clone();
    for (int step = 0; step < 3; ++step) {
      const at::Tensor grads = randn(n, 30 + step) * 1e-2;
      whole.step(p_whole, grads, decay, 1e-3);
      pieces.begin_step();
      for (const auto& [begin, count] : spans)
        pieces.step_span(p_pieces.narrow(0, begin, count), grads.narrow(0, begin, count), begin, decay, 1e-3);
    }
    CHECK(pieces.step_count() == 3);
    CHECK(torch::equal(p_whole, p_pieces));
    CHECK(torch::equal(whole.exp_avg(), pieces.exp_avg()));
    CHECK(torch::equal(whole.exp_avg_sq(), pieces.exp_avg_sq()));
  }
  AdamW fresh(10, options);
  // A refused whole step is not counted.
  CHECK_THROWS(fresh.step(torch::zeros({10}), torch::zeros({10}, torch::kDouble), {}, 1e-3));
  CHECK(fresh.step_count() == 0);
  at::Tensor p = torch::zeros({4});
  CHECK_THROWS(fresh.step_span(p, torch::zeros({4}), 0, {}, 1e-3));  // no begin_step()
  fresh.begin_step();
  CHECK_THROWS(fresh.step_span(p, torch::zeros({4}), 7, {}, 1e-3));  // past the end
  CHECK_THROWS(fresh.step_span(p, torch::zeros({3}), 0, {}, 1e-3));  // sizes differ
}

TEST_CASE("linear warmup/decay schedule at its boundaries (HF get_linear_schedule_with_warmup)") {
  SUBCASE("warmup 0: full lr at step 0, zero at total") {
    LinearWarmupDecay s(2e-5, 0, 100);
    CHECK(s.lr(0) == 2e-5);
    CHECK(s.lr(50) == 2e-5 * (50.0 / 100.0));
    CHECK(s.lr(99) == 2e-5 * (1.0 / 100.0));
    CHECK(s.lr(100) == 0.0);
    CHECK(s.lr(150) == 0.0);
  }
  SUBCASE("warmup 100 of 345 (the reference run): zero at step 0, peak at 100") {
    LinearWarmupDecay s(2e-5, 100, 345);
    CHECK(s.lr(0) == 0.0);
    CHECK(s.lr(1) == 2e-5 * (1.0 / 100.0));
    CHECK(s.lr(99) == 2e-5 * (99.0 / 100.0));
    CHECK(s.lr(100) == 2e-5);
    CHECK(s.lr(101) == 2e-5 * (244.0 / 245.0));
    CHECK(s.lr(345) == 0.0);
  }
  SUBCASE("warmup == total: ramps up and ends at zero without dividing by zero") {
    LinearWarmupDecay s(1.0, 10, 10);
    CHECK(s.lr(9) == 0.9);
    CHECK(s.lr(10) == 0.0);
    CHECK(s.factor(11) == 0.0);
  }
  SUBCASE("warmup from a ratio: ceil(total * ratio) as TrainingArguments.get_warmup_steps") {
    CHECK(warmup_steps_for(345, 0, 0.1) == 35);     // 34.5 rounds up
    CHECK(warmup_steps_for(100, 0, 0.1) == 10);     // exactly 10.0 in float64
    CHECK(warmup_steps_for(100, 0, 0.07) == 8);     // 100 * 0.07 = 7.000000000000001, like Python
    CHECK(warmup_steps_for(1377, 0, 0.06) == 83);
    CHECK(warmup_steps_for(345, 100, 0.5) == 100);  // explicit steps win
    CHECK(warmup_steps_for(345, 0, 0.0) == 0);
    CHECK_THROWS_AS(warmup_steps_for(345, 0, 1.5), Error);
    CHECK_THROWS_AS(LinearWarmupDecay(1.0, -1, 10), Error);
  }
}

TEST_CASE("clip coefficient as torch.nn.utils.clip_grad_norm_") {
  CHECK(clip_coefficient(0.5, 1.0) == 1.0);
  CHECK(clip_coefficient(1.0, 1.0) == 1.0 / (1.0 + 1e-6));  // at the threshold torch still scales slightly
  CHECK(clip_coefficient(4.0, 1.0) == 1.0 / (4.0 + 1e-6));
  CHECK(clip_coefficient(0.0, 1.0) == 1.0);

  at::Tensor small = torch::full({4}, 0.25f);  // norm 0.5
  at::Tensor small_before = small.clone();
  CHECK(clip_grad_norm(small, 1.0) == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(torch::equal(small, small_before));
  at::Tensor big = torch::full({4}, 2.0f);  // norm 4
  CHECK(clip_grad_norm(big, 1.0) == doctest::Approx(4.0).epsilon(1e-12));
  CHECK(std::sqrt(local_sq_norm(big)) == doctest::Approx(4.0 / (4.0 + 1e-6)).epsilon(1e-7));
}

TEST_CASE("global norm from three shards equals the norm of the whole buffer") {
  const int64_t n = 3 * 65536 + 1234;  // several reduction blocks, ragged tail
  at::Tensor g = randn(n, 3);
  const double whole = std::sqrt(local_sq_norm(g));
  const double reference = g.to(at::kDouble).norm().item<double>();
  CHECK(std::abs(whole - reference) <= 1e-12 * reference);
  const int64_t cuts[] = {0, 70001, 140000, n};
  double sum_sq = 0.0;
  for (int s = 0; s < 3; ++s) sum_sq += local_sq_norm(g.narrow(0, cuts[s], cuts[s + 1] - cuts[s]).contiguous());
  CHECK(std::abs(std::sqrt(sum_sq) - whole) <= 1e-12 * whole);
  // Thread count does not change the bits.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const double one_thread = local_sq_norm(g);
  at::set_num_threads(threads);
  CHECK(one_thread == local_sq_norm(g));
}

TEST_CASE("GradScaler rule: backoff and skip on overflow, growth after the interval") {
  LossScalerOptions options = LossScalerOptions::grad_scaler();
  CHECK(options.init_scale == 65536.0);
  CHECK(options.growth_interval == 2000);
  options.growth_interval = 3;
  DynamicLossScaler scaler(options);
  CHECK_FALSE(scaler.update(true));  // overflow: skip, halve
  CHECK(scaler.scale() == 32768.0);
  CHECK(scaler.update(false));
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 32768.0);
  CHECK_FALSE(scaler.update(true));  // resets the growth count
  CHECK(scaler.scale() == 16384.0);
  CHECK(scaler.update(false));
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 16384.0);
  CHECK(scaler.update(false));  // third good step in a row
  CHECK(scaler.scale() == 32768.0);
  CHECK(scaler.state().good_steps == 0);
  CHECK(scaler.state().num_skipped_steps == 2);
  CHECK(scaler.inv_scale() == 1.0 / 32768.0);

  // State round trip.
  DynamicLossScaler restored(options);
  restored.load_state(scaler.state());
  CHECK(restored.scale() == 32768.0);
  for (int i = 0; i < 3; ++i) restored.update(false);
  CHECK(restored.scale() == 65536.0);
}

TEST_CASE("DeepSpeed rule: hysteresis, min_loss_scale, window") {
  SUBCASE("hysteresis 2 absorbs the first overflow; refilled only at growth") {
    DynamicLossScaler scaler(LossScalerOptions::deepspeed(16, 4, 2, 1.0));
    CHECK(scaler.scale() == 65536.0);
    CHECK_FALSE(scaler.update(true));  // absorbed, but the step is still skipped
    CHECK(scaler.scale() == 65536.0);
    CHECK(scaler.update(false));
    CHECK_FALSE(scaler.update(true));  // hysteresis used up: backoff
    CHECK(scaler.scale() == 32768.0);
    CHECK_FALSE(scaler.update(true));
    CHECK(scaler.scale() == 16384.0);
    for (int i = 0; i < 4; ++i) CHECK(scaler.update(false));
    CHECK(scaler.scale() == 32768.0);  // window of 4 good steps since the last overflow
    CHECK_FALSE(scaler.update(true));  // hysteresis refilled at the growth
    CHECK(scaler.scale() == 32768.0);
  }
  SUBCASE("consecutive_hysteresis refills on every good step") {
    DynamicLossScaler scaler(LossScalerOptions::deepspeed(16, 1000, 2, 1.0, true));
    scaler.update(true);
    scaler.update(false);
    scaler.update(true);
    CHECK(scaler.scale() == 65536.0);
    scaler.update(true);
    CHECK(scaler.scale() == 32768.0);
  }
  SUBCASE("min_loss_scale floors the backoff") {
    LossScalerOptions options = LossScalerOptions::deepspeed(1, 1000, 1, 1.0);
    DynamicLossScaler scaler(options);
    scaler.update(true);
    CHECK(scaler.scale() == 1.0);
    scaler.update(true);
    CHECK(scaler.scale() == 1.0);
    options.error_at_min_scale = true;
    DynamicLossScaler strict(options);
    strict.update(true);
    CHECK_THROWS_AS(strict.update(true), Error);
  }
}

TEST_CASE("found_inf and unscale") {
  at::Tensor g = randn(300001, 9);
  CHECK_FALSE(found_inf(g));
  g[300000] = std::numeric_limits<float>::infinity();
  CHECK(found_inf(g));
  g[300000] = 0.0f;
  g[17] = std::numeric_limits<float>::quiet_NaN();
  CHECK(found_inf(g));
  CHECK(found_inf(g.to(at::kDouble)));  // ATen path
  at::Tensor h = torch::full({3}, 1024.0f);
  unscale(h, 65536.0);
  CHECK(torch::equal(h, torch::full({3}, 1.0f / 64.0f)));
}

TEST_CASE("ParamLayout: dense offsets, padding, shards, decay ranges, views") {
  ParamLayout layout({{"a.weight", torch::zeros({3, 2})},
                      {"a.bias", torch::zeros({3})},
                      {"b.LayerNorm.weight", torch::zeros({2})},
                      {"c.weight", torch::zeros({4})},
                      {"d.weight", torch::zeros({2})}});
  CHECK(layout.numel() == 17);
  CHECK(layout.slot("c.weight").offset == 11);
  CHECK(layout.slot("c.weight").shape == std::vector<int64_t>{4});
  CHECK(layout.decay_ranges() == std::vector<ElementRange>{{0, 6}, {11, 17}});  // c and d merged
  CHECK(layout.num_decay_elements() == 12);
  CHECK(layout.padded_numel(4) == 20);
  CHECK(layout.padded_numel(1) == 17);
  CHECK(layout.shard_range(2, 4) == ElementRange{10, 15});
  CHECK(layout.decay_ranges_in({10, 15}) == std::vector<ElementRange>{{1, 5}});
  CHECK(layout.decay_ranges_in({5, 10}) == std::vector<ElementRange>{{0, 1}});
  CHECK(layout.decay_mask().sum().item<float>() == 12.0f);

  at::Tensor flat = layout.flatten({torch::ones({3, 2}), torch::full({3}, 2.0f), torch::full({2}, 3.0f),
                                    torch::full({4}, 4.0f), torch::full({2}, 5.0f)},
                                   layout.padded_numel(4));
  CHECK(flat.numel() == 20);
  CHECK(flat[19].item<float>() == 0.0f);
  auto views = layout.views(flat);
  CHECK(views[3].sizes().vec() == std::vector<int64_t>{4});
  views[3].fill_(9.0f);
  CHECK(flat[11].item<float>() == 9.0f);
  CHECK_THROWS_AS(ParamLayout({{"x", torch::zeros({1})}, {"x", torch::zeros({1})}}), Error);
  CHECK_THROWS_AS(layout.slot("nope"), Error);
}
