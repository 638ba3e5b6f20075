// The DeepSpeed JSON tests' fixtures (tests/test_deepspeed_*.cpp): the
// reference workflow's JSON, a scratch folder with a run config that points at
// a ds.json, and loading it for a world size. Shared here because those files
// are compiled together (unity build, see tests/CMakeLists.txt). Uses doctest's
// REQUIRE: include it after <torch/torch.h> and <doctest/doctest.h>.
#pragma once

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardtrain/config/config.h"
#include "mpi_ranks.h"

namespace shardtrain_test::deepspeed_tests {

// What every DeepSpeed test file uses: `using namespace shardtrain_test::deepspeed_tests;`.
using namespace shardtrain;  // the config structs and the choice enums (core/enum_names.h)
using nlohmann::json;
using shardtrain_test::contains;
using shardtrain_test::error_of;

// The reference workflow's ZeRO-3 JSON as shipped.
inline json reference_json() {
  std::ifstream in(std::string(SHARDTRAIN_SOURCE_DIR) + "/configs/deepspeed/zero3_offload.json");
  REQUIRE(in.good());
  return json::parse(in);
}

// A scratch folder: data, vocabulary, a model config.json with a chosen
// hidden_size, and a run config that points at them and at ds.json.
struct DsScratch {
  std::string dir;
  explicit DsScratch(int hidden_size = 768) {
    char pattern[] = "/tmp/shardtrain_dsconfig_XXXXXX";
    dir = mkdtemp(pattern);
    std::ofstream(dir + "/train.tsv") << "Quality\t#1 String\t#2 String\n1\ta\tb\n";
    std::ofstream(dir + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
    std::ofstream(dir + "/bert.json") << json{{"hidden_size", hidden_size}}.dump();
  }
  ~DsScratch() { std::filesystem::remove_all(dir); }

  // ds.json holds `ds`; the run config adds `extra` TOML after [model] and [data].
  std::string config(const json& ds, const std::string& extra = "", const std::string& parallel_extra = "") const {
    std::ofstream(dir + "/ds.json") << ds.dump(2);
    const std::string path = dir + "/run.toml";
    std::ofstream(path) << "[model]\ninit = \"random\"\nconfig = \"" << dir << "/bert.json\"\nvocab = \"" << dir
                        << "/vocab.txt\"\n\n[data]\ntrain_file = \"" << dir << "/train.tsv\"\n\n"
                        << extra << "\n[parallel]\ndeepspeed_config = \"" << dir << "/ds.json\"\n"
                        << parallel_extra;
    return path;
  }
};

// load_run_config as a job of `world_size` ranks would; `lines` gets the printed DeepSpeed lines.
inline RunConfig load(const std::string& file, int world_size, std::vector<std::string>* lines = nullptr,
                      const ConfigOverrides& overrides = {}) {
  LoadOptions options;
  options.world_size = world_size;
  options.deepspeed_lines = lines;
  return load_run_config(file, overrides, options);
}

inline bool has_line(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& line : lines)
    if (contains(line, text)) return true;
  return false;
}

// Number of "  - " items in a problem list.
inline int count_items(const std::string& message) {
  int n = 0;
  for (size_t at = message.find("\n  - "); at != std::string::npos; at = message.find("\n  - ", at + 1)) ++n;
  return n;
}

}  // namespace shardtrain_test::deepspeed_tests
