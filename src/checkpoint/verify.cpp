#include "checkpoint/verify.h"

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <vector>

#include "checkpoint/attributes.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/digest.h"
#include "checkpoint/dtypes.h"
#include "checkpoint/flat_range_io.h"
#include "checkpoint/hdf5_handles.h"
#include "checkpoint/slice_plan.h"
#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"

namespace shardtrain {
namespace detail {

void check_checkpoint_file(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) throw Error("checkpoint " + path + " does not exist");
  errno = 0;
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 == 0) throw Error(path + " is not an HDF5 file (not a shardtrain checkpoint)");
  if (is_hdf5 < 0) {
    const int error = errno;
    throw Error("cannot read checkpoint " + path + ": " + (error != 0 ? os_error_text(error) : damage_reason()));
  }
  File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw Error(path + " is damaged: " + damage_reason());
  const htri_t has_format = H5Aexists(file.get(), kFormatAttribute);
  if (has_format < 0) throw Error(path + " is damaged: " + damage_reason());
  if (!has_format)
    throw Error(path + " is an HDF5 file but not a shardtrain checkpoint (no '" + kFormatAttribute + "' attribute)");
  Attribute attribute(H5Aopen(file.get(), kFormatAttribute, H5P_DEFAULT));
  int64_t version = 0;
  if (!attribute.valid() || H5Aread(attribute.get(), H5T_NATIVE_INT64, &version) < 0)
    throw Error(path + " is damaged: " + damage_reason());
  check_format_version(path, version);
}

}  // namespace detail

CheckpointVerification verify_checkpoint(const std::string& path) {
  detail::silence_hdf5_printing();
  detail::check_checkpoint_file(path);
  detail::File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw Error(path + " is damaged: " + detail::damage_reason());
  auto require = [&](htri_t status, const std::string& what) {
    if (status < 0) throw Error(path + ": cannot read " + what + ": " + detail::damage_reason());
    return status > 0;
  };
  if (!require(H5Aexists(file.get(), detail::kWorldSizeAttribute), "its attributes"))
    throw Error(path + ": the checkpoint has no '" + std::string(detail::kWorldSizeAttribute) +
                "' attribute (every shardtrain checkpoint has one): the file is damaged");
  CheckpointVerification report;
  report.has_checksums = require(H5Aexists(file.get(), detail::kChecksumAlgorithmAttribute), "its attributes");
  const detail::AttributeCheck attributes = detail::check_attribute_checksums(file.get(), path);
  report.has_attribute_checksums = attributes.has_table;
  report.num_attributes_verified = attributes.num_verified;

  // Every object of the file, groups and datasets, in name order.
  std::vector<std::string> links;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  require(H5Lvisit(file.get(), H5_INDEX_NAME, H5_ITER_INC, collect, &links), "the list of its tensors");

  constexpr int64_t kChunkElements = int64_t{16} << 20;
  const auto& table = detail::dtype_table();
  for (const std::string& link : links) {
    const std::string full = "/" + link;
    const hid_t object = H5Oopen(file.get(), full.c_str(), H5P_DEFAULT);
    require(object, full);
    const H5I_type_t kind = H5Iget_type(object);
    H5Oclose(object);
    if (kind != H5I_DATASET) continue;
    detail::Dataset dataset(H5Dopen2(file.get(), full.c_str(), H5P_DEFAULT));
    require(dataset.get(), "dataset " + full);
    detail::Datatype type(H5Dget_type(dataset.get()));
    require(type.get(), "the type of " + full);
    const int code = detail::dtype_code_of_file_type(type.get());
    if (code < 0) throw Error(path + ": dataset " + full + " has a type shardtrain cannot read");
    detail::Dataspace space(H5Dget_space(dataset.get()));
    require(space.get(), "the shape of " + full);
    const int ndim = H5Sget_simple_extent_ndims(space.get());
    require(ndim, "the shape of " + full);
    std::vector<hsize_t> dims(static_cast<size_t>(ndim));
    if (ndim > 0) require(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "the shape of " + full);
    const std::vector<int64_t> shape(dims.begin(), dims.end());
    std::optional<uint64_t> stored;
    if (report.has_checksums) {
      if (!require(H5Aexists(dataset.get(), detail::kChecksumAttribute), "the checksum of " + full))
        throw Error(path + ": tensor " + full + " has no checksum although the file has them: the file was "
                    "modified after it was written");
      detail::Attribute attribute(H5Aopen(dataset.get(), detail::kChecksumAttribute, H5P_DEFAULT));
      uint64_t value = 0;
      require(attribute.valid() ? H5Aread(attribute.get(), H5T_NATIVE_UINT64, &value) : -1, "the checksum of " + full);
      stored = value;
    }
    int64_t numel = 0;
    try {
      numel = detail::numel_of(shape);
    } catch (const Error& e) {
      throw Error(path + ": dataset " + full + ": " + e.what());
    }
    const auto element_size = static_cast<int64_t>(at::elementSize(table[static_cast<size_t>(code)].scalar_type));
    detail::RangeDigest total;
    at::Tensor buffer;
    for (int64_t begin = 0; begin < numel; begin += kChunkElements) {
      const int64_t count = std::min(kChunkElements, numel - begin);
      if (!buffer.defined() || buffer.numel() < count)
        buffer = at::empty({count}, at::TensorOptions().dtype(table[static_cast<size_t>(code)].scalar_type));
      detail::Dataspace file_space = detail::make_file_space(shape);
      bool first = true;
      detail::select_flat_range(file_space.get(), shape, begin, begin + count, &first);
      const hsize_t length = static_cast<hsize_t>(count);
      detail::Dataspace memory_space(ST_CHECK_HDF5(H5Screate_simple(1, &length, nullptr)));
      errno = 0;
      if (H5Dread(dataset.get(), table[static_cast<size_t>(code)].memory_type, memory_space.get(), file_space.get(),
                  H5P_DEFAULT, buffer.data_ptr()) < 0)
        throw Error("cannot read checkpoint " + path + " (" + full + "): " + detail::io_failure_reason(errno, ""));
      const detail::RangeDigest d = detail::digest(buffer.data_ptr(), code, begin, count);
      total.checksum += d.checksum;
      total.non_finite += d.non_finite;
    }
    if (stored && *stored != total.checksum) detail::checksum_mismatch(path, full, *stored, total.checksum);
    if (total.non_finite > 0) detail::non_finite_values(path, full, total.non_finite);
    ++report.num_datasets;
    if (stored) ++report.num_verified;
    report.num_bytes += numel * element_size;
    report.datasets.push_back(full);
  }
  return report;
}

}  // namespace shardtrain
