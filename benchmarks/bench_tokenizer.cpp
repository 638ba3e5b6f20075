// Tokenizer throughput: encode every MRPC train pair, longest_first
// truncation to --max-length, on one thread, with five tokenizers in the
// same run: WordPiece (bert-base-cased, [CLS] A [SEP] B [SEP]), byte-level BPE
// roberta-base (<s> A </s></s> B </s>) and ModernBERT ([CLS] A [SEP] B [SEP]),
// and SentencePiece Unigram: DeBERTa-v3's spm.model, the SIB-200 XLM-R
// layout model (data/vocab/sib200-xlmr-8k) and a model whose digit pieces
// tie (tests/data/spm/ties-3500: "0" and "00", no "000"; the worst case for
// the chunk cache, which then encodes the whole text).
//
// Before timing, each tokenizer's ids for MRPC dev pair 0 are checked against
// the reference (HF's for WordPiece and BPE, tests/data/mrpc_dev_<name>_ids.jsonl;
// SentencePiece's for the others, tests/data/spm/<name>_ids.jsonl), idx 0.
// Then each warms up and times --repeats passes over the whole file (one
// tokenizer after the other, so the per-thread word cache of BPE and
// SentencePiece holds that tokenizer's words). Reported per tokenizer: the
// first (cold cache) pass, pairs/s (min / median / max over the timed passes),
// ids/s at the median, and the median's ratio to WordPiece's, with the CPU's
// features.
//
//   bench_tokenizer [--data train.tsv] [--vocab vocab.txt] [--repeats 20]
//                   [--warmup 3] [--max-length 128] [--json FILE]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardtrain/core/check.h"
#include "shardtrain/core/cpu_features.h"
#include "shardtrain/core/timer.h"
#include "shardtrain/data/tokenizer.h"
#include "bench_util.h"

namespace bench_tokenizer {  // every benchmark's code lives in its own namespace: they compile together (benchmarks/CMakeLists.txt)

namespace {

struct Pair {
  std::string a, b;
};

std::vector<Pair> read_pairs(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw shardtrain::Error("cannot open '" + path + "'");
  std::vector<Pair> pairs;
  std::string line;
  std::getline(file, line);  // header
  while (std::getline(file, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::size_t start = 0;
    while (true) {
      const std::size_t tab = line.find('\t', start);
      fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (fields.size() != 5) throw shardtrain::Error("'" + path + "': a row without 5 tab-separated fields");
    pairs.push_back({fields[3], fields[4]});
  }
  return pairs;
}

double percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const auto low = static_cast<std::size_t>(position);
  const std::size_t high = std::min(low + 1, values.size() - 1);
  return values[low] + (position - static_cast<double>(low)) * (values[high] - values[low]);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string source = SHARDTRAIN_SOURCE_DIR;
  std::string data = source + "/data/glue/MRPC/train.tsv";
  std::string vocab = source + "/data/vocab/bert-base-cased-vocab.txt";
  std::string json_path;
  int repeats = 20, warmup = 3, max_length = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_tokenizer: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--data") data = value();
    else if (arg == "--vocab") vocab = value();
    else if (arg == "--json") json_path = value();
    else if (arg == "--repeats") repeats = std::max(1, std::atoi(value().c_str()));
    else if (arg == "--warmup") warmup = std::max(1, std::atoi(value().c_str()));  // the first pass is reported
    else if (arg == "--max-length") max_length = std::atoi(value().c_str());
    else {
      std::fprintf(stderr, "usage: bench_tokenizer [--data F] [--vocab F] [--repeats N] [--warmup N] "
                           "[--max-length N] [--json FILE]\n");
      return 2;
    }
  }

  try {
    struct Row {
      std::string name, reference;
      shardtrain::Tokenizer tokenizer;
      std::vector<double> pairs_per_s;
      std::size_t ids_per_pass = 0;
      double first_pass_pairs_per_s = 0;
    };
    std::vector<Row> rows;
    rows.push_back({"bert-base-cased", "mrpc_dev_bert-base-cased_ids.jsonl",
                    shardtrain::Tokenizer::from_vocab_file(vocab, {}), {}, 0});
    rows.push_back({"roberta-base", "mrpc_dev_roberta-base_ids.jsonl",
                    shardtrain::Tokenizer::from_model_dir(source + "/data/vocab/roberta-base"), {}, 0});
    rows.push_back({"modernbert", "mrpc_dev_modernbert_ids.jsonl",
                    shardtrain::Tokenizer::from_model_dir(source + "/data/vocab/modernbert"), {}, 0});
    rows.push_back({"deberta-v3", "spm/deberta-v3_ids.jsonl",
                    shardtrain::Tokenizer::from_model_dir(source + "/data/vocab/deberta-v3"), {}, 0});
    rows.push_back({"sib200-xlmr-8k", "spm/sib200-xlmr-8k_ids.jsonl",
                    shardtrain::Tokenizer::from_model_dir(source + "/data/vocab/sib200-xlmr-8k"), {}, 0});
    rows.push_back({"ties-3500", "spm/ties-3500_ids.jsonl",
                    shardtrain::Tokenizer::from_model_dir(source + "/tests/data/spm/ties-3500"), {}, 0});
    const std::vector<Pair> pairs = read_pairs(data);

    // MRPC dev idx 0 against each tokenizer's HF ids.
    const std::string dev_a =
        "He said the foodservice pie business doesn't fit the company's long-term growth strategy.";
    const std::string dev_b = "\"The foodservice pie business does not fit our long-term growth strategy.";
    for (const Row& row : rows) {
      std::ifstream reference(source + "/tests/data/" + row.reference);
      std::string line;
      if (!std::getline(reference, line)) throw shardtrain::Error("cannot read tests/data/" + row.reference);
      const auto expected = nlohmann::json::parse(line)["input_ids"].get<std::vector<int32_t>>();
      if (row.tokenizer.encode(dev_a, std::string_view(dev_b), 0).input_ids != expected) {
        std::fprintf(stderr, "bench_tokenizer: FAILED: %s: MRPC dev row 0 does not match the reference ids\n",
                     row.name.c_str());
        return 1;
      }
    }

    for (Row& row : rows) {
      auto pass = [&] {
        std::size_t ids = 0;
        for (const Pair& pair : pairs)
          ids += row.tokenizer.encode(pair.a, std::string_view(pair.b), max_length).input_ids.size();
        return ids;
      };
      {
        shardtrain::Timer timer;  // the first pass, with the word caches still empty
        row.ids_per_pass = pass();
        row.first_pass_pairs_per_s = static_cast<double>(pairs.size()) / timer.elapsed_s();
      }
      for (int i = 1; i < warmup; ++i) row.ids_per_pass = pass();
      for (int i = 0; i < repeats; ++i) {
        shardtrain::Timer timer;
        const std::size_t ids = pass();
        const double seconds = timer.elapsed_s();
        row.ids_per_pass = ids;
        row.pairs_per_s.push_back(static_cast<double>(pairs.size()) / seconds);
      }
    }
    std::printf("bench_tokenizer: %zu MRPC pairs, max_length %d, 1 thread, %d passes each\n", pairs.size(), max_length,
                repeats);
    const std::string cpu = shardtrain::current_cpu_features().describe();
    std::printf("# CPU features (cpuid): %s\n", cpu.c_str());
    const double wordpiece_median = percentile(rows[0].pairs_per_s, 0.5);
    nlohmann::json results = nlohmann::json::array();
    for (const Row& row : rows) {
      const double low = percentile(row.pairs_per_s, 0.0), median = percentile(row.pairs_per_s, 0.5),
                   high = percentile(row.pairs_per_s, 1.0);
      const double ids_per_s = median * static_cast<double>(row.ids_per_pass) / static_cast<double>(pairs.size());
      std::printf("  %-16s %-13s first pass %.0f | pairs/s min %.0f median %.0f max %.0f | ids/s %.0f | %.3f us/pair | "
                  "%.2fx WordPiece\n",
                  row.name.c_str(), row.tokenizer.type(), row.first_pass_pairs_per_s, low, median, high, ids_per_s,
                  1e6 / median, median / wordpiece_median);
      results.push_back({{"tokenizer", row.name},
                         {"type", row.tokenizer.type()},
                         {"ids_per_pass", row.ids_per_pass},
                         {"first_pass_pairs_per_s", row.first_pass_pairs_per_s},
                         {"pairs_per_s", {{"min", low}, {"median", median}, {"max", high}}},
                         {"ids_per_s_median", ids_per_s},
                         {"median_vs_wordpiece", median / wordpiece_median}});
    }

    if (!json_path.empty()) {
      const nlohmann::json result = {
          {"benchmark", "tokenizer"}, {"data", data},          {"vocab", vocab},
          {"threads", 1},             {"num_pairs", pairs.size()}, {"max_length", max_length},
          {"repeats", repeats},       {"warmup", warmup},      {"results", results}, {"cpu_features", cpu},
          {"check", "mrpc dev idx 0 == HF ids, each tokenizer"}};
      std::ofstream(json_path) << result.dump(2) << "\n";
    }
  } catch (const shardtrain::Error& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace bench_tokenizer

SHARDTRAIN_BENCH_REGISTER(bench_tokenizer)
