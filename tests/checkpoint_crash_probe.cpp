// Kills a job in the middle of writing a checkpoint, for the CTest
// checkpoint_crash_leaves_previous_intact (tests/CMakeLists.txt):
//   checkpoint_crash_probe crash DIR   writes checkpoint 1 completely, starts
//                                      checkpoint 2, writes its "model" group,
//                                      then rank 0 _exit(1)s: the job dies with
//                                      checkpoint 2 half written
//   checkpoint_crash_probe verify DIR  (a new job, any size) checkpoint 1 is the
//                                      latest, intact and bit-exact; checkpoint
//                                      2 has no final name, only its .tmp file
//   checkpoint_crash_probe full_at_close DIR   (DIR: a small file system of
//                                      its own) writes every group of a
//                                      checkpoint, then rank 0 fills DIR's file
//                                      system up before commit(): the commit
//                                      either completes (the metadata had its
//                                      room; the checkpoint then reads back
//                                      bit-exact) or fails on every rank alike
//                                      with an Error naming ENOSPC and leaves
//                                      no temporary file; it never hangs in
//                                      parallel HDF5's metadata flush
//   checkpoint_crash_probe full_mid_write DIR  (DIR: a small file system)
//                                      writes checkpoint 1 with room, then
//                                      fills the disk up at each point of
//                                      checkpoint 2's write in turn (before
//                                      /model, /optim/exp_avg, /optim/exp_avg_sq):
//                                      every rank gets an Error naming ENOSPC,
//                                      within the test's time limit (a hang
//                                      fails it), no temporary file is left,
//                                      and checkpoint 1 reads back exactly
// Prints "checkpoint crash probe: OK" and exits 0 when its mode passes.
#include <ATen/ATen.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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

// A model-sized state: 160 tensors of 48 x 48 (enough metadata that parallel
// HDF5 spreads its flush over the ranks).
std::vector<FlatTensor> many_tensors_layout() {
  std::vector<FlatTensor> layout;
  for (int i = 0; i < 160; ++i) layout.push_back({"layer." + std::to_string(i) + ".weight", {48, 48}, 48 * 48 * i});
  return layout;
}

// Takes every free byte of the file system of `dir` (a file "filler").
void fill_up(const std::string& dir) {
  const std::string path = dir + "/filler";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  struct statvfs info {};
  if (statvfs(dir.c_str(), &info) == 0) {
    const off_t free_bytes = static_cast<off_t>(info.f_bavail) * static_cast<off_t>(info.f_frsize);
    if (free_bytes > 0) (void)fallocate(fd, 0, 0, free_bytes);
  }
  std::vector<char> block(4096, 1);
  while (write(fd, block.data(), block.size()) > 0) {
  }
  close(fd);
}

bool has_temporary_file(const std::string& dir) {
  bool found = false;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) found = found || std::strstr(entry->d_name, ".tmp-") != nullptr;
    closedir(d);
  }
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  World world(&argc, &argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out before a hang's SIGKILL
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

  if (mode == "full_at_close") {
    std::string error;
    try {
      CheckpointWriter writer(checkpoint_path(dir, 1), world.comm());
      writer.set_attribute("step", 100);
      const auto layout = many_tensors_layout();
      const int64_t numel = layout_numel(layout);
      const auto cuts = uneven_cuts(numel, size);
      for (const char* group : {"model", "optim/exp_avg", "optim/exp_avg_sq"})
        writer.write_group(group, part_slices(layout, flat_state(numel, 1.0), cuts, rank));
      if (rank == 0) fill_up(dir);
      MPI_Barrier(world.comm());
      writer.commit();
    } catch (const Error& e) {
      error = e.what();
    }
    int failures = 0;
    int failed = error.empty() ? 0 : 1, ranks_failed = 0;
    MPI_Allreduce(&failed, &ranks_failed, 1, MPI_INT, MPI_SUM, world.comm());
    if (ranks_failed != 0 && ranks_failed != size)
      failures += fail("commit() failed on " + std::to_string(ranks_failed) + " of " + std::to_string(size) + " ranks");
    if (failed && error.find("No space left on device (ENOSPC)") == std::string::npos)
      failures += fail("rank " + std::to_string(rank) + ": commit() on a full disk gave '" + error +
                       "', not an Error naming ENOSPC");
    if (rank == 0) std::printf("rank 0: %s\n", failed ? error.c_str() : "the commit completed on the full disk");
    MPI_Barrier(world.comm());
    if (rank == 0) {
      struct stat info {};
      const bool final_name = stat(checkpoint_path(dir, 1).c_str(), &info) == 0;
      if (failed && final_name) failures += fail("the commit failed, yet the checkpoint has its final name");
      if (!failed && !final_name) failures += fail("the commit completed, yet the checkpoint has no final name");
      if (has_temporary_file(dir)) failures += fail("a temporary file is left in " + dir);
    }
    if (ranks_failed == 0) {  // what was committed is complete and reads back exactly
      std::remove((dir + "/filler").c_str());
      MPI_Barrier(world.comm());
      const auto layout = many_tensors_layout();
      const int64_t numel = layout_numel(layout);
      CheckpointReader reader(checkpoint_path(dir, 1), world.comm());
      for (const char* group : {"model", "optim/exp_avg", "optim/exp_avg_sq"}) {
        at::Tensor flat = at::full({numel}, -1.0f);
        auto slices = slices_of_shard(layout, 0, flat);
        reader.read(group, slices);
        if (!at::equal(flat, flat_state(numel, 1.0)))
          failures += fail(std::string("group ") + group + " of the committed checkpoint differs");
      }
    }
    int all_failures = 0;
    MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, world.comm());
    if (all_failures == 0 && rank == 0) std::printf("checkpoint crash probe: OK\n");
    return all_failures == 0 ? 0 : 1;
  }

  if (mode == "full_mid_write") {
    // Checkpoint 1 is written with room; then the disk fills up at each point
    // of checkpoint 2's write in turn: after the constructor (the train state's
    // attributes), after /model, after /optim/exp_avg.
    const auto layout = many_tensors_layout();
    const int64_t numel = layout_numel(layout);
    const auto cuts = uneven_cuts(numel, size);
    const char* groups[] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};
    {
      CheckpointWriter first(checkpoint_path(dir, 1), world.comm());
      first.set_attribute("step", 100);
      for (const char* group : groups) first.write_group(group, part_slices(layout, flat_state(numel, 1.0), cuts, rank));
      first.commit();
    }
    int failures = 0;
    for (int fill_at = 0; fill_at < 3; ++fill_at) {
      std::string error;
      try {
        CheckpointWriter writer(checkpoint_path(dir, 2), world.comm());
        writer.set_attribute("step", 200);
        for (int g = 0; g < 3; ++g) {
          if (g == fill_at && rank == 0) fill_up(dir);
          MPI_Barrier(world.comm());
          writer.write_group(groups[g], part_slices(layout, flat_state(numel, 2.0), cuts, rank));
        }
        writer.commit();
      } catch (const Error& e) {
        error = e.what();
      }
      const std::string where = "disk filled before group " + std::string(groups[fill_at]);
      int failed = error.empty() ? 0 : 1, ranks_failed = 0;
      MPI_Allreduce(&failed, &ranks_failed, 1, MPI_INT, MPI_SUM, world.comm());
      if (ranks_failed != size)
        failures += fail(where + ": the write failed on " + std::to_string(ranks_failed) + " of " +
                         std::to_string(size) + " ranks, not on all");
      if (failed && error.find("No space left on device (ENOSPC)") == std::string::npos)
        failures += fail(where + ": rank " + std::to_string(rank) + " got '" + error + "', not an Error naming ENOSPC");
      if (rank == 0) std::printf("%s: rank 0: %s\n", where.c_str(), failed ? error.c_str() : "no error");
      if (rank == 0) {
        struct stat info {};
        if (stat(checkpoint_path(dir, 2).c_str(), &info) == 0)
          failures += fail(where + ": checkpoint 2 has its final name");
        if (has_temporary_file(dir)) failures += fail(where + ": a temporary file is left in " + dir);
        std::remove((dir + "/filler").c_str());
      }
      MPI_Barrier(world.comm());
      // The complete checkpoint beside it is untouched.
      CheckpointReader reader(checkpoint_path(dir, 1), world.comm());
      if (reader.int_attribute("step") != 100) failures += fail(where + ": checkpoint 1 has the wrong step");
      for (const char* group : groups) {
        at::Tensor flat = at::full({numel}, -1.0f);
        auto slices = slices_of_shard(layout, 0, flat);
        reader.read(group, slices);
        if (!at::equal(flat, flat_state(numel, 1.0)))
          failures += fail(where + ": group " + group + " of checkpoint 1 differs");
      }
    }
    int all_failures = 0;
    MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, world.comm());
    if (all_failures == 0 && rank == 0) std::printf("checkpoint crash probe: OK\n");
    return all_failures == 0 ? 0 : 1;
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
