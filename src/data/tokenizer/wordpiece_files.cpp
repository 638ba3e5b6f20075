// WordPiece from a folder's files (data/tokenizer/tokenizer_loader.h):
// vocab.txt with tokenizer_config.json, or a tokenizer.json with a WordPiece
// model.
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "data/tokenizer/tokenizer_loader.h"
#include "data/tokenizer/wordpiece_vocab.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/log.h"

namespace shardtrain {

namespace {
using tokjson::json;
}  // namespace


Tokenizer Tokenizer::Loader::wordpiece_folder(const tokjson::FileMap& files, const tokjson::Where& where,
                                              const std::string& dir) {
  const tokjson::Configs configs = tokjson::read_configs(files, where);
  TokenizerOptions options;
  WordPieceSpecialNames names;
  std::optional<bool> lowercase;
  const json& config = configs.config;
  const std::string& config_name = configs.config_name;
  if (configs.has_config) {
    if (config.contains("do_lower_case") && !config["do_lower_case"].is_null())
      lowercase = tokjson::get_bool(config, "do_lower_case", true, config_name);
    const auto strip = config.find("strip_accents");
    if (strip != config.end() && !strip->is_null()) {
      const bool value = tokjson::get_bool(config, "strip_accents", false, config_name);
      options.strip_accents = value;
      options.keep_accents = !value;
    }
    options.tokenize_chinese_chars = tokjson::get_bool(config, "tokenize_chinese_chars", true, config_name);
    for (auto [key, name] : {std::pair<const char*, std::string*>{"unk_token", &names.unk}, {"cls_token", &names.cls},
                             {"sep_token", &names.sep}, {"pad_token", &names.pad}, {"mask_token", &names.mask}}) {
      const std::string value = tokjson::special_name(config, key, config_name);
      const bool present = config.contains(key) && !config[key].is_null();
      if (present && value.empty())
        throw Error("'" + config_name + "': special token names must not be empty");
      if (!value.empty()) *name = value;
    }
  }
  const std::string& text = files.at("vocab.txt");
  std::shared_ptr<Vocab> vocab = wordpiece_parse_vocab(text, where("vocab.txt"), names);
  if (lowercase) {
    options.lowercase = *lowercase;
  } else {
    options.lowercase = !wordpiece_vocabulary_is_cased(*vocab);
    log_warn("%s: no do_lower_case in tokenizer_config.json; the vocabulary is %s, so lowercase = %s",
             dir.c_str(), options.lowercase ? "uncased" : "cased", options.lowercase ? "true" : "false");
  }
  tokjson::FileMap saved = files;
  json resolved = configs.has_config ? config : json::object();
  resolved["do_lower_case"] = options.lowercase;
  saved["tokenizer_config.json"] = resolved.dump(2) + "\n";
  return finish(Tokenizer(std::move(vocab), options), saved, configs.has_config ? configs.model_max_length() : 0,
                where);
}

Tokenizer Tokenizer::Loader::wordpiece_from_tokenizer_json(const json& root, const tokjson::FileMap& files,
                                                           const tokjson::Where& where) {
  const std::string name = where("tokenizer.json");
  const tokjson::Configs configs = tokjson::read_configs(files, where);
  const json& model = root["model"];
  const std::vector<std::pair<std::string, int32_t>> entries =
      tokjson::vocab_object(tokjson::field(model, "vocab", name, "the WordPiece vocabulary"), name, "model.vocab");
  if (model.value("continuing_subword_prefix", json("##")) != json("##") ||
      model.value("max_input_chars_per_word", json(100)) != json(100))
    throw Error("'" + name + "': WordPiece with continuing_subword_prefix other than \"##\" or "
                "max_input_chars_per_word other than 100 is not supported");
  std::vector<const std::string*> by_id(entries.size(), nullptr);
  for (const auto& [token, id] : entries) {
    if (static_cast<std::size_t>(id) >= entries.size() || by_id[static_cast<std::size_t>(id)] != nullptr)
      throw Error("'" + name + "': model.vocab ids must be 0 .. " + std::to_string(entries.size() - 1) +
                  ", each once (token '" + token + "' has id " + std::to_string(id) + ")");
    if (token.find('\n') != std::string::npos || token.empty() || token.back() == ' ' || token.back() == '\t')
      throw Error("'" + name + "': WordPiece token with id " + std::to_string(id) +
                  " is empty, holds a newline or ends in whitespace");
    by_id[static_cast<std::size_t>(id)] = &token;
  }
  std::string text;
  for (const std::string* token : by_id) text += *token + "\n";

  TokenizerOptions options;
  const json normalizer = root.value("normalizer", json());
  if (normalizer.is_null() || tokjson::type_of(normalizer, name, "normalizer") != "BertNormalizer")
    throw Error("'" + name + "': a WordPiece model needs the BertNormalizer normalizer");
  if (!tokjson::get_bool(normalizer, "clean_text", true, name))
    throw Error("'" + name + "': BertNormalizer clean_text = false is not supported");
  options.lowercase = tokjson::get_bool(normalizer, "lowercase", true, name);
  options.tokenize_chinese_chars = tokjson::get_bool(normalizer, "handle_chinese_chars", true, name);
  if (normalizer.contains("strip_accents") && !normalizer["strip_accents"].is_null()) {
    options.strip_accents = tokjson::get_bool(normalizer, "strip_accents", false, name);
    options.keep_accents = !options.strip_accents;
  }
  if (configs.has_config && configs.config.contains("do_lower_case") && !configs.config["do_lower_case"].is_null())
    options.lowercase = tokjson::get_bool(configs.config, "do_lower_case", true, configs.config_name);
  const json pre = root.value("pre_tokenizer", json());
  if (pre.is_null() || tokjson::type_of(pre, name, "pre_tokenizer") != "BertPreTokenizer")
    throw Error("'" + name + "': a WordPiece model needs the BertPreTokenizer pre_tokenizer");

  // The template must be BERT's; its special tokens name [CLS] and [SEP].
  Template shape;
  tokjson::read_post_processor(root.value("post_processor", json()), name, shape);
  tokjson::check_template_ids(shape, std::vector<bool>(by_id.size(), true), name);  // ids 0 .. n-1, each once
  auto is = [](const std::vector<TemplatePiece>& t, const std::vector<std::pair<int, int>>& want) {
    if (t.size() != want.size()) return false;
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (t[i].sequence != want[i].first || t[i].type_id != want[i].second) return false;
      if (t[i].sequence < 0 && t[i].ids.size() != 1) return false;
    }
    return true;
  };
  if (!is(shape.single, {{-1, 0}, {0, 0}, {-1, 0}}) || !is(shape.pair, {{-1, 0}, {0, 0}, {-1, 0}, {1, 1}, {-1, 1}}) ||
      shape.pair[0].ids != shape.single[0].ids || shape.pair[2].ids != shape.single[2].ids ||
      shape.pair[4].ids != shape.single[2].ids)
    throw Error("'" + name + "': a WordPiece model needs the template [CLS] A [SEP] B:1 [SEP]:1 (BertProcessing)");
  WordPieceSpecialNames names;
  names.cls = *by_id[static_cast<std::size_t>(shape.single[0].ids[0])];
  names.sep = *by_id[static_cast<std::size_t>(shape.single[2].ids[0])];
  if (model.contains("unk_token") && model["unk_token"].is_string()) names.unk = model["unk_token"].get<std::string>();
  const std::string pad = configs.special_token("pad_token");
  const std::string mask = configs.special_token("mask_token");
  if (!pad.empty()) names.pad = pad;
  if (!mask.empty()) names.mask = mask;
  std::shared_ptr<Vocab> vocab = wordpiece_parse_vocab(text, name, names);
  return finish(Tokenizer(std::move(vocab), options), files, configs.has_config ? configs.model_max_length() : 0,
                where, &root);
}

}  // namespace shardtrain
