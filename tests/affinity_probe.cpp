// Starts a World and prints what it decided, for the binding tests in
// tests/CMakeLists.txt (launched under mpirun --bind-to core / none, taskset):
//   affinity probe: rank R cores LIST threads N torch_threads M
// World's own warnings (comm/world.h) go to stderr before it.
#include <ATen/Parallel.h>

#include <cstdio>

#include "shardtrain/comm/world.h"

int main(int argc, char** argv) {
  shardtrain::World world(&argc, &argv);
  world.log_binding();
  std::printf("affinity probe: rank %d cores %s threads %d torch_threads %d\n", world.rank(), world.cpu_list().c_str(),
              world.num_threads(), at::get_num_threads());
  std::fflush(stdout);
  return 0;
}
