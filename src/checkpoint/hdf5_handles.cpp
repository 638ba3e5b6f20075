#include "checkpoint/hdf5_handles.h"

#include <cerrno>
#include <regex>
#include <utility>

#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace detail {

// Every failure here is either turned into an Error (user-fixable: a damaged
// file, a full disk) or reported by the fatal path, which walks the stack
// itself (hdf5_error_text()), so the automatic printing only ever duplicates
// or confuses.
void silence_hdf5_printing() {
  static const bool silenced = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)silenced;
}

// In this order: MPI-IO's error class quoted in HDF5's stack, an "errno = N"
// the POSIX driver quotes, errno itself, or what the file system says
// (explain_write_failure); otherwise HDF5's stack, shortened.
std::string io_failure_reason(int saved_errno, const std::string& path) {
  const std::string stack = hdf5_error_text();
  static const std::pair<const char*, int> kMpiClasses[] = {
      {"MPI_ERR_NO_SPACE", ENOSPC}, {"MPI_ERR_QUOTA", EDQUOT},       {"MPI_ERR_READ_ONLY", EROFS},
      {"MPI_ERR_ACCESS", EACCES},   {"MPI_ERR_NO_SUCH_FILE", ENOENT}, {"MPI_ERR_FILE_EXISTS", EEXIST},
  };
  for (const auto& [name, value] : kMpiClasses)
    if (stack.find(name) != std::string::npos) return os_error_text(value);
  std::smatch match;
  static const std::regex quoted_errno(R"(errno = ([0-9]+))");
  if (std::regex_search(stack, match, quoted_errno)) {
    const int value = std::stoi(match[1].str());
    if (value != 0) return os_error_text(value);
  }
  for (int value : {ENOSPC, EDQUOT, EROFS, EACCES, EPERM, EIO, EFBIG, ENOENT, ESTALE})
    if (saved_errno == value) return os_error_text(value);
  // MPI-IO often reports a failed write as a short one, errno lost: ask the
  // file system what is wrong with it.
  const std::string explained = path.empty() ? "" : explain_write_failure(path);
  if (!explained.empty()) return explained;
  return "HDF5: " + shorten(stack.empty() ? std::string("call failed") : stack, 600);
}

std::string damage_reason() {
  const std::string stack = hdf5_error_text();
  std::smatch match;
  static const std::regex truncated(R"(truncated file: eof = ([0-9]+).*stored_eof = ([0-9]+))");
  if (std::regex_search(stack, match, truncated))
    return "the file is truncated: it has " + match[1].str() + " bytes, its HDF5 superblock says " +
           match[2].str() + " (a copy or write that was cut off?)";
  if (stack.find("checksum") != std::string::npos)
    return "HDF5 metadata fails its checksum (the file was modified or damaged on disk)";
  return "HDF5: " + shorten(stack.empty() ? std::string("call failed") : stack, 400);
}

}  // namespace detail
}  // namespace shardtrain
