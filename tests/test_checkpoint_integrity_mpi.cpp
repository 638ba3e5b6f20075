// Checkpoint integrity over real MPI (np 2 and 4): checksums written by any
// partition verify under any other and on one process (verify_checkpoint);
// a flipped bit, a truncated or overwritten file and NaN weights are Errors
// naming the file (and the tensor), never an HDF5 stack or a silent load; a
// file without checksums (an older shardtrain) still loads. A full disk is
// tests/test_faults.sh's (a small tmpfs).
// The tests edit files with the HDF5 API directly to damage them precisely.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <hdf5.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
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

const char* const kIntegrityTensor = "bert.encoder.layer.0.attention.self.query.weight";

// Writes "model" from `flat` and "counts" (int64) with the ranks owning uneven parts.
void integrity_write(const std::string& path, const at::Tensor& flat) {
  const auto layout = awkward_layout();
  const int64_t numel = layout_numel(layout);
  const auto cuts = uneven_cuts(numel, world_size());
  at::Tensor counts = at::arange(numel, at::kLong) * 1000003 - 7;
  CheckpointWriter writer(path, MPI_COMM_WORLD);
  writer.write_group("model", part_slices(layout, flat, cuts, world_rank()));
  writer.write_group("counts", part_slices(layout, counts, cuts, world_rank()));
  writer.set_attribute("step", 3);
  writer.commit();
}

// Rank 0 only: the byte offset of a contiguous dataset's data in the file.
haddr_t integrity_data_offset(const std::string& path, const std::string& dataset) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  hid_t d = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
  REQUIRE(d >= 0);
  const haddr_t offset = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(file);
  REQUIRE(offset != HADDR_UNDEF);
  return offset;
}

// Rank 0 only: XORs `mask` into the byte at `offset`.
void integrity_flip(const std::string& path, long offset, unsigned char mask) {
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  REQUIRE(f != nullptr);
  std::fseek(f, offset, SEEK_SET);
  const int byte = std::fgetc(f);
  std::fseek(f, offset, SEEK_SET);
  std::fputc(byte ^ mask, f);
  std::fclose(f);
}

// Every rank reads the whole "model" group (overlapping requests).
std::vector<TensorSlice> integrity_whole(const std::vector<FlatTensor>& layout, at::Tensor& into) {
  return slices_of_shard(layout, 0, into);
}

// Every case's shared temporary folder, checkpoint path and layout.
struct IntegrityRun {
  const std::string dir = make_shared_temp_dir("ckpt_integrity");
  const std::string path = dir + "/checkpoint_000001.h5";
  const std::vector<FlatTensor> layout = awkward_layout();
  const int64_t numel = layout_numel(layout);
  ~IntegrityRun() { remove_shared_dir(dir); }
};

}  // namespace

TEST_CASE_FIXTURE(IntegrityRun, "checksums written by one partition verify under others, and on one process") {
  const at::Tensor flat = flat_state(numel, 0.0);
  integrity_write(path, flat);

  CheckpointReader reader(path, MPI_COMM_WORLD);
  CHECK(reader.has_checksums());
  // Even cuts (another partition), everything on every rank (overlapping),
  // and a partial read: only the last rank asks, for a few elements; rank 0
  // reads the rest for the checksum without the caller seeing it.
  at::Tensor even = at::zeros({numel});
  const auto cuts = even_cuts(numel, world_size());
  auto slices = part_slices(layout, even, cuts, world_rank());
  reader.read("model", slices);
  CHECK(even.narrow(0, cuts[world_rank()], cuts[world_rank() + 1] - cuts[world_rank()])
            .equal(flat.narrow(0, cuts[world_rank()], cuts[world_rank() + 1] - cuts[world_rank()])));
  at::Tensor all = at::zeros({numel});
  auto whole = integrity_whole(layout, all);
  reader.read("model", whole);
  CHECK(all.equal(flat));
  std::vector<TensorSlice> few;
  at::Tensor three = at::zeros({3});
  if (world_rank() == world_size() - 1) few.push_back({"tail", {2, 9}, 4, three});
  reader.read("model", few);
  if (world_rank() == world_size() - 1) CHECK(three.equal(flat.narrow(0, layout.back().offset + 4, 3)));
  CHECK(reader.read_tensor("model", kIntegrityTensor).view({-1}).equal(flat.narrow(0, layout[2].offset, 24)));

  if (world_rank() == 0) {
    const CheckpointVerification v = verify_checkpoint(path);
    CHECK(v.has_checksums);
    CHECK(v.num_datasets == 2 * static_cast<int64_t>(layout.size()));
    CHECK(v.num_verified == v.num_datasets);
    CHECK(v.num_bytes == numel * 4 + numel * 8);
    CHECK(v.datasets.front() == "/counts/bert.embeddings.LayerNorm.bias");
  }
}

TEST_CASE_FIXTURE(IntegrityRun, "one flipped bit in a tensor is refused, naming the tensor and the file") {
  integrity_write(path, flat_state(numel, 0.0));
  const std::string tensor = std::string("/model/") + kIntegrityTensor;
  // The lowest mantissa bit of element 5: the value changes by one ulp and
  // stays finite, so only the checksum can tell.
  if (world_rank() == 0) integrity_flip(path, static_cast<long>(integrity_data_offset(path, tensor)) + 5 * 4, 0x01);
  MPI_Barrier(MPI_COMM_WORLD);

  const std::string expected = path + ": tensor " + tensor + " fails its checksum (stored 0x";
  CheckpointReader reader(path, MPI_COMM_WORLD);
  at::Tensor all = at::zeros({numel});
  auto whole = integrity_whole(layout, all);
  CHECK(error_of([&] { reader.read("model", whole); }).rfind(expected, 0) == 0);
  // The same under a sharded read, where no rank holds the flipped element alone.
  at::Tensor even = at::zeros({numel});
  auto slices = part_slices(layout, even, even_cuts(numel, world_size()), world_rank());
  CHECK(error_of([&] { reader.read("model", slices); }).rfind(expected, 0) == 0);
  CHECK(error_of([&] { reader.read_tensor("model", kIntegrityTensor); }).rfind(expected, 0) == 0);
  // The other group is intact and reads.
  at::Tensor counts = at::zeros({numel}, at::kLong);
  auto count_slices = slices_of_shard(layout, 0, counts);
  reader.read("counts", count_slices);
  CHECK(counts.equal(at::arange(numel, at::kLong) * 1000003 - 7));
  if (world_rank() == 0) CHECK(error_of([&] { verify_checkpoint(path); }).rfind(expected, 0) == 0);
}

TEST_CASE_FIXTURE(IntegrityRun, "truncated, overwritten and non-HDF5 files are Errors naming the file") {
  integrity_write(path, flat_state(numel, 0.0));
  const std::string truncated = dir + "/truncated.h5", overwritten = dir + "/overwritten.h5",
                    garbage = dir + "/garbage.h5", empty = dir + "/empty.h5";
  if (world_rank() == 0) {
    const auto size = std::filesystem::file_size(path);
    std::filesystem::copy_file(path, truncated);
    std::filesystem::resize_file(truncated, size / 2);
    // 4 KB of garbage over the superblock and the root group's header.
    std::filesystem::copy_file(path, overwritten);
    std::FILE* f = std::fopen(overwritten.c_str(), "r+b");
    std::fseek(f, 8, SEEK_SET);
    for (int i = 0; i < 4096; ++i) std::fputc((i * 7919 + 13) & 0xFF, f);
    std::fclose(f);
    std::ofstream(garbage, std::ios::binary) << std::string(4096, '\x5a');
    std::ofstream(empty, std::ios::binary).flush();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string truncated_message = error_of([&] { CheckpointReader r(truncated, MPI_COMM_WORLD); });
  CHECK(truncated_message.rfind(truncated + " is damaged: the file is truncated: it has ", 0) == 0);
  const std::string overwritten_message = error_of([&] { CheckpointReader r(overwritten, MPI_COMM_WORLD); });
  CHECK(overwritten_message.rfind(overwritten, 0) == 0);
  CHECK(contains(overwritten_message, "damaged"));
  CHECK(error_of([&] { CheckpointReader r(garbage, MPI_COMM_WORLD); }) ==
        garbage + " is not an HDF5 file (not a shardtrain checkpoint)");
  CHECK(error_of([&] { CheckpointReader r(empty, MPI_COMM_WORLD); }) ==
        empty + " is not an HDF5 file (not a shardtrain checkpoint)");
  if (world_rank() == 0) {
    CHECK(error_of([&] { verify_checkpoint(truncated); }) == truncated_message);
    CHECK(error_of([&] { verify_checkpoint(garbage); }) == garbage + " is not an HDF5 file (not a shardtrain checkpoint)");
  }
}

TEST_CASE_FIXTURE(IntegrityRun, "non-finite weights are refused on load with the tensor's name") {
  at::Tensor flat = flat_state(numel, 0.0);
  flat[layout[2].offset + 1] = std::nanf("");
  flat[layout[2].offset + 7] = INFINITY;
  integrity_write(path, flat);  // written (and checksummed) as it is
  const std::string expected = path + ": tensor /model/" + kIntegrityTensor +
                               " holds 2 non-finite values (NaN or infinity); refusing to load it";
  CheckpointReader reader(path, MPI_COMM_WORLD);
  at::Tensor all = at::zeros({numel});
  auto whole = integrity_whole(layout, all);
  CHECK(error_of([&] { reader.read("model", whole); }).rfind(expected, 0) == 0);
  CHECK(error_of([&] { reader.read_tensor("model", kIntegrityTensor); }).rfind(expected, 0) == 0);
  CHECK(reader.read_tensor("model", "tail").numel() == 18);  // the finite ones read
  if (world_rank() == 0) CHECK(error_of([&] { verify_checkpoint(path); }).rfind(expected, 0) == 0);
}

TEST_CASE_FIXTURE(IntegrityRun, "a checkpoint without checksums (an older shardtrain) still loads") {
  const at::Tensor flat = flat_state(numel, 0.0);
  integrity_write(path, flat);
  if (world_rank() == 0) {
    // What version 1 files looked like before checksums: no root algorithm
    // attribute, no checksum on the datasets.
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(file >= 0);
    CHECK(H5Adelete(file, "shardtrain_checksum_algorithm") >= 0);
    CHECK(H5Adelete(file, "shardtrain_attribute_checksums") >= 0);
    for (const auto& t : layout)
      for (const char* group : {"/model/", "/counts/"})
        CHECK(H5Adelete_by_name(file, (group + t.name).c_str(), "shardtrain_checksum", H5P_DEFAULT) >= 0);
    H5Fclose(file);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointReader reader(path, MPI_COMM_WORLD);
  CHECK_FALSE(reader.has_checksums());
  at::Tensor all = at::zeros({numel});
  auto whole = integrity_whole(layout, all);
  reader.read("model", whole);
  CHECK(all.equal(flat));
  if (world_rank() == 0) {
    const CheckpointVerification v = verify_checkpoint(path);
    CHECK_FALSE(v.has_checksums);
    CHECK_FALSE(v.has_attribute_checksums);
    CHECK(v.num_datasets == 2 * static_cast<int64_t>(layout.size()));
    CHECK(v.num_verified == 0);
  }
}

namespace {

// Rank 0 only: replaces the root attribute `key` of `path` by `value` (a
// variable-length string, as the writer stores text), or removes it (nullptr).
void integrity_rewrite_attribute(const std::string& path, const std::string& key, const char* value) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(file >= 0);
  if (H5Aexists(file, key.c_str()) > 0) CHECK(H5Adelete(file, key.c_str()) >= 0);
  if (value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attribute = H5Acreate2(file, key.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(attribute >= 0);
    CHECK(H5Awrite(attribute, type, &value) >= 0);
    H5Aclose(attribute);
    H5Sclose(space);
    H5Tclose(type);
  }
  H5Fclose(file);
}

// Writes a checkpoint with a model config, an integer and a float attribute
// (the train state's kinds), damages it with `damage` on rank 0, and expects
// the open on every rank and verify_checkpoint() to refuse it with `expected`.
void integrity_refused_attribute(const std::string& path, const std::function<void()>& damage,
                                 const std::string& expected) {
  {
    CheckpointWriter writer(path, MPI_COMM_WORLD);
    writer.set_attribute("model_config_json", std::string(R"({"hidden_act": "gelu"})"));
    writer.set_attribute("step", 12);
    writer.set_attribute("loss_sum", 6.5);
    writer.write_group("model", {});
    writer.set_attribute("metrics_json", std::string("{}"));  // after the group: the table is written again
    writer.commit();
  }
  {
    CheckpointReader reader(path, MPI_COMM_WORLD);  // intact: opens, and says it checked
    CHECK(reader.has_attribute_checksums());
    CHECK(reader.string_attribute("metrics_json") == "{}");
  }
  if (world_rank() == 0) {
    CHECK(verify_checkpoint(path).num_attributes_verified == 7);  // 3 of the writer's, 4 above
    damage();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string message = error_of([&] { CheckpointReader reader(path, MPI_COMM_WORLD); });
  CHECK_MESSAGE(contains(message, expected), message);
  CHECK_MESSAGE(contains(message, path), message);
  if (world_rank() == 0) {
    const std::string verified = error_of([&] { verify_checkpoint(path); });
    CHECK_MESSAGE(contains(verified, expected), verified);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

// Issue 37, item 2: hidden_act changed from gelu to relu passed --verify.
TEST_CASE_FIXTURE(IntegrityRun, "a changed, removed or added attribute is refused on open and by verify, naming it") {
  integrity_refused_attribute(
      path, [&] { integrity_rewrite_attribute(path, "model_config_json", R"({"hidden_act": "relu"})"); },
      "attribute 'model_config_json' fails its checksum");
  integrity_refused_attribute(
      path,
      [&] {
        hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t attribute = H5Aopen(file, "step", H5P_DEFAULT);
        const int64_t value = 13;
        CHECK(H5Awrite(attribute, H5T_NATIVE_INT64, &value) >= 0);
        H5Aclose(attribute);
        H5Fclose(file);
      },
      "attribute 'step' fails its checksum");
  integrity_refused_attribute(
      path, [&] { integrity_rewrite_attribute(path, "loss_sum", "6.5"); },
      "attribute 'loss_sum' is not a floating-point number as it was written");
  integrity_refused_attribute(
      path, [&] { integrity_rewrite_attribute(path, "metrics_json", nullptr); }, "attribute 'metrics_json' is missing");
  integrity_refused_attribute(
      path, [&] { integrity_rewrite_attribute(path, "lowercase_override", "1"); },
      "attribute 'lowercase_override' has no checksum: it was added");
  integrity_refused_attribute(
      path,
      [&] { integrity_rewrite_attribute(path, "shardtrain_attribute_checksums", "int 0000 step\n"); },
      "attribute shardtrain_attribute_checksums is damaged (line 1: no checksum)");
}

TEST_CASE_FIXTURE(IntegrityRun, "the writer's own checksum table is not a name callers may set") {
  CheckpointWriter writer(path, MPI_COMM_WORLD);
  CHECK(contains(error_of([&] { writer.set_attribute("shardtrain_attribute_checksums", std::string("x")); }),
                 "is the writer's own attribute"));
}

TEST_CASE("a damaged checkpoint is set aside, and its number is never reused") {
  if (world_rank() != 0) return;
  char buffer[] = "/tmp/shardtrain_set_aside_XXXXXX";
  REQUIRE(mkdtemp(buffer) != nullptr);
  const std::string dir = buffer;
  const auto named = [&](const char* name) { return dir + "/" + name; };
  for (const char* name : {"checkpoint_000001.h5", "checkpoint_000002.h5", "checkpoint_000004.h5"})
    std::ofstream(named(name)) << "x";
  CHECK(highest_checkpoint_index(dir) == 4);
  CHECK(set_aside_damaged_checkpoint(named("checkpoint_000004.h5")) == named("checkpoint_000004.h5.damaged"));
  CHECK_FALSE(std::filesystem::exists(named("checkpoint_000004.h5")));
  CHECK(highest_checkpoint_index(dir) == 4);  // the damaged file still holds its number
  std::ofstream(named("checkpoint_000004.h5")) << "again";
  CHECK(set_aside_damaged_checkpoint(named("checkpoint_000004.h5")) == named("checkpoint_000004.h5.damaged-2"));
  CHECK(contains(error_of([&] { set_aside_damaged_checkpoint(dir + "/missing.h5"); }),
                 "cannot set the damaged checkpoint " + dir + "/missing.h5 aside as "));
  CHECK(highest_checkpoint_index(dir + "/none") == 0);
  std::filesystem::remove_all(dir);
}
