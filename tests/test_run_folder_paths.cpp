// Creating the run folder (report/run_folder.h): when a file is in the way the
// error names the path that is a file -- run.storage_path itself, or the run
// folder <storage_path>/<name> -- instead of blaming run.storage_path for both.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>

#include <fstream>
#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/core/run_config.h"
#include "shardtrain/report/run_folder.h"
#include "support/scratch_dir.h"

namespace test_run_folder_paths_test {

using namespace shardtrain;

std::string run_folder_paths_error(const JobConfig& run) {
  try {
    RunFolder folder(run, MPI_COMM_SELF);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("a file where the run folder or run.storage_path should be is named") {
  const shardtrain_test::ScratchDir scratch("run_folder_paths");
  JobConfig run;
  run.storage_path = scratch.dir;
  run.name = "taken";
  std::ofstream(scratch.dir + "/taken") << "a file\n";
  const std::string folder_message = run_folder_paths_error(run);
  CHECK(folder_message == "the run folder '" + scratch.dir + "/taken' (run.storage_path / run.name) is a file, not a "
                          "folder; choose another run.name or move the file away");

  run.storage_path = scratch.dir + "/taken";
  run.name = "q";
  CHECK(run_folder_paths_error(run) == "run.storage_path = '" + scratch.dir + "/taken' is a file, not a folder; point "
                                       "it at a folder");
  run.storage_path = scratch.dir + "/runs";
  CHECK(run_folder_paths_error(run) == "(no error)");
}

}  // namespace test_run_folder_paths_test
