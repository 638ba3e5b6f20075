// Sweeps (sweep/space.h, asha.h, state.h, results.h): the sweep file's
// errors name the key; the trials cross the grid keys with the sampled ones,
// the same seed giving the same trials; ASHA's rule against report sequences
// worked by hand (Ray Tune's ASHAScheduler: the top 1/rf of the results
// recorded at a rung so far, numpy's linear percentile); the state file reads
// back bit for bit; the table sorts by the metric with mean and std per
// configuration.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/sweep/asha.h"
#include "shardtrain/sweep/metric.h"
#include "shardtrain/sweep/results.h"
#include "shardtrain/sweep/space.h"
#include "shardtrain/sweep/state.h"
#include "support/scratch_dir.h"

using namespace shardtrain;

namespace sweep_test {
namespace {

const char* kHeader =
    "[sweep]\nbase = \"run.toml\"\nname = \"s\"\nmetric = \"eval_loss\"\nmode = \"min\"\n";

SweepSpec parse(const std::string& rest) { return parse_sweep_text(std::string(kHeader) + rest, "sweep.toml", "/cfg"); }

std::string sweep_error_of(const std::string& rest) {
  try {
    parse(rest);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string param(const TrialSpec& t, const std::string& key) {
  for (const auto& kv : t.params)
    if (kv.first == key) return kv.second;
  return "";
}

// The values train.seed takes over `num_samples` trials of a randint domain.
std::vector<int64_t> randint_draws(const std::string& bounds, int num_samples) {
  const SweepSpec spec = parse("num_samples = " + std::to_string(num_samples) + "\n[sweep.space]\n\"train.seed\" = { randint = " +
                              bounds + " }\n");
  std::vector<int64_t> out;
  for (const TrialSpec& t : make_trials(spec)) out.push_back(std::stoll(param(t, "train.seed")));
  return out;
}

std::string metric_error_of(const RunConfig& config, const std::string& metric) {
  SweepSpec spec;
  spec.file = "s.toml";
  spec.base = "run.toml";
  spec.metric = metric;
  try {
    check_sweep_metric(spec, config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace
}  // namespace sweep_test

using namespace sweep_test;

TEST_CASE("sweep file: the settings, the base resolved against the file's folder, both spellings of a key") {
  const SweepSpec spec = parse(
      "num_samples = 2\nrepeats = 3\nranks_per_trial = 2\nseed = 7\nscheduler = \"asha\"\ngrace_period = 2\n"
      "reduction_factor = 3\nmax_t = 20\n[sweep.space]\n\"train.lr\" = { loguniform = [1e-5, 1e-3] }\n"
      "[sweep.space.train]\nbatch_size = { grid = [8, 16] }\n");
  CHECK(spec.base == "/cfg/run.toml");
  CHECK_FALSE(spec.maximize);
  CHECK(spec.num_samples == 2);
  CHECK(spec.repeats == 3);
  CHECK(spec.ranks_per_trial == 2);
  CHECK(spec.asha);
  CHECK(spec.grace_period == 2);
  CHECK(spec.reduction_factor == 3);
  CHECK(spec.max_t == 20);
  REQUIRE(spec.space.size() == 2);
  // Sorted by key, however the file spells them.
  CHECK(spec.space[0].key == "train.batch_size");
  CHECK(spec.space[0].values == std::vector<std::string>{"8", "16"});
  CHECK(spec.space[1].key == "train.lr");
  CHECK(spec.space[1].kind == SpaceKind::kLogUniform);
}

TEST_CASE("sweep file: bad files are refused, naming the key") {
  CHECK(sweep_error_of("[sweep.space]\n\"train.lrr\" = { grid = [1, 2] }\n").find("sweep.space.train.lrr: unknown run-config key 'train.lrr'") == 0);
  CHECK(sweep_error_of("[sweep.space]\n").find("sweep.space is empty") == 0);
  CHECK(sweep_error_of("").find("sweep.space is empty") == 0);
  CHECK(sweep_error_of("[sweep.space]\n\"train.lr\" = { loguniform = [0, 1e-3] }\n") ==
        "sweep.space.train.lr: loguniform needs 0 < a < b, got a = 0, b = 0.001 in sweep.toml (line 7)");
  CHECK(sweep_error_of("[sweep.space]\n\"train.lr\" = { loguniform = [-1, 1e-3] }\n").find("loguniform needs 0 < a < b") != std::string::npos);
  CHECK(sweep_error_of("[sweep.space]\n\"train.lr\" = { uniform = [2, 1] }\n").find("sweep.space.train.lr: uniform needs a < b") == 0);
  CHECK(sweep_error_of("[sweep.space]\n\"train.lr\" = { normal = [2, 1] }\n").find("sweep.space.train.lr: unknown domain 'normal'") == 0);
  CHECK(sweep_error_of("[sweep.space]\n\"train.lr\" = { grid = [] }\n").find("sweep.space.train.lr: grid = [] has no values") == 0);
  CHECK(sweep_error_of("[sweep.space]\n\"train.batch_size\" = { randint = [1.5, 4] }\n").find("randint takes two integers") != std::string::npos);
  CHECK(sweep_error_of("[sweep.space]\n\"run.name\" = { grid = [\"a\"] }\n").find("sweep.space.run.name: the sweep sets it") == 0);
  CHECK(sweep_error_of("sedd = 3\n[sweep.space]\n\"train.lr\" = { grid = [1] }\n").find("unknown key 'sweep.sedd'") == 0);
  CHECK(sweep_error_of("ranks_per_trial = 0\n[sweep.space]\n\"train.lr\" = { grid = [1] }\n").find("sweep.ranks_per_trial = 0") == 0);
  CHECK(sweep_error_of("[sweep.space]\n\"train.lr\" = { grid = [1] }\n[sweep.space.train]\nlr = { grid = [2] }\n").find("sweep.space.train.lr is given twice") == 0);
  CHECK(sweep_error_of("grace_period = 2\n[sweep.space]\n\"train.lr\" = { grid = [1] }\n").find("sweep.grace_period only applies with sweep.scheduler = \"asha\"") == 0);
  CHECK(sweep_error_of("num_samples = 100000000000\nrepeats = 1000\n[sweep.space]\n\"train.lr\" = { grid = [1, 2] }\n")
            .find("sweep.num_samples x grid points x sweep.repeats = 200000000000000 trials") == 0);
  CHECK(sweep_error_of("repeats = 2\n[sweep.space]\n\"train.seed\" = { grid = [1, 2] }\n").find("sweep.space.train.seed with sweep.repeats = 2") == 0);
  bool no_base = false;
  try {
    parse_sweep_text("[sweep]\nname = \"s\"\nmetric = \"m\"\nmode = \"max\"\n", "f", ".");
  } catch (const Error& e) {
    no_base = std::string(e.what()).find("sweep.base: name the run config") == 0;
  }
  CHECK(no_base);
}

TEST_CASE("sweep trials: grid keys cross, sampled keys drawn per point, repeats per configuration; same seed, same trials") {
  const std::string text =
      "num_samples = 2\nrepeats = 2\nseed = 3\n[sweep.space]\n\"train.lr\" = { loguniform = [1e-5, 1e-3] }\n"
      "\"train.batch_size\" = { grid = [8, 16] }\n\"train.warmup_steps\" = { grid = [0, 1, 2] }\n"
      "\"train.seed\" = { randint = [5, 8] }\n\"parallel.strategy\" = { choice = [\"ddp\", \"zero2\"] }\n"
      "\"train.weight_decay\" = { uniform = [0.0, 0.1] }\n";
  // train.seed with repeats is refused: the same space without it.
  std::string allowed = text;
  allowed.erase(allowed.find("\"train.seed\""), std::string("\"train.seed\" = { randint = [5, 8] }\n").size());
  allowed += "\"train.max_steps\" = { randint = [5, 8] }\n";
  const SweepSpec spec = parse(allowed);
  const std::vector<TrialSpec> trials = make_trials(spec);
  REQUIRE(trials.size() == 2 * 2 * 3 * 2);  // num_samples x grid x repeats
  CHECK(trials[0].id == "trial_000_r0");
  CHECK(trials[1].id == "trial_000_r1");
  CHECK(trials[23].id == "trial_011_r1");
  std::set<std::string> points, lrs;
  for (size_t i = 0; i < trials.size(); i += 2) {
    const TrialSpec& t = trials[i];
    CHECK(trials[i + 1].params == t.params);  // the repeats share the configuration
    CHECK(trials[i + 1].repeat == 1);
    // Grid point: the last grid key fastest, then the next sample.
    const int64_t point = t.config_index % 6;
    CHECK(param(t, "train.batch_size") == (point / 3 == 0 ? "8" : "16"));
    CHECK(param(t, "train.warmup_steps") == std::to_string(point % 3));
    points.insert(param(t, "train.batch_size") + "/" + param(t, "train.warmup_steps"));
    const double lr = std::stod(param(t, "train.lr"));
    CHECK(lr >= 1e-5);
    CHECK(lr < 1e-3);
    lrs.insert(param(t, "train.lr"));
    const int steps = std::stoi(param(t, "train.max_steps"));
    CHECK(steps >= 5);
    CHECK(steps < 8);  // randint's upper bound is exclusive, as tune.randint
    const double decay = std::stod(param(t, "train.weight_decay"));
    CHECK(decay >= 0.0);
    CHECK(decay < 0.1);
    const std::string strategy = param(t, "parallel.strategy");
    CHECK((strategy == "ddp" || strategy == "zero2"));
  }
  CHECK(points.size() == 6);
  CHECK(lrs.size() == 12);  // a fresh draw for every configuration
  CHECK(make_trials(spec)[13].params == trials[13].params);
  SweepSpec other = spec;
  other.seed = 4;
  CHECK(make_trials(other)[0].params != trials[0].params);
  CHECK(param(make_trials(other)[0], "train.batch_size") == param(trials[0], "train.batch_size"));  // grid values do not depend on the seed
}

TEST_CASE("ASHA: numpy's linear percentile") {
  CHECK(std::isnan(percentile_linear({}, 50)));
  CHECK(percentile_linear({0.5}, 66.0) == 0.5);
  CHECK(percentile_linear({0.5, 0.4}, 50) == doctest::Approx(0.45));
  CHECK(percentile_linear({0.6, 0.4, 0.5}, 75) == doctest::Approx(0.55));
  CHECK(percentile_linear({NAN, 1.0, 3.0}, 100) == 3.0);
}

TEST_CASE("ASHA: rungs at grace_period x rf^k below max_t") {
  CHECK(Asha({1, 3, 9, true}, "m").rungs() == std::vector<int64_t>{1, 3});
  CHECK(Asha({1, 3, 10, true}, "m").rungs() == std::vector<int64_t>{1, 3, 9});
  CHECK(Asha({2, 2, 17, true}, "m").rungs() == std::vector<int64_t>{2, 4, 8, 16});
  CHECK(Asha({1, 4, 100, true}, "m").rungs() == std::vector<int64_t>{1, 4, 16, 64});
}

TEST_CASE("ASHA: a hand-worked sequence, grace_period 1, reduction_factor 3, max_t 9 (mode max)") {
  Asha asha({1, 3, 9, true}, "eval_accuracy");
  // Rung 1. A: first result, goes on.
  AshaDecision d = asha.on_result("A", 1, 0.5);
  CHECK_FALSE(d.stop);
  CHECK(d.rung == 1);
  CHECK(d.reason == "rung 1: eval_accuracy 0.5, the first result at this rung");
  // B: the 66.7th percentile of {0.5} is 0.5; 0.4 is below.
  d = asha.on_result("B", 1, 0.4);
  CHECK(d.stop);
  CHECK(d.pruned);
  CHECK(d.reason == "pruned at rung 1: eval_accuracy 0.4 is not in the top 1/3 of 1 earlier result at this rung (cutoff 0.5)");
  // C: of {0.4, 0.5} the cutoff is 0.4 + 0.1 x 2/3 = 0.4667; 0.6 goes on.
  d = asha.on_result("C", 1, 0.6);
  CHECK_FALSE(d.stop);
  CHECK(d.reason.find("rung 1: eval_accuracy 0.6 is in the top 1/3 of 2 earlier results at this rung (cutoff 0.466666") == 0);
  // D: of {0.4, 0.5, 0.6} the cutoff is 0.5 + 0.1 x 1/3 = 0.5333; 0.45 stops, 0.55 would not.
  d = asha.on_result("D", 1, 0.45);
  CHECK(d.stop);
  CHECK(d.reason.find("(cutoff 0.53333") != std::string::npos);
  // A's second evaluation: past rung 1 (recorded), below rung 3: goes on, nothing recorded.
  d = asha.on_result("A", 2, 0.1);
  CHECK_FALSE(d.stop);
  CHECK(d.rung == 0);
  // Rung 3: A first (goes on), then C below A's 0.7 stops.
  CHECK_FALSE(asha.on_result("A", 3, 0.7).stop);
  d = asha.on_result("C", 3, 0.65);
  CHECK(d.stop);
  CHECK(d.rung == 3);
  // E reports first at evaluation 4: recorded at the highest rung it reached
  // (3), compared with {0.7, 0.65}: cutoff 0.6833, 0.69 goes on.
  d = asha.on_result("E", 4, 0.69);
  CHECK_FALSE(d.stop);
  CHECK(d.rung == 3);
  // max_t: the 9th evaluation stops, whatever the value.
  d = asha.on_result("A", 9, 0.99);
  CHECK(d.stop);
  CHECK_FALSE(d.pruned);  // stopped, not pruned: the trial finished its budget
  CHECK(d.reason == "max_t reached (9 evaluations)");
  // Equal to the cutoff goes on (Ray stops only below it).
  Asha ties({1, 2, 4, true}, "m");
  ties.on_result("X", 1, 0.5);
  CHECK_FALSE(ties.on_result("Y", 1, 0.5).stop);
}

TEST_CASE("ASHA: mode min compares the negated values; NaN never stops and is left out of cutoffs") {
  Asha asha({1, 2, 8, false}, "eval_loss");
  CHECK_FALSE(asha.on_result("A", 1, 0.5).stop);
  AshaDecision d = asha.on_result("B", 1, 0.6);  // a higher loss is worse
  CHECK(d.stop);
  CHECK(d.reason.find("eval_loss 0.6 is not in the top 1/2 of 1 earlier result at this rung (cutoff 0.5)") != std::string::npos);
  CHECK_FALSE(asha.on_result("C", 1, 0.4).stop);  // cutoff of {-0.5, -0.6} at 50%: -0.55, i.e. loss 0.55
  CHECK_FALSE(asha.on_result("D", 1, NAN).stop);
  // {0.5, 0.6, 0.4} (NaN left out): the median loss 0.5; 0.52 stops, 0.5 goes on.
  CHECK(asha.on_result("E", 1, 0.52).stop);
  CHECK_FALSE(asha.on_result("F", 1, 0.5).stop);
}

TEST_CASE("sweep state: written atomically and read back bit for bit") {
  shardtrain_test::ScratchDir scratch("sweep_state");
  SweepState state;
  state.fingerprint = "fp";
  state.metric = "eval_loss";
  state.maximize = false;
  state.rungs = {1, 3};
  TrialRecord t;
  t.spec.id = "trial_000";
  t.spec.params = {{"train.lr", "0.001"}};
  t.status = TrialStatus::kPruned;
  t.stop_reason = "pruned at rung 1: ...";
  state.trials.push_back(t);
  state.events.push_back({"trial_000", 1, 4, 0.1 + 0.2, true, true, "pruned at rung 1: ..."});
  state.events.push_back({"trial_000", 2, 8, NAN, true, false, "max_t reached (2 evaluations)"});
  write_sweep_state(scratch.dir, state);
  const SweepState back = read_sweep_state(scratch.dir);
  CHECK(back.fingerprint == "fp");
  CHECK_FALSE(back.maximize);
  CHECK(back.rungs == state.rungs);
  REQUIRE(back.trials.size() == 1);
  CHECK(back.trials[0].status == TrialStatus::kPruned);
  CHECK(back.trials[0].spec.params == t.spec.params);
  REQUIRE(back.events.size() == 2);
  CHECK(back.events[0].value == 0.1 + 0.2);  // exactly: 0.30000000000000004
  CHECK(std::isnan(back.events[1].value));
  CHECK(back.events[0].pruned);
  CHECK_FALSE(back.events[1].pruned);
  {
    // A state written before the field: the pruning reason says so.
    std::ifstream in(scratch.dir + "/sweep_state.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t at = text.find("\"pruned\":"); at != std::string::npos; at = text.find("\"pruned\":")) {
      const size_t end = text.find(',', at);
      text.erase(at, end - at + 1);
    }
    std::ofstream(scratch.dir + "/sweep_state.json") << text;
    const SweepState old = read_sweep_state(scratch.dir);
    CHECK(old.events[0].pruned);
    CHECK_FALSE(old.events[1].pruned);
    write_sweep_state(scratch.dir, state);
  }
  {
    SweepStateLock lock(scratch.dir, 5);
    bool refused = false;
    try {
      SweepStateLock second(scratch.dir, 0.05);
    } catch (const Error& e) {
      refused = std::string(e.what()).find("sweep_state.lock was held for more than") != std::string::npos;
    }
    CHECK(refused);
  }
  SweepStateLock again(scratch.dir, 1);  // released by the first one's destructor
}

TEST_CASE("sweep results: sorted by the metric (min), mean and sample std per configuration, csv values exact") {
  SweepState state;
  state.metric = "eval_loss";
  state.maximize = false;
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 2; ++r) {
      TrialRecord t;
      t.spec.id = "trial_00" + std::to_string(c) + "_r" + std::to_string(r);
      t.spec.config_index = c;
      t.spec.repeat = r;
      t.spec.params = {{"train.lr", c == 0 ? "0.1" : "0.2"}};
      t.status = TrialStatus::kFinished;
      state.trials.push_back(t);
    }
  // Loss per evaluation; a trial's value is its best (lowest).
  state.events = {{"trial_000_r0", 1, 1, 0.9, false, ""}, {"trial_001_r0", 1, 1, 0.7, false, ""},
                  {"trial_000_r0", 2, 2, 0.8, false, ""}, {"trial_000_r1", 1, 1, 0.6, false, ""},
                  {"trial_001_r1", 1, 1, 0.5, false, ""}};
  const SweepResults r = summarize_sweep(state);
  REQUIRE(r.trials.size() == 4);
  CHECK(r.trials[0].trial->spec.id == "trial_001_r1");
  CHECK(r.trials[1].trial->spec.id == "trial_000_r1");
  CHECK(r.trials[2].trial->spec.id == "trial_001_r0");
  CHECK(r.trials[3].trial->spec.id == "trial_000_r0");
  CHECK(r.trials[3].best == 0.8);
  CHECK(r.trials[3].best_evaluation == 2);
  REQUIRE(r.configs.size() == 2);
  CHECK(r.configs[0].config_index == 1);
  CHECK(r.configs[0].mean == doctest::Approx(0.6));
  CHECK(r.configs[0].std_dev == doctest::Approx(std::sqrt(0.02)));
  CHECK(r.configs[1].mean == doctest::Approx(0.7));
  const std::string csv = sweep_results_csv(state, r);
  CHECK(csv.find("trial_000_r0,0,0,finished,0.1,2,0.8,0.8,2,") != std::string::npos);
  const std::string table = sweep_table(state, r);
  CHECK(table.find("config 001  train.lr=0.2  mean 0.6000  std 0.1414  seeds 0.7000 0.5000") != std::string::npos);
  CHECK(sweep_best_json(state, r).find("\"trial\": \"trial_001_r1\"") != std::string::npos);
}

TEST_CASE("sweep randint: int64 bounds read, drawn and written exactly (past 2^53, up to 2^63 - 1)") {
  // 2^53 + 1 and 2^53 + 3: no double holds them; b exclusive leaves two values.
  std::set<int64_t> seen;
  for (int64_t v : randint_draws("[9007199254740993, 9007199254740995]", 64)) {
    CHECK((v == 9007199254740993 || v == 9007199254740994));
    seen.insert(v);
  }
  CHECK(seen.size() == 2);
  // The whole non-negative range: never negative, never b.
  bool high_half = false;
  for (int64_t v : randint_draws("[0, 9223372036854775807]", 64)) {
    CHECK(v >= 0);
    CHECK(v < INT64_MAX);
    high_half = high_half || v > (INT64_MAX / 2);
  }
  CHECK(high_half);  // uniform over the range, not folded into its low end
  // The widest range (span 2^64 - 1): no overflow, both signs.
  bool negative = false, positive = false;
  for (int64_t v : randint_draws("[-9223372036854775808, 9223372036854775807]", 64)) {
    negative = negative || v < 0;
    positive = positive || v > 0;
  }
  CHECK((negative && positive));
  for (int64_t v : randint_draws("[-3, -2]", 8)) CHECK(v == -3);
  // Small ranges: uniform, every value drawn.
  std::set<int64_t> small;
  for (int64_t v : randint_draws("[5, 8]", 64)) small.insert(v);
  CHECK(small == std::set<int64_t>{5, 6, 7});
  CHECK(sweep_error_of("[sweep.space]\n\"train.seed\" = { randint = [9007199254740995, 9007199254740993] }\n") ==
        "sweep.space.train.seed: randint needs a < b, got a = 9007199254740995, b = 9007199254740993 in sweep.toml "
        "(line 7)");
}

TEST_CASE("sweep.metric: checked against the metrics the base config's task reports") {
  RunConfig config;  // sequence classification, classes from the data
  const std::string error = metric_error_of(config, "eval_nonsense");
  CHECK(error.find("sweep.metric = 'eval_nonsense' (s.toml) is never reported by model.task = "
                   "\"sequence_classification\"") == 0);
  CHECK(error.find("its evaluations report train_loss, eval_loss, eval_accuracy, eval_f1, eval_mcc, and eval_macro_f1 "
                   "when the data has more than two classes") != std::string::npos);
  for (const char* ok : {"eval_loss", "eval_mcc", "train_loss", "eval_macro_f1"}) CHECK(metric_error_of(config, ok).empty());
  config.model.num_labels = 2;
  CHECK_FALSE(metric_error_of(config, "eval_macro_f1").empty());
  config.model.num_labels = 1;  // regression
  CHECK(metric_error_of(config, "eval_pearson").empty());
  CHECK_FALSE(metric_error_of(config, "eval_accuracy").empty());
  config.model.task = Task::kTokenClassification;
  CHECK(metric_error_of(config, "eval_PER_f1").empty());  // per entity type of the data
  CHECK(metric_error_of(config, "eval_mcc").find("eval_<TYPE>_f1 for each entity type") != std::string::npos);
  config.model.task = Task::kQuestionAnswering;
  CHECK(metric_error_of(config, "eval_exact_match").empty());
  CHECK_FALSE(metric_error_of(config, "eval_HasAns_f1").empty());
  config.data.version_2_with_negative = true;
  CHECK(metric_error_of(config, "eval_HasAns_f1").empty());
  CHECK(metric_error_of(config, "eval_best_f1").empty());
}

TEST_CASE("sweep state: the base config kept; its changes named by key") {
  shardtrain_test::ScratchDir scratch("sweep_base");
  SweepState state;
  state.base_config = {{"data.max_length", "64"}, {"train.max_steps", "40"}, {"train.weight_decay", "0"}};
  write_sweep_state(scratch.dir, state);
  CHECK(read_sweep_state(scratch.dir).base_config == state.base_config);
  const std::map<std::string, std::string> now = {
      {"data.max_length", "32"}, {"train.max_steps", "20"}, {"train.weight_decay", "0.01"}, {"train.lr", "0.001"}};
  CHECK(base_config_changes(state.base_config, state.base_config).empty());
  CHECK(base_config_changes(state.base_config, now) ==
        std::vector<std::string>{"data.max_length: 64 -> 32", "train.lr: (none) -> 0.001", "train.max_steps: 40 -> 20",
                                 "train.weight_decay: 0 -> 0.01"});
}

TEST_CASE("sweep state: paths relative to the sweep folder; an old state's absolute paths read as relative") {
  shardtrain_test::ScratchDir scratch("sweep_paths");
  // Format 1 (absolute paths), as an earlier shardtrain wrote it, from a
  // folder that has moved since.
  std::ofstream(scratch.dir + "/sweep_state.json")
      << R"({"format": "shardtrain sweep state 1", "fingerprint": "fp", "metric": "eval_loss", "mode": "min",
  "rungs": [], "stop_requested": false, "events": [{"trial": "trial_000", "evaluation": 1, "step": 4, "value": 0.5,
  "stop": false, "reason": "scheduler none"}],
  "trials": [{"id": "trial_000", "config_index": 0, "repeat": 0, "params": [["train.lr", "0.001"]], "status": "finished",
   "group": 0, "attempts": 1, "steps": 12, "stop_reason": "", "error": "",
   "best_checkpoint": "/gone/runs/grid/trial_000/checkpoint_000002.h5", "run_dir": "/gone/runs/grid/trial_000"},
  {"id": "trial_001", "config_index": 1, "repeat": 0, "params": [["train.lr", "0.003"]], "status": "finished",
   "group": 0, "attempts": 1, "steps": 12, "stop_reason": "", "error": "",
   "best_checkpoint": "runs/grid/trial_001/checkpoint_000002.h5", "run_dir": "runs/grid/trial_001"}]})";
  SweepState state = read_sweep_state(scratch.dir);
  REQUIRE(state.trials.size() == 2);
  CHECK(state.trials[0].run_dir == "trial_000");
  CHECK(state.trials[0].best_checkpoint == "trial_000/checkpoint_000002.h5");
  CHECK(state.trials[1].best_checkpoint == "trial_001/checkpoint_000002.h5");  // a folder relative to the job's
  CHECK(sweep_path(scratch.dir, state.trials[0].best_checkpoint) == scratch.dir + "/trial_000/checkpoint_000002.h5");
  // Neither trial's files are in this folder: missing, not finished.
  CHECK(check_trial_files(scratch.dir, state) == 2);
  CHECK(state.trials[0].missing == "its run folder trial_000 is gone");
  std::filesystem::create_directories(scratch.dir + "/trial_000");
  std::filesystem::create_directories(scratch.dir + "/trial_001");
  std::ofstream(scratch.dir + "/trial_001/checkpoint_000002.h5") << "x";
  CHECK(check_trial_files(scratch.dir, state) == 1);
  CHECK(state.trials[0].missing == "its checkpoint trial_000/checkpoint_000002.h5 is gone");
  CHECK(state.trials[1].missing.empty());
  const SweepResults r = summarize_sweep(state);
  const std::string table = sweep_table(state, r);
  CHECK(table.find("trial_000  missing") != std::string::npos);
  CHECK(table.find("trial_000 finished, but its checkpoint trial_000/checkpoint_000002.h5 is gone") != std::string::npos);
  CHECK(sweep_results_csv(state, r).find("trial_000,0,0,missing,") != std::string::npos);
  CHECK(r.best == nullptr);  // trial_001 has no evaluation, trial_000 no checkpoint
  // Written back relative, as best.json names them.
  write_sweep_state(scratch.dir, state);
  const std::string text = read_file(sweep_state_path(scratch.dir), "state");
  CHECK(text.find("\"run_dir\": \"trial_000\"") != std::string::npos);
  CHECK(text.find("/gone/") == std::string::npos);
  // trial_000's 0.5 is the better loss, but its checkpoint is gone: the best is trial_001.
  state.events.push_back({"trial_001", 1, 4, 0.6, false, ""});
  const std::string best = sweep_best_json(state, summarize_sweep(state));
  CHECK(best.find("\"checkpoint\": \"trial_001/checkpoint_000002.h5\"") != std::string::npos);
  CHECK(best.find("\"config\": \"trial_001/config.toml\"") != std::string::npos);
}
