// Shared by the libFuzzer targets of tests/fuzz (see README.md there): the
// input split into sections, and a scratch folder for parsers that read files.
// Each target is one .cpp with LLVMFuzzerTestOneInput; none needs MPI.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace fuzz_support {

// Sections of one input are separated by this line, so that a seed that is
// several files (a vocab.txt and its tokenizer_config.json) stays readable text.
inline constexpr std::string_view kSeparator = "\n=====\n";

// The first `count` sections of the input (missing ones are empty; the last
// one takes the rest, separators included).
inline std::vector<std::string> sections(const uint8_t* data, size_t size, size_t count) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> out;
  while (out.size() + 1 < count) {
    const size_t at = rest.find(kSeparator);
    if (at == std::string_view::npos) break;
    out.emplace_back(rest.substr(0, at));
    rest.remove_prefix(at + kSeparator.size());
  }
  out.emplace_back(rest);
  out.resize(count);
  return out;
}

// A folder of this process's own under /dev/shm (or /tmp) for the files a
// parser reads, emptied by clear_scratch().
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::filesystem::path d = std::filesystem::path(base) / ("shardtrain_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    // libFuzzer ends with _Exit (no atexit, no destructors): remove the
    // folders of earlier runs whose process is gone instead.
    for (const auto& item : std::filesystem::directory_iterator(base)) {
      const std::string name = item.path().filename().string();
      if (name.rfind("shardtrain_fuzz_", 0) != 0) continue;
      const long pid = std::atol(name.c_str() + 16);
      std::error_code ignored;
      if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        std::filesystem::remove_all(item.path(), ignored);
    }
    return d;
  }();
  return dir;
}

inline void clear_scratch() {
  for (const auto& item : std::filesystem::directory_iterator(scratch())) std::filesystem::remove_all(item.path());
}

inline std::string write_scratch(const std::string& name, const std::string& bytes) {
  const std::filesystem::path path = scratch() / name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

// A property the parser promised did not hold: a crash libFuzzer reports.
#define FUZZ_REQUIRE(cond)                                                       \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "fuzz: property failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

}  // namespace fuzz_support
