// After a FATAL (a watchdog's phase timeout on another thread), nothing is
// committed to a run folder: a checkpoint is not renamed into place
// (core/check.h, refuse_if_fatal_in_progress). And the timeout in such a
// message is written as given: 0.001 s, not "0 s".
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>
#include <sys/stat.h>

#include <string>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fatal_guard.h"
#include "shardtrain/core/text.h"
#include "support/mpi_ranks.h"
#include "support/scratch_dir.h"

namespace test_fatal_guard_test {

using namespace shardtrain;
using namespace shardtrain_test;

bool fatal_guard_exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
}

TEST_CASE("with a FATAL in progress a checkpoint is not committed; without one it is") {
  const ScratchDir scratch("fatal_guard");
  const std::string& dir = scratch.dir;
  const std::string path = dir + "/checkpoint_000001.h5";
  shardtrain::detail::set_fatal_in_progress_for_test(true);
  std::string message;
  {
    CheckpointWriter writer(path, MPI_COMM_SELF);
    writer.set_attribute("step", 3);
    try {
      writer.commit();
    } catch (const Error& e) {
      message = e.what();
    }
  }
  shardtrain::detail::set_fatal_in_progress_for_test(false);
  CHECK(contains(message, "not done, a FATAL error is ending this job"));
  CHECK_FALSE(fatal_guard_exists(path));
  {
    CheckpointWriter writer(path, MPI_COMM_SELF);
    writer.set_attribute("step", 3);
    writer.commit();
  }
  CHECK(fatal_guard_exists(path));
}

TEST_CASE("timeouts in messages keep their sub-second part") {
  CHECK(seconds_text(0.001) == "0.001 s");
  CHECK(seconds_text(600) == "600 s");
  CHECK(seconds_text(2.5) == "2.5 s");
}

}  // namespace test_fatal_guard_test
