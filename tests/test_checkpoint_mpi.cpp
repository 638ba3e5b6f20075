// Parallel-HDF5 checkpoints over real MPI (np 2 and 4): a sharded write read
// back bit-exactly under other partitions, attributes, atomic commit, user
// errors that name file and dataset, and h5dump's view of the file (true
// shapes, row-major values). Naming and finding checkpoints:
// test_checkpoint_manager_mpi.cpp.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/core/check.h"
#include "support/checkpoint_state.h"
#include "support/mpi_ranks.h"

using namespace shardtrain;
using namespace shardtrain_test;

namespace {

using shardtrain_test::world_rank;
using shardtrain_test::world_size;

bool exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
}

// True on every rank iff `ok` holds on every rank.
std::string run_command(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  pclose(pipe);
  return out;
}

// Writes the awkward state as groups "model" (salt 0), "optim/exp_avg" (salt 1)
// and an int64 group "counts", each rank owning its part of `cuts`.
void write_state(const std::string& path, const std::vector<int64_t>& cuts) {
  auto layout = awkward_layout();
  const int64_t numel = layout_numel(layout);
  at::Tensor model = flat_state(numel, 0.0), exp_avg = flat_state(numel, 1.0);
  at::Tensor counts = at::arange(numel, at::kLong) * 1000003 - 7;
  CheckpointWriter writer(path, MPI_COMM_WORLD);
  writer.write_group("model", part_slices(layout, model, cuts, world_rank()));
  writer.write_group("optim/exp_avg", part_slices(layout, exp_avg, cuts, world_rank()));
  writer.write_group("counts", part_slices(layout, counts, cuts, world_rank()));
  writer.set_attribute("step", 42);
  writer.commit();
}

}  // namespace

TEST_CASE("uneven shards written collectively read back bit-exactly under other partitions") {
  const std::string dir = make_shared_temp_dir("ckpt_test");
  const std::string path = checkpoint_path(dir, 1);
  auto layout = awkward_layout();
  const int64_t numel = layout_numel(layout);
  const int ranks = world_size(), rank = world_rank();
  write_state(path, uneven_cuts(numel, ranks));
  REQUIRE(exists(path));

  CheckpointReader reader(path, MPI_COMM_WORLD);
  // The file holds every tensor under its name with its true shape.
  std::vector<std::string> expected_names;
  for (const auto& t : layout) expected_names.push_back(t.name);
  std::sort(expected_names.begin(), expected_names.end());
  CHECK(reader.names("model") == expected_names);
  CHECK(reader.names("optim/exp_avg") == expected_names);
  CHECK(reader.shape("model", "bert.encoder.layer.0.attention.self.query.weight") == std::vector<int64_t>{2, 3, 4});
  CHECK(reader.shape("model", "scalar").empty());
  CHECK(reader.shape("model", "empty") == std::vector<int64_t>{0});
  CHECK((reader.dtype("counts", "tail") == at::kLong));
  CHECK(reader.int_attribute("writer_world_size") == ranks);

  const std::vector<std::pair<std::string, double>> float_groups = {{"model", 0.0}, {"optim/exp_avg", 1.0}};
  for (const auto& [group, salt] : float_groups) {
    at::Tensor expected = flat_state(numel, salt);

    // (1) Every rank reads the whole state into fresh tensors of the true shape.
    std::vector<TensorSlice> whole;
    for (const auto& t : layout)
      whole.push_back({t.name, t.shape, 0, at::full(t.shape, -1.0f)});
    reader.read(group, whole);
    bool same = true;
    for (size_t i = 0; i < layout.size(); ++i)
      same = same && at::equal(whole[i].data.view({-1}), expected.narrow(0, layout[i].offset, whole[i].data.numel()));
    CHECK_MESSAGE(all_ranks(same), group);

    // (2) The partition of a world of 5 (uneven, one empty part), virtual part v
    // on rank v % ranks: some ranks hold two disjoint slices of one tensor.
    auto cuts5 = uneven_cuts(numel, 5);
    at::Tensor flat = at::full({numel}, -1.0f);
    std::vector<TensorSlice> mine;
    for (int part = rank; part < 5; part += ranks) {
      auto slices = part_slices(layout, flat, cuts5, part);
      mine.insert(mine.end(), slices.begin(), slices.end());
    }
    reader.read(group, mine);
    bool parts_same = true;
    for (int part = rank; part < 5; part += ranks) {
      int64_t begin = cuts5[part], length = cuts5[part + 1] - cuts5[part];
      parts_same = parts_same && at::equal(flat.narrow(0, begin, length), expected.narrow(0, begin, length));
    }
    CHECK_MESSAGE(all_ranks(parts_same), group);

    // (3) Only rank 0 reads, into a non-contiguous tensor (goes through a copy).
    std::vector<TensorSlice> rank0;
    at::Tensor transposed = at::full({5, 3}, -1.0f).t();  // [3, 5], strided
    if (rank == 0) rank0.push_back({"bert.embeddings.word_embeddings.weight", {3, 5}, 0, transposed});
    reader.read(group, rank0);
    if (rank == 0) CHECK(at::equal(transposed.reshape({-1}), expected.narrow(0, 0, 15)));
  }

  // int64 data round-trips exactly too.
  at::Tensor counts = at::full({numel}, int64_t{-1}, at::kLong);
  auto count_slices = part_slices(layout, counts, even_cuts(numel, ranks), rank);
  reader.read("counts", count_slices);
  at::Tensor expected_counts = at::arange(numel, at::kLong) * 1000003 - 7;
  auto cuts = even_cuts(numel, ranks);
  CHECK(at::equal(counts.narrow(0, cuts[rank], cuts[rank + 1] - cuts[rank]),
                  expected_counts.narrow(0, cuts[rank], cuts[rank + 1] - cuts[rank])));
  CHECK(at::equal(reader.read_tensor("counts", "tail").view({-1}), expected_counts.narrow(0, layout.back().offset, 18)));
  remove_shared_dir(dir);
}

TEST_CASE("attributes round-trip: int, double, 10 KB TOML text, empty text, binary bytes, 100 KB text") {
  const std::string dir = make_shared_temp_dir("ckpt_test");
  const std::string path = dir + "/attrs.h5";
  std::string toml;
  for (int i = 0; toml.size() < 10 * 1024; ++i)
    toml += "[section_" + std::to_string(i) + "]\nlr = 2e-5\nname = \"caf\xc3\xa9 \\\"quoted\\\"\"\n\n";
  std::string huge(100 * 1024, 'x');
  for (size_t i = 0; i < huge.size(); i += 97) huge[i] = static_cast<char>('a' + i % 26);
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 5056; ++i) bytes.push_back(static_cast<uint8_t>((i * 37) % 256));  // has NULs
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    writer.set_attribute("step", int64_t{1234567890123});
    writer.set_attribute("epoch", 2);
    writer.set_attribute("lr", 1.9999999999e-5);
    writer.set_attribute("loss_scale", world_rank() == 0 ? 65536.0 : -1.0);  // rank 0's value wins
    writer.set_attribute("config", toml);
    writer.set_attribute("empty", std::string());
    writer.set_attribute("huge", huge);
    writer.set_attribute("rng", bytes);
    writer.set_attribute("epoch", 3);  // replaces
    writer.commit();
  }
  CheckpointReader reader(path, MPI_COMM_WORLD);
  CHECK(reader.int_attribute("step") == 1234567890123);
  CHECK(reader.int_attribute("epoch") == 3);
  CHECK(reader.double_attribute("lr") == 1.9999999999e-5);
  CHECK(reader.double_attribute("loss_scale") == 65536.0);
  CHECK(reader.string_attribute("config") == toml);
  CHECK(reader.string_attribute("empty").empty());
  CHECK(reader.string_attribute("huge") == huge);
  CHECK(reader.bytes_attribute("rng") == bytes);
  CHECK(reader.has_attribute("rng"));
  CHECK_FALSE(reader.has_attribute("missing"));
  auto names = reader.attribute_names();
  CHECK(std::find(names.begin(), names.end(), "config") != names.end());
  CHECK(std::find(names.begin(), names.end(), "shardtrain_format_version") != names.end());

  std::string message = error_of([&] { reader.int_attribute("config"); });
  CHECK(contains(message, path));
  CHECK(contains(message, "'config' is not an integer"));
  message = error_of([&] { reader.string_attribute("nope"); });
  CHECK(contains(message, "no attribute 'nope'"));
  remove_shared_dir(dir);
}

TEST_CASE("a writer destroyed without commit leaves no final file, removes its tmp, keeps an older final") {
  const std::string dir = make_shared_temp_dir("ckpt_test");
  const std::string path = checkpoint_path(dir, 4);
  auto layout = awkward_layout();
  const int64_t numel = layout_numel(layout);
  std::string tmp;
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    tmp = writer.temporary_path();
    writer.write_group("model", part_slices(layout, flat_state(numel, 0.0), uneven_cuts(numel, world_size()),
                                            world_rank()));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(exists(tmp));
    CHECK_FALSE(exists(path));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_FALSE(exists(tmp));
  CHECK_FALSE(exists(path));

  // An existing checkpoint of the same name survives an abandoned rewrite.
  write_state(path, uneven_cuts(numel, world_size()));
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    writer.write_group("model", part_slices(layout, flat_state(numel, 5.0), even_cuts(numel, world_size()),
                                            world_rank()));
    writer.set_attribute("step", 99);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointReader reader(path, MPI_COMM_WORLD);
  CHECK(reader.int_attribute("step") == 42);
  CHECK(at::equal(reader.read_tensor("model", "tail").view({-1}), flat_state(numel, 0.0).narrow(0, layout.back().offset, 18)));

  // A write that fails validation throws on every rank and leaves nothing behind.
  const std::string bad_path = checkpoint_path(dir, 5);
  std::string message = error_of([&] {
    CheckpointWriter writer(bad_path, MPI_COMM_WORLD);
    std::vector<TensorSlice> slices;
    // Ranks > 0 own [1, 7); rank 0 owns nothing: element 0 would stay unwritten.
    if (world_rank() > 0) slices.push_back({"gap", {7}, 1, at::zeros({6})});
    writer.write_group("model", slices);
  });
  CHECK(contains(message, bad_path));
  CHECK(contains(message, "/model/gap"));
  CHECK(contains(message, "leave elements [0, 1) unwritten"));
  message = error_of([&] {
    CheckpointWriter writer(bad_path, MPI_COMM_WORLD);
    writer.write_group("model", {{"disagree", {world_rank() == 0 ? int64_t{4} : int64_t{2}, 2}, 0,
                                  at::zeros({world_rank() == 0 ? 4 : 0})}});
  });
  CHECK(contains(message, "/model/disagree: ranks disagree on the tensor: rank 0 has float32 [4, 2], rank 1 has "
                          "float32 [2, 2]"));
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_FALSE(exists(bad_path));
  CHECK(latest_checkpoint(dir) == path);
  remove_shared_dir(dir);
}

TEST_CASE("reading what is not there names the file, the dataset and both shapes") {
  const std::string dir = make_shared_temp_dir("ckpt_test");
  const std::string path = checkpoint_path(dir, 1);
  auto layout = awkward_layout();
  write_state(path, uneven_cuts(layout_numel(layout), world_size()));
  CheckpointReader reader(path, MPI_COMM_WORLD);

  std::vector<TensorSlice> missing;
  if (world_rank() == world_size() - 1) missing.push_back({"classifier.weight", {2, 768}, 0, at::zeros({4})});
  std::string message = error_of([&] { reader.read("model", missing); });
  CHECK(message == path + ": dataset /model/classifier.weight does not exist in the checkpoint");

  std::vector<TensorSlice> wrong_shape = {{"bert.embeddings.word_embeddings.weight", {5, 3}, 0, at::zeros({15})}};
  message = error_of([&] { reader.read("model", wrong_shape); });
  CHECK(message == path + ": dataset /model/bert.embeddings.word_embeddings.weight is float32 [3, 5] in the "
                          "checkpoint but float32 [5, 3] was expected");

  std::vector<TensorSlice> wrong_dtype = {{"tail", {2, 9}, 0, at::zeros({18}, at::kDouble)}};
  message = error_of([&] { reader.read("counts", wrong_dtype); });
  CHECK(message == path + ": dataset /counts/tail is int64 [2, 9] in the checkpoint but float64 [2, 9] was expected");

  std::vector<TensorSlice> out_of_range = {{"tail", {2, 9}, 10, at::zeros({9})}};
  message = error_of([&] { reader.read("model", out_of_range); });
  CHECK(contains(message, "/model/tail: rank 0's slice [10, 19) is outside the tensor's 18 elements"));

  CHECK(error_of([&] { reader.names("optim/exp_avg_sq"); }) ==
        path + ": group /optim/exp_avg_sq does not exist in the checkpoint");
  CHECK(error_of([&] { reader.shape("model", "nope"); }) ==
        path + ": dataset /model/nope does not exist in the checkpoint");
  CHECK_FALSE(reader.has("model", "nope"));
  CHECK_FALSE(reader.has("nogroup", "nope"));
  CHECK(reader.has("model", "tail"));

  CHECK(error_of([&] { CheckpointReader r(dir + "/nothing.h5", MPI_COMM_WORLD); }) ==
        "checkpoint " + dir + "/nothing.h5 does not exist");
  if (world_rank() == 0) std::ofstream(dir + "/text.h5") << "not hdf5 at all\n";
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(error_of([&] { CheckpointReader r(dir + "/text.h5", MPI_COMM_WORLD); }) ==
        dir + "/text.h5 is not an HDF5 file (not a shardtrain checkpoint)");
  CHECK(contains(error_of([&] { CheckpointWriter w(dir + "/no/such/dir/c.h5", MPI_COMM_WORLD); }),
                 "checkpoint directory " + dir + "/no/such/dir does not exist"));
  remove_shared_dir(dir);
}

TEST_CASE("h5dump sees an ordinary HDF5 state dict: true shapes, float32, row-major values") {
  const std::string dir = make_shared_temp_dir("ckpt_test");
  const std::string path = checkpoint_path(dir, 1);
  auto layout = awkward_layout();
  const int64_t numel = layout_numel(layout);
  // Values = flat index, so h5dump's element listing shows the row-major order.
  at::Tensor flat = at::arange(numel, at::kFloat);
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    writer.write_group("model", part_slices(layout, flat, uneven_cuts(numel, world_size()), world_rank()));
    writer.set_attribute("config", "[train]\nlr = 2e-5\n");
    writer.commit();
  }
  if (world_rank() == 0) {
    REQUIRE_MESSAGE(!run_command("command -v h5dump").empty(), "h5dump missing: scripts/setup.sh installs hdf5-tools");
    std::string header = run_command("h5dump -H '" + path + "' 2>&1");
    CHECK(contains(header, "DATASET \"bert.encoder.layer.0.attention.self.query.weight\""));
    CHECK(contains(header, "DATASPACE  SIMPLE { ( 2, 3, 4 ) / ( 2, 3, 4 ) }"));
    CHECK(contains(header, "DATASPACE  SIMPLE { ( 4, 1, 3 ) / ( 4, 1, 3 ) }"));
    CHECK(contains(header, "DATASPACE  SCALAR"));
    CHECK(contains(header, "H5T_IEEE_F32LE"));
    CHECK(contains(header, "ATTRIBUTE \"config\""));
    // query.weight holds flat elements 22..45: row (1, 2) is 42..45.
    std::string values =
        run_command("h5dump -d '/model/bert.encoder.layer.0.attention.self.query.weight' '" + path + "' 2>&1");
    CHECK(contains(values, "(0,0,0): 22, 23, 24, 25,"));
    CHECK(contains(values, "(1,2,0): 42, 43, 44, 45"));
    // A plain HDF5 file without shardtrain's attributes is refused by name.
    run_command("h5copy -i '" + path + "' -o '" + dir + "/plain.h5' -s /model -d /model 2>&1");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(error_of([&] { CheckpointReader r(dir + "/plain.h5", MPI_COMM_WORLD); }) ==
        dir + "/plain.h5 is an HDF5 file but not a shardtrain checkpoint (no 'shardtrain_format_version' attribute)");
  remove_shared_dir(dir);
}

TEST_CASE("slices_of_shard cuts a flat shard at tensor boundaries as views") {
  auto layout = awkward_layout();
  at::Tensor shard = at::zeros({30});
  auto slices = slices_of_shard(layout, 10, shard);  // flat elements [10, 40)
  REQUIRE(slices.size() == 4);
  CHECK(slices[3].name == "empty");  // empty tensors are in every shard
  CHECK(slices[3].data.numel() == 0);
  CHECK(slices[0].name == "bert.embeddings.word_embeddings.weight");
  CHECK(slices[0].begin == 10);
  CHECK(slices[0].data.numel() == 5);
  CHECK(slices[1].begin == 0);
  CHECK(slices[1].data.numel() == 7);
  CHECK(slices[2].shape == std::vector<int64_t>{2, 3, 4});
  CHECK(slices[2].begin == 0);
  CHECK(slices[2].data.numel() == 18);
  slices[2].data.fill_(1.0f);
  CHECK(shard.sum().item<float>() == 18.0f);
}
