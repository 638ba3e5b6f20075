// Parallel-HDF5 checkpoint throughput: write and read a BERT-shaped training
// state (model + AdamW exp_avg + exp_avg_sq, fp32) sharded ZeRO-style: the
// three groups share one flat layout of the parameters and rank r owns the
// contiguous flat range [r * N / P, (r + 1) * N / P) of each.
//
//   write  CheckpointWriter: create, 3 collective write_group calls, a config
//          attribute, commit (flush, close, rename, fsync of the directory)
//   read   CheckpointReader: open, 3 collective read calls into this rank's shard
//
// GB/s = checkpoint bytes (3 x 4 x N) / seconds, seconds = slowest rank
// (barrier before, max over ranks after). Before timing, a written checkpoint
// is read back under a different partition (every rank reads an uneven part)
// and compared bit-exactly; every timed read is compared too. One warm-up
// write/read pair, then --runs timed pairs; min/median/max printed and written
// as JSON with --json FILE. Reads right after writes come largely from the
// page cache on one node: they measure the MPI-IO/HDF5 path, not the disk.
//
//   mpiexec -np 2 bench_checkpoint [--params N] [--runs 3] [--dir D] [--json out.json]
//   --params N   parameter count (default: BERT-base-cased, 108.3M); the layout
//                keeps BERT's tensor names and shapes with fewer layers and a
//                smaller vocabulary
#include <ATen/ATen.h>

#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "shardtrain/checkpoint/checkpoint.h"
#include "shardtrain/train/checkpoint_manager.h"
#include "shardtrain/comm/world.h"
#include "bench_util.h"

namespace bench_checkpoint {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;

namespace {

// BERT-base tensor names and shapes (hidden D = 768, intermediate 4D) with
// `num_layers` encoder layers and a `vocab` x D word embedding.
std::vector<FlatTensor> bert_layout(int num_layers, int64_t vocab) {
  const int64_t D = 768, F = 3072;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"bert.embeddings.word_embeddings.weight", {vocab, D}},
      {"bert.embeddings.position_embeddings.weight", {512, D}},
      {"bert.embeddings.token_type_embeddings.weight", {2, D}},
      {"bert.embeddings.LayerNorm.weight", {D}},
      {"bert.embeddings.LayerNorm.bias", {D}}};
  for (int l = 0; l < num_layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense"}) {
      shapes.push_back({p + m + ".weight", {D, D}});
      shapes.push_back({p + m + ".bias", {D}});
    }
    shapes.push_back({p + "attention.output.LayerNorm.weight", {D}});
    shapes.push_back({p + "attention.output.LayerNorm.bias", {D}});
    shapes.push_back({p + "intermediate.dense.weight", {F, D}});
    shapes.push_back({p + "intermediate.dense.bias", {F}});
    shapes.push_back({p + "output.dense.weight", {D, F}});
    shapes.push_back({p + "output.dense.bias", {D}});
    shapes.push_back({p + "output.LayerNorm.weight", {D}});
    shapes.push_back({p + "output.LayerNorm.bias", {D}});
  }
  shapes.push_back({"bert.pooler.dense.weight", {D, D}});
  shapes.push_back({"bert.pooler.dense.bias", {D}});
  shapes.push_back({"classifier.weight", {2, D}});
  shapes.push_back({"classifier.bias", {2}});
  std::vector<FlatTensor> layout;
  int64_t offset = 0;
  for (auto& [name, shape] : shapes) {
    layout.push_back({name, shape, offset});
    offset += std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
  }
  return layout;
}

int64_t total_numel(const std::vector<FlatTensor>& layout) {
  const auto& last = layout.back();
  return last.offset + std::accumulate(last.shape.begin(), last.shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

// The smallest BERT-shaped layout with about `params` parameters: layers
// scaled down from 12, the word embedding absorbing the rest.
std::vector<FlatTensor> layout_for(int64_t params) {
  const int64_t base_vocab = 28996;
  const int64_t per_layer = total_numel(bert_layout(1, base_vocab)) - total_numel(bert_layout(0, base_vocab));
  const int64_t fixed = total_numel(bert_layout(0, 2));
  int layers = 12;
  while (layers > 0 && fixed + layers * per_layer > params) --layers;
  int64_t vocab = std::max<int64_t>(2, 2 + (params - fixed - layers * per_layer) / 768);
  vocab = std::min(vocab, base_vocab);
  return bert_layout(layers, vocab);
}

// Deterministic, exactly reproducible values of flat elements [begin, end).
at::Tensor values(int64_t begin, int64_t end, int group) {
  return (at::arange(begin, end, at::kLong).remainder(1000003).to(at::kFloat) * 0.001f) + static_cast<float>(group);
}

const char* kGroups[] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};

double max_over_ranks(double value, MPI_Comm comm) {
  double out = 0;
  MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm);
  return out;
}

struct Stats {
  double min, median, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  World world(&argc, &argv);
  MPI_Comm comm = world.comm();
  const int rank = world.rank(), size = world.size();
  int64_t params = 108310274;  // bert-base-cased + 2-label head
  int runs = 3;
  std::string dir = "/tmp/shardtrain_bench_checkpoint", json;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        if (rank == 0) std::fprintf(stderr, "bench_checkpoint: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--params") params = std::stoll(next());
    else if (arg == "--runs") runs = std::stoi(next());
    else if (arg == "--dir") dir = next();
    else if (arg == "--json") json = next();
    else {
      if (rank == 0) std::fprintf(stderr, "bench_checkpoint: unknown flag %s\n", arg.c_str());
      return 2;
    }
  }
  if (rank == 0) mkdir(dir.c_str(), 0755);
  MPI_Barrier(comm);

  const std::vector<FlatTensor> layout = layout_for(params);
  const int64_t numel = total_numel(layout);
  const int64_t shard_begin = numel * rank / size, shard_end = numel * (rank + 1) / size;
  const double checkpoint_bytes = 3.0 * 4.0 * static_cast<double>(numel);
  std::vector<at::Tensor> shards, read_back;
  for (int g = 0; g < 3; ++g) {
    shards.push_back(values(shard_begin, shard_end, g));
    read_back.push_back(at::empty({shard_end - shard_begin}));
  }
  const std::string path = checkpoint_path(dir, 1);
  const std::string config(8 * 1024, '#');

  auto write = [&] {
    CheckpointWriter writer(path, comm);
    for (int g = 0; g < 3; ++g) writer.write_group(kGroups[g], slices_of_shard(layout, shard_begin, shards[g]));
    writer.set_attribute("config", config);
    writer.set_attribute("step", 1);
    writer.commit();
  };
  auto read = [&] {
    CheckpointReader reader(path, comm);
    for (int g = 0; g < 3; ++g) {
      auto slices = slices_of_shard(layout, shard_begin, read_back[g]);
      reader.read(kGroups[g], slices);
    }
  };
  auto timed = [&](const std::function<void()>& fn) {
    MPI_Barrier(comm);
    auto start = std::chrono::steady_clock::now();
    fn();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return max_over_ranks(seconds, comm);
  };
  auto verify = [&](const char* when) {
    bool ok = true;
    for (int g = 0; g < 3; ++g) ok = ok && at::equal(read_back[g], shards[g]);
    int mine = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
    if (!all) {
      if (rank == 0) std::fprintf(stderr, "bench_checkpoint: data read back %s differs from what was written\n", when);
      MPI_Abort(comm, 1);
    }
  };

  // Correctness first, under a different partition: rank r reads the uneven
  // range [N * r^2 / P^2, N * (r+1)^2 / P^2) of every group.
  write();
  {
    CheckpointReader reader(path, comm);
    const int64_t begin = numel * rank * rank / (size * size), end = numel * (rank + 1) * (rank + 1) / (size * size);
    bool ok = true;
    for (int g = 0; g < 3; ++g) {
      at::Tensor part = at::full({end - begin}, -1.0f);
      auto slices = slices_of_shard(layout, begin, part);
      reader.read(kGroups[g], slices);
      ok = ok && at::equal(part, values(begin, end, g));
    }
    int mine = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
    if (!all) {
      if (rank == 0) std::fprintf(stderr, "bench_checkpoint: resharded read differs from what was written\n");
      MPI_Abort(comm, 1);
    }
  }
  for (auto& t : read_back) t.fill_(-1.0f);
  read();
  verify("(warm-up)");

  std::vector<double> write_s, read_s;
  for (int run = 0; run < runs; ++run) {
    if (rank == 0) std::remove(path.c_str());
    write_s.push_back(timed(write));
    for (auto& t : read_back) t.fill_(-1.0f);  // a stale buffer must not pass the check
    read_s.push_back(timed(read));
    verify("(timed run)");
  }
  if (rank == 0) std::remove(path.c_str());

  if (rank == 0) {
    Stats w = stats(write_s), r = stats(read_s);
    const double gb = checkpoint_bytes / 1e9;
    std::printf("bench_checkpoint: %d ranks, %lld params (%zu tensors x 3 groups), %.3f GB per checkpoint, dir %s\n",
                size, static_cast<long long>(numel), layout.size(), gb, dir.c_str());
    std::printf("  GB/s   %10s %10s %10s   (%d runs)\n", "min", "median", "max", runs);
    std::printf("  %-6s %10.3f %10.3f %10.3f   (seconds %.3f / %.3f / %.3f)\n", "write", gb / w.max, gb / w.median,
                gb / w.min, w.min, w.median, w.max);
    std::printf("  %-6s %10.3f %10.3f %10.3f   (seconds %.3f / %.3f / %.3f)\n", "read", gb / r.max, gb / r.median,
                gb / r.min, r.min, r.median, r.max);
    if (!json.empty()) {
      std::ofstream out(json);
      out << "{\"benchmark\": \"checkpoint\", \"ranks\": " << size << ", \"params\": " << numel
          << ", \"bytes\": " << static_cast<int64_t>(checkpoint_bytes) << ", \"runs\": " << runs
          << ", \"write_gb_per_s\": {\"min\": " << gb / w.max << ", \"median\": " << gb / w.median
          << ", \"max\": " << gb / w.min << "}, \"read_gb_per_s\": {\"min\": " << gb / r.max
          << ", \"median\": " << gb / r.median << ", \"max\": " << gb / r.min << "}}\n";
    }
  }
  return 0;
}

}  // namespace bench_checkpoint

SHARDTRAIN_BENCH_REGISTER(bench_checkpoint)
