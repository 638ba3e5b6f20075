// Kills a job in the middle of writing a checkpoint, for the CTest
// checkpoint_crash_leaves_previous_intact (tests/CMakeLists.txt):
//   checkpoint_crash_probe crash DIR   writes checkpoint 1 completely, starts
//                                      checkpoint 2, writes its "model" group,
//                                      then rank 0 _exit(1)s: the job dies with
//                                      checkpoint 2 half written
//   checkpoint_crash_probe verify DIR  (a new job, any size) checkpoint 1 is the
//                                      latest, intact and bit-exact; checkpoint
//                                      2 has no final name, only its .tmp file
// Prints "checkpoint crash probe: OK" and exits 0 when verify passes.
#include <ATen/ATen.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "support/checkpoint_state.h"

using namespace shardtrain;
using namespace shardtrain_test;

namespace {

enum class Groups { kModel, kOptimizer, kAll };

void write_groups(CheckpointWriter& writer, int rank, int size, Groups groups) {
  auto layout = awkward_layout();
  const int64_t numel = layout_numel(layout);
  auto cuts = uneven_cuts(numel, size);
  if (groups != Groups::kOptimizer)
    writer.write_group("model", part_slices(layout, flat_state(numel, 0.0), cuts, rank));
  if (groups == Groups::kModel) return;
  writer.write_group("optim/exp_avg", part_slices(layout, flat_state(numel, 1.0), cuts, rank));
  writer.write_group("optim/exp_avg_sq", part_slices(layout, flat_state(numel, 2.0), cuts, rank));
}

int fail(const std::string& message) {
  std::fprintf(stderr, "checkpoint crash probe: FAILED: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  World world(&argc, &argv);
  if (argc < 3) return fail("usage: checkpoint_crash_probe crash|verify DIR");
  const std::string mode = argv[1], dir = argv[2];
  const int rank = world.rank(), size = world.size();

  if (mode == "crash") {
    {
      CheckpointWriter first(checkpoint_path(dir, 1), world.comm());
      write_groups(first, rank, size, Groups::kAll);
      first.set_attribute("step", 100);
      first.commit();
    }
    CheckpointWriter second(checkpoint_path(dir, 2), world.comm());
    second.set_attribute("step", 200);
    write_groups(second, rank, size, Groups::kModel);
    MPI_Barrier(world.comm());
    if (rank == 0) _exit(1);  // no destructor, no cleanup: as if the node died
    write_groups(second, rank, size, Groups::kOptimizer);  // the others block here until mpiexec kills them
    second.commit();
    return 3;  // reaching here means the crash did not happen
  }

  if (mode != "verify") return fail("unknown mode " + mode);
  int failures = 0;
  if (rank == 0) {
    struct stat info {};
    if (latest_checkpoint(dir) != checkpoint_path(dir, 1))
      failures += fail("latest_checkpoint is '" + latest_checkpoint(dir) + "', not checkpoint 1");
    if (stat(checkpoint_path(dir, 2).c_str(), &info) == 0) failures += fail("checkpoint 2 exists under its final name");
    bool found_tmp = false;
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* entry = readdir(d))
        found_tmp = found_tmp || std::strncmp(entry->d_name, "checkpoint_000002.h5.tmp-", 25) == 0;
      closedir(d);
    }
    if (!found_tmp) failures += fail("no checkpoint_000002.h5.tmp-* left: the crash did not happen mid-write");
  }
  CheckpointReader reader(checkpoint_path(dir, 1), world.comm());
  if (reader.int_attribute("step") != 100) failures += fail("checkpoint 1 has the wrong step");
  auto layout = awkward_layout();
  const int64_t numel = layout_numel(layout);
  const char* groups[] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};
  for (int g = 0; g < 3; ++g) {
    // Every rank reads everything, whatever the writing job's size was.
    at::Tensor flat = at::full({numel}, -1.0f);
    auto slices = slices_of_shard(layout, 0, flat);
    reader.read(groups[g], slices);
    if (!at::equal(flat, flat_state(numel, g)))
      failures += fail(std::string("group ") + groups[g] + " differs from what was written");
  }
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, world.comm());
  if (all_failures == 0 && rank == 0) std::printf("checkpoint crash probe: OK\n");
  return all_failures == 0 ? 0 : 1;
}
