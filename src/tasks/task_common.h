// Private to the tasks layer: what several task specs share.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/run_config.h"

namespace shardtrain::tasks {

// 'text', as messages quote a value.
inline std::string single_quoted(const std::string& text) { return "'" + text + "'"; }

// A float as JSON: 9 significant digits (it reads back as the same float);
// null for NaN / Infinity, which JSON lacks.
inline void append_json_float(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char digits[32];
  const int n = std::snprintf(digits, sizeof(digits), "%.9g", value);
  out.append(digits, static_cast<size_t>(n));
}

// "{"row":i,"line":L," : the start of every task's JSON line.
inline std::string json_line_start(int64_t row, int64_t line) {
  return str_format("{\"row\":%lld,\"line\":%lld,", static_cast<long long>(row), static_cast<long long>(line));
}

// Warns that `n` rows of `path` were skipped (data.on_bad_row = "skip").
inline void warn_skipped_rows(const std::string& path, int64_t n) {
  if (n > 0) log_warn("%s: skipped %lld bad rows (data.on_bad_row = skip)", path.c_str(), static_cast<long long>(n));
}

// The data key `key` is needed by this task: Error naming it when empty.
inline void require_key(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}

// CoNLL files are sentences of tagged words: token classification's format.
inline void refuse_conll(const DataConfig& d) {
  require_key(d.format != FileFormat::kConll,
              "data.format = \"conll\" (a token and its tag per line) is the token-classification format; set "
              "model.task = \"token_classification\", or give the data as tsv, csv or jsonl");
}

// The task's default for a data key the user did not set (not in keys_set).
template <class T>
void fill_default(const std::set<std::string>& keys_set, const char* key, T& field, const T& value) {
  if (!keys_set.count(key)) field = value;
}

}  // namespace shardtrain::tasks
