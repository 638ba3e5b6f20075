// BPE from a folder's files (data/tokenizer/tokenizer_loader.h): a
// tokenizer.json with a BPE model (byte-level, or SentencePiece-style as
// Gemma's and mmBERT's), or RoBERTa's vocab.json + merges.txt.
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/tokenizer/tokenizer_loader.h"
#include "shardtrain/core/check.h"

namespace shardtrain {

namespace {
using tokjson::json;
}  // namespace


Tokenizer Tokenizer::Loader::bpe_from_tokenizer_json(const json& root, const tokjson::FileMap& files,
                                                     const tokjson::Where& where) {
  const std::string name = where("tokenizer.json");
  const tokjson::Configs configs = tokjson::read_configs(files, where);
  const json& model = tokjson::field(root, "model", name, "the tokenizer model");
  auto bpe = std::make_shared<Bpe>();
  bpe->source = name;
  auto refuse_if = [&](bool bad, const std::string& what) {
    if (bad) throw Error("'" + name + "': model." + what + " is not supported");
  };
  // The pre-tokenizer decides the kind of BPE: ByteLevel, or SentencePiece-style (none, Metaspace).
  tokjson::read_pre_tokenizer(root.value("pre_tokenizer", json()), name, *bpe);
  const json dropout = model.value("dropout", json());
  if (!dropout.is_null() && !dropout.is_number())
    throw Error("'" + name + "': model.dropout must be a number or null, not " + dropout.dump());
  refuse_if(!dropout.is_null() && dropout.get<double>() > 0, "dropout > 0 (BPE dropout)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    refuse_if(model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty(),
              std::string(key) + " (non-empty)");
  }
  bpe::BpeModelSpec spec;
  spec.source = name;
  spec.byte_level = bpe->byte_level;
  spec.byte_fallback = tokjson::get_bool(model, "byte_fallback", false, name);
  spec.fuse_unk = tokjson::get_bool(model, "fuse_unk", false, name);
  refuse_if(spec.byte_level && spec.byte_fallback, "byte_fallback = true with the ByteLevel pre_tokenizer");
  refuse_if(spec.byte_level && spec.fuse_unk, "fuse_unk = true with the ByteLevel pre_tokenizer");
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

void Tokenizer::Loader::apply_configs(Bpe& bpe, const tokjson::Configs& configs) {
  if (!configs.has_config) return;
  if (!bpe.byte_level) {
    // transformers' Gemma and Llama classes rebuild the template from
    // add_bos_token / add_eos_token, and with add_prefix_space convert the
    // SentencePiece model again: not what the tokenizer.json says.
    const json tokenizer_class = configs.config.value("tokenizer_class", json());
    for (const char* name : {"GemmaTokenizer", "GemmaTokenizerFast", "LlamaTokenizer", "LlamaTokenizerFast"}) {
      if (tokenizer_class == name)
        throw Error("'" + configs.config_name + "': tokenizer_class '" + name + "' is not supported (transformers "
                    "rebuilds its template from add_bos_token / add_eos_token); with tokenizer_class "
                    "PreTrainedTokenizerFast the tokenizer.json is read as it is");
    }
    if (configs.config.contains("add_prefix_space") && !configs.config["add_prefix_space"].is_null())
      throw Error("'" + configs.config_name + "': add_prefix_space is not supported with a SentencePiece-style BPE "
                  "tokenizer.json (its Prepend normalizer or Metaspace pre_tokenizer says where \"\xE2\x96\x81\" goes)");
  }
  bpe.add_prefix_space = tokjson::get_bool(configs.config, "add_prefix_space", bpe.add_prefix_space,
                                             configs.config_name);
  // RobertaTokenizerFast sets the post-processor's add_prefix_space too.
  if (bpe.post.trim_offsets) bpe.post.trim_add_prefix_space = bpe.add_prefix_space;
  if (tokjson::get_bool(configs.config, "do_lower_case", false, configs.config_name))
    bpe.normalizer.push_back(BpeNormalizerStep{BpeNormalizerStep::kLowercase, {}, {}});
}

Tokenizer Tokenizer::Loader::bpe_from_vocab_merges(const tokjson::FileMap& files, const tokjson::Where& where) {
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

}  // namespace shardtrain
