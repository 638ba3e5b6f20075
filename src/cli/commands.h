// Private to the cli layer: each subcommand lives in src/cli/cmd_<name>.cpp and
// registers itself on the root CLI11 app through one add_<name>_command()
// function declared here. The callback does the work; it throws
// shardtrain::Error for anything the user can fix (run_cli reports it and
// exits with status 2).
#pragma once

#include <CLI/CLI.hpp>

namespace shardtrain {

class World;

void add_config_command(CLI::App& root, World& world);
void add_tokenize_command(CLI::App& root, World& world);
void add_predict_command(CLI::App& root, World& world);
void add_train_command(CLI::App& root, World& world);
void add_sweep_command(CLI::App& root, World& world);
void add_inspect_command(CLI::App& root, World& world);
void add_export_command(CLI::App& root, World& world);
void add_plot_command(CLI::App& root, World& world);
void add_estimate_memory_command(CLI::App& root, World& world);

}  // namespace shardtrain
