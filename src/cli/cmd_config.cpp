// `shardtrain config`: resolve and validate a run config, print it as TOML
// (after what a DeepSpeed JSON resolved to, as comments).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "shardtrain/comm/world.h"

namespace shardtrain {

void add_config_command(CLI::App& root, World& world) {
  CLI::App* command = root.add_subcommand(
      "config", "Validate a run config (file + overrides) and print the resolved values as TOML");
  auto flags = add_config_flags(*command);
  auto world_size = std::make_shared<int>(0);
  command->add_option("--world-size", *world_size,
                      "resolve a DeepSpeed JSON (train_batch_size, \"auto\") for this many ranks; "
                      "default: the ranks of this job")
      ->check(CLI::PositiveNumber);
  command->callback([flags, world_size, &world]() {
    LoadOptions options;
    options.world_size = *world_size > 0 ? *world_size : world.size();
    std::vector<std::string> deepspeed_lines;
    options.deepspeed_lines = &deepspeed_lines;
    const RunConfig config = flags->load(options);
    if (world.rank() != 0) return;
    // Comments, so that the output stays a config that loads back unchanged.
    for (const auto& line : deepspeed_lines) std::printf("# %s\n", line.c_str());
    std::fputs(config_to_toml(config).c_str(), stdout);
  });
}

}  // namespace shardtrain
