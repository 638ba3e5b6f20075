#include "shardtrain/core/memory.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::optional<uint64_t> parse_bytes(const std::string& text) {
  const char* begin = text.c_str();
  while (*begin == ' ' || *begin == '\t') ++begin;
  if (*begin < '0' || *begin > '9') return std::nullopt;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(begin, &end, 10);
  return static_cast<uint64_t>(value);
}

// The cgroup of this process, relative to the hierarchy's root, for `controller`
// ("memory" on v1; "" for the v2 unified line "0::/path").
std::string cgroup_path(const std::string& self_cgroup, const std::string& controller) {
  std::istringstream lines(self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controller.empty() ? controllers.empty() && line.compare(0, first, "0") == 0
                           : ("," + controllers + ",").find("," + controller + ",") != std::string::npos)
      return path;
  }
  return "";
}

// The limit and usage files of the memory cgroup this process is in: the
// cgroup's own directory, or the mount root (inside a container the mount is
// the container's cgroup).
void read_cgroup(std::string* limit, std::string* usage) {
  const std::string self = read_text("/proc/self/cgroup");
  const std::string v2 = cgroup_path(self, "");
  const std::string v1 = cgroup_path(self, "memory");
  const struct Candidate {
    std::string directory, limit_file, usage_file;
  } candidates[] = {
      {"/sys/fs/cgroup" + v2, "memory.max", "memory.current"},
      {"/sys/fs/cgroup", "memory.max", "memory.current"},
      {"/sys/fs/cgroup/memory" + v1, "memory.limit_in_bytes", "memory.usage_in_bytes"},
      {"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"},
  };
  for (const Candidate& c : candidates) {
    const std::string l = read_text(c.directory + "/" + c.limit_file);
    if (l.empty()) continue;
    *limit = l;
    *usage = read_text(c.directory + "/" + c.usage_file);
    return;
  }
}

}  // namespace

std::optional<AvailableMemory> available_memory_from(const std::string& meminfo, const std::string& cgroup_limit,
                                                     const std::string& cgroup_usage) {
  std::optional<AvailableMemory> best;
  const auto at = meminfo.find("MemAvailable:");
  if (at != std::string::npos) {
    if (const auto kib = parse_bytes(meminfo.substr(at + 13))) {
      AvailableMemory m;
      m.bytes = *kib * 1024;
      m.source = "MemAvailable " + format_bytes(static_cast<double>(m.bytes));
      best = m;
    }
  }
  // cgroup v1 reports "no limit" as a page-rounded 2^63 - 1; v2 as "max".
  const auto limit = parse_bytes(cgroup_limit);
  if (limit && *limit < (uint64_t{1} << 62)) {
    const uint64_t usage = parse_bytes(cgroup_usage).value_or(0);
    AvailableMemory m;
    m.bytes = *limit > usage ? *limit - usage : 0;
    m.source = "cgroup limit " + format_bytes(static_cast<double>(*limit)) + ", " +
               format_bytes(static_cast<double>(usage)) + " in use";
    if (!best || m.bytes < best->bytes) best = m;
  }
  return best;
}

std::optional<AvailableMemory> available_memory() {
  std::string limit, usage;
  read_cgroup(&limit, &usage);
  return available_memory_from(read_text("/proc/meminfo"), limit, usage);
}

void require_memory(double bytes, const std::string& what, const std::string& hint) {
  const std::optional<AvailableMemory> available = available_memory();
  if (!available || bytes <= static_cast<double>(available->bytes)) return;
  throw Error(what + " needs " + format_bytes(bytes) + " of host memory, but " +
              format_bytes(static_cast<double>(available->bytes)) + " are available (" + available->source + ")" +
              hint);
}

}  // namespace shardtrain
