// ModernBERT's sliding-window layers against its global layers, at
// ModernBERT-base's layer shape (hidden 768, 12 heads, intermediate 1152,
// window 128: 64 keys each side), one sequence of L tokens, unpadded, one
// training step's forward + backward (docs/DESIGN.md, "Model families").
//
// Three models of the same layer shape, in the same process, timed
// alternately:
//   one     1 layer (global): embeddings + one global layer + head
//   global  2 layers, both global
//   local   2 layers, the second local (banded blocks)
//   masked  as local, with the window applied as a mask over every key
//           (HF's eager way: set_banded_attention(false))
// A layer's cost is the model's minus `one`'s: global layer = global - one,
// local layer = local - one, masked local layer = masked - one. A banded
// local layer grows linearly with L, a global one quadratically.
//
//   bench_sliding_window [--lengths 512,2048,8192] [--reps 3] [--threads N]
//                        [--max-full 8192] [--json FILE]
// --max-full: the longest L at which the models with full L x L attention
// (global, masked) run (at 8192 a global layer's scores are 3.2 GB each).
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/collator.h"
#include "shardtrain/model/classifier.h"
#include "shardtrain/model/encoder_config.h"

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

double step_seconds(SequenceClassifier& model, const Batch& batch) {
  model.zero_grad();
  const auto start = Clock::now();
  model.loss(model.forward_batch(batch), batch.labels).backward();
  return seconds_since(start);
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

    std::map<std::string, std::unique_ptr<SequenceClassifier>> models;
    models["one"] = std::make_unique<SequenceClassifier>(base_shape(1, 1));
    models["global"] = std::make_unique<SequenceClassifier>(base_shape(2, 1));
    models["local"] = std::make_unique<SequenceClassifier>(base_shape(2, 2));
    models["masked"] = std::make_unique<SequenceClassifier>(base_shape(2, 2));
    models["masked"]->set_banded_attention(false);
    for (auto& [name, model] : models) {
      model->init_weights(7);
      model->train();
      model->set_unpadded(true);
    }
    nlohmann::json rows = nlohmann::json::array();
    std::printf("%7s %12s %12s %12s %14s %12s %12s\n", "L", "one ms", "global ms", "local ms", "masked ms",
                "global/local", "masked/local");
    for (int64_t L : lengths) {
      const Batch batch = one_sequence(L);
      std::vector<std::string> names = {"one", "local"};
      if (L <= max_full) names.insert(names.end(), {"global", "masked"});
      std::map<std::string, std::vector<double>> times;
      for (int r = -1; r < reps; ++r)  // r = -1: warm-up
        for (const std::string& name : names) {
          const double t = step_seconds(*models[name], batch);
          if (r >= 0) times[name].push_back(t);
        }
      std::map<std::string, double> median;
      for (auto& [name, t] : times) median[name] = shardtrain_bench::summarize(t).median * 1e3;
      const double one = median["one"], local = median["local"] - one;
      const double global = median.count("global") ? median["global"] - one : 0;
      const double masked = median.count("masked") ? median["masked"] - one : 0;
      std::printf("%7lld %12.1f %12.1f %12.1f %14.1f %12.2f %12.2f   (per-layer ms: global %.1f, local %.1f, masked %.1f)\n",
                  static_cast<long long>(L), one, median.count("global") ? median["global"] : 0.0, median["local"],
                  median.count("masked") ? median["masked"] : 0.0, global > 0 ? global / local : 0.0,
                  masked > 0 ? masked / local : 0.0, global, local, masked);
      rows.push_back({{"length", L}, {"one_ms", one}, {"global_layer_ms", global}, {"local_layer_ms", local},
                      {"masked_local_layer_ms", masked}, {"cpu", cpu_flags()}, {"threads", at::get_num_threads()}});
    }
    if (!json_path.empty()) std::ofstream(json_path) << rows.dump(1) << "\n";
    return 0;
  });
}
