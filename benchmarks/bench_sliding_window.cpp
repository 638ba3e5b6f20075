// ModernBERT's sliding-window layers against its global layers, at
// ModernBERT-base's layer shape (hidden 768, 12 heads, intermediate 1152,
// window 128: 64 keys each side), one sequence of L tokens, unpadded, one
// training step's forward + backward (docs/DESIGN.md, "Model families").
//
// Four models of the same layer shape, in the same process, timed
// alternately, each a 2-layer encoder (ModernBERT's layer 0 is always global):
//   global   both layers global (the CPU kernel blocks its attention by
//            itself above 2^24 scores: at 2048 and 8192, not at 512)
//   blocked  as global, its attention always in blocks of query rows that
//            backward recomputes (set_attention_block_threshold(0)): what
//            blocking costs where the whole score matrix would fit
//   local    the second layer local (banded blocks)
//   masked   as local, with the window applied as a mask over every key
//            (HF's eager way: set_banded_attention(false))
// Each layer is timed where it runs, by unit hooks (model/unit_model.h): its
// forward from before_forward to after_forward, its backward from the moment
// the gradient of its output is ready to the moment the gradient of its
// input is (a gradient hook on the previous unit's output; CPU autograd runs
// the nodes in the calling thread, in reverse order of creation). Each
// figure is layer 1 of its model. Above --max-full only the local model runs,
// and its layer 0 (global, without the attention norm that layer 0 does not
// have) gives the global figure. A banded local layer grows linearly with L,
// a global one quadratically.
//
//   bench_sliding_window [--lengths 512,2048,8192] [--reps 3] [--threads N]
//                        [--max-full 8192] [--json FILE]
// --max-full: the longest L at which the global, blocked and masked models run
// (at 8192 a global layer's attention is 12 x 8192 x 8192 scores, 3.2 GB per
// fp32 tensor, computed in blocks: about 2 GB of RSS for the step).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/encoder_config.h"
#include "shardtrain/model/unit_model.h"

namespace bench_sliding_window {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;
using shardtrain_bench::Clock;
using shardtrain_bench::seconds_since;

namespace {

EncoderConfig base_shape(int64_t layers, int64_t global_every) {
  EncoderConfig c;
  c.family = ModelFamily::kModernBert;
  c.model_type = "modernbert";
  c.vocab_size = 50368;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.intermediate_size = 1152;
  c.num_hidden_layers = layers;
  c.global_attn_every_n_layers = global_every;
  c.local_attention = 128;
  c.max_position_embeddings = 8192;
  c.hidden_act = "gelu";
  c.layer_norm_eps = 1e-5;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = c.embedding_dropout = c.classifier_dropout = 0;
  c.pad_token_id = 50283;
  c.type_vocab_size = 0;
  c.set_num_labels(2);
  c.validate("bench_sliding_window");
  return c;
}

Batch one_sequence(int64_t length) {
  at::manual_seed(1);
  Batch b;
  b.input_ids = at::randint(3, 50000, {1, length}, at::kLong);
  b.attention_mask = at::ones({1, length}, at::kLong);
  b.token_type_ids = at::zeros({1, length}, at::kLong);
  b.labels = at::zeros({1}, at::kLong);
  b.num_real_tokens = b.num_total_tokens = length;
  return b;
}

// Per-layer forward and backward seconds of one step, recorded through the
// unit hooks (unit u = layer u - 1; unit 0 the embeddings).
class LayerTimer : public UnitHooks {
 public:
  explicit LayerTimer(int64_t units) : start_(units), forward_(units), grad_ready_(units) {}
  void before_forward(int64_t unit) override { start_[unit] = Clock::now(); }
  at::Tensor after_forward(int64_t unit, at::Tensor output) override {
    forward_[unit] = seconds_since(start_[unit]);
    if (output.requires_grad())
      output.register_hook([this, unit](const at::Tensor& grad) {
        grad_ready_[unit] = Clock::now();
        return grad;
      });
    return output;
  }
  double layer_forward(int64_t layer) const { return forward_[layer + 1]; }
  // The gradient of layer l's input is the gradient of unit l's output.
  double layer_backward(int64_t layer) const {
    return std::chrono::duration<double>(grad_ready_[layer] - grad_ready_[layer + 1]).count();
  }

 private:
  std::vector<Clock::time_point> start_;
  std::vector<double> forward_;
  std::vector<Clock::time_point> grad_ready_;
};

// One training step (forward + loss + backward): the forward + backward seconds of layer 0 and layer 1.
std::array<double, 2> layer_seconds(TaskModel& model, const Batch& batch) {
  LayerTimer timer(model.num_units());
  model.set_unit_hooks(&timer);
  model.zero_grad();
  model.loss(model.forward_batch(batch), batch.labels).backward();
  model.set_unit_hooks(nullptr);
  return {timer.layer_forward(0) + timer.layer_backward(0), timer.layer_forward(1) + timer.layer_backward(1)};
}

std::string cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    for (const char* f : {" avx2 ", " avx512f ", " avx512_bf16 ", " amx_bf16 "})
      if ((line + " ").find(f) != std::string::npos) out += std::string(f + 1, f + std::strlen(f) - 1) + " ";
    break;
  }
  return out.empty() ? "none of avx2/avx512f/avx512_bf16/amx_bf16" : out;
}

}  // namespace

int main(int argc, char** argv) {
  return shardtrain_bench::bench_main("bench_sliding_window", argc, argv, [](shardtrain::World&, int argc, char** argv) {
    CLI::App app{"ModernBERT sliding-window layers against global layers"};
    std::vector<int64_t> lengths = {512, 2048, 8192};
    int reps = 3, threads = 0;
    int64_t max_full = 8192;
    std::string json_path;
    app.add_option("--lengths", lengths)->delimiter(',');
    app.add_option("--reps", reps);
    app.add_option("--threads", threads);
    app.add_option("--max-full", max_full);
    app.add_option("--json", json_path);
    CLI11_PARSE(app, argc, argv);
    if (threads > 0) at::set_num_threads(threads);
    std::printf("bench_sliding_window: %d threads; CPU features: %s\n", at::get_num_threads(), cpu_flags().c_str());

    std::map<std::string, std::unique_ptr<TaskModel>> models;
    models["global"] = std::make_unique<TaskModel>(base_shape(2, 1));
    models["local"] = std::make_unique<TaskModel>(base_shape(2, 2));
    models["masked"] = std::make_unique<TaskModel>(base_shape(2, 2));
    models["masked"]->set_banded_attention(false);
    models["blocked"] = std::make_unique<TaskModel>(base_shape(2, 1));
    models["blocked"]->set_attention_block_threshold(0);
    for (auto& [name, model] : models) {
      model->init_weights(7);
      model->train();
      model->set_unpadded(true);
    }
    nlohmann::json rows = nlohmann::json::array();
    std::printf("# ms per layer, forward + backward, median of %d; global from %s\n", reps,
                "layer 1 of the global model, or layer 0 of the local one above --max-full");
    std::printf("%7s %12s %12s %12s %14s %14s %12s %12s %14s\n", "L", "global ms", "blocked ms", "local ms",
                "masked ms", "global from", "global/local", "masked/local", "blocked/global");
    for (int64_t L : lengths) {
      const Batch batch = one_sequence(L);
      const bool full = L <= max_full;
      std::vector<std::string> names = {"local"};
      if (full) names.insert(names.end(), {"global", "blocked", "masked"});
      std::map<std::string, std::vector<double>> times;
      for (int r = -1; r < reps; ++r)  // r = -1: warm-up
        for (const std::string& name : names) {
          const std::array<double, 2> t = layer_seconds(*models[name], batch);
          if (r < 0) continue;
          times[name].push_back(t[1]);
          if (name == "local") times["local_layer0"].push_back(t[0]);
        }
      std::map<std::string, double> median;
      for (auto& [name, t] : times) median[name] = shardtrain_bench::summarize(t).median * 1e3;
      const double local = median["local"];
      const double global = full ? median["global"] : median["local_layer0"];
      const double masked = full ? median["masked"] : 0;
      const double blocked = full ? median["blocked"] : 0;
      const char* global_from = full ? "global model" : "local model L0";
      std::printf("%7lld %12.1f %12.1f %12.1f %14.1f %14s %12.2f %12.2f %14.2f\n", static_cast<long long>(L), global,
                  blocked, local, masked, global_from, global / local, masked > 0 ? masked / local : 0.0,
                  blocked > 0 ? blocked / global : 0.0);
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      const double peak_rss_gb = static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss: KiB
      std::printf("        peak RSS of the process so far: %.2f GiB\n", peak_rss_gb);
      rows.push_back({{"length", L}, {"peak_rss_gib_so_far", peak_rss_gb}, {"global_layer_ms", global}, {"local_layer_ms", local},
                      {"blocked_global_layer_ms", full ? nlohmann::json(blocked) : nlohmann::json(nullptr)},
                      {"masked_local_layer_ms", full ? nlohmann::json(masked) : nlohmann::json(nullptr)},
                      {"local_model_layer0_ms", median["local_layer0"]}, {"global_from", global_from},
                      {"cpu", cpu_flags()}, {"threads", at::get_num_threads()}});
    }
    if (!json_path.empty()) std::ofstream(json_path) << rows.dump(1) << "\n";
    return 0;
  });
}

}  // namespace bench_sliding_window

SHARDTRAIN_BENCH_REGISTER(bench_sliding_window)
