// CheckpointManager over real MPI (np 2 and 4): the one filename pattern and
// latest_checkpoint, the cadence of every_steps / every_epochs / the last
// report, keep-best-N by a metric in either order (the newest always kept,
// unscored checkpoints ranked last, ties to the newer), what a restarted job
// finds, --resume of a file that does not exist, and resuming past a damaged
// newest checkpoint (set aside, never deleted, its number never reused).
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "support/checkpoint_state.h"
#include "support/mpi_ranks.h"

using namespace shardtrain;

namespace checkpoint_manager_mpi_test {
using shardtrain_test::error_of;
using shardtrain_test::world_rank;
using shardtrain_test::world_size;

namespace {

bool exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
}

// A one-tensor state of 3 elements per rank, rank r owning elements [3r, 3r + 3).
struct TinyState {
  std::vector<FlatTensor> layout{{"w", {3 * world_size()}, 0}};
  std::vector<FlatPart> parts() const {
    FlatPart part;
    part.begin = 3 * world_rank();
    part.params = at::arange(3, at::kFloat) + part.begin;
    part.exp_avg = at::zeros({3});
    part.exp_avg_sq = at::zeros({3});
    return {part};
  }
};

TrainState state_with(int64_t step, const std::string& metrics_json) {
  TrainState s;
  s.step = step;
  s.metrics_json = metrics_json;
  return s;
}

// The checkpoint files of `dir` that exist, as indices.
std::set<int64_t> present(const std::string& dir, int64_t up_to) {
  std::set<int64_t> out;
  for (int64_t i = 1; i <= up_to; ++i)
    if (exists(checkpoint_path(dir, i))) out.insert(i);
  return out;
}

}  // namespace

TEST_CASE("one filename pattern; latest_checkpoint picks the highest complete index and ignores temporary files") {
  const std::string dir = shardtrain_test::make_shared_temp_dir("manager_latest");
  CHECK(latest_checkpoint(dir).empty());
  CHECK(latest_checkpoint(dir + "/does_not_exist").empty());
  auto layout = shardtrain_test::awkward_layout();
  const int64_t numel = shardtrain_test::layout_numel(layout);
  const std::vector<int64_t> cuts = shardtrain_test::even_cuts(numel, world_size());
  for (int64_t index : {1, 3, 2}) {  // 2 written last, with a lower index
    CheckpointWriter writer(checkpoint_path(dir, index), MPI_COMM_WORLD);
    writer.write_group("model", shardtrain_test::part_slices(layout, shardtrain_test::flat_state(numel, 0.0), cuts,
                                                             world_rank()));
    writer.commit();
  }
  if (world_rank() == 0) {
    // Leftovers of a crashed job and unrelated names.
    std::ofstream(dir + "/checkpoint_000009.h5.tmp-12345") << "partial";
    std::ofstream(dir + "/checkpoint_000010.h5.bak") << "x";
    std::ofstream(dir + "/notes_checkpoint_000011.h5") << "x";
  }
  {
    CheckpointWriter abandoned(checkpoint_path(dir, 7), MPI_COMM_WORLD);
    abandoned.write_group("model", shardtrain_test::part_slices(layout, shardtrain_test::flat_state(numel, 0.0), cuts,
                                                                world_rank()));
  }  // no commit
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(latest_checkpoint(dir) == dir + "/checkpoint_000003.h5");
  CHECK(checkpoint_path(dir, 3) == dir + "/checkpoint_000003.h5");
  CHECK(checkpoint_path("/runs/a", 1234567) == "/runs/a/checkpoint_1234567.h5");
  CHECK(checkpoint_index(dir + "/checkpoint_000003.h5") == 3);
  CHECK(checkpoint_index(dir + "/checkpoint_000009.h5.tmp-12345") == -1);
  CHECK(checkpoint_index("notes_checkpoint_000011.h5") == -1);
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("cadence: every_steps, every_epochs and always the last report") {
  CheckpointConfig config;
  config.every_steps = 0;
  config.every_epochs = 2;
  const CheckpointManager every_two_epochs("/nonexistent", config, MPI_COMM_WORLD);
  CHECK_FALSE(every_two_epochs.due(10, /*epoch_end=*/true, /*epochs_done=*/1, /*last=*/false));
  CHECK(every_two_epochs.due(20, true, 2, false));
  CHECK_FALSE(every_two_epochs.due(20, false, 2, false));  // mid-epoch: not an epoch end
  CHECK(every_two_epochs.due(25, true, 3, true));           // the end of training always
  config.every_steps = 4;
  config.every_epochs = 0;
  const CheckpointManager every_four_steps("/nonexistent", config, MPI_COMM_WORLD);
  CHECK(every_four_steps.due(8, false, 0, false));
  CHECK_FALSE(every_four_steps.due(9, false, 0, false));
  CHECK_FALSE(every_four_steps.due(10, true, 1, false));
  CHECK(every_four_steps.due(12, true, 1, false));
}

TEST_CASE("keep-best-N by a metric, in either order; the newest is always kept; a restart sees the survivors") {
  const TinyState tiny;
  for (const ScoreOrder order : {ScoreOrder::kMax, ScoreOrder::kMin}) {
    CAPTURE(enum_name(order));
    const std::string dir = shardtrain_test::make_shared_temp_dir("manager_keep");
    CheckpointConfig config;
    config.num_to_keep = 2;
    config.score_attribute = "eval_f1";
    config.score_order = order;
    CheckpointManager manager(dir, config, MPI_COMM_WORLD);
    CHECK(manager.newest().empty());
    CHECK(manager.best().empty());
    // f1 by checkpoint: 1: 0.5, 2: 0.9, 3: 0.1, 4: (none), 5: 0.3
    const std::vector<std::string> metrics = {"{\"eval_f1\": 0.5}", "{\"eval_f1\": 0.9}", "{\"eval_f1\": 0.1}",
                                              "{\"train_loss\": 1.0}", "{\"eval_f1\": 0.3}"};
    for (size_t i = 0; i < metrics.size(); ++i) {
      const std::string path = manager.save(tiny.layout, tiny.parts(), state_with(static_cast<int64_t>(i + 1), metrics[i]));
      CHECK(path == checkpoint_path(dir, static_cast<int64_t>(i + 1)));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // max: the best two are 2 (0.9) and 1 (0.5); min: 3 (0.1) and 5 (0.3). 5 is the newest either way.
    const std::set<int64_t> expected = order == ScoreOrder::kMax ? std::set<int64_t>{1, 2, 5} : std::set<int64_t>{3, 5};
    CHECK(present(dir, 6) == expected);
    CHECK(manager.newest() == checkpoint_path(dir, 5));
    CHECK(manager.best() == checkpoint_path(dir, order == ScoreOrder::kMax ? 2 : 3));

    // A restarted job finds the survivors, their scores, and numbers on.
    CheckpointManager restarted(dir, config, MPI_COMM_WORLD);
    CHECK(restarted.newest() == checkpoint_path(dir, 5));
    CHECK(restarted.best() == manager.best());
    CHECK(restarted.resume_path("") == checkpoint_path(dir, 5));
    CHECK(restarted.save(tiny.layout, tiny.parts(), state_with(6, "{\"eval_f1\": 0.2}")) == checkpoint_path(dir, 6));
    shardtrain_test::remove_shared_dir(dir);
  }
}

TEST_CASE("without a score the newest N are kept; --resume of a missing file is an error on every rank") {
  const TinyState tiny;
  const std::string dir = shardtrain_test::make_shared_temp_dir("manager_newest");
  CheckpointConfig config;
  config.num_to_keep = 2;
  CheckpointManager manager(dir, config, MPI_COMM_WORLD);
  for (int64_t step = 1; step <= 4; ++step) manager.save(tiny.layout, tiny.parts(), state_with(step, "{}"));
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(present(dir, 5) == std::set<int64_t>{3, 4});
  CHECK(manager.best().empty());
  CHECK(error_of([&] { manager.resume_path(dir + "/checkpoint_000001.h5"); }) ==
        "--resume: no checkpoint file '" + dir + "/checkpoint_000001.h5'");
  CHECK(manager.resume_path(dir + "/checkpoint_000003.h5") == dir + "/checkpoint_000003.h5");
  shardtrain_test::remove_shared_dir(dir);
}

TEST_CASE("resume verifies the newest checkpoint: a damaged one is set aside and the next older one used") {
  const TinyState tiny;
  const std::string dir = shardtrain_test::make_shared_temp_dir("manager_damaged");
  CheckpointConfig config;
  {
    CheckpointManager manager(dir, config, MPI_COMM_WORLD);
    for (int64_t step = 1; step <= 3; ++step) manager.save(tiny.layout, tiny.parts(), state_with(step, "{}"));
  }
  const std::string newest = checkpoint_path(dir, 3);
  if (world_rank() == 0) {
    // Cut the newest file in half, as a node that died mid-copy would leave it.
    std::ifstream in(newest, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    std::ofstream(newest, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointManager restarted(dir, config, MPI_COMM_WORLD);
  // Asked for by name, the damaged file is refused, and left where it is.
  const std::string refused = error_of([&] { restarted.resume_path(newest); });
  CHECK(refused.rfind("--resume: " + newest, 0) == 0);
  CHECK(refused.find("leave --resume out") != std::string::npos);
  CHECK(exists(newest));
  MPI_Barrier(MPI_COMM_WORLD);
  // Found by the scan, it is recorded and checkpoint 2 resumes; it is set
  // aside (not deleted) only when the job says so, once nothing refuses it.
  CHECK(restarted.resume_path("") == checkpoint_path(dir, 2));
  const std::vector<std::string> damaged = restarted.damaged();
  REQUIRE(damaged.size() == 1);
  CHECK(damaged[0].rfind(newest, 0) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(exists(newest));
  MPI_Barrier(MPI_COMM_WORLD);  // every rank looked before rank 0 renames it
  restarted.set_aside_damaged();
  CHECK(restarted.damaged().empty());
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_FALSE(exists(newest));
  CHECK(exists(newest + ".damaged"));
  CHECK(latest_checkpoint(dir) == checkpoint_path(dir, 2));
  // The next checkpoint takes a new number, not the damaged one's.
  CHECK(restarted.save(tiny.layout, tiny.parts(), state_with(3, "{}")) == checkpoint_path(dir, 4));
  CHECK(restarted.newest() == checkpoint_path(dir, 4));
  // Every checkpoint damaged: none to resume, all three recorded (newest
  // first), and set aside on request (nothing deleted).
  if (world_rank() == 0)
    for (int64_t i : {1, 2, 4}) std::ofstream(checkpoint_path(dir, i), std::ios::trunc) << "not hdf5";
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointManager again(dir, config, MPI_COMM_WORLD);
  CHECK(again.resume_path("").empty());
  const std::vector<std::string> all_damaged = again.damaged();
  REQUIRE(all_damaged.size() == 3);
  CHECK(all_damaged[0].find(checkpoint_path(dir, 4)) != std::string::npos);
  again.set_aside_damaged();
  MPI_Barrier(MPI_COMM_WORLD);
  for (int64_t i : {1, 2, 4}) CHECK(exists(checkpoint_path(dir, i) + ".damaged"));
  shardtrain_test::remove_shared_dir(dir);
}

}  // namespace checkpoint_manager_mpi_test
