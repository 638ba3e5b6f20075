// How much host memory this process may still allocate, for refusing a run
// that cannot fit before anything large is allocated.
//
//   if (auto available = available_memory())
//     if (needed > available->bytes) throw Error("... needs X, " + available->source);
//
// The answer is the smaller of the kernel's MemAvailable (/proc/meminfo: free
// memory plus what the page cache can give back without swapping) and, when
// the process runs in a memory cgroup with a limit (Slurm, containers), that
// limit minus the cgroup's current usage (cgroup v2 memory.max /
// memory.current, or v1 memory.limit_in_bytes / memory.usage_in_bytes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardtrain {

struct AvailableMemory {
  uint64_t bytes = 0;
  // What decided it, for messages: "MemAvailable 20.1 GiB" or
  // "cgroup limit 16.0 GiB, 3.9 GiB in use".
  std::string source;
};

// nullopt when neither /proc/meminfo nor a cgroup limit can be read.
std::optional<AvailableMemory> available_memory();

// The pure part of available_memory(), for tests: the text of /proc/meminfo
// (may be empty), and a cgroup's limit and usage files' text (empty when
// absent; "max" or a value of 2^62 and above means no limit).
std::optional<AvailableMemory> available_memory_from(const std::string& meminfo, const std::string& cgroup_limit,
                                                     const std::string& cgroup_usage);

// Error unless `bytes` fit in available_memory() (nothing happens when it is
// unknown): "<what> needs 3.0 GiB of host memory, but 1.2 GiB are available
// (MemAvailable 1.2 GiB)<hint>". For allocations sized from input files.
void require_memory(double bytes, const std::string& what, const std::string& hint = "");

}  // namespace shardtrain
