#include "shardtrain/core/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

const char* errno_name(int value) {
  switch (value) {
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EROFS: return "EROFS";
    case ENOENT: return "ENOENT";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EEXIST: return "EEXIST";
    case EIO: return "EIO";
    case EFBIG: return "EFBIG";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ELOOP: return "ELOOP";
    case EXDEV: return "EXDEV";
    case EBUSY: return "EBUSY";
    case ESTALE: return "ESTALE";
    case EINTR: return "EINTR";
    default: return nullptr;
  }
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes all of `data` (write(2) may write less than asked); errno on failure.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = EIO;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void fail(const std::string& action, const std::string& path, int error) {
  throw Error("cannot " + action + " " + path + ": " + os_error_text(error));
}

}  // namespace

std::string os_error_text(int errno_value) {
  const char* name = errno_name(errno_value);
  std::string text = std::strerror(errno_value);
  return name ? text + " (" + name + ")" : text + " (errno " + std::to_string(errno_value) + ")";
}

namespace {

// This process's umask, read without changing it (umask(2) would, for a moment,
// for every thread): the mode a plain open(O_CREAT, 0666) would give.
mode_t new_file_mode() {
  mode_t mask = 022;
  if (std::FILE* status = std::fopen("/proc/self/status", "re")) {
    char line[256];
    while (std::fgets(line, sizeof(line), status))
      if (std::strncmp(line, "Umask:", 6) == 0) {
        mask = static_cast<mode_t>(std::strtoul(line + 6, nullptr, 8));
        break;
      }
    std::fclose(status);
  }
  return 0666 & ~mask;
}

// `path` with every symbolic link followed, as open(2) would (at most 40
// links); a path that does not exist (a new file, or a dangling link's target)
// is returned as it is. Error for a loop of links.
std::string follow_links(const std::string& path, const std::string& what) {
  std::string current = path;
  for (int hops = 0; hops <= 40; ++hops) {
    struct stat info {};
    if (::lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return current;
    std::string link(static_cast<size_t>(info.st_size > 0 ? info.st_size : 255) + 1, '\0');
    const ssize_t n = ::readlink(current.c_str(), link.data(), link.size());
    if (n < 0) throw Error(what + "cannot read the symbolic link " + current + ": " + os_error_text(errno));
    link.resize(static_cast<size_t>(n));
    current = link.empty() || link[0] == '/' ? link : directory_of(current) + "/" + link;
  }
  throw Error(what + "'" + path + "': a loop of symbolic links (" + os_error_text(ELOOP) + "); point it at a file");
}

}  // namespace

OutputFile::OutputFile(const std::string& path, const std::string& what) : path_(path) {
  const std::string prefix = what.empty() ? "" : what + " ";
  if (path.empty()) throw Error(prefix + "'': the path is empty; name a file (or - for standard output)");
  if (path == "-") {
    target_ = path;
    std::fflush(stdout);  // what printf buffered goes first
    fd_ = STDOUT_FILENO;
    return;
  }
  target_ = follow_links(path, prefix);
  struct stat info {};
  const bool exists = ::stat(target_.c_str(), &info) == 0;
  if (exists && S_ISDIR(info.st_mode)) throw Error(prefix + "'" + path + "' is a folder; name a file in it");
  if (exists && S_ISSOCK(info.st_mode)) throw Error(prefix + "'" + path + "' is a socket; name a file");
  if (exists && !S_ISREG(info.st_mode)) {
    // A device or FIFO is the output itself: renaming a file over it would
    // replace /dev/null for every user, or leave a FIFO's reader waiting.
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error("cannot open " + path + " for writing: " + os_error_text(errno));
    return;
  }
  // mkstemp never opens a file that exists: not the input of the command, not
  // another writer's temporary file.
  const std::string directory = directory_of(target_);
  const std::string base = target_.substr(target_.rfind('/') == std::string::npos ? 0 : target_.rfind('/') + 1);
  std::string name = directory + "/" + base + ".tmp-XXXXXX";
  fd_ = ::mkstemp(name.data());
  if (fd_ < 0) throw Error("cannot create a file in " + directory + " (writing " + path + "): " + os_error_text(errno));
  temporary_ = name;
  ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
  // mkstemp makes it 0600: give the file the mode the one it replaces had, or a new file's.
  ::fchmod(fd_, exists ? (info.st_mode & 07777) : new_file_mode());
}

OutputFile::~OutputFile() {
  if (!committed_) discard();
}

void OutputFile::discard() {
  if (fd_ >= 0 && fd_ != STDOUT_FILENO) ::close(fd_);
  fd_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

void OutputFile::fail(const std::string& action, int error) {
  discard();
  throw Error("cannot " + action + " " + path_ + (target_ != path_ && path_ != "-" ? " (-> " + target_ + ")" : "") +
              ": " + os_error_text(error));
}

void OutputFile::write(const void* data, size_t size) {
  if (committed_ || fd_ < 0) throw Error("cannot write " + path_ + ": the output is already closed");
  if (!write_all(fd_, static_cast<const char*>(data), size)) fail("write", errno);
}

void OutputFile::commit() {
  if (committed_ || fd_ < 0) throw Error("cannot write " + path_ + ": the output is already closed");
  if (in_place()) {
    const int fd = fd_;
    fd_ = -1;
    if (fd != STDOUT_FILENO && ::close(fd) != 0) fail("write (close)", errno);
    committed_ = true;
    return;
  }
  // A full disk may only show at fsync on network and delayed-allocation file systems.
  if (::fsync(fd_) != 0) fail("write (fsync)", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("write (close)", errno);
  if (std::rename(temporary_.c_str(), target_.c_str()) != 0) fail("rename a new version into", errno);
  temporary_.clear();
  committed_ = true;
  // The rename is durable only once the directory is on disk; a failure here
  // loses nothing the next run cannot redo, so it is not an error.
  const int directory = ::open(directory_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory >= 0) {
    ::fsync(directory);
    ::close(directory);
  }
}

void write_file_atomic(const std::string& path, const std::string& content) {
  OutputFile out(path);
  out.write(content);
  out.commit();
}

void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail("open for appending", path, errno);
  struct stat before {};
  const bool have_size = ::fstat(fd, &before) == 0;
  const std::string text = line + "\n";
  if (!write_all(fd, text.data(), text.size())) {
    const int error = errno;
    // A partial line would corrupt the report (a JSON line cut in two): cut it off.
    if (have_size && ::ftruncate(fd, before.st_size) != 0) {
      // Nothing more to do: the message below already says the write failed.
    }
    ::close(fd);
    fail("append to", path, error);
  }
  if (::close(fd) != 0) fail("append to", path, errno);
}

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ELOOP)
      throw Error(what + " = '" + path + "': a loop of symbolic links (" + os_error_text(error) + "); point it at a file");
    if (error == ENOENT) throw Error(what + " = '" + path + "': no such file");
    throw Error(what + " = '" + path + "': cannot read it: " + os_error_text(error));
  }
  if (S_ISREG(info.st_mode)) return;
  const char* kind = S_ISDIR(info.st_mode)    ? "a folder"
                     : S_ISFIFO(info.st_mode) ? "a FIFO (named pipe)"
                     : S_ISSOCK(info.st_mode) ? "a socket"
                     : S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode) ? "a device"
                                                                      : "something other than a regular file";
  throw Error(what + " = '" + path + "': is " + kind + ", not a file");
}

std::string read_file(const std::string& path, const std::string& what) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(what + ": cannot read " + path + ": " + os_error_text(errno));
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      close(fd);
      throw Error(what + ": cannot read " + path + ": " + os_error_text(error));
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

std::optional<uint64_t> free_bytes(const std::string& directory) {
  struct statvfs info {};
  if (::statvfs(directory.c_str(), &info) != 0) return std::nullopt;
  return static_cast<uint64_t>(info.f_bavail) * static_cast<uint64_t>(info.f_frsize);
}

void require_free_space(const std::string& directory, uint64_t bytes, const std::string& what) {
  const std::optional<uint64_t> available = free_bytes(directory);
  if (!available || *available >= bytes) return;
  throw Error(os_error_text(ENOSPC) + ": " + what + " needs " + format_bytes(static_cast<double>(bytes)) + ", " +
              format_bytes(static_cast<double>(*available)) + " are free on the file system of " + directory +
              "; free some space (or move run.storage_path) and run again");
}

void reserve_file_space(const std::string& path, uint64_t end, const std::string& what, bool keep_size) {
  if (end == 0) return;
#if defined(__linux__)
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail("open", path, errno);
  int error = 0;
  // fallocate(2), not posix_fallocate(3): where the file system cannot
  // preallocate, glibc's fallback writes the whole range (the data is written
  // right after anyway), and an error is what this is for.
  while (::fallocate(fd, keep_size ? FALLOC_FL_KEEP_SIZE : 0, 0, static_cast<off_t>(end)) != 0) {
    if (errno == EINTR) continue;
    error = errno;
    break;
  }
  ::close(fd);
  if (error == 0 || error == EOPNOTSUPP || error == ENOSYS || error == ENODEV) return;
  const std::optional<uint64_t> available = free_bytes(directory_of(path));
  const bool space = error == ENOSPC || error == EDQUOT;
  throw Error(os_error_text(error) + ": reserving " + format_bytes(static_cast<double>(end)) + " for " + what +
              " in " + path +
              (space && available ? " (" + format_bytes(static_cast<double>(*available)) + " free on its file system)"
                                  : "") +
              (space ? "; free some space (or move run.storage_path) and run again" : ""));
#else
  (void)path;
  (void)what;
  (void)keep_size;
#endif
}

std::string explain_write_failure(const std::string& path) {
  const std::string directory = directory_of(path);
  struct statvfs info {};
  if (::statvfs(directory.c_str(), &info) == 0) {
    if (info.f_flag & ST_RDONLY) return os_error_text(EROFS);
    const uint64_t available = static_cast<uint64_t>(info.f_bavail) * static_cast<uint64_t>(info.f_frsize);
    // Below a megabyte no checkpoint write goes through: the disk is full.
    if (available < (uint64_t{1} << 20))
      return os_error_text(ENOSPC) + " (" + format_bytes(static_cast<double>(available)) + " free on the file system of " +
             directory + ")";
  }
  struct rlimit limit {};
  struct stat file {};
  if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && ::stat(path.c_str(), &file) == 0 &&
      static_cast<uint64_t>(file.st_size) + (uint64_t{1} << 20) >= static_cast<uint64_t>(limit.rlim_cur))
    return os_error_text(EFBIG) + " (this process may write files of at most " +
           format_bytes(static_cast<double>(limit.rlim_cur)) + ": ulimit -f)";
  if (::access(directory.c_str(), W_OK) != 0 && (errno == EACCES || errno == EROFS)) return os_error_text(errno);
  return "";
}

bool is_temp_file_name(const std::string& file_name) {
  const auto at = file_name.rfind(".tmp");
  if (at == std::string::npos || at == 0) return false;
  const std::string tail = file_name.substr(at + 4);
  if (tail.empty()) return true;
  if (tail[0] != '-' || tail.size() == 1) return false;
  for (size_t i = 1; i < tail.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(tail[i]);
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

std::vector<std::string> remove_stale_temp_files(const std::string& run_dir, const std::string& keep_job_id) {
  std::vector<std::string> removed;
  DIR* directory = ::opendir(run_dir.c_str());
  if (!directory) return removed;
  const std::string keep_suffix = keep_job_id.empty() ? "" : ".tmp-" + keep_job_id;
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(directory)) names.emplace_back(entry->d_name);
  ::closedir(directory);
  for (const std::string& name : names) {
    if (!is_temp_file_name(name)) continue;
    if (!keep_suffix.empty() && name.size() >= keep_suffix.size() &&
        name.compare(name.size() - keep_suffix.size(), keep_suffix.size(), keep_suffix) == 0)
      continue;
    const std::string path = run_dir + "/" + name;
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0 || S_ISDIR(info.st_mode)) continue;
    if (::unlink(path.c_str()) == 0) removed.push_back(path);
  }
  return removed;
}

void refuse_link_loop(const std::string& path, const std::string& what) {
  struct stat info {};
  if (path.empty() || ::stat(path.c_str(), &info) == 0 || errno != ELOOP) return;
  // The shortest leading part of the path that loops: the link to fix.
  std::filesystem::path looping, prefix;
  for (const std::filesystem::path& part : std::filesystem::path(path)) {
    prefix /= part;
    if (::stat(prefix.c_str(), &info) != 0 && errno == ELOOP) {
      looping = prefix;
      break;
    }
  }
  const std::string where = looping.empty() || looping == std::filesystem::path(path)
                                ? ""
                                : " '" + looping.string() + "' is";
  throw Error(what + " '" + path + "':" + where + " a loop of symbolic links (" + os_error_text(ELOOP) +
              "); point " + what + " at a real path");
}

std::string real_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::path real = fs::weakly_canonical(fs::absolute(path, error), error);
  if (error) real = fs::absolute(path, error).lexically_normal();
  if (real.filename().empty()) real = real.parent_path();  // "dir/"
  return real.string();
}

namespace {

// True when the real path `inner` is `folder` or lies below it.
bool real_path_within(const std::filesystem::path& inner, const std::filesystem::path& folder) {
  auto i = inner.begin();
  for (auto f = folder.begin(); f != folder.end(); ++f, ++i)
    if (i == inner.end() || *i != *f) return false;
  return true;
}

}  // namespace

void refuse_output_over_input(const std::string& output_flag, const std::string& output, const std::string& input_flag,
                              const std::string& input) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path out = real_path(output), in = real_path(input);
  const std::string fix = "; choose an " + output_flag + " outside it (nothing was written)";
  if (fs::is_directory(input, error)) {
    bool clash = real_path_within(out, in);
    if (!clash && fs::is_regular_file(output, error))
      for (fs::recursive_directory_iterator it(in, error), end; !clash && !error && it != end; it.increment(error))
        clash = it->is_regular_file(error) && fs::equivalent(it->path(), output, error);
    if (clash)
      throw Error(output_flag + " '" + output + "' is inside the folder of " + input_flag + " '" + input +
                  "', which this command reads" + fix);
    return;
  }
  if (out == in || (fs::exists(output, error) && fs::exists(input, error) && fs::equivalent(output, input, error)))
    throw Error(output_flag + " '" + output + "' is " + input_flag + " '" + input +
                "', which this command reads; writing it would destroy it" + fix);
}

}  // namespace shardtrain
