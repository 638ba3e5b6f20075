// Available host memory (core/memory.h): MemAvailable and cgroup limits, as
// the kernel writes them, and the refusal of an allocation that cannot fit.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>

#include "shardtrain/core/check.h"
#include "shardtrain/core/memory.h"

using namespace shardtrain;

namespace {

const char* kMeminfo =
    "MemTotal:       24683652 kB\n"
    "MemFree:        19000000 kB\n"
    "MemAvailable:   20000000 kB\n"
    "Buffers:          100000 kB\n";

}  // namespace

TEST_CASE("available memory: MemAvailable, or a smaller cgroup limit minus its usage") {
  auto m = available_memory_from(kMeminfo, "", "");
  REQUIRE(m.has_value());
  CHECK(m->bytes == 20000000ull * 1024);
  CHECK(m->source == "MemAvailable 19.1 GiB");

  // cgroup v2 "max" and v1's page-rounded 2^63 mean no limit.
  CHECK(available_memory_from(kMeminfo, "max\n", "123\n")->bytes == 20000000ull * 1024);
  CHECK(available_memory_from(kMeminfo, "9223372036854771712\n", "3816849408\n")->bytes == 20000000ull * 1024);

  // A 4 GiB limit with 1 GiB in use leaves 3 GiB, less than MemAvailable.
  m = available_memory_from(kMeminfo, "4294967296\n", "1073741824\n");
  REQUIRE(m.has_value());
  CHECK(m->bytes == 3ull << 30);
  CHECK(m->source == "cgroup limit 4.0 GiB, 1.0 GiB in use");
  // Usage above the limit (the kernel is reclaiming): nothing is available.
  CHECK(available_memory_from("", "100\n", "200\n")->bytes == 0);
  CHECK_FALSE(available_memory_from("", "", "").has_value());
  CHECK_FALSE(available_memory_from("garbage", "max", "").has_value());
}

TEST_CASE("this machine reports its memory, and require_memory refuses what cannot fit") {
  const auto m = available_memory();
  REQUIRE(m.has_value());
  CHECK(m->bytes > 0);
  require_memory(1024.0, "a small buffer");
  std::string message;
  try {
    require_memory(1e18, "model config x.json (vocab_size 1000000000000)", "; lower vocab_size");
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("model config x.json (vocab_size 1000000000000) needs 888.2 PiB of host memory, but ") == 0);
  CHECK(message.find(" are available (") != std::string::npos);
  CHECK(message.find("); lower vocab_size") != std::string::npos);
}
