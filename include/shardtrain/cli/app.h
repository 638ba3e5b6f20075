// The command-line front end: `shardtrain <subcommand> [options]`.
#pragma once

namespace shardtrain {

// Initialises MPI (World), parses the command line, runs the chosen subcommand.
// Returns the process exit code: 0 success, 2 a usage/config/input error (the
// message names what to fix), 1 anything else.
int run_cli(int argc, char** argv);

}  // namespace shardtrain
