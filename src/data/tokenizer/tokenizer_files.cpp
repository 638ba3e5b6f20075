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

#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/spm_files.h"
#include "data/tokenizer/tokenizer_json.h"
#include "data/tokenizer/wordpiece_vocab.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/enum_names.h"
#include "shardtrain/core/log.h"
#include "shardtrain/core/text.h"

namespace shardtrain {

namespace {
using tokjson::json;
}  // namespace

struct Tokenizer::Loader {
  // `root`: the parsed tokenizer.json, when the tokenizer came from one.
  static Tokenizer finish(Tokenizer tokenizer, const tokjson::FileMap& files, int64_t model_max_length,
                          const tokjson::Where& where = tokjson::Where{}, const json* root = nullptr) {
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

  // AutoTokenizer's truncation_side: tokenizer_config.json's, else
  // tokenizer.json's truncation.direction, else right.
  static bool truncation_left(const tokjson::FileMap& files, const tokjson::Where& where, const json* root) {
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

  // vocab.txt (+ tokenizer_config.json): the WordPiece folder rules of from_model_dir.
  static Tokenizer wordpiece_folder(const tokjson::FileMap& files, const tokjson::Where& where,
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

  static Tokenizer bpe_from_tokenizer_json(const json& root, const tokjson::FileMap& files,
                                           const tokjson::Where& where) {
    const std::string name = where("tokenizer.json");
    const tokjson::Configs configs = tokjson::read_configs(files, where);
    const json& model = tokjson::field(root, "model", name, "the tokenizer model");
    auto bpe = std::make_shared<Bpe>();
    bpe->source = name;
    auto refuse_if = [&](bool bad, const std::string& what) {
      if (bad) throw Error("'" + name + "': model." + what + " is not supported (shardtrain reads byte-level BPE)");
    };
    const json dropout = model.value("dropout", json());
    if (!dropout.is_null() && !dropout.is_number())
      throw Error("'" + name + "': model.dropout must be a number or null, not " + dropout.dump());
    refuse_if(!dropout.is_null() && dropout.get<double>() > 0, "dropout > 0 (BPE dropout)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      refuse_if(model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty(),
                std::string(key) + " (non-empty)");
    }
    refuse_if(tokjson::get_bool(model, "byte_fallback", false, name), "byte_fallback = true");
    bpe::BpeModelSpec spec;
    spec.source = name;
    spec.vocab = tokjson::vocab_object(tokjson::field(model, "vocab", name, "the BPE vocabulary"), name,
                                             "model.vocab");
    const json& merges = tokjson::field(model, "merges", name, "the BPE merges");
    if (!merges.is_array()) throw Error("'" + name + "': model.merges must be a list");
    spec.merges.reserve(merges.size());
    for (std::size_t i = 0; i < merges.size(); ++i) {
      const json& merge = merges[i];
      if (merge.is_string()) {
        const std::string text = merge.get<std::string>();
        const std::size_t space = text.find(' ');
        if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
          throw Error("'" + name + "': model.merges[" + std::to_string(i) + "] '" + text + "' must be two tokens "
                      "separated by one space");
        spec.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        spec.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      } else {
        throw Error("'" + name + "': model.merges[" + std::to_string(i) + "] must be \"a b\" or [\"a\", \"b\"]");
      }
    }
    spec.ignore_merges = tokjson::get_bool(model, "ignore_merges", false, name);
    std::string model_unk;
    if (model.contains("unk_token") && model["unk_token"].is_string()) model_unk = model["unk_token"].get<std::string>();

    bpe->added = tokjson::read_added_tokens(root, name);
    tokjson::index_tokens(*bpe, spec.vocab);
    if (!model_unk.empty()) {
      spec.unk_id = tokjson::lookup(bpe->token_ids, model_unk);
      if (spec.unk_id < 0) throw Error("'" + name + "': model.unk_token '" + model_unk + "' is not in the vocabulary");
    }
    bpe->model = std::make_unique<bpe::BpeModel>(spec);
    tokjson::read_normalizer(root.value("normalizer", json()), name, bpe->normalizer);
    tokjson::read_pre_tokenizer(root.value("pre_tokenizer", json()), name, *bpe);
    tokjson::read_post_processor(root.value("post_processor", json()), name, bpe->post);
    std::vector<bool> has_token(bpe->tokens.size(), false);  // ids may leave holes
    for (const auto& entry : spec.vocab) has_token[static_cast<std::size_t>(entry.second)] = true;
    for (const AddedToken& t : bpe->added) has_token[static_cast<std::size_t>(t.id)] = true;
    tokjson::check_template_ids(bpe->post, has_token, name);
    apply_configs(*bpe, configs);
    tokjson::resolve_specials(*bpe, bpe->token_ids, configs, name, model_unk);
    bpe->finish();
    return finish(Tokenizer(std::shared_ptr<const Bpe>(std::move(bpe))), files,
                  configs.has_config ? configs.model_max_length() : 0, where, &root);
  }

  // tokenizer_config.json's add_prefix_space and do_lower_case (see tokenizer.h).
  static void apply_configs(Bpe& bpe, const tokjson::Configs& configs) {
    if (!configs.has_config) return;
    bpe.add_prefix_space = tokjson::get_bool(configs.config, "add_prefix_space", bpe.add_prefix_space,
                                               configs.config_name);
    // RobertaTokenizerFast sets the post-processor's add_prefix_space too.
    if (bpe.post.trim_offsets) bpe.post.trim_add_prefix_space = bpe.add_prefix_space;
    if (tokjson::get_bool(configs.config, "do_lower_case", false, configs.config_name))
      bpe.normalizer.push_back(BpeNormalizerStep::kLowercase);
  }

  // vocab.json + merges.txt: RoBERTa's tokenizer as the fast converter builds it.
  static Tokenizer bpe_from_vocab_merges(const tokjson::FileMap& files, const tokjson::Where& where) {
    const std::string vocab_name = where("vocab.json"), merges_name = where("merges.txt");
    const auto merges_file = files.find("merges.txt");
    if (merges_file == files.end())
      throw Error("'" + vocab_name + "' has no merges.txt beside it ('" + merges_name +
                  "'): a BPE vocabulary needs its merges");
    const tokjson::Configs configs = tokjson::read_configs(files, where);
    auto bpe = std::make_shared<Bpe>();
    bpe->source = vocab_name;
    bpe::BpeModelSpec spec;
    spec.source = merges_name;
    spec.vocab = tokjson::vocab_object(tokjson::parse_object(files.at("vocab.json"), vocab_name), vocab_name,
                                             "the vocabulary");
    std::istringstream lines(merges_file->second);
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if ((number == 1 && line.rfind("#version", 0) == 0) || line.empty()) continue;
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
          line.find(' ', space + 1) != std::string::npos)
        throw Error("'" + merges_name + "' line " + std::to_string(number) + ": '" + line +
                    "' must be two tokens separated by one space");
      spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    }
    if (spec.merges.empty()) throw Error("'" + merges_name + "' has no merges");
    const std::vector<std::pair<const char*, const char*>> roberta_specials = {
        {"bos_token", "<s>"}, {"pad_token", "<pad>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"},
        {"cls_token", "<s>"}, {"sep_token", "</s>"}, {"mask_token", "<mask>"}};
    std::unordered_map<std::string, int32_t> vocab_ids(spec.vocab.begin(), spec.vocab.end());
    auto name_of = [&](const char* key, const char* fallback) {
      const std::string configured = configs.special_token(key);
      return configured.empty() ? std::string(fallback) : configured;
    };
    for (const auto& [key, fallback] : roberta_specials) {
      const std::string token = name_of(key, fallback);
      const auto it = vocab_ids.find(token);
      if (it == vocab_ids.end()) continue;
      bool seen = false;
      for (const auto& t : bpe->added) seen = seen || t.content == token;
      if (seen) continue;
      AddedToken t;
      t.content = token;
      t.id = it->second;
      t.special = true;
      t.lstrip = std::string(key) == "mask_token";  // RobertaTokenizer: <mask> takes the space before it
      bpe->added.push_back(std::move(t));
    }
    tokjson::index_tokens(*bpe, spec.vocab);
    const std::string unk = name_of("unk_token", "<unk>");
    spec.unk_id = tokjson::lookup(bpe->token_ids, unk);
    bpe->model = std::make_unique<bpe::BpeModel>(spec);
    const int32_t cls = tokjson::lookup(bpe->token_ids, name_of("cls_token", "<s>"));
    const int32_t sep = tokjson::lookup(bpe->token_ids, name_of("sep_token", "</s>"));
    if (cls < 0 || sep < 0)
      throw Error("'" + vocab_name + "' has no " + (cls < 0 ? name_of("cls_token", "<s>") : name_of("sep_token", "</s>")) +
                  " token (the RoBERTa template <s> A </s></s> B </s> needs cls_token and sep_token)");
    bpe->post.single = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}};
    bpe->post.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep, sep}, 0}, {1, {}, 0}, {-1, {sep}, 0}};
    bpe->post.trim_offsets = true;  // RobertaConverter: RobertaProcessing(trim_offsets=True)
    apply_configs(*bpe, configs);
    tokjson::resolve_specials(*bpe, bpe->token_ids, configs, vocab_name, "");
    bpe->finish();
    return finish(Tokenizer(std::shared_ptr<const Bpe>(std::move(bpe))), files,
                  configs.has_config ? configs.model_max_length() : 0, where);
  }

  static bool is_binary_file(const std::string& file) {
    return file.size() > 6 && file.compare(file.size() - 6, 6, ".model") == 0;
  }

  // A SentencePiece model file with tokenizer_config.json (spm_files.h).
  static Tokenizer spm_folder(const tokjson::FileMap& files, const tokjson::Where& where, const std::string& model_file,
                              const std::string& model_type) {
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

  static Tokenizer from_files(const tokjson::FileMap& files, const tokjson::Where& where, const std::string& dir,
                              const std::string& model_type = "");
  static Tokenizer wordpiece_from_tokenizer_json(const json& root, const tokjson::FileMap& files,
                                                 const tokjson::Where& where);
};

// tokenizer.json with a WordPiece model, mapped onto the WordPiece engine:
// BertNormalizer options, the [CLS] A [SEP] B [SEP] template.
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
