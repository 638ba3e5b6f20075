// A fresh temporary directory for a single-process test, removed with
// everything in it at the end of the scope (multi-rank tests: mpi_ranks.h's
// make_shared_temp_dir); whether a writer left a temporary file.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace shardtrain_test {

struct ScratchDir {
  std::string dir;  // /tmp/shardtrain_<name>_XXXXXX
  explicit ScratchDir(const std::string& name) {
    std::string pattern = "/tmp/shardtrain_" + name + "_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a temporary directory for " + name);
    dir = pattern;
  }
  ~ScratchDir() { std::filesystem::remove_all(dir); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

// Whether the folder of `path` holds a temporary file of it: "<name>.tmp" or
// "<name>.tmp-XXXXXX" (core/fs_util.h's OutputFile).
inline bool has_temporary_of(const std::string& path) {
  const std::filesystem::path file(path);
  const std::filesystem::path folder = file.has_parent_path() ? file.parent_path() : ".";
  const std::string prefix = file.filename().string() + ".tmp";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name == prefix || name.rfind(prefix + "-", 0) == 0) return true;
  }
  return false;
}

}  // namespace shardtrain_test
