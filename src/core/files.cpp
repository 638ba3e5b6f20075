#include "shardtrain/core/files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "shardtrain/core/check.h"

namespace shardtrain {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

std::string read_whole_file(const std::string& path) {
  File in(std::fopen(path.c_str(), "rb"));
  if (!in) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  std::string out;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), in.get())) > 0) out.append(buffer, n);
  if (std::ferror(in.get())) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  return out;
}

void write_file_atomic(const std::string& path, const std::string& content, const std::string& tmp_path) {
  const std::string tmp = tmp_path.empty() ? path + ".tmp" : tmp_path;
  {
    File out(std::fopen(tmp.c_str(), "wb"));
    if (!out) throw Error("cannot write '" + tmp + "': " + std::strerror(errno));
    // fclose's result is checked too: a full disk may only show up there.
    const bool written = std::fwrite(content.data(), 1, content.size(), out.get()) == content.size() &&
                         std::fflush(out.get()) == 0;
    const int error = errno;
    if (!written || std::fclose(out.release()) != 0) {
      std::remove(tmp.c_str());
      throw Error("cannot write '" + tmp + "': " + std::strerror(written ? errno : error));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(error));
  }
}

}  // namespace shardtrain
