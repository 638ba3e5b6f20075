#include "shardtrain/sweep/space.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace {

std::string line_of(const toml::node& node, const std::string& source) {
  const auto line = node.source().begin.line;
  return " in " + source + (line > 0 ? " (line " + std::to_string(line) + ")" : "");
}

std::set<std::string> run_config_keys() {
  std::set<std::string> keys;
  RunConfig defaults;
  visit_config_keys(defaults, [&](const char* name, const auto&, const char*) { keys.insert(name); });
  return keys;
}

// A grid / choice value as the text a config override takes.
std::string value_text(const std::string& key, const toml::node& node, const std::string& where) {
  if (node.is_string()) return node.as_string()->get();
  if (node.is_integer()) return std::to_string(node.as_integer()->get());
  if (node.is_floating_point()) {
    const double v = node.as_floating_point()->get();
    if (!std::isfinite(v)) throw Error(key + ": " + shortest_text(v) + " is not a value a config key takes" + where);
    return shortest_text(v);
  }
  if (node.is_boolean()) return node.as_boolean()->get() ? "true" : "false";
  if (node.is_array()) {
    // A list-valued key (data.text_columns): the override text is comma-separated.
    std::string text;
    for (const toml::node& item : *node.as_array()) {
      if (!item.is_string()) throw Error(key + ": a list value holds strings only" + where);
      text += (text.empty() ? "" : ",") + item.as_string()->get();
    }
    return text;
  }
  throw Error(key + ": expected a string, number or boolean" + where);
}

double number_of(const std::string& key, const toml::node& node, const std::string& where) {
  if (node.is_integer()) return static_cast<double>(node.as_integer()->get());
  if (node.is_floating_point() && std::isfinite(node.as_floating_point()->get())) return node.as_floating_point()->get();
  throw Error(key + ": expected a finite number" + where);
}

SpaceDimension read_dimension(const std::string& key, const toml::table& domain, const std::string& source) {
  const std::string where = line_of(domain, source);
  const std::string name = "sweep.space." + key;
  if (domain.size() != 1)
    throw Error(name + ": give exactly one of grid = [...], choice = [...], uniform = [a, b], loguniform = [a, b], "
                "randint = [a, b]" + where);
  // toml++'s iterator owns the pair it yields: keep it alive while using it.
  const auto first = domain.begin();
  const std::string kind_name(first->first.str());
  const toml::node& node = first->second;
  static const std::map<std::string, SpaceKind> kinds = {{"grid", SpaceKind::kGrid},
                                                         {"choice", SpaceKind::kChoice},
                                                         {"uniform", SpaceKind::kUniform},
                                                         {"loguniform", SpaceKind::kLogUniform},
                                                         {"randint", SpaceKind::kRandInt}};
  const auto kind = kinds.find(kind_name);
  if (kind == kinds.end())
    throw Error(name + ": unknown domain '" + kind_name + "'" + where +
                "; use grid, choice, uniform, loguniform or randint");
  const toml::array* list = node.as_array();
  if (!list) throw Error(name + ": " + kind_name + " takes a list, [...]" + where);
  SpaceDimension d;
  d.key = key;
  d.kind = kind->second;
  if (d.kind == SpaceKind::kGrid || d.kind == SpaceKind::kChoice) {
    if (list->empty()) throw Error(name + ": " + kind_name + " = [] has no values" + where);
    for (const toml::node& item : *list) d.values.push_back(value_text(name, item, where));
    return d;
  }
  if (list->size() != 2) throw Error(name + ": " + kind_name + " takes two numbers, [a, b]" + where);
  if (d.kind == SpaceKind::kRandInt) {
    // Integers end to end: a double holds every integer only up to 2^53.
    if (!list->get(0)->is_integer() || !list->get(1)->is_integer())
      throw Error(name + ": randint takes two integers, [a, b) with b exclusive" + where);
    d.int_low = list->get(0)->as_integer()->get();
    d.int_high = list->get(1)->as_integer()->get();
    if (!(d.int_low < d.int_high))
      throw Error(name + ": randint needs a < b, got a = " + std::to_string(d.int_low) +
                  ", b = " + std::to_string(d.int_high) + where);
    return d;
  }
  d.low = number_of(name, *list->get(0), where);
  d.high = number_of(name, *list->get(1), where);
  const std::string got = "got a = " + shortest_text(d.low) + ", b = " + shortest_text(d.high);
  if (d.kind == SpaceKind::kLogUniform && !(d.low > 0 && d.low < d.high))
    throw Error(name + ": loguniform needs 0 < a < b, " + got + where);
  if (!(d.low < d.high)) throw Error(name + ": " + kind_name + " needs a < b, " + got + where);
  return d;
}

// A leaf of [sweep.space] is a table with one domain key; anything else nests.
bool is_domain(const toml::table& table) {
  if (table.size() != 1) return false;
  const auto first = table.begin();
  const std::string k(first->first.str());
  return k == "grid" || k == "choice" || k == "uniform" || k == "loguniform" || k == "randint";
}

void read_space(const toml::table& table, const std::string& prefix, const std::string& source,
                const std::set<std::string>& known, std::vector<SpaceDimension>& out) {
  for (const auto& [name, node] : table) {
    const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    const toml::table* sub = node.as_table();
    if (!sub)
      throw Error("sweep.space." + key + ": expected a domain such as { grid = [...] } or { loguniform = [a, b] }" +
                  line_of(node, source));
    if (!is_domain(*sub) && !known.count(key)) {
      read_space(*sub, key, source, known, out);
      continue;
    }
    if (!known.count(key))
      throw Error("sweep.space." + key + ": unknown run-config key '" + key + "'" + line_of(node, source) +
                  " (shardtrain config --help lists them)");
    if (key == "run.name" || key == "run.storage_path")
      throw Error("sweep.space." + key + ": the sweep sets it (each trial is <sweep folder>/<trial id>)" +
                  line_of(node, source));
    out.push_back(read_dimension(key, *sub, source));
  }
}

template <class T>
T get_or(const toml::table& sweep, const char* key, T fallback, const std::string& source) {
  const toml::node* node = sweep.get(key);
  if (!node) return fallback;
  const std::string where = line_of(*node, source);
  if constexpr (std::is_same_v<T, std::string>) {
    if (!node->is_string()) throw Error(std::string("sweep.") + key + ": expected a string (in quotes)" + where);
    return node->as_string()->get();
  } else {
    if (!node->is_integer()) throw Error(std::string("sweep.") + key + ": expected an integer" + where);
    return node->as_integer()->get();
  }
}

int64_t at_least(const char* key, int64_t value, int64_t min) {
  if (value < min)
    throw Error(str_format("sweep.%s = %lld: must be at least %lld", key, static_cast<long long>(value),
                           static_cast<long long>(min)));
  return value;
}

// Uniform in [0, 1) from 53 bits: the same on every platform (std's
// distributions are not specified bit for bit).
double unit_draw(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Uniform in [low, high), exactly, for any int64 low < high: the span is
// taken as uint64 (it fits: at most 2^64 - 1) and drawn by Lemire's
// multiply-shift with rejection (no modulo bias). One draw of the generator
// but with probability span / 2^64 of another; for spans far below 2^53 the
// value is that of the earlier floor(unit_draw x span) but for that chance.
int64_t randint_draw(std::mt19937_64& rng, int64_t low, int64_t high) {
  const uint64_t span = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  unsigned __int128 product = static_cast<unsigned __int128>(rng()) * span;
  if (static_cast<uint64_t>(product) < span) {
    const uint64_t threshold = (0 - span) % span;  // 2^64 mod span
    while (static_cast<uint64_t>(product) < threshold) product = static_cast<unsigned __int128>(rng()) * span;
  }
  // low + offset in uint64 wraps to the int64 value (two's complement).
  return static_cast<int64_t>(static_cast<uint64_t>(low) + static_cast<uint64_t>(product >> 64));
}

}  // namespace

const char* space_kind_name(SpaceKind kind) {
  switch (kind) {
    case SpaceKind::kGrid: return "grid";
    case SpaceKind::kChoice: return "choice";
    case SpaceKind::kUniform: return "uniform";
    case SpaceKind::kLogUniform: return "loguniform";
    case SpaceKind::kRandInt: return "randint";
  }
  return "?";
}

SweepSpec parse_sweep_text(const std::string& text, const std::string& source, const std::string& base_dir) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw Error("cannot parse sweep file " + source + " (line " + std::to_string(e.source().begin.line) +
                ", column " + std::to_string(e.source().begin.column) + "): " + std::string(e.description()));
  }
  for (const auto& [name, node] : root)
    if (name.str() != "sweep")
      throw Error("sweep file " + source + ": unknown section or key '" + std::string(name.str()) + "'" +
                  line_of(node, source) + "; a sweep file holds [sweep] and [sweep.space] (the run config goes in "
                  "the file sweep.base names)");
  const toml::table* sweep = root["sweep"].as_table();
  if (!sweep) throw Error("sweep file " + source + " has no [sweep] section");
  static const std::set<std::string> keys = {"base", "name", "metric", "mode", "num_samples", "repeats",
                                             "ranks_per_trial", "seed", "scheduler", "grace_period",
                                             "reduction_factor", "max_t", "space"};
  for (const auto& [name, node] : *sweep)
    if (!keys.count(std::string(name.str())))
      throw Error("unknown key 'sweep." + std::string(name.str()) + "'" + line_of(node, source) +
                  "; [sweep] takes base, name, metric, mode, num_samples, repeats, ranks_per_trial, seed, scheduler, "
                  "grace_period, reduction_factor, max_t and [sweep.space]");
  SweepSpec spec;
  spec.file = source;
  const std::string base = get_or<std::string>(*sweep, "base", "", source);
  if (base.empty()) throw Error("sweep.base: name the run config every trial starts from (" + source + ")");
  spec.base = std::filesystem::path(base).is_absolute() ? base : (std::filesystem::path(base_dir) / base).string();
  spec.name = get_or<std::string>(*sweep, "name", "", source);
  if (spec.name.empty() || spec.name == "." || spec.name == ".." || spec.name.find('/') != std::string::npos)
    throw Error("sweep.name: a folder name under the base config's run.storage_path (no '/'), got '" + spec.name +
                "' (" + source + ")");
  spec.metric = get_or<std::string>(*sweep, "metric", "", source);
  if (spec.metric.empty()) throw Error("sweep.metric: name the metric to optimize, e.g. \"eval_accuracy\" (" + source + ")");
  const std::string mode = get_or<std::string>(*sweep, "mode", "", source);
  if (mode != "max" && mode != "min") throw Error("sweep.mode: \"max\" or \"min\", got '" + mode + "' (" + source + ")");
  spec.maximize = mode == "max";
  spec.num_samples = at_least("num_samples", get_or<int64_t>(*sweep, "num_samples", 1, source), 1);
  spec.repeats = at_least("repeats", get_or<int64_t>(*sweep, "repeats", 1, source), 1);
  spec.ranks_per_trial = at_least("ranks_per_trial", get_or<int64_t>(*sweep, "ranks_per_trial", 1, source), 1);
  spec.seed = at_least("seed", get_or<int64_t>(*sweep, "seed", 0, source), 0);
  const std::string scheduler = get_or<std::string>(*sweep, "scheduler", "none", source);
  if (scheduler != "asha" && scheduler != "none")
    throw Error("sweep.scheduler: \"asha\" or \"none\", got '" + scheduler + "' (" + source + ")");
  spec.asha = scheduler == "asha";
  spec.grace_period = at_least("grace_period", get_or<int64_t>(*sweep, "grace_period", 1, source), 1);
  spec.reduction_factor = at_least("reduction_factor", get_or<int64_t>(*sweep, "reduction_factor", 4, source), 2);
  spec.max_t = at_least("max_t", get_or<int64_t>(*sweep, "max_t", 100, source), spec.grace_period);
  if (!spec.asha)
    for (const char* key : {"grace_period", "reduction_factor", "max_t"})
      if (sweep->get(key))
        throw Error(std::string("sweep.") + key + " only applies with sweep.scheduler = \"asha\" (" + source + ")");
  const toml::node* space = sweep->get("space");
  if (space && !space->is_table()) throw Error("sweep.space: expected a table, [sweep.space]" + line_of(*space, source));
  if (space) read_space(*space->as_table(), "", source, run_config_keys(), spec.space);
  std::sort(spec.space.begin(), spec.space.end(),
            [](const SpaceDimension& a, const SpaceDimension& b) { return a.key < b.key; });
  for (size_t i = 1; i < spec.space.size(); ++i)
    if (spec.space[i].key == spec.space[i - 1].key)
      throw Error("sweep.space." + spec.space[i].key + " is given twice (" + source + ")");
  if (spec.space.empty())
    throw Error("sweep.space is empty (" + source + "): give at least one run-config key to search, e.g. "
                "\"train.lr\" = { loguniform = [1e-5, 1e-3] }");
  // num_samples x grid points x repeats, refused past kMaxTrials before any is made.
  double num_trials = static_cast<double>(spec.num_samples) * static_cast<double>(spec.repeats);
  for (const SpaceDimension& d : spec.space)
    if (d.kind == SpaceKind::kGrid) num_trials *= static_cast<double>(d.values.size());
  if (num_trials > static_cast<double>(kMaxTrials))
    throw Error(str_format("sweep.num_samples x grid points x sweep.repeats = %.0f trials (%s); a sweep makes at most "
                           "%lld", num_trials, source.c_str(), static_cast<long long>(kMaxTrials)));
  if (spec.repeats > 1)
    for (const SpaceDimension& d : spec.space)
      if (d.key == "train.seed")
        throw Error("sweep.space.train.seed with sweep.repeats = " + std::to_string(spec.repeats) +
                    ": repeats set train.seed (base seed + repeat); search the seed or repeat, not both");
  return spec;
}

SweepSpec read_sweep_file(const std::string& path) {
  require_regular_file(path, "the sweep file");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return parse_sweep_text(read_file(path, "the sweep file"), path, dir.empty() ? "." : dir);
}

std::vector<TrialSpec> make_trials(const SweepSpec& spec) {
  std::vector<const SpaceDimension*> grid;
  for (const SpaceDimension& d : spec.space)
    if (d.kind == SpaceKind::kGrid) grid.push_back(&d);
  int64_t num_points = 1;
  for (const SpaceDimension* d : grid) num_points *= static_cast<int64_t>(d->values.size());
  std::mt19937_64 rng(static_cast<uint64_t>(spec.seed));
  std::vector<TrialSpec> trials;
  int64_t config_index = 0;
  for (int64_t sample = 0; sample < spec.num_samples; ++sample) {
    for (int64_t point = 0; point < num_points; ++point) {
      std::map<std::string, std::string> chosen;
      int64_t rest = point;  // mixed radix, the last grid key fastest
      for (size_t g = grid.size(); g-- > 0;) {
        const int64_t n = static_cast<int64_t>(grid[g]->values.size());
        chosen[grid[g]->key] = grid[g]->values[static_cast<size_t>(rest % n)];
        rest /= n;
      }
      std::vector<std::pair<std::string, std::string>> params;
      for (const SpaceDimension& d : spec.space) {
        std::string value;
        if (d.kind == SpaceKind::kRandInt) {
          params.emplace_back(d.key, std::to_string(randint_draw(rng, d.int_low, d.int_high)));
          continue;
        }
        const double u = d.kind == SpaceKind::kGrid ? 0.0 : unit_draw(rng);
        switch (d.kind) {
          case SpaceKind::kGrid: value = chosen[d.key]; break;
          case SpaceKind::kChoice:
            value = d.values[std::min(d.values.size() - 1, static_cast<size_t>(u * static_cast<double>(d.values.size())))];
            break;
          case SpaceKind::kUniform: value = shortest_text(d.low + (d.high - d.low) * u); break;
          case SpaceKind::kLogUniform:
            value = shortest_text(std::exp(std::log(d.low) + (std::log(d.high) - std::log(d.low)) * u));
            break;
          case SpaceKind::kRandInt: break;  // drawn above
        }
        params.emplace_back(d.key, value);
      }
      for (int64_t repeat = 0; repeat < spec.repeats; ++repeat) {
        TrialSpec t;
        t.config_index = config_index;
        t.repeat = repeat;
        t.params = params;
        t.id = str_format("trial_%03lld", static_cast<long long>(config_index)) +
               (spec.repeats > 1 ? str_format("_r%lld", static_cast<long long>(repeat)) : "");
        trials.push_back(std::move(t));
      }
      ++config_index;
    }
  }
  return trials;
}

}  // namespace shardtrain
