#include "shardtrain/comm/affinity.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {
namespace {

std::vector<int> first_n(int n) {
  std::vector<int> cpus;
  for (int i = 0; i < std::max(n, 1); ++i) cpus.push_back(i);
  return cpus;
}

// A cpulist file's parsed content, or empty when absent or unreadable.
std::vector<int> read_cpu_list_file(const char* path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_cpu_list(text.str());
  } catch (const Error&) {
    return {};
  }
}

}  // namespace

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    std::vector<int> cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    if (!cpus.empty()) return cpus;
  }
  return first_n(static_cast<int>(std::thread::hardware_concurrency()));
}

std::vector<int> node_cpus() {
  for (const char* path : {"/sys/fs/cgroup/cpuset.cpus.effective", "/sys/fs/cgroup/cpuset/cpuset.effective_cpus"}) {
    std::vector<int> cpus = read_cpu_list_file(path);
    if (!cpus.empty()) return cpus;
  }
  std::vector<int> cpus = read_cpu_list_file("/sys/devices/system/cpu/online");
  if (!cpus.empty()) return cpus;
  return first_n(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  const std::set<int> sorted(cpus.begin(), cpus.end());
  std::string out;
  for (auto it = sorted.begin(); it != sorted.end();) {
    const int first = *it;
    int last = first;
    for (++it; it != sorted.end() && *it == last + 1; ++it) last = *it;
    if (!out.empty()) out += ',';
    out += std::to_string(first);
    if (last != first) out += '-' + std::to_string(last);
  }
  return out;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  auto bad = [&text](const std::string& why) -> Error {
    return Error("cpu list \"" + text + "\": " + why + " (expected e.g. \"0-3,8\")");
  };
  std::string compact;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) compact += c;
  std::set<int> cpus;
  if (compact.empty()) return {};
  std::stringstream items(compact);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) throw bad("empty entry");
    const size_t dash = item.find('-');
    auto number = [&](const std::string& digits) {
      if (digits.empty() || digits.size() > 7 || digits.find_first_not_of("0123456789") != std::string::npos)
        throw bad("\"" + item + "\" is not a CPU number or range");
      return std::stoi(digits);
    };
    const int first = number(item.substr(0, dash));
    const int last = dash == std::string::npos ? first : number(item.substr(dash + 1));
    if (last < first) throw bad("range \"" + item + "\" runs backwards");
    for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
  }
  if (compact.back() == ',') throw bad("empty entry");
  return {cpus.begin(), cpus.end()};
}

int ranks_sharing_cores(const std::vector<std::vector<int>>& masks, int self) {
  ST_ASSERT(self >= 0 && self < static_cast<int>(masks.size()), "ranks_sharing_cores: self outside the masks");
  const std::set<int> mine(masks[self].begin(), masks[self].end());
  int sharing = 0;
  for (const auto& other : masks)
    if (std::any_of(other.begin(), other.end(), [&](int cpu) { return mine.count(cpu) > 0; })) ++sharing;
  return std::max(sharing, 1);
}

ThreadDecision decide_threads(const char* omp_num_threads, int num_cores, int ranks_sharing) {
  num_cores = std::max(num_cores, 1);
  ranks_sharing = std::max(ranks_sharing, 1);
  ThreadDecision d;
  d.num_threads = std::max(1, num_cores / ranks_sharing);
  if (omp_num_threads == nullptr) return d;

  // OpenMP reads the first entry of a nested list ("4,2").
  std::string first = omp_num_threads;
  first = first.substr(0, first.find(','));
  first.erase(std::remove_if(first.begin(), first.end(), [](unsigned char c) { return std::isspace(c); }),
              first.end());
  const bool is_number = !first.empty() && first.size() <= 6 && first.find_first_not_of("0123456789") == std::string::npos;
  const int value = is_number ? std::stoi(first) : 0;
  if (value <= 0) {
    d.warning = str_format("OMP_NUM_THREADS=\"%s\" is not a positive integer and is ignored; using %d thread(s) "
                           "(the rank's %d core(s) / %d rank(s) sharing them)",
                           omp_num_threads, d.num_threads, num_cores, ranks_sharing);
    return d;
  }
  d.num_threads = value;
  d.from_env = true;
  if (value > num_cores) {
    d.warning = str_format(
        "OMP_NUM_THREADS=%d but this rank may run on %d core(s): its %d threads time-share them. Fix the launch: "
        "`mpirun --bind-to none` (Open MPI binds each rank to one core when it starts 2 ranks or fewer), "
        "`mpirun --map-by slot:PE=%d` (%d cores per rank), or `srun --cpus-per-task=%d` under Slurm; "
        "or set OMP_NUM_THREADS=%d",
        value, num_cores, value, value, value, value, num_cores);
  } else if (value > 1 && value * ranks_sharing > num_cores) {
    d.warning = str_format(
        "%d ranks share this rank's %d core(s), each with OMP_NUM_THREADS=%d: %d threads on %d cores. Set "
        "OMP_NUM_THREADS=%d (or leave it unset), or give each rank cores of its own: "
        "`mpirun --map-by slot:PE=%d`, `srun --cpus-per-task=%d`",
        ranks_sharing, num_cores, value, value * ranks_sharing, num_cores, std::max(1, num_cores / ranks_sharing),
        value, value);
  }
  return d;
}

}  // namespace shardtrain
