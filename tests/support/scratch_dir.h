// A fresh temporary directory for a single-process test, removed with
// everything in it at the end of the scope (multi-rank tests: mpi_ranks.h's
// make_shared_temp_dir).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

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

}  // namespace shardtrain_test
