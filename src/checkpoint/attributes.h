// Private to src/checkpoint: a checkpoint's root attributes read by kind, and
// the check of their checksums (checkpoint_format.h, kAttributeChecksumsAttribute),
// over an open HDF5 file; shared by CheckpointReader (every open) and
// verify_checkpoint() (`inspect --verify`).
//
//   std::string bytes = detail::read_attribute_bytes(file, path, "step", AttributeKind::kInteger);
//   const detail::AttributeCheck check = detail::check_attribute_checksums(file, path);
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"

namespace shardtrain {
namespace detail {

// The value of the root attribute `key` as attribute_checksum() takes it: an
// integer or a float as its 8 bytes, a string's text, bytes as they are.
// Error naming `path` when it is missing, of another kind, or unreadable.
std::string read_attribute_bytes(hid_t file, const std::string& path, const std::string& key, AttributeKind kind);

// The names of the root attributes, in name order.
std::vector<std::string> root_attribute_names(hid_t file, const std::string& path);

struct AttributeCheck {
  bool has_table = false;     // false: written before attribute checksums existed
  int64_t num_verified = 0;   // attributes whose checksum matched
};

// Every root attribute against the checksum table: Error naming `path` and the
// attribute when one fails its checksum, is missing, is of another kind than
// written, or was added after the file was written. No table: nothing checked.
AttributeCheck check_attribute_checksums(hid_t file, const std::string& path);

}  // namespace detail
}  // namespace shardtrain
