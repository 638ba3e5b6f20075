// Private to the cli layer: `--config FILE` plus one `--section.key VALUE`
// option per RunConfig key, on any subcommand that takes a run config.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "shardtrain/config/config.h"

namespace shardtrain {

struct ConfigFlags {
  CLI::App* command = nullptr;
  std::string file;
  std::vector<std::pair<std::string, CLI::Option*>> options;

  // The overrides given on the command line, as ("section.key", value).
  ConfigOverrides overrides() const;
  // load_run_config(file, overrides(), options).
  RunConfig load(const LoadOptions& options = LoadOptions()) const;
};

// Registers the options on `command`; the returned flags are filled by parsing.
std::shared_ptr<ConfigFlags> add_config_flags(CLI::App& command);

}  // namespace shardtrain
