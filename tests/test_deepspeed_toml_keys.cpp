// The DeepSpeed and FSDP names written in TOML ([parallel.zero], [parallel.fsdp];
// docs/DESIGN.md, "DeepSpeed and FSDP names"), read and checked against
// parallel.strategy by src/config/config_parse.cpp.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/deepspeed_fixtures.h"

namespace test_deepspeed_toml_keys_test {

namespace fs = std::filesystem;
using namespace shardtrain_test::deepspeed_tests;  // DsScratch, load, ..., and shardtrain's names

struct TomlScratch {
  std::string dir;
  TomlScratch() {
    char pattern[] = "/tmp/shardtrain_zerokeys_XXXXXX";
    dir = mkdtemp(pattern);
    std::ofstream(dir + "/train.tsv") << "Quality\t#1 String\t#2 String\n1\ta\tb\n";
    std::ofstream(dir + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
    std::ofstream(dir + "/bert.json") << "{}";
  }
  ~TomlScratch() { fs::remove_all(dir); }
  std::string config(const std::string& parallel) const {
    const std::string path = dir + "/run.toml";
    std::ofstream(path) << "[model]\ninit = \"random\"\nconfig = \"" << dir << "/bert.json\"\nvocab = \"" << dir
                        << "/vocab.txt\"\n[data]\ntrain_file = \"" << dir << "/train.tsv\"\n"
                        << parallel;
    return path;
  }
  std::string error(const std::string& parallel) const {
    return error_of([&] { load_run_config(config(parallel), {}); });
  }
};

TEST_CASE("[parallel.zero] keys are read and checked against the strategy") {
  TomlScratch t;
  const RunConfig c = load_run_config(
      t.config("[parallel]\nstrategy = \"zero3\"\noffload_optimizer = \"cpu\"\n[parallel.zero]\noverlap_comm = false\n"
               "reduce_bucket_size = 1000\nallgather_bucket_size = 2000\ncontiguous_gradients = false\n"
               "round_robin_gradients = true\nstage3_prefetch_bucket_size = 3000\n"
               "stage3_param_persistence_threshold = 4000\ngather_16bit_weights_on_model_save = true\n"),
      {});
  CHECK(c.parallel.offload_optimizer == OffloadDevice::kCpu);
  CHECK_FALSE(c.parallel.zero.overlap_comm);
  CHECK(c.parallel.zero.reduce_bucket_size == 1000);
  CHECK(c.parallel.zero.allgather_bucket_size == 2000);
  CHECK_FALSE(c.parallel.zero.contiguous_gradients);
  CHECK(c.parallel.zero.round_robin_gradients);
  CHECK(c.parallel.zero.stage3_prefetch_bucket_size == 3000);
  CHECK(c.parallel.zero.stage3_param_persistence_threshold == 4000);
  CHECK(c.parallel.zero.gather_16bit_weights_on_model_save);

  CHECK(t.error("[parallel]\nstrategy = \"ddp\"\n[parallel.zero]\noverlap_comm = false\n") ==
        "parallel.zero.overlap_comm only applies when parallel.strategy is \"zero1\", \"zero2\", \"zero3\" or "
        "\"hybrid\" (it is \"ddp\")");
  CHECK(contains(t.error("[parallel]\nstrategy = \"fsdp\"\n[parallel.zero]\nreduce_bucket_size = 5\n"),
                 "for fsdp use parallel.fsdp.*"));
  CHECK(contains(t.error("[parallel]\nstrategy = \"zero2\"\n[parallel.zero]\nstage3_prefetch_bucket_size = 5\n"),
                 "parallel.zero.stage3_prefetch_bucket_size only applies when parallel.strategy is \"zero3\" or "
                 "\"hybrid\""));
  CHECK(contains(t.error("[parallel]\nstrategy = \"zero1\"\n[parallel.zero]\ngather_16bit_weights_on_model_save = "
                         "true\n"),
                 "parallel.zero.gather_16bit_weights_on_model_save only applies"));
  CHECK(t.error("[parallel]\nstrategy = \"zero2\"\nbucket_cap_mb = 50.0\n[parallel.zero]\nreduce_bucket_size = 5\n") ==
        "parallel.zero.reduce_bucket_size and parallel.bucket_cap_mb are both set (two sizes for the gradient "
        "buckets); keep one");
  CHECK(t.error("[parallel]\nstrategy = \"zero3\"\n[parallel.zero]\nstage3_prefetch_bucket_size = -1\n") ==
        "parallel.zero.stage3_prefetch_bucket_size = -1: must be >= 0");
  CHECK(contains(t.error("[parallel]\nstrategy = \"zero3\"\n[parallel.zero]\nreduce_bucket_size = 1.5\n"),
                 "parallel.zero.reduce_bucket_size: expected an integer, got 1.5"));
  // hybrid shards parameters too.
  CHECK(t.error("[parallel]\nstrategy = \"hybrid\"\n[parallel.zero]\nstage3_param_persistence_threshold = 7\n") ==
        "(no error)");
}

TEST_CASE("FSDP prefetch keys: choices, and only with strategy fsdp") {
  TomlScratch t;
  const RunConfig c = load_run_config(
      t.config("[parallel]\nstrategy = \"fsdp\"\n[parallel.fsdp]\nbackward_prefetch = \"BACKWARD_POST\"\n"
               "forward_prefetch = true\nsharding_strategy = \"SHARD_GRAD_OP\"\nstate_dict_type = "
               "\"SHARDED_STATE_DICT\"\noffload_to_cpu = false\nrank0_only = false\n"),
      {});
  CHECK(c.parallel.fsdp.backward_prefetch == BackwardPrefetch::kBackwardPost);
  CHECK(c.parallel.fsdp.forward_prefetch);
  CHECK(c.parallel.fsdp.sharding_strategy == FsdpShardingStrategy::kShardGradOp);
  CHECK(c.parallel.fsdp.state_dict_type == FsdpStateDictType::kShardedStateDict);
  CHECK_FALSE(c.parallel.fsdp.offload_to_cpu);
  CHECK_FALSE(c.parallel.fsdp.rank0_only);
  CHECK(contains(t.error("[parallel]\nstrategy = \"fsdp\"\n[parallel.fsdp]\nbackward_prefetch = \"PRE\"\n"),
                 "allowed values are \"BACKWARD_PRE\", \"BACKWARD_POST\", \"NO_PREFETCH\""));
  CHECK(t.error("[parallel]\nstrategy = \"zero3\"\n[parallel.fsdp]\nforward_prefetch = true\n") ==
        "parallel.fsdp.forward_prefetch only applies when parallel.strategy = \"fsdp\" (it is \"zero3\")");
}

}  // namespace test_deepspeed_toml_keys_test
