// `shardtrain tokenize`: encode a TSV / CSV / JSONL file with a tokenizer (a
// WordPiece vocab.txt, a tokenizer.json, or a HF folder: data/tokenizer.h) and
// print one JSON line per row, {"input_ids":[...],"token_type_ids":[...]},
// the same ids HF's fast tokenizer gives. Useful to compare against a Python
// pipeline and to inspect what the model is fed. Rows are read by read_table,
// so columns, formats and bad rows behave exactly as in training.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "shardtrain/comm/mpi_helpers.h"
#include "shardtrain/comm/world.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/fs_util.h"
#include "shardtrain/core/log.h"
#include "shardtrain/data/reader.h"
#include "shardtrain/data/tokenizer.h"

namespace shardtrain {

namespace {

struct TokenizeOptions {
  std::string vocab;
  bool lowercase = false;
  std::string data;
  std::string format = "auto";
  std::string text_a;
  std::string text_b;
  std::string on_bad_row = "error";
  int max_length = 0;
  std::string output = "-";
};

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
  const bool folder = std::filesystem::is_directory(options.vocab);
  if (options.lowercase && (folder || std::filesystem::path(options.vocab).extension() == ".json")) {
    throw Error("--lowercase goes with a vocab.txt file; for the tokenizer '" + options.vocab +
                "' set do_lower_case in its tokenizer_config.json");
  }
  TokenizerOptions tokenizer_options;
  tokenizer_options.lowercase = options.lowercase;
  return Tokenizer::from_path(options.vocab, tokenizer_options);
}

void run_tokenize(const TokenizeOptions& options) {
  if (options.max_length < 0) throw Error(str_format("--max-length must be >= 0, got %d", options.max_length));
  require_output_named("--output", options.output);
  refuse_link_loop(options.output, "--output");
  if (options.output != "-" && same_file(options.output, options.data))
    throw Error("--output '" + options.output + "' is the input file; choose another name");
  if (options.output != "-") refuse_output_over_input("--output", options.output, "--vocab", options.vocab);
  const Tokenizer tokenizer = load_tokenizer(options);

  ReaderOptions reader;
  reader.format = parse_file_format(options.format);
  reader.text_a = options.text_a;
  reader.text_b = options.text_b;
  reader.on_bad_row = parse_bad_row_policy(options.on_bad_row);
  const RawTable table = read_table(options.data, reader);

  // core/fs_util.h: "-" is standard output, a file is replaced only when
  // complete, a link is followed, a device or FIFO is written in place.
  OutputFile out(options.output, "--output");
  std::string chunk;
  for (int64_t row = 0; row < table.size(); ++row) {
    std::optional<std::string_view> text_b;
    if (table.has_text_b) text_b = table.text_b[row];
    append_json_line(tokenizer.encode(table.text_a[row], text_b, options.max_length), chunk);
    if (chunk.size() > (1u << 20)) {
      out.write(chunk);
      chunk.clear();
    }
  }
  out.write(chunk);
  out.commit();
  if (table.num_bad_rows > 0)
    log_warn("tokenize: skipped %lld bad rows of %s (--on-bad-row skip)", static_cast<long long>(table.num_bad_rows),
             options.data.c_str());
  log_info("tokenize: %lld rows from %s", static_cast<long long>(table.size()), options.data.c_str());
}

}  // namespace

void add_tokenize_command(CLI::App& root, World& world) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* sub = root.add_subcommand(
      "tokenize", "Encode a .tsv/.csv/.jsonl file with a WordPiece or byte-level BPE tokenizer; print one JSON line per row");
  sub->add_option("--vocab", options->vocab, "vocab.txt, tokenizer.json, a SentencePiece spm.model / sentencepiece.bpe.model, or a HF model folder (tokenizer.json, vocab.json + merges.txt, vocab.txt, or a SentencePiece model)")
      ->required();
  sub->add_flag("--lowercase", options->lowercase, "lowercase and strip accents (uncased vocabularies)");
  sub->add_option("--data", options->data, "input file: .tsv (GLUE style, header row), .csv (header row) or .jsonl")
      ->required();
  sub->add_option("--format", options->format, "tsv, csv, jsonl, or auto (from the extension)")->capture_default_str();
  sub->add_option("--text-a", options->text_a, "first text column: header name / JSON key, or 0-based index")
      ->required();
  sub->add_option("--text-b", options->text_b, "second text column for pairs: header name / JSON key, or index");
  sub->add_option("--on-bad-row", options->on_bad_row, "error: stop at the first bad row; skip: drop and count it")
      ->capture_default_str();
  sub->add_option("--max-length", options->max_length, "truncate to this many ids, longest_first (0 = no truncation)");
  sub->add_option("--output", options->output, "output JSON-lines file, or - for stdout")->capture_default_str();
  sub->callback([&world, options] {
    on_rank0(world.comm(), "tokenize: rank 0 tokenizes", [&] { with_flag_names([&] { run_tokenize(*options); }); });
  });
}

}  // namespace shardtrain
