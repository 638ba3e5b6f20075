// Private to src/checkpoint: CheckpointWriter's state and the steps its methods
// share. checkpoint_writer.cpp has the file's life (create, attributes, commit,
// abandon), checkpoint_write_group.cpp the groups of tensors.
#pragma once

#include <ATen/ATen.h>
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/hdf5_handles.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"

namespace shardtrain {
namespace detail {

// The folder of `path` ("." when it has none).
std::string file_directory(const std::string& path);

// Reserved beyond HDF5's end of allocation, for the metadata it allocates
// while it flushes (docs/DESIGN.md, "Errors and hangs").
constexpr uint64_t kMetadataHeadroom = uint64_t{64} << 10;

// An upper bound of HDF5's end of allocation (EOA) of an open file: its
// H5Fget_filesize, max(EOA, EOF). H5Fget_eoa itself refuses the MPI-IO
// driver (it wants a SWMR-compatible one), and that driver forgets its EOF at
// every raw data write, so this answers only until the file's first dataset
// write; nothing after (write_group then bounds the EOA by its data's end).
std::optional<uint64_t> end_of_allocation(hid_t file);

}  // namespace detail

struct CheckpointWriter::Impl {
  std::string final_path, temporary_path;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  detail::File file;
  bool committed = false;
  std::vector<std::string> written_groups;
  // Rank 0: the end of the blocks reserved so far ([0, reserved_end) is on disk).
  uint64_t reserved_end = 0;
  // Why the file is being abandoned (the first error a method threw), so that
  // a close that cannot complete still names the cause when it times out.
  std::string failure;
  // Every root attribute's kind and checksum (identical on every rank: the
  // values are rank 0's), and whether the table in the file is up to date.
  std::map<std::string, detail::AttributeChecksum> attribute_checksums;
  bool checksum_table_current = false;

  void record_checksum(const std::string& key, detail::AttributeKind kind, const std::string& value_bytes) {
    attribute_checksums[key] = {kind, detail::attribute_checksum(kind, value_bytes)};
    checksum_table_current = false;
  }
  void refuse_reserved(const std::string& key) const {
    if (key == detail::kAttributeChecksumsAttribute)
      throw Error(final_path + ": '" + key + "' is the writer's own attribute; use another name");
  }
  // Rank 0's text as a variable-length UTF-8 root attribute, its metadata room reserved.
  void write_string_attribute(const std::string& key, const std::string& value) {
    std::string text = broadcast_string(value, comm, phase("attribute " + key));
    if (text.find('\0') != std::string::npos)
      throw Error(final_path + ": string attribute '" + key + "' contains a NUL byte; store it as bytes");
    {
      PhaseGuard guard(comm, phase("attribute " + key));
      // Variable-length UTF-8: h5py returns it as str, and an empty string is fine.
      detail::Datatype type(ST_CHECK_HDF5(H5Tcopy(H5T_C_S1)));
      ST_CHECK_HDF5(H5Tset_size(type.get(), H5T_VARIABLE));
      ST_CHECK_HDF5(H5Tset_cset(type.get(), H5T_CSET_UTF8));
      detail::Dataspace scalar(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));
      const char* pointer = text.c_str();
      write_attribute(file.get(), key, type.get(), type.get(), scalar.get(), &pointer);
    }
    reserve_metadata_room("attribute " + key);
    if (key != detail::kAttributeChecksumsAttribute) record_checksum(key, detail::AttributeKind::kString, text);
  }
  // The checksum table, when an attribute changed since it was last written.
  // Written before the first group (then the train state's attributes and the
  // table lie in the blocks the groups reserve from offset 0, docs/DESIGN.md,
  // "Errors and hangs") and at commit for attributes set after the groups.
  void write_checksum_table() {
    if (checksum_table_current) return;
    write_string_attribute(detail::kAttributeChecksumsAttribute, detail::encode_attribute_checksums(attribute_checksums));
    checksum_table_current = true;
  }

  // Each public method's handler (a function-try-block) calls this.
  void remember_failure(const std::exception& e) {
    if (failure.empty()) failure = e.what();
  }

  std::string phase(const std::string& what) const { return "checkpoint write " + final_path + ": " + what; }
  // Rank 0 reserves the blocks of [0, EOA + 64 KiB) once the metadata HDF5
  // has allocated (the root group, attributes, object headers) reaches past
  // what is reserved. Parallel HDF5 writes that metadata at the close,
  // collectively, at those addresses: a block missing there when the disk has
  // filled up meets ENOSPC on one rank only, and the close hangs. Reserved
  // first, a full disk fails here, cleanly on every rank, and an abandoned
  // file still closes (docs/DESIGN.md, "Errors and hangs").
  void reserve_metadata_room(const std::string& what) {
    on_rank0(comm, phase("reserving room for the metadata of " + what), [&] {
      const std::optional<uint64_t> eoa = detail::end_of_allocation(file.get());
      if (!eoa || *eoa + detail::kMetadataHeadroom <= reserved_end) return;  // no EOA: the flush will report
      const uint64_t end = *eoa + detail::kMetadataHeadroom;
      reserve_file_space(temporary_path, end, "checkpoint " + final_path + " (" + what + ")", /*keep_size=*/true);
      reserved_end = end;
    });
  }
  void abandon();
  // `location`: the file (root attributes) or a dataset. A collective metadata
  // operation: every rank passes the same value.
  void write_attribute(hid_t location, const std::string& key, hid_t file_type, hid_t memory_type, hid_t space,
                       const void* value) {
    if (ST_CHECK_HDF5(H5Aexists(location, key.c_str()))) ST_CHECK_HDF5(H5Adelete(location, key.c_str()));
    detail::Attribute attribute(
        ST_CHECK_HDF5(H5Acreate2(location, key.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT)));
    ST_CHECK_HDF5(H5Awrite(attribute.get(), memory_type, value));
  }
  // A number as a root attribute: rank 0's value, stored as `file_type`.
  template <class T>
  void set_scalar_attribute(const std::string& key, T value, hid_t file_type, hid_t memory_type) {
    check_open("set_attribute");
    refuse_reserved(key);
    value = broadcast_value(value, comm, phase("attribute " + key));
    {
      PhaseGuard guard(comm, phase("attribute " + key));
      detail::Dataspace scalar(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));
      write_attribute(file.get(), key, file_type, memory_type, scalar.get(), &value);
    }
    reserve_metadata_room("attribute " + key);
    // The 8 bytes attribute_checksum() takes for an int64 or a double.
    record_checksum(key, std::is_floating_point<T>::value ? detail::AttributeKind::kFloat : detail::AttributeKind::kInteger,
                    std::string(reinterpret_cast<const char*>(&value), sizeof(value)));
  }
  void check_open(const char* method) const {
    if (!file.valid())
      throw Error(std::string("CheckpointWriter::") + method + " called after commit() on " + final_path);
  }
  std::string write_failure(const std::string& what, const std::string& reason) const {
    return "cannot write checkpoint " + temporary_path + (what.empty() ? "" : " (" + what + ")") + ": " + reason;
  }

  // write_group's steps, in order (checkpoint_write_group.cpp). `slices_by_name`:
  // the indices into `slices` of each tensor's slices on this rank.
  using SlicesByName = std::map<std::string, std::vector<size_t>>;
  std::vector<detail::SliceRecord> slice_records(const std::string& where, const std::vector<TensorSlice>& slices,
                                                 std::vector<at::Tensor>& host_data) const;
  void require_group_space(const std::string& group, const std::map<std::string, detail::TensorPlan>& plans);
  std::vector<uint64_t> group_checksums(const std::string& group,
                                        const std::map<std::string, detail::TensorPlan>& plans,
                                        const std::vector<TensorSlice>& slices,
                                        const std::vector<at::Tensor>& host_data, SlicesByName& slices_by_name);
  detail::Group create_datasets(const std::string& group, const std::map<std::string, detail::TensorPlan>& plans,
                                const std::vector<uint64_t>& checksums, std::vector<detail::Dataset>& datasets);
  void write_datasets(const std::string& group, const std::map<std::string, detail::TensorPlan>& plans,
                      const std::vector<TensorSlice>& slices, const std::vector<at::Tensor>& host_data,
                      SlicesByName& slices_by_name, std::vector<detail::Dataset>& datasets);
};

}  // namespace shardtrain
