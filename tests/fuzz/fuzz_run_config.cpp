// libFuzzer target: the TOML run config with `--section.key VALUE` overrides
// (load_run_config, src/config/config_parse.cpp). Input: the TOML file, then a line
// "=====", then one override per line as "section.key=value". What loads must
// print (config_to_toml) as TOML that loads back to the same text.
// Seeds: corpus/run_config (configs/*.toml and broken ones).
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz_support.h"
#include "shardtrain/config/config.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shardtrain::set_log_rank(1);  // warnings are for rank 0: keep the fuzzer's output quiet
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz_support::sections(data, size, 2);
  shardtrain::ConfigOverrides overrides;
  std::istringstream lines(parts[1]);
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) overrides.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  const std::string file = fuzz_support::write_scratch("run.toml", parts[0]);
  std::string printed;
  try {
    printed = shardtrain::config_to_toml(shardtrain::load_run_config(file, overrides));
  } catch (const shardtrain::Error&) {
    return 0;
  }
  const std::string again_file = fuzz_support::write_scratch("printed.toml", printed);
  std::string again;
  try {
    again = shardtrain::config_to_toml(shardtrain::load_run_config(again_file, {}));
  } catch (const shardtrain::Error& e) {
    std::fprintf(stderr, "fuzz: the printed config does not load: %s\n%s\n", e.what(), printed.c_str());
    std::abort();
  }
  FUZZ_REQUIRE(again == printed);
  return 0;
}
