// `shardtrain config`: resolve and validate a run config, print it as TOML.
#include <cstdio>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "shardtrain/comm/world.h"

namespace shardtrain {

void add_config_command(CLI::App& root, World& world) {
  CLI::App* command = root.add_subcommand(
      "config", "Validate a run config (file + overrides) and print the resolved values as TOML");
  auto flags = add_config_flags(*command);
  command->callback([flags, &world]() {
    const RunConfig config = flags->load();
    if (world.rank() == 0) std::fputs(config_to_toml(config).c_str(), stdout);
  });
}

}  // namespace shardtrain
