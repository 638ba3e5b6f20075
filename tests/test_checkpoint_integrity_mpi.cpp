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
    CHECK(v.num_datasets == 2 * static_cast<int64_t>(layout.size()));
    CHECK(v.num_verified == 0);
  }
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
