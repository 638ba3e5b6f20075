// Tokenizer throughput: encode every MRPC train pair ([CLS] A [SEP] B [SEP],
// bert-base-cased, longest_first truncation to --max-length) on one thread.
//
// Before timing it checks the first MRPC dev pair against the ids HF
// BertTokenizerFast gives for it (tests/data/mrpc_dev_bert-base-cased_ids.jsonl,
// idx 0). Then it warms up and times --repeats passes over the whole file.
// Reported: pairs/s (min / median / max over passes) and ids/s at the median.
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
#include "shardtrain/core/timer.h"
#include "shardtrain/data/tokenizer.h"

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
    else if (arg == "--warmup") warmup = std::max(0, std::atoi(value().c_str()));
    else if (arg == "--max-length") max_length = std::atoi(value().c_str());
    else {
      std::fprintf(stderr, "usage: bench_tokenizer [--data F] [--vocab F] [--repeats N] [--warmup N] "
                           "[--max-length N] [--json FILE]\n");
      return 2;
    }
  }

  try {
    const shardtrain::Tokenizer tokenizer = shardtrain::Tokenizer::from_vocab_file(vocab, {});
    const std::vector<Pair> pairs = read_pairs(data);

    // MRPC dev idx 0, ids from HF BertTokenizerFast (bert-base-cased).
    const shardtrain::Encoding check = tokenizer.encode(
        "He said the foodservice pie business doesn't fit the company's long-term growth strategy.",
        std::string_view("\"The foodservice pie business does not fit our long-term growth strategy."), 0);
    const std::vector<int32_t> expected{
        101,  1124, 1163, 1103, 11785, 1200, 14301, 16288, 1671, 2144, 112,  189,  4218, 1103,
        1419, 112,  188,  1263, 118,   1858, 3213,  5564,  119,  102,  107,  1109, 11785, 1200,
        14301, 16288, 1671, 1674, 1136, 4218, 1412,  1263,  118,  1858, 3213, 5564, 119,  102};
    if (check.input_ids != expected) {
      std::fprintf(stderr, "bench_tokenizer: FAILED: MRPC dev row 0 does not match the HF ids\n");
      return 1;
    }

    std::size_t ids_per_pass = 0;
    auto pass = [&] {
      std::size_t ids = 0;
      for (const Pair& pair : pairs) ids += tokenizer.encode(pair.a, std::string_view(pair.b), max_length).input_ids.size();
      return ids;
    };
    for (int i = 0; i < warmup; ++i) ids_per_pass = pass();
    std::vector<double> pairs_per_s;
    for (int i = 0; i < repeats; ++i) {
      shardtrain::Timer timer;
      const std::size_t ids = pass();
      const double seconds = timer.elapsed_s();
      ids_per_pass = ids;
      pairs_per_s.push_back(static_cast<double>(pairs.size()) / seconds);
    }
    const double low = percentile(pairs_per_s, 0.0), median = percentile(pairs_per_s, 0.5),
                 high = percentile(pairs_per_s, 1.0);
    const double ids_per_s = median * static_cast<double>(ids_per_pass) / static_cast<double>(pairs.size());
    std::printf("bench_tokenizer: %zu MRPC pairs (%zu ids incl. specials, max_length %d), 1 thread, %d passes\n",
                pairs.size(), ids_per_pass, max_length, repeats);
    std::printf("  pairs/s  min %.0f  median %.0f  max %.0f\n", low, median, high);
    std::printf("  ids/s    median %.0f   (%.3f us per pair)\n", ids_per_s, 1e6 / median);

    if (!json_path.empty()) {
      const nlohmann::json result = {
          {"benchmark", "tokenizer"},       {"data", data},
          {"vocab", vocab},                 {"threads", 1},
          {"num_pairs", pairs.size()},      {"ids_per_pass", ids_per_pass},
          {"max_length", max_length},       {"repeats", repeats},
          {"warmup", warmup},               {"pairs_per_s", {{"min", low}, {"median", median}, {"max", high}}},
          {"ids_per_s_median", ids_per_s},  {"check", "mrpc dev idx 0 == HF ids"}};
      std::ofstream(json_path) << result.dump(2) << "\n";
    }
  } catch (const shardtrain::Error& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 2;
  }
  return 0;
}
