// `shardtrain tokenize`: encode a GLUE-style TSV with a BERT vocabulary and
// print one JSON line per row, {"input_ids":[...],"token_type_ids":[...]},
// the same ids HF BertTokenizerFast gives. Useful to compare against a Python
// pipeline and to inspect what the model is fed.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/tokenizer.h"

namespace shardtrain {

namespace {

struct TokenizeOptions {
  std::string vocab;
  bool lowercase = false;
  std::string data;
  std::string text_a;
  std::string text_b;
  int max_length = 0;
  std::string output = "-";
};

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  while (true) {
    const std::size_t tab = line.find('\t', start);
    if (tab == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, tab - start));
    start = tab + 1;
  }
}

// A column given as a header name, or else as a 0-based index.
std::size_t resolve_column(const std::string& column, const std::vector<std::string_view>& header,
                           const std::string& flag, const std::string& path) {
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (header[i] == column) return i;
  }
  if (!column.empty() && column.find_first_not_of("0123456789") == std::string::npos && column.size() < 10) {
    const std::size_t index = std::stoul(column);
    if (index < header.size()) return index;
    throw Error(str_format("%s %s: '%s' has only %zu columns (0-based indices 0..%zu)", flag.c_str(),
                           column.c_str(), path.c_str(), header.size(), header.size() - 1));
  }
  std::string names;
  for (const std::string_view name : header) names += (names.empty() ? "'" : ", '") + std::string(name) + "'";
  throw Error(str_format("%s '%s': no such column in the header of '%s' (columns: %s; or give a 0-based index)",
                         flag.c_str(), column.c_str(), path.c_str(), names.c_str()));
}

void append_int(std::string& out, int value) {
  char digits[16];
  const int length = std::snprintf(digits, sizeof(digits), "%d", value);
  out.append(digits, static_cast<std::size_t>(length));
}

void append_json_line(const Encoding& encoding, std::string& out) {
  out += "{\"input_ids\":[";
  for (std::size_t i = 0; i < encoding.input_ids.size(); ++i) {
    if (i > 0) out += ',';
    append_int(out, encoding.input_ids[i]);
  }
  out += "],\"token_type_ids\":[";
  for (std::size_t i = 0; i < encoding.token_type_ids.size(); ++i) {
    if (i > 0) out += ',';
    out += static_cast<char>('0' + encoding.token_type_ids[i]);
  }
  out += "]}\n";
}

Tokenizer load_tokenizer(const TokenizeOptions& options) {
  if (std::filesystem::is_directory(options.vocab)) {
    if (options.lowercase) {
      throw Error("--lowercase goes with a vocab.txt file; for the model folder '" + options.vocab +
                  "' set do_lower_case in its tokenizer_config.json");
    }
    return Tokenizer::from_model_dir(options.vocab);
  }
  TokenizerOptions tokenizer_options;
  tokenizer_options.lowercase = options.lowercase;
  return Tokenizer::from_vocab_file(options.vocab, tokenizer_options);
}

void run_tokenize(const TokenizeOptions& options) {
  const std::string& path = options.data;
  if (std::filesystem::path(path).extension() != ".tsv") {
    throw Error("--data '" + path + "': `shardtrain tokenize` reads tab-separated files with a header row (.tsv)");
  }
  if (options.max_length < 0) throw Error(str_format("--max-length must be >= 0, got %d", options.max_length));
  const Tokenizer tokenizer = load_tokenizer(options);

  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error("--data: cannot open '" + path + "'");
  std::stringstream buffer;
  buffer << file.rdbuf();
  const std::string text = buffer.str();
  const std::string_view all(text);

  std::size_t position = 0, line_number = 0;
  auto next_line = [&](std::string_view& line) {
    if (position >= all.size()) return false;
    std::size_t end = all.find('\n', position);
    if (end == std::string_view::npos) end = all.size();
    line = all.substr(position, end - position);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    position = end + 1;
    ++line_number;
    return true;
  };

  std::string_view header_line;
  if (!next_line(header_line)) throw Error("--data '" + path + "' is empty (a header row is expected)");
  if (header_line.substr(0, 3) == "\xEF\xBB\xBF") header_line.remove_prefix(3);
  const std::vector<std::string_view> header = split_tabs(header_line);
  const std::size_t column_a = resolve_column(options.text_a, header, "--text-a", path);
  std::optional<std::size_t> column_b;
  if (!options.text_b.empty()) column_b = resolve_column(options.text_b, header, "--text-b", path);
  const std::size_t needed = std::max(column_a, column_b.value_or(0)) + 1;

  std::FILE* out = stdout;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> owned(nullptr, &std::fclose);
  if (options.output != "-") {
    owned.reset(std::fopen(options.output.c_str(), "wb"));
    if (!owned) throw Error("--output: cannot create '" + options.output + "'");
    out = owned.get();
  }

  std::string chunk;
  std::size_t num_rows = 0;
  auto flush = [&] {
    if (!chunk.empty() && std::fwrite(chunk.data(), 1, chunk.size(), out) != chunk.size()) {
      throw Error("--output: write failed for '" + options.output + "'");
    }
    chunk.clear();
  };
  std::string_view line;
  while (next_line(line)) {
    if (line.empty()) continue;
    const std::vector<std::string_view> fields = split_tabs(line);
    if (fields.size() < needed) {
      throw Error(str_format("%s:%zu: the row has %zu tab-separated fields, the chosen columns need %zu",
                             path.c_str(), line_number, fields.size(), needed));
    }
    std::optional<std::string_view> text_b;
    if (column_b) text_b = fields[*column_b];
    append_json_line(tokenizer.encode(fields[column_a], text_b, options.max_length), chunk);
    ++num_rows;
    if (chunk.size() > (1u << 20)) flush();
  }
  flush();
  if (std::fflush(out) != 0) throw Error("--output: write failed for '" + options.output + "'");
  log_info("tokenize: %zu rows from %s", num_rows, path.c_str());
}

}  // namespace

void add_tokenize_command(CLI::App& root, World& world) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* sub = root.add_subcommand(
      "tokenize", "Encode a .tsv file with a BERT WordPiece vocabulary; print one JSON line per row");
  sub->add_option("--vocab", options->vocab, "vocab.txt (or a HF model folder with vocab.txt + tokenizer_config.json)")
      ->required();
  sub->add_flag("--lowercase", options->lowercase, "lowercase and strip accents (uncased vocabularies)");
  sub->add_option("--data", options->data, "tab-separated file with a header row (.tsv, GLUE style)")->required();
  sub->add_option("--text-a", options->text_a, "first text column: header name or 0-based index")->required();
  sub->add_option("--text-b", options->text_b, "second text column for pairs: header name or 0-based index");
  sub->add_option("--max-length", options->max_length, "truncate to this many ids, longest_first (0 = no truncation)");
  sub->add_option("--output", options->output, "output JSON-lines file, or - for stdout")->capture_default_str();
  sub->callback([&world, options] {
    if (world.rank() == 0) run_tokenize(*options);
  });
}

}  // namespace shardtrain
