// The value axis of a curves panel (report/curves.h, curve_axis) for every
// finite range: the ranges that once hung the tick loop, then random ones over
// the whole double range; and render_curves_svg ending on them.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <cstring>
#include <random>
#include <string>

#include "shardtrain/report/curves.h"

namespace test_curves_axis_test {

using namespace shardtrain;

// The properties every axis must have, for data in [lo, hi].
void curves_axis_check(double lo, double hi, bool from_zero) {
  CAPTURE(lo);
  CAPTURE(hi);
  const CurveAxis a = curve_axis(lo, hi, from_zero);
  REQUIRE(std::isfinite(a.lo));
  REQUIRE(std::isfinite(a.hi));
  CHECK(a.lo <= (from_zero ? std::min(lo, 0.0) : lo));
  CHECK(a.hi >= hi);
  CHECK(a.hi > a.lo);
  CHECK(std::isfinite(a.step));
  CHECK(a.step > 0);
  CHECK(a.ticks.size() >= 2);
  CHECK(a.ticks.size() <= 13);
  for (size_t i = 0; i < a.ticks.size(); ++i) {
    CHECK(std::isfinite(a.ticks[i]));
    CHECK(a.ticks[i] >= a.lo - a.step * 1e-6);
    CHECK(a.ticks[i] <= a.hi + a.step * 1e-6);
    if (i > 0) CHECK(a.ticks[i] > a.ticks[i - 1]);
  }
}

TEST_CASE("curve_axis: the ranges that hung the tick loop, and other edges") {
  curves_axis_check(0.6284062483166163, 0.6284062483166164, false);  // one ulp apart
  curves_axis_check(1e15, 1.00000000000000025e15, false);
  curves_axis_check(0, 1.7e308, true);                                 // a step of 1.7e308
  const double max = std::numeric_limits<double>::max();
  curves_axis_check(-max, max, false);
  curves_axis_check(max, max, false);
  curves_axis_check(-max, -max, true);
  curves_axis_check(0, 0, false);
  curves_axis_check(5e-324, 5e-324, false);                            // the smallest denormal
  curves_axis_check(1e-310, 2e-310, true);
  curves_axis_check(-3.0, -3.0, false);
  // An ordinary range keeps its 1-2-5 ticks.
  const CurveAxis a = curve_axis(0.31, 0.69, false);
  CHECK(a.step == doctest::Approx(0.1));
  CHECK(a.lo == doctest::Approx(0.3));
  CHECK(a.hi == doctest::Approx(0.7));
  CHECK(a.ticks.size() == 5);
}

TEST_CASE("curve_axis: random finite ranges, of random width and magnitude") {
  std::mt19937_64 random(20261202);
  std::uniform_real_distribution<double> exponent(-320, 308), unit(-1, 1);
  std::uniform_int_distribution<uint64_t> bits;
  for (int i = 0; i < 20000; ++i) {
    double a, b;
    if (i % 3 == 0) {
      // Any two finite doubles, from their bits.
      do {
        uint64_t x = bits(random), y = bits(random);
        std::memcpy(&a, &x, sizeof a);
        std::memcpy(&b, &y, sizeof b);
      } while (!std::isfinite(a) || !std::isfinite(b));
    } else {
      a = unit(random) * std::pow(10.0, exponent(random));
      // A neighbour a few ulps away, or a value of another magnitude.
      b = i % 3 == 1 ? std::nextafter(std::nextafter(a, INFINITY), INFINITY)
                     : unit(random) * std::pow(10.0, exponent(random));
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
    }
    curves_axis_check(std::min(a, b), std::max(a, b), i % 2 == 0);
  }
}

TEST_CASE("render_curves_svg ends on the values that hung it, with a bounded number of ticks") {
  for (const auto& values : {std::pair<double, double>{0.6284062483166163, 0.6284062483166164},
                             std::pair<double, double>{1e15, 1.00000000000000025e15}}) {
    RunCurves run;
    run.name = "r";
    run.loss.push_back({"eval_loss", {{10, values.first}, {20, values.second}}});
    const std::string svg = render_curves_svg({run});
    CHECK(svg.size() < 40000);
  }
  RunCurves far;
  far.name = "far";
  far.loss.push_back({"train_loss", {{0, 0.7}, {1.7e308, 0.6}}});
  CHECK(render_curves_svg({far}).size() < 40000);
}

}  // namespace test_curves_axis_test
