// Small data files for the tasks beyond sequence classification, cut from
// the shipped sets: CoNLL sentences (WNUT-17), multiple-choice rows made from
// MRPC pairs, SQuAD paragraphs. Collective: rank 0 writes, every rank gets the
// path once the file is there.
#pragma once

#include <mpi.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "mpi_ranks.h"
#include "train_fixtures.h"

namespace shardtrain_test {

// Collective: sentences [first, first + count) of a shipped CoNLL file, as
// dir/name (rank 0 writes).
inline std::string conll_part(const std::string& dir, const std::string& name, const std::string& source, int first,
                              int count) {
  return written_by_rank0(dir, name, [&](std::ofstream& out) {
    std::ifstream in(std::string(SHARDTRAIN_SOURCE_DIR) + "/" + source);
    std::string line;
    int sentence = 0;
    bool in_sentence = false;
    while (sentence < first + count && std::getline(in, line)) {
      const bool blank = line.find_first_not_of(" \t\r") == std::string::npos;
      if (blank) {
        if (in_sentence) ++sentence;
        in_sentence = false;
        if (sentence > first) out << "\n";
        continue;
      }
      in_sentence = true;
      if (sentence >= first) out << line << "\n";
    }
  });
}

// Collective: `rows` multiple-choice rows as JSON Lines dir/name: row r's
// context is MRPC training row (first + r)'s first sentence, its 3 choices
// the second sentences of rows first + r .. first + r + 2, rotated so that
// the right one (its own) is at r % 3.
inline std::string choice_part(const std::string& dir, const std::string& name, int first, int rows) {
  return written_by_rank0(dir, name, [&](std::ofstream& out) {
    std::ifstream in(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/glue/MRPC/train.tsv");
    std::string line;
    std::getline(in, line);  // header
    std::vector<std::pair<std::string, std::string>> pairs;
    while (static_cast<int>(pairs.size()) < first + rows + 2 && std::getline(in, line)) {
      std::vector<std::string> fields;
      size_t start = 0;
      for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
        fields.push_back(line.substr(start, tab - start));
      fields.push_back(line.substr(start));
      pairs.emplace_back(fields.at(3), fields.at(4));
    }
    for (int r = first; r < first + rows; ++r) {
      const int label = r % 3;
      std::vector<std::string> choices(3);
      for (int k = 0; k < 3; ++k)
        choices[static_cast<size_t>((label + k) % 3)] = pairs.at(static_cast<size_t>(r + k)).second;
      out << nlohmann::json{{"context", pairs[static_cast<size_t>(r)].first}, {"endings", choices}, {"label", label}}
                 .dump()
          << "\n";
    }
  });
}

// Collective: paragraphs [first, first + count) of article `article` of the
// shipped SQuAD training part, as a SQuAD JSON file dir/name (rank 0 writes).
inline std::string squad_part(const std::string& dir, const std::string& name, int article, int first, int count) {
  const std::string path = dir + "/" + name;
  if (world_rank() == 0) {
    std::ifstream in(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/qa/squad-v1.1/train-articles-00-23.json");
    const nlohmann::json all = nlohmann::json::parse(in);
    nlohmann::json part = {{"version", "1.1"}, {"data", nlohmann::json::array()}};
    nlohmann::json chosen = all["data"][article];
    nlohmann::json paragraphs = nlohmann::json::array();
    for (int p = first; p < first + count; ++p) paragraphs.push_back(chosen["paragraphs"][p]);
    chosen["paragraphs"] = paragraphs;
    part["data"].push_back(chosen);
    std::ofstream(path) << part.dump();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

}  // namespace shardtrain_test
