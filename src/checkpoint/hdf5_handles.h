// Private to src/checkpoint: RAII owners of HDF5 ids, and turning HDF5's
// failures into the reasons a user reads (docs/DESIGN.md, "Checkpoints").
//
//   detail::silence_hdf5_printing();                 // once, before any HDF5 call
//   detail::File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
//   if (!file.valid()) throw Error(path + " is damaged: " + detail::damage_reason());
//   // file closes when it goes out of scope
#pragma once

#include <hdf5.h>

#include <string>

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace detail {

// Owns one HDF5 id and closes it with `Close`. Move-only; an invalid id
// (negative, e.g. a failed H5Fopen) is held as is and never closed.
template <herr_t (*Close)(hid_t)>
class H5Id {
 public:
  H5Id() = default;
  explicit H5Id(hid_t id) : id_(id) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  H5Id& operator=(H5Id&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      other.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and returns HDF5's status (negative on failure).
  herr_t close() {
    herr_t status = id_ >= 0 ? Close(id_) : 0;
    id_ = H5I_INVALID_HID;
    return status;
  }
  // Closes now, aborting the job if HDF5 reports an error (a destructor cannot).
  void close_or_abort() {
    if (id_ >= 0) ST_CHECK_HDF5(Close(id_));
    id_ = H5I_INVALID_HID;
  }

 private:
  void reset() {
    if (id_ >= 0) Close(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t id_ = H5I_INVALID_HID;
};

using File = H5Id<H5Fclose>;
using Group = H5Id<H5Gclose>;
using Dataset = H5Id<H5Dclose>;
using Dataspace = H5Id<H5Sclose>;
using Datatype = H5Id<H5Tclose>;
using Attribute = H5Id<H5Aclose>;
using PropertyList = H5Id<H5Pclose>;

// Turns off HDF5's printing of its error stack to stderr, once for the process.
void silence_hdf5_printing();

// Why an HDF5 I/O call on the file `path` failed, as the operating system's
// reason where one can be found (`saved_errno`: errno right after the call;
// `path` "" when the file system need not be asked, e.g. on a read).
std::string io_failure_reason(int saved_errno, const std::string& path);

// Why HDF5 could not read a file's structure, for "<path> is damaged" messages.
std::string damage_reason();

}  // namespace detail
}  // namespace shardtrain
