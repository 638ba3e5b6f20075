// The pieces of a BERT training step that shardtrain computes differently
// from PyTorch eager, each timed against the PyTorch way in the same process
// (one process, no MPI ranks), at bert-base-cased's shape on an MRPC-like
// batch (16 rows, lengths 30..80 from a seeded generator, padded to the
// longest). Legend: B rows, L padded length, T real tokens, D 768, H 12, V 28996.
//
//   layer            one encoder layer, forward + backward, train mode with
//                    dropout 0.1, padded [B, L, D]: BertLayer::forward (fused
//                    QKV, the CPU attention kernel, model/dropout.h) against the
//                    same math as HF writes it (three Linears, at::matmul
//                    attention, at::dropout), on the layer's own parameters
//   attention-only   the same two, dropout 0: isolates the attention kernel
//                    and the fused projection from the dropout masks
//   deberta-attention / deberta-layer
//                    a DeBERTa-v3 encoder layer (both position terms, shared
//                    keys, 256 buckets), dropout 0 / 0.1: its CPU kernel
//                    against the same math in ATen ops (what other devices
//                    run; set_disentangled_attention_kernel(false))
//   deberta/bert     the DeBERTa-v3 layer against the BERT layer, both
//                    shardtrain's, dropout 0: what the position terms cost
//   dropout          dropout of attention probabilities [B, H, L, L]:
//                    shardtrain::dropout against at::dropout
//   qkv              the q/k/v projections of T packed tokens, forward +
//                    backward: one matmul on the concatenated weights against
//                    three at::linear
//   word-embedding   the word-embedding lookup's backward into an existing
//                    .grad (as every strategy keeps one): BertEmbeddings'
//                    row-wise sparse accumulation against at::embedding's
//                    dense [V, D] gradient added into .grad
//
// Check before timing (dropout 0 where a comparison needs equal masks): both
// ways give the same outputs and gradients within 1e-5 (fp32 rounding of
// other operation orders); otherwise the benchmark exits 1. Each row: warm-up
// runs, then --reps timed runs of each way, alternating; min/median/max ms.
//
//   bench_model_parts [--threads T] [--reps 7] [--json FILE]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench_util.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/model/task_model.h"
#include "shardtrain/model/dropout.h"

namespace bench_model_parts {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;
using shardtrain_bench::Clock;
using shardtrain_bench::seconds_since;
using shardtrain_bench::Summary;
using shardtrain_bench::summarize;

namespace {

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.detach() - b.detach()).abs().max().item<double>() / (1.0 + b.detach().abs().max().item<double>());
}

// HF's eager BertLayer on the parameters of `model`'s layer 0.
at::Tensor hf_layer(const TaskModel& model, const at::Tensor& x, const at::Tensor& mask, int64_t H,
                    double p) {
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), Dh = D / H;
  auto linear = [&](const at::Tensor& in, const std::string& name) {
    return at::linear(in, model.parameter("bert.encoder.layer.0." + name + ".weight"),
                      model.parameter("bert.encoder.layer.0." + name + ".bias"));
  };
  auto norm = [&](const at::Tensor& in, const std::string& name) {
    return at::layer_norm(in, {D}, model.parameter("bert.encoder.layer.0." + name + ".weight"),
                          model.parameter("bert.encoder.layer.0." + name + ".bias"), model.config().layer_norm_eps);
  };
  auto heads = [&](const std::string& name) { return linear(x, name).view({B, L, H, Dh}).transpose(1, 2); };
  at::Tensor scores = at::matmul(heads("attention.self.query"), heads("attention.self.key").transpose(-1, -2)) /
                          std::sqrt(double(Dh)) + mask;
  at::Tensor probs = at::dropout(at::softmax(scores, -1), p, p > 0);
  at::Tensor context = at::matmul(probs, heads("attention.self.value")).transpose(1, 2).reshape({B, L, D});
  at::Tensor attended =
      norm(at::dropout(linear(context, "attention.output.dense"), p, p > 0) + x, "attention.output.LayerNorm");
  at::Tensor inner = at::gelu(linear(attended, "intermediate.dense"));
  return norm(at::dropout(linear(inner, "output.dense"), p, p > 0) + attended, "output.LayerNorm");
}

struct Row {
  std::string name, ours_label, theirs_label;
  Summary ours, theirs;
};

// Alternates the two ways `reps` times after two warm-up runs of each.
Row time_pair(const std::string& name, const std::string& ours_label, const std::function<void()>& ours,
              const std::string& theirs_label, const std::function<void()>& theirs, int reps) {
  for (int i = 0; i < 2; ++i) {
    ours();
    theirs();
  }
  std::vector<double> a, b;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    ours();
    a.push_back(seconds_since(start) * 1e3);
    start = Clock::now();
    theirs();
    b.push_back(seconds_since(start) * 1e3);
  }
  return {name, ours_label, theirs_label, summarize(a), summarize(b)};
}

int run(World& world, int argc, char** argv) {
  CLI::App app{"BERT step pieces, shardtrain's way against PyTorch eager's"};
  int threads = 0, reps = 7;
  std::string json_path;
  app.add_option("--threads", threads, "intra-op threads (default: World's choice)");
  app.add_option("--reps", reps, "timed runs of each way")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the rows here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (threads > 0) at::set_num_threads(threads);

  EncoderConfig config = bert_base_cased_config(2);
  const int64_t D = config.hidden_size, H = config.num_attention_heads, B = 16;
  auto gen = at::detail::createCPUGenerator(7);
  const at::Tensor lengths = at::randint(30, 81, {B}, gen, at::kLong);
  const int64_t L = lengths.max().item<int64_t>(), T = lengths.sum().item<int64_t>();
  const at::Tensor keep = (at::arange(L, at::kLong).unsqueeze(0) < lengths.unsqueeze(1)).to(at::kFloat);
  const at::Tensor mask = (1.0 - keep).mul(std::numeric_limits<float>::lowest()).view({B, 1, 1, L});
  const at::Tensor x = at::randn({B, L, D}, gen, at::TensorOptions()).requires_grad_(true);
  const at::Tensor upstream = at::randn({B, L, D}, gen, at::TensorOptions());
  std::printf("# bench_model_parts: bert-base shape, B %lld, L %lld, T %lld real tokens, %d threads, %d reps\n",
              static_cast<long long>(B), static_cast<long long>(L), static_cast<long long>(T), at::get_num_threads(),
              reps);

  bool ok = true;
  auto check = [&](const char* what, double diff) {
    std::printf("# check %-28s max rel diff %.1e %s\n", what, diff, diff <= 1e-5 ? "ok" : "FAILED");
    ok = ok && diff <= 1e-5;
  };
  std::vector<Row> rows;

  // ---- layer, attention-only ----
  for (const double p : {0.0, 0.1}) {
    EncoderConfig c = config;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = p;
    c.num_hidden_layers = 1;
    TaskModel model(c);
    model.init_weights(11);
    model.train();
    const at::Tensor query = model.parameter("bert.encoder.layer.0.attention.self.query.weight");
    auto ours = [&] { model.forward_layer(0, x, mask).backward(upstream); };
    auto theirs = [&] { hf_layer(model, x, mask, H, p).backward(upstream); };
    if (p == 0.0) {
      const at::Tensor a = model.forward_layer(0, x, mask), b = hf_layer(model, x, mask, H, 0.0);
      check("layer outputs", max_diff(a, b));
      model.zero_grad();
      a.backward(upstream);
      const at::Tensor grad_a = query.grad().clone();
      model.zero_grad();
      b.backward(upstream);
      check("layer query.weight grads", max_diff(grad_a, query.grad()));
    }
    rows.push_back(time_pair(p == 0.0 ? "attention-only" : "layer", "the encoder layer", ours,
                             "HF eager ops", theirs, reps));
  }

  // ---- DeBERTa-v3's layer: its kernel against ATen ops, and against BERT's ----
  for (const double p : {0.0, 0.1}) {
    EncoderConfig c = EncoderConfig::from_json(
        R"({"model_type": "deberta-v2", "vocab_size": 1000, "hidden_size": 768, "num_hidden_layers": 1,
            "num_attention_heads": 12, "intermediate_size": 3072, "relative_attention": true,
            "position_buckets": 256, "pos_att_type": ["p2c", "c2p"], "share_att_key": true,
            "norm_rel_ebd": "layer_norm", "position_biased_input": false})",
        "bench deberta config");
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = p;
    TaskModel model(c);
    model.init_weights(11);
    model.train();
    const at::Tensor query = model.parameter("deberta.encoder.layer.0.attention.self.query_proj.weight");
    auto layer = [&](bool kernel) {
      model.set_disentangled_attention_kernel(kernel);
      return model.forward_layer(0, x, mask);
    };
    if (p == 0.0) {
      const at::Tensor a = layer(true), b = layer(false);
      check("deberta layer outputs", max_diff(a, b));
      model.zero_grad();
      a.backward(upstream);
      const at::Tensor grad_a = query.grad().clone();
      model.zero_grad();
      b.backward(upstream);
      check("deberta query_proj grads", max_diff(grad_a, query.grad()));
    }
    rows.push_back(time_pair(p == 0.0 ? "deberta-attention" : "deberta-layer", "disentangled CPU kernel",
                             [&] { layer(true).backward(upstream); }, "ATen ops",
                             [&] { layer(false).backward(upstream); }, reps));
    if (p == 0.0) {
      EncoderConfig b = config;
      b.hidden_dropout_prob = b.attention_probs_dropout_prob = 0.0;
      b.num_hidden_layers = 1;
      TaskModel bert(b);
      bert.init_weights(11);
      bert.train();
      rows.push_back(time_pair("deberta/bert", "DeBERTa-v3 layer (kernel)", [&] { layer(true).backward(upstream); },
                               "BERT layer (kernel)", [&] { bert.forward_layer(0, x, mask).backward(upstream); },
                               reps));
    }
  }

  // ---- dropout ----
  {
    const at::Tensor probs = at::softmax(at::randn({B, H, L, L}, gen, at::TensorOptions()), -1);
    rows.push_back(time_pair("dropout", "shardtrain::dropout", [&] { shardtrain::dropout(probs, 0.1, true); },
                             "at::dropout", [&] { at::dropout(probs, 0.1, true); }, reps));
  }

  // ---- qkv ----
  {
    const at::Tensor tokens = at::randn({T, D}, gen, at::TensorOptions()).requires_grad_(true);
    std::vector<at::Tensor> w, b;
    for (int i = 0; i < 3; ++i) {
      w.push_back((at::randn({D, D}, gen, at::TensorOptions()) * 0.02).requires_grad_(true));
      b.push_back(at::zeros({D}).requires_grad_(true));
    }
    const at::Tensor up = at::randn({T, 3 * D}, gen, at::TensorOptions());
    auto fused = [&] { return at::linear(tokens, at::cat({w[0], w[1], w[2]}), at::cat({b[0], b[1], b[2]})); };
    auto separate = [&] {
      return std::vector<at::Tensor>{at::linear(tokens, w[0], b[0]), at::linear(tokens, w[1], b[1]),
                                     at::linear(tokens, w[2], b[2])};
    };
    check("qkv outputs", max_diff(fused(), at::cat(separate(), 1)));
    rows.push_back(time_pair("qkv", "one matmul, concatenated weights", [&] { fused().backward(up); },
                             "three at::linear",
                             [&] { torch::autograd::backward(separate(), up.chunk(3, 1)); }, reps));
  }

  // ---- word-embedding gradient ----
  {
    EncoderConfig c = config;
    c.num_hidden_layers = 1;
    TaskModel embeddings(c);
    embeddings.init_weights(13);
    auto p = [&](const char* name) { return embeddings.parameter(std::string("bert.embeddings.") + name); };
    at::Tensor weight = p("word_embeddings.weight");
    weight.mutable_grad() = at::zeros_like(weight);  // a strategy's flat-buffer view
    const at::Tensor ids = at::randint(1, config.vocab_size, {T}, gen, at::kLong);
    const at::Tensor up = at::randn({T, D}, gen, at::TensorOptions());
    // Both ways add the same token-type and position rows and apply the same
    // LayerNorm: only the word rows' gradient path differs.
    auto lookup_ours = [&] { return embeddings.forward_embeddings(ids, at::zeros_like(ids), at::zeros_like(ids)); };
    auto lookup_theirs = [&] {
      at::Tensor x = at::embedding(weight, ids, config.pad_token_id) +
                     at::embedding(p("token_type_embeddings.weight"), at::zeros_like(ids)) +
                     at::embedding(p("position_embeddings.weight"), at::zeros_like(ids));
      return at::layer_norm(x, {D}, p("LayerNorm.weight"), p("LayerNorm.bias"), config.layer_norm_eps);
    };
    embeddings.eval();  // dropout off: the two ways must give the same gradient
    weight.grad().zero_();
    lookup_ours().backward(up);
    const at::Tensor grad_ours = weight.grad().clone();
    weight.grad().zero_();
    lookup_theirs().backward(up);
    check("word-embedding grads", max_diff(grad_ours, weight.grad()));
    rows.push_back(time_pair("word-embedding", "sparse rows into .grad", [&] { lookup_ours().backward(up); },
                             "dense [V, D] into .grad", [&] { lookup_theirs().backward(up); }, reps));
  }

  std::printf("%-16s %-34s %9s %9s %9s   %-26s %9s %9s %9s  %7s\n", "part", "shardtrain", "min_ms", "median_ms",
              "max_ms", "pytorch way", "min_ms", "median_ms", "max_ms", "x");
  nlohmann::json doc = nlohmann::json::array();
  for (const Row& r : rows) {
    std::printf("%-16s %-34s %9.2f %9.2f %9.2f   %-26s %9.2f %9.2f %9.2f  %7.2f\n", r.name.c_str(),
                r.ours_label.c_str(), r.ours.min, r.ours.median, r.ours.max, r.theirs_label.c_str(), r.theirs.min,
                r.theirs.median, r.theirs.max, r.theirs.median / r.ours.median);
    doc.push_back({{"part", r.name}, {"shardtrain", r.ours_label}, {"pytorch_way", r.theirs_label},
                   {"shardtrain_ms", shardtrain_bench::to_json(r.ours)},
                   {"pytorch_ms", shardtrain_bench::to_json(r.theirs)}, {"threads", at::get_num_threads()},
                   {"B", B}, {"L", L}, {"T", T}});
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    if (!out) throw Error("--json: cannot write " + json_path);
    out << doc.dump(2) << "\n";
  }
  if (!ok) std::fprintf(stderr, "bench_model_parts: a check failed (see above)\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return shardtrain_bench::bench_main("bench_model_parts", argc, argv, run); }

}  // namespace bench_model_parts

SHARDTRAIN_BENCH_REGISTER(bench_model_parts)
