// Root attributes by kind and their checksums (checkpoint/attributes.h;
// docs/DESIGN.md, "Checkpoints").
#include "checkpoint/attributes.h"

#include <cstring>

#include "checkpoint/hdf5_handles.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {
namespace detail {
namespace {

TypeClass type_class_of(H5T_class_t type_class) {
  switch (type_class) {
    case H5T_INTEGER: return TypeClass::kInteger;
    case H5T_FLOAT: return TypeClass::kFloat;
    case H5T_STRING: return TypeClass::kString;
    default: return TypeClass::kOther;
  }
}

template <class T>
T checked(T status, const std::string& path, const std::string& what) {
  if (status < 0) throw Error(path + ": cannot read " + what + ": " + damage_reason());
  return status;
}

}  // namespace

std::string read_attribute_bytes(hid_t file, const std::string& path, const std::string& key, AttributeKind kind) {
  const std::string what = "attribute '" + key + "'";
  if (!checked(H5Aexists(file, key.c_str()), path, what)) throw Error(path + ": checkpoint has no attribute '" + key + "'");
  Attribute attribute(checked(H5Aopen(file, key.c_str(), H5P_DEFAULT), path, what));
  Datatype type(checked(H5Aget_type(attribute.get()), path, what));
  AttributeShape shape;
  shape.type_class = type_class_of(H5Tget_class(type.get()));
  shape.type_size_bytes = H5Tget_size(type.get());
  if (kind != AttributeKind::kString) {
    Dataspace space(checked(H5Aget_space(attribute.get()), path, what));
    shape.num_dimensions = H5Sget_simple_extent_ndims(space.get());
    shape.num_elements = H5Sget_simple_extent_npoints(space.get());
  }
  if (!holds(kind, shape)) throw Error(path + ": attribute '" + key + "' is not " + kind_description(kind));
  switch (kind) {
    case AttributeKind::kInteger: {
      int64_t value = 0;
      checked(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), path, what);
      return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
    }
    case AttributeKind::kFloat: {
      double value = 0;
      checked(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value), path, what);
      return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
    }
    case AttributeKind::kBytes: {
      std::string value(static_cast<size_t>(shape.num_elements), '\0');
      if (!value.empty()) checked(H5Aread(attribute.get(), H5T_NATIVE_UINT8, value.data()), path, what);
      return value;
    }
    case AttributeKind::kString: break;
  }
  if (checked(H5Tis_variable_str(type.get()), path, what)) {
    Datatype memory_type(ST_CHECK_HDF5(H5Tcopy(H5T_C_S1)));
    ST_CHECK_HDF5(H5Tset_size(memory_type.get(), H5T_VARIABLE));
    ST_CHECK_HDF5(H5Tset_cset(memory_type.get(), H5Tget_cset(type.get())));
    char* pointer = nullptr;
    checked(H5Aread(attribute.get(), memory_type.get(), &pointer), path, what);
    std::string value = pointer ? pointer : "";
    H5free_memory(pointer);
    return value;
  }
  // Fixed-length strings (e.g. written by other tools): size bytes, NUL padded.
  std::string value(shape.type_size_bytes, '\0');
  checked(H5Aread(attribute.get(), type.get(), value.data()), path, what);
  return text_of_fixed_length_string(std::move(value));
}

std::vector<std::string> root_attribute_names(hid_t file, const std::string& path) {
  std::vector<std::string> out;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  checked(H5Aiterate2(file, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &out), path, "the attributes");
  return out;
}

AttributeCheck check_attribute_checksums(hid_t file, const std::string& path) {
  AttributeCheck check;
  if (!checked(H5Aexists(file, kAttributeChecksumsAttribute), path, "its attributes")) return check;
  check.has_table = true;
  const auto table = decode_attribute_checksums(
      read_attribute_bytes(file, path, kAttributeChecksumsAttribute, AttributeKind::kString), path);
  const std::string fix = "; the checkpoint's metadata was changed or damaged after it was written: use another "
                          "checkpoint";
  for (const std::string& name : root_attribute_names(file, path))
    if (name != kAttributeChecksumsAttribute && !table.count(name))
      throw Error(path + ": attribute '" + clip_for_message(name, 60) + "' has no checksum: it was added" + fix);
  for (const auto& [name, entry] : table) {
    if (!checked(H5Aexists(file, name.c_str()), path, "attribute '" + name + "'"))
      throw Error(path + ": attribute '" + clip_for_message(name, 60) + "' is missing" + fix);
    std::string value;
    try {
      value = read_attribute_bytes(file, path, name, entry.kind);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " as it was written" + fix);
    }
    const uint64_t computed = attribute_checksum(entry.kind, value);
    if (computed != entry.checksum)
      throw Error(path + ": attribute '" + name + "' fails its checksum (stored " +
                  str_format("0x%016llx", static_cast<unsigned long long>(entry.checksum)) + ", its value gives " +
                  str_format("0x%016llx", static_cast<unsigned long long>(computed)) + ")" + fix);
    ++check.num_verified;
  }
  return check;
}

}  // namespace detail
}  // namespace shardtrain
