// Reading tokenizer folders and files (include/shardtrain/data/tokenizer.h):
// AutoTokenizer's order, tokenizer_config.json settings, the saved form a
// checkpoint keeps, and errors that name the file and the field.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/tokenizer.h"

namespace {

using shardtrain::Tokenizer;
using FileIds = std::vector<int32_t>;

const std::string kFilesSourceDir = SHARDTRAIN_SOURCE_DIR;
const std::string kFilesRoberta = kFilesSourceDir + "/data/vocab/roberta-base";
const std::string kFilesModernBert = kFilesSourceDir + "/data/vocab/modernbert";

std::string files_read(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

struct FilesTempDir {
  std::filesystem::path path;
  FilesTempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("shardtrain_test_tokenizer_files_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~FilesTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string folder(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) const {
    const std::filesystem::path dir = path / name;
    std::filesystem::create_directories(dir);
    for (const auto& [file, content] : files) std::ofstream(dir / file, std::ios::binary) << content;
    return dir.string();
  }
};

std::string files_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const shardtrain::Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool files_contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every MRPC dev pair through both tokenizers: the same ids and type ids.
void files_same_on_mrpc(const Tokenizer& x, const Tokenizer& y) {
  std::ifstream tsv(kFilesSourceDir + "/data/glue/MRPC/dev.tsv", std::ios::binary);
  REQUIRE(tsv);
  std::string line;
  std::getline(tsv, line);
  int rows = 0;
  while (std::getline(tsv, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> f;
    std::size_t start = 0;
    for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
      f.push_back(line.substr(start, tab - start));
    f.push_back(line.substr(start));
    REQUIRE(f.size() == 5);
    const auto a = x.encode(f[3], std::string_view(f[4]), 0);
    const auto b = y.encode(f[3], std::string_view(f[4]), 0);
    CHECK_MESSAGE(a.input_ids == b.input_ids, "row ", rows);
    CHECK(a.token_type_ids == b.token_type_ids);
    ++rows;
  }
  CHECK(rows == 408);
}

}  // namespace

TEST_CASE("tokenizer folders: tokenizer.json first, else vocab.json + merges.txt; both give the same ids") {
  FilesTempDir dir;
  const std::string slow = dir.folder("roberta_slow", {{"vocab.json", files_read(kFilesRoberta + "/vocab.json")},
                                                       {"merges.txt", files_read(kFilesRoberta + "/merges.txt")}});
  const Tokenizer from_merges = Tokenizer::from_model_dir(slow);
  const Tokenizer from_json = Tokenizer::from_model_dir(kFilesRoberta);
  CHECK(from_json.vocab_path() == kFilesRoberta + "/tokenizer.json");
  CHECK(from_merges.vocab_path() == slow + "/vocab.json");
  files_same_on_mrpc(from_merges, from_json);
  CHECK(from_merges.mask_id() == 50264);
  // A lone tokenizer.json, as model.vocab / --vocab may name it.
  const Tokenizer lone = Tokenizer::from_path(kFilesModernBert + "/tokenizer.json", {});
  CHECK(lone.encode("Hello", std::string_view("world"), 0).input_ids ==
        Tokenizer::from_model_dir(kFilesModernBert).encode("Hello", std::string_view("world"), 0).input_ids);
}

TEST_CASE("tokenizer_config.json: add_prefix_space, model_max_length, do_lower_case") {
  FilesTempDir dir;
  const std::string json = files_read(kFilesRoberta + "/tokenizer.json");
  const Tokenizer plain = Tokenizer::from_model_dir(kFilesRoberta);
  const Tokenizer prefixed = Tokenizer::from_model_dir(
      dir.folder("prefix", {{"tokenizer.json", json},
                            {"tokenizer_config.json", R"({"add_prefix_space": true, "model_max_length": 512})"}}));
  FileIds ids;
  prefixed.tokenize("Hello", ids);
  CHECK(ids == FileIds{20920});  // ĠHello
  ids.clear();
  plain.tokenize("Hello", ids);
  CHECK(ids == FileIds{31414});
  CHECK(prefixed.model_max_length() == 512);
  CHECK(plain.model_max_length() == 0);
  const Tokenizer lower = Tokenizer::from_model_dir(
      dir.folder("lower", {{"tokenizer.json", json}, {"tokenizer_config.json", R"({"do_lower_case": true})"}}));
  FileIds upper_ids, lower_ids;
  lower.tokenize("HELLO World", upper_ids);
  plain.tokenize("hello world", lower_ids);
  CHECK(upper_ids == lower_ids);
}

TEST_CASE("saved files rebuild the same tokenizer (what a checkpoint stores)") {
  for (const Tokenizer& original : {Tokenizer::from_model_dir(kFilesRoberta), Tokenizer::from_model_dir(kFilesModernBert)}) {
    const Tokenizer copy = Tokenizer::from_saved_files(original.saved_files(), "ckpt.h5 (attribute tokenizer_files)");
    CHECK(std::string(copy.type()) == "bpe");
    CHECK(copy.vocab_size() == original.vocab_size());
    CHECK(copy.pad_id() == original.pad_id());
    files_same_on_mrpc(copy, original);
  }
  // WordPiece from vocab.txt with options: the options travel in a tokenizer_config.json.
  shardtrain::TokenizerOptions options;
  options.lowercase = true;
  const Tokenizer uncased =
      Tokenizer::from_vocab_file(kFilesSourceDir + "/data/vocab/bert-base-uncased-vocab.txt", options);
  const Tokenizer copy = Tokenizer::from_saved_files(uncased.saved_files(), "ckpt.h5");
  CHECK(copy.options().lowercase);
  CHECK(std::string(copy.type()) == "wordpiece");
  CHECK(copy.encode("Héllo WORLD", std::nullopt, 0).input_ids == uncased.encode("Héllo WORLD", std::nullopt, 0).input_ids);
  CHECK(uncased.vocab_text() == files_read(kFilesSourceDir + "/data/vocab/bert-base-uncased-vocab.txt"));
  CHECK(Tokenizer::from_model_dir(kFilesRoberta).vocab_text().empty());
  CHECK(files_contains(files_error_of([] { Tokenizer::from_saved_files("{not json", "ckpt.h5 (attribute tokenizer_files)"); }),
                       "ckpt.h5 (attribute tokenizer_files)"));
}

// One list of a tokenizer folder's file names (Tokenizer::folder_file_names):
// what every kind of tokenizer saves (and export writes) is in it, and it is
// what `export --force` clears, DeBERTa's spm.model included.
TEST_CASE("saved tokenizer files are named from folder_file_names, and only from it") {
  const std::vector<std::string>& names = Tokenizer::folder_file_names();
  auto listed = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  for (const char* name : {"spm.model", "sentencepiece.bpe.model", "spiece.model", "sentencepiece.model",
                           "tokenizer.model", "tokenizer.json", "vocab.txt", "special_tokens_map.json"})
    CHECK_MESSAGE(listed(name), name);
  FilesTempDir dir;
  const std::string bpe = dir.folder("bpe", {{"vocab.json", files_read(kFilesRoberta + "/vocab.json")},
                                             {"merges.txt", files_read(kFilesRoberta + "/merges.txt")}});
  const std::vector<Tokenizer> kinds = {
      Tokenizer::from_model_dir(kFilesRoberta), Tokenizer::from_model_dir(bpe),
      Tokenizer::from_model_dir(kFilesSourceDir + "/data/vocab/deberta-v3"),
      Tokenizer::from_model_dir(kFilesSourceDir + "/data/vocab/sib200-xlmr-8k"),
      Tokenizer::from_path(kFilesSourceDir + "/data/vocab/bert-base-cased-vocab.txt", {})};
  std::set<std::string> saved;
  for (const Tokenizer& tokenizer : kinds)
    for (const auto& [name, bytes] : Tokenizer::saved_file_contents(tokenizer.saved_files(), "saved")) {
      CHECK_MESSAGE(listed(name), name);
      saved.insert(name);
    }
  for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt", "spm.model", "added_tokens.json",
                           "sentencepiece.bpe.model", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"})
    CHECK_MESSAGE(saved.count(name) == 1, name);
  // A saved file under another name (a damaged checkpoint) is refused, not
  // kept to be written by an export that would never clear it.
  nlohmann::json with_extra = nlohmann::json::parse(kinds.back().saved_files());
  with_extra["notes.txt"] = "x";
  CHECK(files_error_of([&] { Tokenizer::from_saved_files(with_extra.dump(), "ckpt.h5 (attribute tokenizer_files)"); }) ==
        "'ckpt.h5 (attribute tokenizer_files): notes.txt': not a file of a tokenizer folder (\"tokenizer_config.json\", "
        "\"special_tokens_map.json\", \"added_tokens.json\", \"tokenizer.json\", \"vocab.json\", \"merges.txt\", "
        "\"vocab.txt\", \"spm.model\", \"sentencepiece.bpe.model\", \"spiece.model\", \"sentencepiece.model\", "
        "\"tokenizer.model\")");
}

TEST_CASE("tokenizer.json with a WordPiece model equals the vocab.txt tokenizer") {
  const std::string vocab_path = kFilesSourceDir + "/data/vocab/bert-base-cased-vocab.txt";
  nlohmann::json vocab = nlohmann::json::object();
  std::ifstream lines(vocab_path);
  std::string token;
  for (int id = 0; std::getline(lines, token); ++id) vocab[token] = id;
  const nlohmann::json root = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                      {"strip_accents", nullptr}, {"lowercase", false}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", {{"type", "BertProcessing"}, {"sep", {"[SEP]", 102}}, {"cls", {"[CLS]", 101}}}},
      {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                 {"max_input_chars_per_word", 100}, {"vocab", vocab}}}};
  FilesTempDir dir;
  const std::string folder = dir.folder("bert_json", {{"tokenizer.json", root.dump()}});
  const Tokenizer from_json = Tokenizer::from_model_dir(folder);
  CHECK(std::string(from_json.type()) == "wordpiece");
  files_same_on_mrpc(from_json, Tokenizer::from_vocab_file(vocab_path, {}));
}

TEST_CASE("BPE merges by rank, leftmost first, for short and long words (tiny tokenizer.json)") {
  const nlohmann::json root = {
      {"added_tokens", nlohmann::json::array({{{"id", 0}, {"content", "<pad>"}, {"special", true}}})},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"model", {{"type", "BPE"},
                 {"vocab", {{"<pad>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}, {"abab", 4}, {"aa", 5}}},
                 {"merges", {"a b", "ab ab", nlohmann::json::array({"a", "a"})}}}}};
  FilesTempDir dir;
  const Tokenizer t = Tokenizer::from_model_dir(dir.folder("tiny", {{"tokenizer.json", root.dump()}}));
  auto ids_of = [&](const std::string& text) {
    FileIds ids;
    t.tokenize(text, ids);
    return ids;
  };
  std::string ab10, ab40;
  for (int i = 0; i < 10; ++i) ab10 += "ab";
  for (int i = 0; i < 40; ++i) ab40 += "ab";       // 80 symbols: the heap path
  CHECK(ids_of(ab10) == FileIds(5, 4));              // a b -> ab (rank 0) everywhere, then ab ab -> abab
  CHECK(ids_of(ab40) == FileIds(20, 4));
  CHECK(ids_of(ab10 + "a") == [] { FileIds v(5, 4); v.push_back(1); return v; }());
  CHECK(ids_of("aaa") == FileIds{5, 1});             // ties: the leftmost pair first
  FileIds odd(50, 5);
  odd.push_back(1);
  CHECK(ids_of(std::string(101, 'a')) == odd);
  CHECK(ids_of("abc") == FileIds{3});                // no token for "c" and no unk_token: dropped, as HF
  // No post-processor: the pair is A then B, B with type id 1.
  const auto pair = t.encode("ab", std::string_view("a"), 0);
  CHECK(pair.input_ids == FileIds{3, 1});
  CHECK(pair.token_type_ids == std::vector<uint8_t>{0, 1});
}

TEST_CASE("tokenizer errors name the file and the field") {
  FilesTempDir dir;
  const std::string roberta_json = files_read(kFilesRoberta + "/tokenizer.json");
  std::string message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("broken", {{"tokenizer.json", "{\"model\": "}})); });
  CHECK(files_contains(message, "broken/tokenizer.json"));
  CHECK(files_contains(message, "cannot parse"));

  nlohmann::json unigram = {{"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}}}};
  message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("xlmr", {{"tokenizer.json", unigram.dump()}})); });
  CHECK(files_contains(message, "xlmr/tokenizer.json"));
  CHECK(files_contains(message, "model.vocab must be a non-empty list"));

  message = files_error_of([&] {
    Tokenizer::from_model_dir(dir.folder("camembert", {{"sentencepiece.bpe.model", "binary"}, {"config.json", "{}"}}));
  });
  CHECK(files_contains(message, "camembert/sentencepiece.bpe.model"));
  CHECK(files_contains(message, "ModelProto"));

  nlohmann::json unknown = {{"model", {{"type", "Mystery"}}}};
  message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("unknown", {{"tokenizer.json", unknown.dump()}})); });
  CHECK(files_contains(message, "unknown/tokenizer.json"));
  CHECK(files_contains(message, "'Mystery'"));

  message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("nomodel", {{"tokenizer.json", "{}"}})); });
  CHECK(files_contains(message, "no field 'model'"));

  message = files_error_of([&] {
    Tokenizer::from_model_dir(dir.folder("nomerges", {{"vocab.json", files_read(kFilesRoberta + "/vocab.json")}}));
  });
  CHECK(files_contains(message, "nomerges/vocab.json"));
  CHECK(files_contains(message, "merges.txt"));

  nlohmann::json root = nlohmann::json::parse(roberta_json);
  root["model"].erase("merges");
  message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("nomerges_json", {{"tokenizer.json", root.dump()}})); });
  CHECK(files_contains(message, "nomerges_json/tokenizer.json"));
  CHECK(files_contains(message, "'merges'"));

  message = files_error_of([&] {
    Tokenizer::from_model_dir(dir.folder("badmerge", {{"vocab.json", R"({"a": 0, "b": 1, "<pad>": 2, "<s>": 3, "</s>": 4})"},
                                                      {"merges.txt", "#version: 0.2\na b\n"}}));
  });
  CHECK(files_contains(message, "badmerge/merges.txt"));
  CHECK(files_contains(message, "'ab', which is not in the vocabulary"));

  message = files_error_of([&] {
    Tokenizer::from_model_dir(dir.folder("badline", {{"vocab.json", R"({"a": 0})"}, {"merges.txt", "a b c\n"}}));
  });
  CHECK(files_contains(message, "badline/merges.txt' line 1"));

  root = nlohmann::json::parse(roberta_json);
  root["pre_tokenizer"] = {{"type", "Whitespace"}};
  message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("whitespace", {{"tokenizer.json", root.dump()}})); });
  CHECK(files_contains(message, "whitespace/tokenizer.json"));
  CHECK(files_contains(message, "'Whitespace'"));

  root = nlohmann::json::parse(roberta_json);
  root["normalizer"] = {{"type", "Precompiled"}};
  message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("precompiled", {{"tokenizer.json", root.dump()}})); });
  CHECK(files_contains(message, "normalizer type 'Precompiled'"));

  message = files_error_of([&] {
    Tokenizer::from_model_dir(dir.folder("badconfig", {{"tokenizer.json", roberta_json}, {"tokenizer_config.json", "[1,"}}));
  });
  CHECK(files_contains(message, "badconfig/tokenizer_config.json"));

  message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("empty", {})); });
  CHECK(files_contains(message, "tokenizer.json, vocab.json + merges.txt or SentencePiece model"));
  message = files_error_of([&] { Tokenizer::from_path((dir.path / "nowhere.json").string(), {}); });
  CHECK(files_contains(message, "nowhere.json"));
}

TEST_CASE("a SentencePiece model path that is a folder, a FIFO or a symbolic link names what it is") {
  FilesTempDir dir;
  const std::string model = files_read(kFilesSourceDir + "/data/vocab/sib200-xlmr-8k/sentencepiece.bpe.model");
  REQUIRE(!model.empty());
  // Each takes a model file's name in its folder; the folder and the path
  // itself are refused naming the path and what is there.
  auto refused = [&](const std::string& name, const std::string& file, const std::string& what,
                     const std::function<void(const std::filesystem::path&)>& make) {
    const std::filesystem::path folder = dir.folder(name, {});
    make(folder / file);
    const std::string path = (folder / file).string();
    const std::string expected = "'" + path + "' is " + what + ", not a SentencePiece model file";
    CHECK_MESSAGE(files_error_of([&] { Tokenizer::from_model_dir(folder.string()); }) == expected, name);
    CHECK_MESSAGE(files_error_of([&] { Tokenizer::from_path(path, {}); }) == expected, name);
  };
  refused("folder", "spm.model", "a folder", [](const auto& path) { std::filesystem::create_directory(path); });
  refused("fifo", "sentencepiece.bpe.model", "a FIFO (named pipe)",
          [](const auto& path) { REQUIRE(::mkfifo(path.c_str(), 0600) == 0); });
  refused("loop", "spm.model", "a symbolic link loop (too many levels of symbolic links)",
          [](const auto& path) { std::filesystem::create_symlink("spm.model", path); });
  refused("dangling", "spm.model", "a symbolic link to 'gone.model', which does not exist",
          [](const auto& path) { std::filesystem::create_symlink("gone.model", path); });
  // A folder with no model at all keeps the message that lists what a folder may hold.
  CHECK(files_contains(files_error_of([&] { Tokenizer::from_model_dir(dir.folder("none", {})); }),
                       "has no vocab.txt"));
#if !defined(SHARDTRAIN_SANITIZED)  // SentencePiece needs its module (test_tokenizer_spm.cpp)
  // Another model name that is a file still loads.
  const std::string both = dir.folder("both", {{"sentencepiece.bpe.model", model}});
  std::filesystem::create_directory(std::filesystem::path(both) / "spm.model");
  CHECK(Tokenizer::from_model_dir(both).vocab_size() == 8002);
#endif
}

// Found by fuzz_tokenizer's tokenizer.json kind (tests/fuzz/README.md): ids
// that index the token table unchecked, and fields of the wrong type that
// escaped as JSON library exceptions naming no file.
TEST_CASE("tokenizer.json: hostile ids and wrongly typed fields are refused, naming the file and the field") {
  FilesTempDir dir;
  const nlohmann::json roberta = nlohmann::json::parse(files_read(kFilesRoberta + "/tokenizer.json"));
  auto error_with = [&](const std::string& name, const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json root = roberta;
    change(root);
    return files_error_of([&] { Tokenizer::from_model_dir(dir.folder(name, {{"tokenizer.json", root.dump()}})); });
  };
  // A template id outside the vocabulary: encode() gave id -1 (or any id) to the model.
  std::string message = error_with("cls_negative", [](nlohmann::json& r) { r["post_processor"]["cls"] = {"<s>", -1}; });
  CHECK(files_contains(message, "cls_negative/tokenizer.json"));
  CHECK(files_contains(message, "post_processor.cls's id must be an integer id from 0 to 1048575, not -1"));
  message = error_with("sep_beyond", [](nlohmann::json& r) { r["post_processor"]["sep"] = {"</s>", 60000}; });
  CHECK(files_contains(message, "post_processor names token id 60000, beyond the vocabulary's 50265 ids"));
  message = error_with("template_text_id", [](nlohmann::json& r) {
    r["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
        "pair": [{"Sequence": {"id": "A"}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": ["zero"], "tokens": ["<s>"]}}})");
  });
  CHECK(files_contains(message, "post_processor special token '<s>'s id must be an integer id"));
  message = error_with("template_type_id", [](nlohmann::json& r) {
    r["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 7}}],
        "pair": [{"Sequence": {"id": "A"}}, {"Sequence": {"id": "B", "type_id": "one"}}],
        "special_tokens": {}})");
  });
  CHECK(files_contains(message, "post_processor.single item 'A' has type_id 7; token types are 0 or 1"));
  // A text named twice was inserted twice, past max_length (truncation fits it once).
  message = error_with("template_twice", [](nlohmann::json& r) {
    r["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A"}}, {"Sequence": {"id": "A"}}],
        "pair": [{"Sequence": {"id": "A"}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {}})");
  });
  CHECK(files_contains(message, "post_processor.single names sequence A 2 times; the single template takes A once and no B"));
  message = error_with("pair_without_b", [](nlohmann::json& r) {
    r["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A"}}], "pair": [{"Sequence": {"id": "A"}}], "special_tokens": {}})");
  });
  CHECK(files_contains(message, "post_processor.pair names sequence B 0 times; the pair template takes A once and B once"));
  // An id inside the table that no token has (vocabulary ids may leave holes).
  message = error_with("template_hole", [](nlohmann::json& r) {
    r["model"]["vocab"]["<far>"] = 60000;
    r["post_processor"]["sep"] = {"</s>", 59999};
  });
  CHECK(files_contains(message, "post_processor names token id 59999, which no token of the vocabulary or added_tokens has"));
  // The token types encode() gives are the template's (preflight checks them against type_vocab_size).
  CHECK(Tokenizer::from_model_dir(kFilesRoberta).max_token_type(true) == 0);
  nlohmann::json typed = roberta;
  typed["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
      "single": [{"Sequence": {"id": "A", "type_id": 1}}],
      "pair": [{"Sequence": {"id": "A"}}, {"Sequence": {"id": "B"}}], "special_tokens": {}})");
  const Tokenizer typed_tokenizer = Tokenizer::from_model_dir(dir.folder("typed", {{"tokenizer.json", typed.dump()}}));
  CHECK(typed_tokenizer.max_token_type(false) == 1);
  CHECK(typed_tokenizer.max_token_type(true) == 0);
  CHECK(typed_tokenizer.encode("hello", std::nullopt, 0).token_type_ids == std::vector<uint8_t>{1});
  // Ids that sized the token table: 2^31 - 1 allocated 2^31 strings; an added
  // token's 2^33 wrapped to id 0 through int32.
  message = error_with("vocab_huge", [](nlohmann::json& r) { r["model"]["vocab"]["zzz"] = 2147483647; });
  CHECK(files_contains(message, "model.vocab entry 'zzz' must be an integer id from 0 to 1048575, not 2147483647"));
  message = error_with("added_huge", [](nlohmann::json& r) {
    r["added_tokens"].push_back({{"id", int64_t{1} << 33}, {"content", "<big>"}, {"special", true}});
  });
  CHECK(files_contains(message, "added token '<big>' must be an integer id from 0 to 1048575, not 8589934592"));
  message = error_with("added_text_id", [](nlohmann::json& r) {
    r["added_tokens"].push_back({{"id", "7"}, {"content", "<seven>"}});
  });
  CHECK(files_contains(message, "added token '<seven>' must be an integer id"));
  message = error_with("dropout_text", [](nlohmann::json& r) { r["model"]["dropout"] = "0.1"; });
  CHECK(files_contains(message, "dropout_text/tokenizer.json': model.dropout must be a number or null, not \"0.1\""));

  // WordPiece in tokenizer.json: the [CLS] id indexed the vocabulary unchecked.
  const nlohmann::json wordpiece = {
      {"normalizer", {{"type", "BertNormalizer"}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 99}}}},
      {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"},
                 {"vocab", {{"[PAD]", 0}, {"[UNK]", 1}, {"[CLS]", 2}, {"[SEP]", 3}, {"a", 4}}}}}};
  message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("wp_cls", {{"tokenizer.json", wordpiece.dump()}})); });
  CHECK(files_contains(message, "wp_cls/tokenizer.json': post_processor names token id 99, beyond the vocabulary's 5 ids"));
  nlohmann::json wordpiece_prefix = wordpiece;
  wordpiece_prefix["post_processor"]["cls"] = {"[CLS]", 2};
  wordpiece_prefix["model"]["max_input_chars_per_word"] = "100";
  message = files_error_of([&] { Tokenizer::from_model_dir(dir.folder("wp_max", {{"tokenizer.json", wordpiece_prefix.dump()}})); });
  CHECK(files_contains(message, "max_input_chars_per_word other than 100 is not supported"));
  wordpiece_prefix["model"]["max_input_chars_per_word"] = 100;
  CHECK(std::string(Tokenizer::from_model_dir(dir.folder("wp_ok", {{"tokenizer.json", wordpiece_prefix.dump()}})).type()) ==
        "wordpiece");
}
