#include "checkpoint/dtypes.h"

#include "checkpoint/checkpoint_format.h"
#include "shardtrain/core/check.h"

namespace shardtrain {
namespace detail {

const std::vector<DtypeInfo>& dtype_table() {
  // In the order of the codes of checkpoint_format.h (dtype_name()).
  static const std::vector<DtypeInfo> table = {{at::kFloat, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, dtype_name(0)},
          {at::kDouble, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, dtype_name(1)},
          {at::kInt, H5T_NATIVE_INT32, H5T_STD_I32LE, dtype_name(2)},
          {at::kLong, H5T_NATIVE_INT64, H5T_STD_I64LE, dtype_name(3)}};
  static_assert(kNumDtypes == 4, "dtype_table() lists every dtype code");
  return table;
}

int dtype_code(at::ScalarType type, const std::string& where) {
  const auto& table = dtype_table();
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].scalar_type == type) return static_cast<int>(i);
  throw Error(where + ": unsupported dtype " + std::string(c10::toString(type)) +
              " (checkpoints hold float32, float64, int32, int64)");
}

int dtype_code_of_file_type(hid_t file_type) {
  const auto& table = dtype_table();
  H5T_class_t type_class = H5Tget_class(file_type);
  size_t size = H5Tget_size(file_type);
  for (size_t i = 0; i < table.size(); ++i)
    if (H5Tget_class(table[i].file_type) == type_class && H5Tget_size(table[i].file_type) == size)
      return static_cast<int>(i);
  return -1;
}

}  // namespace detail
}  // namespace shardtrain
