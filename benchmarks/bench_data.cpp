// Data-layer throughput on GLUE MRPC train (3668 pairs), one process:
//   read     read_table on train.tsv
//   build    build_dataset (encoder: whitespace words hashed to ids, a stand-in
//            that costs about what a table lookup per word costs; the WordPiece
//            tokenizer has its own benchmark)
//   epoch    one epoch of DistributedSampler + collate at batch 16 (plain and
//            length-bucketed), reported with its padding fraction
//   squad    extractive QA on the shipped SQuAD v1.1 part (7,010 questions of
//            the dev set's 10,570): read_qa_table on both files, and
//            build_qa_features with bert-base-cased's WordPiece at run_qa's
//            384 / 128 (windows, labels, character offsets), reported per question;
//            warm (the word cache filled by the previous build) and cold (a
//            fresh tokenizer each time, as a job's single build)
// Each result is checked before timing (row count, every example once per
// epoch); each timing is warmed up once and repeated; min/median/max printed,
// and written as JSON with --json FILE.
//
//   bench_data [--repeats N] [--threads T] [--json out.json]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/data/collator.h"
#include "shardtrain/data/dataset.h"
#include "shardtrain/data/qa_data.h"
#include "shardtrain/tasks/question_answering.h"
#include "shardtrain/data/reader.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/data/tokenizer.h"
#include "bench_util.h"

namespace bench_data {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

using namespace shardtrain;

namespace {

EncodedRow encode_words(std::string_view a, std::optional<std::string_view> b, int max_length) {
  EncodedRow row;
  auto add = [&](std::string_view text, uint8_t type) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find(' ', pos);
      if (end == std::string_view::npos) end = text.size();
      if (end > pos) {
        uint32_t h = 2166136261u;
        for (size_t i = pos; i < end; ++i) h = (h ^ static_cast<unsigned char>(text[i])) * 16777619u;
        row.input_ids.push_back(static_cast<int32_t>(1000 + h % 28000));
        row.token_type_ids.push_back(type);
      }
      pos = end + 1;
    }
    row.input_ids.push_back(102);
    row.token_type_ids.push_back(type);
  };
  row.input_ids.push_back(101);
  row.token_type_ids.push_back(0);
  add(a, 0);
  if (b) add(*b, 1);
  if (static_cast<int>(row.input_ids.size()) > max_length) {
    row.input_ids.resize(max_length);
    row.token_type_ids.resize(max_length);
  }
  return row;
}

struct Timing {
  std::string name;
  std::vector<double> seconds;
  std::map<std::string, double> extra;
};

Timing time_it(const std::string& name, int repeats, const std::function<void()>& fn) {
  fn();  // warm-up
  Timing t{name, {}, {}};
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    t.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.seconds.begin(), t.seconds.end());
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5, threads = 1;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--repeats N] [--threads T] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  at::set_num_threads(1);
  const std::string path = SHARDTRAIN_SOURCE_DIR "/data/glue/MRPC/train.tsv";
  ReaderOptions options;
  options.text_a = "#1 String";
  options.text_b = "#2 String";
  options.label = "Quality";
  const int max_length = 128, batch_size = 16;

  // Check before timing.
  RawTable table = read_table(path, options);
  if (table.size() != 3668) {
    std::fprintf(stderr, "FAIL: expected 3668 rows, read %lld\n", static_cast<long long>(table.size()));
    return 1;
  }
  EncodeFn encode = [&](std::string_view a, std::optional<std::string_view> b) { return encode_words(a, b, max_length); };
  BuildOptions build_options;
  build_options.num_threads = threads;
  TokenizedDataset dataset = build_dataset(table, encode, MPI_COMM_NULL, build_options);

  auto run_epoch = [&](int64_t window, PaddingStats* stats, std::map<int64_t, int>* seen) {
    SamplerOptions so;
    so.num_examples = dataset.size();
    so.batch_size = batch_size;
    so.drop_last = true;  // so that "every example at most once" is checkable
    so.bucket_window_batches = window;
    so.lengths = dataset.lengths();
    DistributedSampler sampler(so);
    sampler.set_epoch(0);
    std::vector<int64_t> indices;
    while (sampler.next(&indices)) {
      Batch batch = collate(dataset, indices, 0);
      if (stats) stats->add(batch);
      if (seen)
        for (int64_t i : indices) (*seen)[i]++;
    }
  };
  for (int64_t window : {0, 50}) {
    std::map<int64_t, int> seen;
    run_epoch(window, nullptr, &seen);
    const int64_t expected = (dataset.size() / batch_size) * batch_size;
    bool ok = static_cast<int64_t>(seen.size()) == expected;
    for (auto [i, c] : seen) ok = ok && c == 1;
    if (!ok) {
      std::fprintf(stderr, "FAIL: epoch with window %lld does not cover each example once\n", (long long)window);
      return 1;
    }
  }

  std::vector<Timing> timings;
  timings.push_back(time_it("read_tsv", repeats, [&] { read_table(path, options); }));
  timings.push_back(time_it("build_dataset", repeats, [&] { build_dataset(table, encode, MPI_COMM_NULL, build_options); }));
  for (int64_t window : {0, 50}) {
    PaddingStats stats;
    run_epoch(window, &stats, nullptr);
    Timing t = time_it(window == 0 ? "epoch_collate_plain" : "epoch_collate_bucketed_w50", repeats,
                       [&] { run_epoch(window, nullptr, nullptr); });
    t.extra["padding_fraction"] = stats.padding_fraction();
    t.extra["examples_per_s"] = static_cast<double>(dataset.size()) / t.seconds[t.seconds.size() / 2];
    timings.push_back(t);
  }

  // SQuAD: check (every question has a feature, answers in range), then time.
  const std::string squad_dir = SHARDTRAIN_SOURCE_DIR "/data/qa/squad-v1.1/";
  auto read_squad = [&] {
    QaTable all = read_qa_table(squad_dir + "train-articles-00-23.json", {});
    QaTable dev = read_qa_table(squad_dir + "dev-articles-24-29.json", {});
    for (size_t q = 0; q < dev.examples.size(); ++q) {
      all.examples.push_back(std::move(dev.examples[q]));
      all.line_numbers.push_back(dev.line_numbers[q]);
    }
    return all;
  };
  const QaTable squad = read_squad();
  const Tokenizer wordpiece =
      Tokenizer::from_vocab_file(SHARDTRAIN_SOURCE_DIR "/data/vocab/bert-base-cased-vocab.txt", TokenizerOptions{});
  QaFeatureOptions qa_options;  // 384 / 128
  const TokenizedDataset features = build_qa_features(squad, wordpiece, qa_options, MPI_COMM_NULL, build_options);
  const std::vector<int64_t> first = features_per_question(features, squad.size());
  bool squad_ok = squad.size() == 7010 && features.size() >= squad.size();
  for (int64_t q = 0; q < squad.size(); ++q) squad_ok = squad_ok && first[q + 1] > first[q];
  for (size_t i = 0; i < features.span_labels.size(); ++i)
    squad_ok = squad_ok && features.span_labels[i] >= 0 && features.span_labels[i] < 384;
  if (!squad_ok) {
    std::fprintf(stderr, "FAIL: SQuAD features (%lld questions, %lld features)\n", (long long)squad.size(),
                 (long long)features.size());
    return 1;
  }
  timings.push_back(time_it("squad_read", repeats, [&] { read_squad(); }));
  Timing squad_timing = time_it("squad_features_384_128", repeats, [&] {
    build_qa_features(squad, wordpiece, qa_options, MPI_COMM_NULL, build_options);
  });
  squad_timing.extra["questions_per_s"] =
      static_cast<double>(squad.size()) / squad_timing.seconds[squad_timing.seconds.size() / 2];
  squad_timing.extra["features"] = static_cast<double>(features.size());
  timings.push_back(squad_timing);
  // The same with an empty word cache each time (a fresh tokenizer empties
  // the thread's cache, data/word_cache.h): what a job's one build costs.
  std::vector<Tokenizer> fresh;
  for (int i = 0; i <= repeats; ++i)
    fresh.push_back(
        Tokenizer::from_vocab_file(SHARDTRAIN_SOURCE_DIR "/data/vocab/bert-base-cased-vocab.txt", TokenizerOptions{}));
  size_t next_fresh = 0;
  Timing cold_timing = time_it("squad_features_384_128_cold", repeats, [&] {
    build_qa_features(squad, fresh[next_fresh++], qa_options, MPI_COMM_NULL, build_options);
  });
  cold_timing.extra["questions_per_s"] =
      static_cast<double>(squad.size()) / cold_timing.seconds[cold_timing.seconds.size() / 2];
  timings.push_back(cold_timing);

  std::printf("MRPC train: %lld rows, %lld tokens, threads %d, repeats %d\n", (long long)dataset.size(),
              (long long)dataset.num_tokens(), threads, repeats);
  std::printf("%-28s %10s %10s %10s  %s\n", "benchmark", "min_ms", "median_ms", "max_ms", "extra");
  for (const auto& t : timings) {
    std::string extra;
    for (const auto& [k, v] : t.extra) extra += k + "=" + std::to_string(v) + " ";
    std::printf("%-28s %10.3f %10.3f %10.3f  %s\n", t.name.c_str(), 1e3 * t.seconds.front(),
                1e3 * t.seconds[t.seconds.size() / 2], 1e3 * t.seconds.back(), extra.c_str());
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"benchmark\": \"bench_data\", \"rows\": " << dataset.size() << ", \"threads\": " << threads
        << ", \"results\": [";
    for (size_t i = 0; i < timings.size(); ++i) {
      const auto& t = timings[i];
      out << (i ? ", " : "") << "{\"name\": \"" << t.name << "\", \"min_s\": " << t.seconds.front()
          << ", \"median_s\": " << t.seconds[t.seconds.size() / 2] << ", \"max_s\": " << t.seconds.back();
      for (const auto& [k, v] : t.extra) out << ", \"" << k << "\": " << v;
      out << "}";
    }
    out << "]}\n";
  }
  return 0;
}

}  // namespace bench_data

SHARDTRAIN_BENCH_REGISTER(bench_data)
