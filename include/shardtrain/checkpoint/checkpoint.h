// Checkpoints: one parallel-HDF5 file per checkpoint, written and read by all
// ranks through MPI-IO, the same format for every strategy and world size.
//
// File layout (an ordinary HDF5 state dict; h5py / h5dump read it as is):
//   /model/<hf name>              one dataset per tensor, its true shape, e.g.
//   /model/bert.encoder.layer.0.attention.self.query.weight   float32 [768, 768]
//   /optim/exp_avg/<hf name>      any group path the caller names
//   root attributes               training state: int64, double, UTF-8 string,
//                                 bytes (uint8 array); plus shardtrain_format_version
//                                 and writer_world_size, set by the writer
//
// Each rank owns a flat element range of some tensors (its ZeRO / FSDP shard, or
// everything under DDP) and passes it as a TensorSlice. Writes are one collective
// H5Dwrite per dataset; a rank that owns nothing of a dataset joins with an empty
// selection. A reader may use any world size and any partition.
//
//   {
//     CheckpointWriter writer(run_dir + "/checkpoint_000003.h5", world.comm());
//     writer.write_group("model", model_slices);           // collective
//     writer.write_group("optim/exp_avg", exp_avg_slices);
//     writer.set_attribute("step", step);
//     writer.commit();  // only now does checkpoint_000003.h5 appear
//   }
//   CheckpointReader reader(run_dir + "/checkpoint_000003.h5", world.comm());
//   reader.read("model", my_slices);                       // collective, any sharding
//   int64_t step = reader.int_attribute("step");
//
// Atomicity: the writer creates "<final>.tmp-<job id>" and renames it to the
// final name on rank 0 after every rank has closed it (then fsyncs the
// directory). A job that dies mid-write leaves at most a .tmp file, which
// never has a checkpoint's name; an earlier checkpoint is never touched.
// Naming, scanning and keeping checkpoints is train/checkpoint_manager.h's.
//
// Integrity: every dataset carries a checksum attribute ("shardtrain_checksum",
// uint64), written collectively: the sum, modulo 2^64, over the tensor's
// elements i (row-major flat index) of mix64(bits(x_i) + (i + 1) * phi), where
// bits is the element's bit pattern and mix64 SplitMix64's finaliser. A sum
// does not depend on how the elements are split between ranks, so each rank
// hashes its own slices and one reduction combines them: a file written at 4
// ranks verifies at 1. One flipped bit changes the sum (mix64 is a bijection);
// moved elements change it through the index. Every read checks it (read()
// over the union of the ranks' requests, filling in what no rank asked for;
// read_tensor() and verify_checkpoint() over the whole dataset) and refuses a
// mismatch, and any NaN or infinity in a floating-point tensor, with an Error
// naming the file and the tensor. The root attributes (the model config, the
// tokenizer's files, the run config, the training state) have checksums too,
// summed the same way over each value's bytes and stored together in one root
// attribute, "shardtrain_attribute_checksums" (a line "<kind> <hex> <name>"
// per attribute); every open checks them, and an attribute changed, removed
// or added after the file was written is an Error naming it. Files written
// before either kind of checksum existed still load; the reader says once
// that what they lack cannot be verified.
//
// Errors a user can fix (missing file, not a shardtrain checkpoint, a
// truncated or damaged file, missing dataset or attribute, shape / dtype
// mismatch, slices that do not tile a tensor) throw shardtrain::Error on every
// rank alike, naming the file and the dataset; HDF5's own error stack is never
// printed. I/O failures (a full disk, no permission, a read-only file system)
// are Errors too, with the operating system's reason and the path; the
// temporary file of a failed write is removed. A rank that stops inside any
// collective step (open, write, read, close, the commit's barrier) ends the
// job after the phase timeout (comm/watchdog.h) instead of hanging it.
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace shardtrain {

// The piece of one tensor a rank owns. The full logical tensor `name` has
// `shape` (every rank passes the same shape and dtype); this rank owns the
// flat element range [begin, begin + data.numel()) of its row-major layout.
// data: float32, float64, int32 or int64; any device / layout when writing;
// when reading it is filled in place (CPU contiguous tensors directly, others
// through a CPU copy), so it may be a view into a flat shard buffer.
struct TensorSlice {
  std::string name;            // dataset name inside the group; must not contain '/'
  std::vector<int64_t> shape;  // the full tensor's shape; {} for a scalar
  int64_t begin = 0;           // first flat element this rank owns
  at::Tensor data;             // numel() elements starting at `begin`
};

// Where a tensor lives in a flat buffer: elements [offset, offset + numel(shape)).
struct FlatTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
};

// The slices of `layout` that fall inside a shard of the flat buffer: the shard
// holds flat elements [shard_begin, shard_begin + shard.numel()). Each slice's
// data is a view into `shard` (so reading into the slices fills the shard).
// Tensors that do not intersect the shard are left out, except empty tensors
// (numel 0), which every shard lists with no elements so they are still written.
std::vector<TensorSlice> slices_of_shard(const std::vector<FlatTensor>& layout, int64_t shard_begin,
                                         const at::Tensor& shard);

// Writes one checkpoint. Collective over `comm`: every rank calls every method,
// in the same order, with the same group and attribute names.
class CheckpointWriter {
 public:
  // Creates "<final_path>.tmp-<job id>" (job id: SLURM_JOB_ID, else rank 0's
  // pid). Throws Error when the directory of final_path does not exist or the
  // file cannot be created (naming the OS's reason).
  CheckpointWriter(const std::string& final_path, MPI_Comm comm);
  // Without commit(): closes and removes the temporary file; final_path is
  // never touched. Collective (it closes the file on every rank).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes every tensor named in any rank's `slices` as the dataset
  // "/<group>/<name>" (intermediate groups are created; a group may be written
  // once per checkpoint). A rank lists only the slices it owns, possibly none.
  // The slices of all ranks together must cover each tensor exactly once,
  // otherwise Error (naming the tensor and the gap or overlap) before anything
  // is written. Error, before writing, when the file system has less free
  // space than the group's bytes.
  void write_group(const std::string& group, const std::vector<TensorSlice>& slices);

  // Root-group attributes. The value of rank 0 is the one stored. Setting a key
  // again replaces it. Each one's checksum goes into the checksum table, which
  // is written before the first group and again at commit() if an attribute
  // was set after it; the table's own name is refused as a key.
  void set_attribute(const std::string& key, int64_t value);
  void set_attribute(const std::string& key, double value);
  void set_attribute(const std::string& key, const std::string& value);  // UTF-8 text
  void set_attribute(const std::string& key, const char* value) { set_attribute(key, std::string(value)); }
  void set_attribute(const std::string& key, const std::vector<uint8_t>& bytes);  // binary (RNG state)
  template <class Integer, std::enable_if_t<std::is_integral<Integer>::value, int> = 0>
  void set_attribute(const std::string& key, Integer value) {
    set_attribute(key, static_cast<int64_t>(value));
  }

  // Flushes and closes the file on all ranks, then rank 0 renames it to
  // final_path (atomic on POSIX file systems, replacing an older file of that
  // name) and fsyncs the directory. No other method may be called afterwards.
  void commit();

  const std::string& final_path() const;
  const std::string& temporary_path() const;
  MPI_Comm comm() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a checkpoint written by any world size and strategy. The inspection
// methods are local (any rank may call them alone); read() is collective.
class CheckpointReader {
 public:
  // Throws Error when the file does not exist, is not HDF5, is truncated or
  // damaged, or is not a shardtrain checkpoint.
  CheckpointReader(const std::string& path, MPI_Comm comm);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const;
  // Dataset names in `group`, sorted. Error when the group does not exist.
  std::vector<std::string> names(const std::string& group) const;
  bool has(const std::string& group, const std::string& name) const;
  // Error when the dataset does not exist.
  std::vector<int64_t> shape(const std::string& group, const std::string& name) const;
  at::ScalarType dtype(const std::string& group, const std::string& name) const;

  // Collective. Fills each slice's data with elements [begin, begin + numel)
  // of "/<group>/<name>". Ranks may request any ranges (overlapping across ranks
  // is fine; a rank's own slices of one tensor must not overlap). Every
  // requested dataset is validated before anything is read: Error, on all
  // ranks, naming file, dataset and both shapes / dtypes on a mismatch. After
  // reading, checksums and finiteness are checked (see the top of this file).
  void read(const std::string& group, std::vector<TensorSlice>& slices);
  // A whole dataset as a CPU tensor of its shape and dtype (local, independent
  // I/O), its checksum and finiteness checked.
  at::Tensor read_tensor(const std::string& group, const std::string& name) const;
  // False for a file written before checksums existed.
  bool has_checksums() const;
  // False for a file written before attribute checksums existed (the
  // constructor checked them otherwise).
  bool has_attribute_checksums() const;

  bool has_attribute(const std::string& key) const;
  std::vector<std::string> attribute_names() const;
  // Error when missing or of another kind (e.g. asking for an int of a string).
  int64_t int_attribute(const std::string& key) const;
  double double_attribute(const std::string& key) const;
  std::string string_attribute(const std::string& key) const;
  std::vector<uint8_t> bytes_attribute(const std::string& key) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What verify_checkpoint() checked.
struct CheckpointVerification {
  int64_t num_datasets = 0;          // datasets read in full
  int64_t num_verified = 0;          // of them, with a checksum that matched
  int64_t num_bytes = 0;             // bytes of data read
  bool has_checksums = true;         // false: written before checksums existed
  int64_t num_attributes_verified = 0;  // root attributes whose checksum matched
  bool has_attribute_checksums = true;  // false: written before attribute checksums existed
  std::vector<std::string> datasets; // "/model/classifier.weight", ... in file order
};

// Local (one process, no MPI collective): opens `path`, checks the attributes
// every checkpoint has (shardtrain_format_version, writer_world_size), and
// reads every dataset in chunks of at most 16 Mi elements (bounded memory),
// checking its checksum and that floating-point data is finite, and every root
// attribute against its checksum. Error naming the file and the first problem
// (a truncated file, a damaged dataset or attribute, a checksum mismatch, a NaN).
CheckpointVerification verify_checkpoint(const std::string& path);

}  // namespace shardtrain
