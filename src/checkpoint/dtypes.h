// Private to src/checkpoint: the four element types a checkpoint holds
// (float32, float64, int32, int64), as ATen and HDF5 name them. A dtype code
// is an index into dtype_table(); codes travel between ranks in slice records
// (checkpoint/checkpoint_format.h).
#pragma once

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "checkpoint/hdf5_handles.h"

namespace shardtrain {
namespace detail {

struct DtypeInfo {
  at::ScalarType scalar_type;
  hid_t memory_type;  // native, for H5Dread / H5Dwrite
  hid_t file_type;    // fixed little-endian, for H5Dcreate
  const char* name;   // "float32", for messages
};

const std::vector<DtypeInfo>& dtype_table();

// The code of `type`; Error naming `where` for a type a checkpoint cannot hold.
int dtype_code(at::ScalarType type, const std::string& where);

// The code of a dataset's file type (matched by class and size), or -1.
int dtype_code_of_file_type(hid_t file_type);

}  // namespace detail
}  // namespace shardtrain
