// CheckpointWriter::write_group: one group of tensors, each rank passing its
// slices; the records are exchanged and planned, the free space checked, the
// datasets created with their checksums and their space reserved, then each
// dataset written in one collective transfer (include/shardtrain/checkpoint/
// checkpoint.h; docs/DESIGN.md, "Checkpoints").
#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/digest.h"
#include "checkpoint/dtypes.h"
#include "checkpoint/flat_range_io.h"
#include "checkpoint/hdf5_handles.h"
#include "checkpoint/slice_plan.h"
#include "checkpoint/writer_impl.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/watchdog.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"

namespace shardtrain {

std::vector<detail::SliceRecord> CheckpointWriter::Impl::slice_records(const std::string& where,
                                                                       const std::vector<TensorSlice>& slices,
                                                                       std::vector<at::Tensor>& host_data) const {
  std::vector<detail::SliceRecord> mine;
  for (const auto& slice : slices) {
    if (slice.name.empty() || slice.name.find('/') != std::string::npos)
      throw Error(where + ": tensor name '" + slice.name + "' must be non-empty and contain no '/'");
    if (!slice.data.defined()) throw Error(where + "/" + slice.name + ": slice has no data");
    mine.push_back(detail::record_of(slice, rank, where));
    host_data.push_back(slice.data.to(at::kCPU).contiguous().view({-1}));
  }
  return mine;
}

// A full disk is found before anything of the group is written. The margin
// covers HDF5's metadata (object headers, the group's B-tree).
void CheckpointWriter::Impl::require_group_space(const std::string& group,
                                                 const std::map<std::string, detail::TensorPlan>& plans) {
  uint64_t group_bytes = uint64_t{1} << 20;
  for (const auto& [name, plan] : plans)
    group_bytes += static_cast<uint64_t>(detail::numel_of(plan.shape)) *
                       at::elementSize(detail::dtype_table()[static_cast<size_t>(plan.dtype)].scalar_type) + 4096;
  on_rank0(comm, phase("/" + group + ": checking free space"), [&] {
    require_free_space(detail::file_directory(final_path), group_bytes,
                       "checkpoint " + final_path + " (/" + group + ")");
  });
}

// Each rank hashes what it owns; the sum over ranks is the dataset's checksum.
std::vector<uint64_t> CheckpointWriter::Impl::group_checksums(const std::string& group,
                                                              const std::map<std::string, detail::TensorPlan>& plans,
                                                              const std::vector<TensorSlice>& slices,
                                                              const std::vector<at::Tensor>& host_data,
                                                              SlicesByName& slices_by_name) {
  std::vector<uint64_t> checksums;
  for (const auto& [name, plan] : plans) {
    uint64_t sum = 0;
    for (size_t i : slices_by_name[name])
      sum += detail::digest(host_data[i].data_ptr(), plan.dtype, slices[i].begin, host_data[i].numel()).checksum;
    checksums.push_back(sum);
  }
  all_reduce_in_place(checksums.data(), static_cast<int>(checksums.size()), MPI_UINT64_T, MPI_SUM, comm,
                      phase("/" + group + ": combining checksums"));
  return checksums;
}

// All datasets first (their space is allocated at creation), so rank 0 can
// reserve the group's bytes in the file before anything is written: a full
// disk or a quota then fails here, cleanly, instead of inside a collective
// MPI-IO write, after which parallel HDF5 may not be able to close the file.
detail::Group CheckpointWriter::Impl::create_datasets(const std::string& group,
                                                      const std::map<std::string, detail::TensorPlan>& plans,
                                                      const std::vector<uint64_t>& checksums,
                                                      std::vector<detail::Dataset>& datasets) {
  detail::PropertyList link_create(ST_CHECK_HDF5(H5Pcreate(H5P_LINK_CREATE)));
  ST_CHECK_HDF5(H5Pset_create_intermediate_group(link_create.get(), 1));
  detail::Group group_id;
  {
    PhaseGuard guard(comm, phase("creating /" + group));
    group_id = detail::Group(
        ST_CHECK_HDF5(H5Gcreate2(file.get(), group.c_str(), link_create.get(), H5P_DEFAULT, H5P_DEFAULT)));
  }

  detail::PropertyList dataset_create(ST_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE)));
  // Every element is written (exact cover is checked by plan_group): skip the fill pass.
  ST_CHECK_HDF5(H5Pset_alloc_time(dataset_create.get(), H5D_ALLOC_TIME_EARLY));
  ST_CHECK_HDF5(H5Pset_fill_time(dataset_create.get(), H5D_FILL_TIME_NEVER));
  detail::Dataspace scalar(ST_CHECK_HDF5(H5Screate(H5S_SCALAR)));

  uint64_t end_of_data = 0;
  {
    PhaseGuard guard(comm, phase("creating the datasets of /" + group));
    size_t index = 0;
    for (const auto& [name, plan] : plans) {
      const uint64_t checksum = checksums[index++];
      detail::Dataspace file_space = detail::make_file_space(plan.shape);
      detail::Dataset dataset(ST_CHECK_HDF5(H5Dcreate2(group_id.get(), name.c_str(),
                                                       detail::dtype_table()[plan.dtype].file_type, file_space.get(),
                                                       H5P_DEFAULT, dataset_create.get(), H5P_DEFAULT)));
      write_attribute(dataset.get(), detail::kChecksumAttribute, H5T_STD_U64LE, H5T_NATIVE_UINT64, scalar.get(),
                      &checksum);
      const haddr_t offset = H5Dget_offset(dataset.get());
      if (offset != HADDR_UNDEF)
        end_of_data = std::max<uint64_t>(end_of_data, offset + H5Dget_storage_size(dataset.get()));
      datasets.push_back(std::move(dataset));
    }
  }
  // With the metadata allocated so far (the datasets' headers, the group's
  // links, the root attributes written before) and headroom: at commit the
  // metadata flush then writes into blocks already on disk.
  on_rank0(comm, phase("/" + group + ": reserving its space"), [&] {
    const uint64_t end =
        std::max(end_of_data, detail::end_of_allocation(file.get()).value_or(0)) + detail::kMetadataHeadroom;
    reserve_file_space(temporary_path, end, "checkpoint " + final_path + " (/" + group + ")");
    reserved_end = std::max(reserved_end, end);
  });
  return group_id;
}

void CheckpointWriter::Impl::write_datasets(const std::string& group,
                                            const std::map<std::string, detail::TensorPlan>& plans,
                                            const std::vector<TensorSlice>& slices,
                                            const std::vector<at::Tensor>& host_data, SlicesByName& slices_by_name,
                                            std::vector<detail::Dataset>& datasets) {
  detail::PropertyList dxpl = detail::collective_transfer();
  size_t index = 0;
  for (const auto& [name, plan] : plans) {
    detail::Dataset& dataset = datasets[index++];
    const std::string full = detail::join_group(group, name);
    PhaseGuard guard(comm, phase(full));
    if (detail::numel_of(plan.shape) == 0) continue;  // nothing to write, on every rank alike

    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::vector<size_t> order = slices_by_name[name];
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slices[a].begin < slices[b].begin; });
    at::Tensor buffer;
    if (order.size() == 1) {
      buffer = host_data[order[0]];
    } else if (order.size() > 1) {
      std::vector<at::Tensor> pieces;
      for (size_t i : order) pieces.push_back(host_data[i]);
      buffer = at::cat(pieces);
    }
    for (size_t i : order) ranges.emplace_back(slices[i].begin, host_data[i].numel());
    std::string problem =
        detail::transfer(/*writing=*/true, dataset.get(), plan.shape, plan.dtype, ranges,
                         buffer.defined() ? buffer.data_ptr() : nullptr, dxpl.get(), temporary_path);
    if (!problem.empty()) problem = write_failure(full, problem);
    throw_if_any_failed(problem, comm, phase(full + ": agreeing on the write"));
  }
}

void CheckpointWriter::write_group(const std::string& group, const std::vector<TensorSlice>& slices) try {
  Impl& w = *impl_;
  w.check_open("write_group");
  detail::check_group_name(group);
  const std::string where = w.final_path + ": /" + group;

  std::vector<at::Tensor> host_data;  // CPU contiguous copies where needed
  const std::vector<detail::SliceRecord> mine = w.slice_records(where, slices, host_data);
  // Validation happens on the gathered records, so every rank throws alike.
  if (std::find(w.written_groups.begin(), w.written_groups.end(), group) != w.written_groups.end())
    throw Error(where + ": group written twice in one checkpoint");
  if (w.written_groups.empty()) w.write_checksum_table();
  std::map<std::string, detail::TensorPlan> plans = detail::plan_group(
      detail::exchange_records(mine, w.comm, w.phase("/" + group + ": exchanging the slices")), where,
      /*require_exact_cover=*/true);
  w.written_groups.push_back(group);

  w.require_group_space(group, plans);
  Impl::SlicesByName my_slices_by_name;
  for (size_t i = 0; i < slices.size(); ++i) my_slices_by_name[slices[i].name].push_back(i);
  const std::vector<uint64_t> checksums = w.group_checksums(group, plans, slices, host_data, my_slices_by_name);
  std::vector<detail::Dataset> datasets;
  detail::Group group_id = w.create_datasets(group, plans, checksums, datasets);
  w.write_datasets(group, plans, slices, host_data, my_slices_by_name, datasets);
  for (detail::Dataset& dataset : datasets) dataset.close_or_abort();
  group_id.close_or_abort();
} catch (const std::exception& e) {
  impl_->remember_failure(e);
  throw;
}

}  // namespace shardtrain
