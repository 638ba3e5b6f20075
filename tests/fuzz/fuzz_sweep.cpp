// libFuzzer target: the sweep file (parse_sweep_text, src/sweep/space.cpp) and
// the trials it makes (make_trials). What parses must make num_samples x grid
// points x repeats trials, the same ones twice, each with every space key in
// order and a value inside its domain.
// Seeds: corpus/sweep (configs/sweep_quickstart.toml, every domain, broken files).
#include <cmath>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/sweep/space.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shardtrain::set_log_rank(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  shardtrain::SweepSpec spec;
  try {
    spec = shardtrain::parse_sweep_text(text, "sweep.toml", "/base");
  } catch (const shardtrain::Error&) {
    return 0;
  }
  // Keep each input quick: the limit itself is checked by the parser.
  double expected = static_cast<double>(spec.num_samples * spec.repeats);
  for (const shardtrain::SpaceDimension& d : spec.space)
    if (d.kind == shardtrain::SpaceKind::kGrid) expected *= static_cast<double>(d.values.size());
  FUZZ_REQUIRE(expected <= static_cast<double>(shardtrain::kMaxTrials));
  if (expected > 2000) return 0;
  const std::vector<shardtrain::TrialSpec> trials = shardtrain::make_trials(spec);
  FUZZ_REQUIRE(static_cast<double>(trials.size()) == expected);
  const std::vector<shardtrain::TrialSpec> again = shardtrain::make_trials(spec);
  for (size_t i = 0; i < trials.size(); ++i) {
    FUZZ_REQUIRE(trials[i].id == again[i].id && trials[i].params == again[i].params);
    FUZZ_REQUIRE(trials[i].params.size() == spec.space.size());
    for (size_t k = 0; k < spec.space.size(); ++k) {
      const shardtrain::SpaceDimension& d = spec.space[k];
      const std::string& value = trials[i].params[k].second;
      FUZZ_REQUIRE(trials[i].params[k].first == d.key);
      if (d.kind == shardtrain::SpaceKind::kGrid || d.kind == shardtrain::SpaceKind::kChoice) {
        bool found = false;
        for (const std::string& v : d.values) found = found || v == value;
        FUZZ_REQUIRE(found);
      } else if (d.kind == shardtrain::SpaceKind::kRandInt) {
        const long long v = std::stoll(value);  // exact: int64 end to end
        FUZZ_REQUIRE(v >= d.int_low && v < d.int_high);
      } else {
        const double v = std::stod(value);
        FUZZ_REQUIRE(std::isfinite(v) && v >= d.low * (1 - 1e-12) - 1e-300);
        FUZZ_REQUIRE(v <= d.high * (1 + 1e-12) + 1e-300);
      }
    }
  }
  return 0;
}
