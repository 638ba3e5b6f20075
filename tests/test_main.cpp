// Shared doctest main. It includes no torch header, so it compiles in seconds;
// a file that does include torch must include it before doctest: glog (pulled in
// by torch) defines CHECK, and doctest must define it last or assertions silently vanish.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "shardtrain/comm/world.h"

// Multi-rank tests initialise MPI once for the whole executable; single-rank
// tests run the same way with a world of one. Every rank runs every test case,
// and the exit code is the worst over all ranks so mpiexec reports failures.
int main(int argc, char** argv) {
  shardtrain::World world(&argc, &argv);
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  int result = context.run();
  return world.max_over_ranks(result);
}
