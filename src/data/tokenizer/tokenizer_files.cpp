// Reading tokenizers the way AutoTokenizer (fast) reads a model folder
// (include/shardtrain/data/tokenizer.h, docs/DESIGN.md "Tokenizers"): the
// folder's files are read into memory first, so a folder, a lone
// tokenizer.json and the files a checkpoint saved all load through one path.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/tokenizer/spm_files.h"
#include "data/tokenizer/tokenizer_loader.h"
#include "data/tokenizer/wordpiece_vocab.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/enum_names.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {

namespace {
using tokjson::json;
}  // namespace

Tokenizer Tokenizer::Loader::finish(Tokenizer tokenizer, const tokjson::FileMap& files, int64_t model_max_length,
                                    const tokjson::Where& where, const json* root) {
  json saved = json::object();
  const std::vector<std::string>& names = folder_file_names();
  for (const auto& [file, text] : files) {
    // export writes these files and clears the others of the list: a name
    // outside it would be written and never cleared.
    if (std::find(names.begin(), names.end(), file) == names.end())
      throw Error("'" + where(clip_for_message(file, 60)) + "': not a file of a tokenizer folder (" +
                  quoted_list(names) + ")");
    if (is_binary_file(file)) {
      saved[file] = json{{"base64", tokjson::base64_encode(text)}};  // a SentencePiece ModelProto
    } else {
      saved[file] = text;
    }
  }
  tokenizer.saved_files_ =
      std::make_shared<const std::string>(saved.dump(-1, ' ', false, json::error_handler_t::replace));
  tokenizer.model_max_length_ = model_max_length;
  tokenizer.truncation_left_ = truncation_left(files, where, root);
  return tokenizer;
}

bool Tokenizer::Loader::truncation_left(const tokjson::FileMap& files, const tokjson::Where& where,
                                        const json* root) {
  const tokjson::Configs configs = tokjson::read_configs(files, where);
  if (configs.has_config && configs.config.contains("truncation_side") &&
      !configs.config["truncation_side"].is_null()) {
    const json& side = configs.config["truncation_side"];
    if (side == "left") return true;
    if (side == "right") return false;
    throw Error("'" + configs.config_name + "': truncation_side must be \"left\" or \"right\", not " + side.dump());
  }
  if (root == nullptr) return false;
  const std::string name = where("tokenizer.json");
  const json truncation = root->value("truncation", json());
  if (truncation.is_null()) return false;
  if (!truncation.is_object()) throw Error("'" + name + "': truncation must be null or an object");
  const json direction = truncation.value("direction", json("Right"));
  if (direction == "Left") return true;
  if (direction == "Right") return false;
  throw Error("'" + name + "': truncation.direction must be \"Left\" or \"Right\", not " + direction.dump());
}

bool Tokenizer::Loader::is_binary_file(const std::string& file) {
  return file.size() > 6 && file.compare(file.size() - 6, 6, ".model") == 0;
}

Tokenizer Tokenizer::Loader::spm_folder(const tokjson::FileMap& files, const tokjson::Where& where,
                                        const std::string& model_file, const std::string& model_type) {
  std::string tokenizer_class;
  std::shared_ptr<Spm> engine = spm_from_model_file(files, where, model_file, model_type, &tokenizer_class);
  const tokjson::Configs configs = tokjson::read_configs(files, where);
  // The class the layout came from goes with the saved files, so the copy
  // (a checkpoint, an export) loads the same way without config.json.
  tokjson::FileMap saved = files;
  json config = configs.has_config ? configs.config : json::object();
  if (!config.contains("tokenizer_class")) {
    config["tokenizer_class"] = tokenizer_class;
    saved["tokenizer_config.json"] = config.dump(2) + "\n";
  }
  return finish(Tokenizer(std::shared_ptr<const Spm>(std::move(engine))), saved,
                configs.has_config ? configs.model_max_length() : 0, where);
}

Tokenizer Tokenizer::Loader::from_files(const tokjson::FileMap& files, const tokjson::Where& where,
                                        const std::string& dir, const std::string& model_type) {
  if (const auto it = files.find("tokenizer.json"); it != files.end()) {
    const std::string name = where("tokenizer.json");
    const json root = tokjson::parse_object(it->second, name);
    const json& model = tokjson::field(root, "model", name, "the tokenizer model");
    // Old files omit model.type for BPE; HF infers it from the fields.
    std::string type = model.is_object() && model.contains("type") && model["type"].is_string()
                           ? model["type"].get<std::string>()
                           : model.is_object() && model.contains("merges") ? "BPE" : "";
    if (type == "BPE") return bpe_from_tokenizer_json(root, files, where);
    if (type == "WordPiece") return wordpiece_from_tokenizer_json(root, files, where);
    if (type == "Unigram") {
      const tokjson::Configs configs = tokjson::read_configs(files, where);
      return finish(Tokenizer(std::shared_ptr<const Spm>(spm_from_tokenizer_json(root, files, where))), files,
                    configs.has_config ? configs.model_max_length() : 0, where, &root);
    }
    if (type.empty())
      throw Error("'" + name + "': model has no 'type' and no 'merges' (a BPE model needs its merges; a WordPiece "
                  "model says \"type\": \"WordPiece\")");
    throw Error("'" + name + "': tokenizer model type '" + type +
                "' is not supported; shardtrain reads WordPiece, byte-level BPE and Unigram (SentencePiece) tokenizers");
  }
  if (files.count("vocab.json") != 0) return bpe_from_vocab_merges(files, where);
  if (files.count("vocab.txt") != 0) return wordpiece_folder(files, where, dir);
  for (const char* model : kSpmModelFiles)
    if (files.count(model) != 0) return spm_folder(files, where, model, model_type);
  throw Error("no tokenizer in '" + dir + "': it needs tokenizer.json, vocab.json + merges.txt, vocab.txt, or a "
              "SentencePiece model (spm.model, sentencepiece.bpe.model)");
}

Tokenizer Tokenizer::from_vocab_text(const std::string& text, const TokenizerOptions& options,
                                     const std::string& source) {
  if (options.strip_accents && options.keep_accents) {
    throw Error("tokenizer options for '" + source + "': strip_accents and keep_accents are both set");
  }
  Tokenizer tokenizer(wordpiece_parse_vocab(text, source, WordPieceSpecialNames{}), options);
  json config = {{"do_lower_case", options.lowercase},
                 {"tokenize_chinese_chars", options.tokenize_chinese_chars},
                 {"strip_accents", options.strip_accents ? json(true) : options.keep_accents ? json(false) : json()}};
  return Loader::finish(std::move(tokenizer), {{"vocab.txt", text}, {"tokenizer_config.json", config.dump(2) + "\n"}},
                        0);
}

Tokenizer Tokenizer::from_vocab_file(const std::string& vocab_path, const TokenizerOptions& options) {
  if (options.strip_accents && options.keep_accents) {
    throw Error("tokenizer options for '" + vocab_path + "': strip_accents and keep_accents are both set");
  }
  std::ifstream file(vocab_path, std::ios::binary);
  if (!file) throw Error("cannot open vocabulary file '" + vocab_path + "'");
  std::stringstream buffer;
  buffer << file.rdbuf();
  if (file.bad()) throw Error("cannot read vocabulary file '" + vocab_path + "'");
  return from_vocab_text(buffer.str(), options, vocab_path);
}

Tokenizer Tokenizer::from_model_dir(const std::string& dir) {
  const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) throw Error("model folder '" + dir + "' does not exist");
  tokjson::FileMap files;
  auto take = [&](const char* file) {
    if (std::optional<std::string> text = tokjson::read_optional(prefix + file)) files[file] = std::move(*text);
  };
  take("tokenizer_config.json");
  take("special_tokens_map.json");
  if (std::filesystem::is_regular_file(prefix + "tokenizer.json", error)) {
    take("tokenizer.json");
  } else if (std::filesystem::is_regular_file(prefix + "vocab.json", error)) {
    take("vocab.json");
    take("merges.txt");
  } else if (std::filesystem::is_regular_file(prefix + "vocab.txt", error)) {
    take("vocab.txt");
  } else {
    std::string model_type;
    if (spm_read_folder(prefix, files, model_type))
      return Loader::from_files(files, tokjson::Where{prefix, ""}, dir, model_type);
    throw Error("model folder '" + dir + "' has no vocab.txt ('" + prefix +
                "vocab.txt'), tokenizer.json, vocab.json + merges.txt or SentencePiece model (spm.model, "
                "sentencepiece.bpe.model)");
  }
  return Loader::from_files(files, tokjson::Where{prefix, ""}, dir);
}

Tokenizer Tokenizer::from_path(const std::string& path, const TokenizerOptions& options) {
  std::error_code error;
  const std::filesystem::path file(path);
  const std::string name = file.filename().string();
  const bool known = std::find_if(std::begin(kSpmModelFiles), std::end(kSpmModelFiles),
                                  [&](const char* model) { return name == model; }) != std::end(kSpmModelFiles);
  // A folder is a model folder, unless it has a model file's name (refused below).
  if (!known && std::filesystem::is_directory(path, error)) return from_model_dir(path);
  if (file.extension() == ".json") {
    std::optional<std::string> text = tokjson::read_optional(path);
    if (!text) throw Error("cannot open tokenizer file '" + path + "'");
    const std::string folder = file.has_parent_path() ? file.parent_path().string() + "/" : "";
    if (file.filename() != "tokenizer.json")
      throw Error("'" + path + "': a tokenizer file is a tokenizer.json, a vocab.txt, or their folder");
    return Loader::from_files({{"tokenizer.json", std::move(*text)}}, tokjson::Where{folder, ""}, folder);
  }
  if (file.extension() == ".model") {
    // A SentencePiece model: its layout follows its name, or the
    // tokenizer_config.json beside it (spm_files.h).
    if (!known)
      throw Error("'" + path + "': a SentencePiece model is read as spm.model (DeBERTa-v2), sentencepiece.bpe.model "
                  "(XLM-R) or from its folder (with tokenizer_config.json's tokenizer_class)");
    if (const std::string what = tokjson::describe_non_file(path); !what.empty())
      throw Error("'" + path + "' is " + what + ", not a SentencePiece model file");
    std::optional<std::string> bytes = tokjson::read_optional(path);
    if (!bytes) throw Error("cannot open tokenizer file '" + path + "'");
    const std::string folder = file.has_parent_path() ? file.parent_path().string() + "/" : "";
    tokjson::FileMap files{{name, std::move(*bytes)}};
    for (const char* config : {"tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"})
      if (std::optional<std::string> text = tokjson::read_optional(folder + config)) files[config] = std::move(*text);
    return Loader::from_files(files, tokjson::Where{folder, ""}, folder);
  }
  return from_vocab_file(path, options);
}

const std::vector<std::string>& Tokenizer::folder_file_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = {"tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                                    "tokenizer.json",        "vocab.json",              "merges.txt",
                                    "vocab.txt"};
    out.insert(out.end(), std::begin(kSpmModelFiles), std::end(kSpmModelFiles));
    return out;
  }();
  return names;
}

std::map<std::string, std::string> Tokenizer::saved_file_contents(const std::string& text, const std::string& source) {
  const json saved = tokjson::parse_object(text, source);
  std::map<std::string, std::string> files;
  for (auto it = saved.begin(); it != saved.end(); ++it) {
    const json& value = it.value();
    if (value.is_string()) {
      files[it.key()] = value.get<std::string>();
    } else if (value.is_object() && value.size() == 1 && value.contains("base64") && value["base64"].is_string()) {
      files[it.key()] = tokjson::base64_decode(value["base64"].get<std::string>(), source, "entry '" + it.key() + "'");
    } else {
      throw Error("'" + source + "': entry '" + it.key() + "' must be the file's text or {\"base64\": its bytes}");
    }
  }
  return files;
}

Tokenizer Tokenizer::from_saved_files(const std::string& text, const std::string& source) {
  const std::map<std::string, std::string> contents = saved_file_contents(text, source);
  const tokjson::FileMap files(contents.begin(), contents.end());
  return Loader::from_files(files, tokjson::Where{"", source}, source);
}

}  // namespace shardtrain