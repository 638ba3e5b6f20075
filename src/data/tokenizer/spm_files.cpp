// SentencePiece tokenizers read the way AutoTokenizer (fast) reads a folder
// (data/spm_files.h, docs/DESIGN.md "SentencePiece"): a model file with the
// id layout and template of transformers' converter for its class
// (DebertaV2Converter, XLMRobertaConverter, CamembertConverter), or a
// tokenizer.json Unigram model mapped onto a ModelProto for libsentencepiece.
#include "data/tokenizer/spm_files.h"

#include <algorithm>
#include <filesystem>

#include "data/tokenizer/spm_model.h"
#include "data/tokenizer/unicode_text.h"
#include "shardtrain/core/check.h"

namespace shardtrain {

namespace {

using tokjson::json;

enum class SpmLayout { kDeberta, kXlmRoberta, kCamembert };

// Whether pieces split at ASCII spaces encode as the whole text does (see
// spm_chunks.cpp): the normalizer removes extra whitespace and adds the
// dummy prefix, no piece has U+2581 after its first character, and "▁" is a
// piece or unknown text becomes bytes (else an unknown "▁" would merge with
// an unknown piece before it into one).
bool spm_chunks_allowed(const spm::ModelSpec& spec) {
  if (!spec.add_dummy_prefix || !spec.remove_extra_whitespaces || !spec.escape_whitespaces ||
      !spec.split_by_whitespace || spec.treat_whitespace_as_suffix)
    return false;
  bool meta_piece = spec.byte_fallback;
  for (const spm::Piece& piece : spec.pieces) {
    if (piece.type != spm::PieceType::kNormal && piece.type != spm::PieceType::kUserDefined) continue;
    if (piece.text.find("\xE2\x96\x81", 1) != std::string::npos) return false;
    meta_piece = meta_piece || piece.text == "\xE2\x96\x81";
  }
  return meta_piece;
}

// engine.chunks and, for a Unigram model cut into chunks, the Viterbi that
// keeps its ties as SentencePiece decides them on the whole text (spm_unigram.h).
void spm_set_chunks(Tokenizer::Spm& engine, const spm::ModelSpec& spec) {
  engine.chunks = spm_chunks_allowed(spec);
  if (engine.chunks && spec.model_type == spm::ModelType::kUnigram) engine.unigram = std::make_shared<spm::Unigram>(spec);
}

// Token tables from engine.tokens (ids in order); the specials win a tie.
// `spec`: the model, whose BYTE pieces are byte_piece (through spm_to_id).
void spm_index_tokens(Tokenizer::Spm& engine, const spm::ModelSpec& spec) {
  engine.token_ids.clear();
  for (std::size_t id = 0; id < engine.tokens.size(); ++id)
    engine.token_ids.emplace(engine.tokens[id], static_cast<int32_t>(id));
  for (const AddedToken& t : engine.added.tokens) engine.token_ids[t.content] = t.id;
  engine.meta_first.assign(engine.tokens.size(), false);
  for (std::size_t id = 0; id < engine.tokens.size(); ++id)
    engine.meta_first[id] = engine.tokens[id].rfind("\xE2\x96\x81", 0) == 0;
  engine.byte_piece.assign(engine.tokens.size(), false);
  for (std::size_t i = 0; i < spec.pieces.size() && i < engine.spm_to_id.size(); ++i)
    if (spec.pieces[i].type == spm::PieceType::kByte) engine.byte_piece[static_cast<std::size_t>(engine.spm_to_id[i])] = true;
}

AddedToken spm_special(const std::string& content, int32_t id, bool lstrip = false) {
  AddedToken t;
  t.content = content;
  t.id = id;
  t.special = true;
  t.lstrip = lstrip;
  t.normalized = false;
  return t;
}

SpmLayout spm_layout(const tokjson::Configs& configs, const std::string& model_type, const std::string& model_file,
                     const std::string& file_name) {
  if (configs.has_config && configs.config.contains("tokenizer_class") &&
      configs.config["tokenizer_class"].is_string()) {
    std::string name = configs.config["tokenizer_class"].get<std::string>();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, "Fast") == 0) name.resize(name.size() - 4);
    if (name == "DebertaV2Tokenizer") return SpmLayout::kDeberta;
    if (name == "XLMRobertaTokenizer") return SpmLayout::kXlmRoberta;
    if (name == "CamembertTokenizer") return SpmLayout::kCamembert;
    throw Error("'" + configs.config_name + "': tokenizer_class '" + configs.config["tokenizer_class"].get<std::string>() +
                "' is not a SentencePiece tokenizer shardtrain reads (DebertaV2Tokenizer, XLMRobertaTokenizer, "
                "CamembertTokenizer; or a tokenizer.json)");
  }
  if (model_type == "deberta-v2") return SpmLayout::kDeberta;
  if (model_type == "xlm-roberta") return SpmLayout::kXlmRoberta;
  if (model_type == "camembert") return SpmLayout::kCamembert;
  if (model_file == "spm.model") return SpmLayout::kDeberta;
  if (model_file == "sentencepiece.bpe.model") return SpmLayout::kXlmRoberta;
  throw Error("cannot tell which tokenizer '" + file_name + "' belongs to: set tokenizer_class in " +
              configs.config_name + " (DebertaV2Tokenizer, XLMRobertaTokenizer or CamembertTokenizer)");
}

// tokenizer_config.json's added_tokens_decoder and added_tokens.json must
// agree with the layout: an entry names the layout's token at its id, or
// adds one at the next free id (in id order).
void spm_check_added(Tokenizer::Spm& engine, const tokjson::FileMap& files, const tokjson::Configs& configs,
                     const tokjson::Where& where) {
  std::vector<std::pair<int64_t, AddedToken>> entries;
  std::string source;
  if (configs.has_config && configs.config.contains("added_tokens_decoder")) {
    source = configs.config_name + " added_tokens_decoder";
    const json& decoder = configs.config["added_tokens_decoder"];
    if (!decoder.is_object()) throw Error("'" + configs.config_name + "': added_tokens_decoder must be an object");
    for (auto it = decoder.begin(); it != decoder.end(); ++it) {
      int64_t id = -1;
      try {
        std::size_t used = 0;
        id = std::stoll(it.key(), &used);
        if (used != it.key().size()) id = -1;
      } catch (const std::exception&) {
      }
      const json& entry = it.value();
      if (id < 0 || !entry.is_object() || !entry.contains("content") || !entry["content"].is_string())
        throw Error("'" + configs.config_name + "': added_tokens_decoder entry '" + it.key() +
                    "' must be \"<id>\": {\"content\": ...}");
      AddedToken t = spm_special(entry["content"].get<std::string>(), static_cast<int32_t>(std::min<int64_t>(id, INT32_MAX)));
      t.lstrip = tokjson::get_bool(entry, "lstrip", false, configs.config_name);
      t.rstrip = tokjson::get_bool(entry, "rstrip", false, configs.config_name);
      t.single_word = tokjson::get_bool(entry, "single_word", false, configs.config_name);
      t.special = tokjson::get_bool(entry, "special", true, configs.config_name);
      entries.emplace_back(id, std::move(t));
    }
  } else if (const auto it = files.find("added_tokens.json"); it != files.end()) {
    source = where("added_tokens.json");
    const json added = tokjson::parse_object(it->second, source);
    for (auto entry = added.begin(); entry != added.end(); ++entry) {
      if (!entry.value().is_number_integer() || entry.value().get<int64_t>() < 0)
        throw Error("'" + source + "': '" + entry.key() + "' must map to a token id");
      const int64_t id = entry.value().get<int64_t>();
      entries.emplace_back(id, spm_special(entry.key(), static_cast<int32_t>(std::min<int64_t>(id, INT32_MAX))));
    }
  }
  std::sort(entries.begin(), entries.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<AddedToken> added = engine.added.tokens;
  for (auto& [id, token] : entries) {
    const auto size = static_cast<int64_t>(engine.tokens.size());
    if (id < size) {
      if (engine.tokens[static_cast<std::size_t>(id)] != token.content)
        throw Error("'" + source + "': id " + std::to_string(id) + " is '" + token.content + "', but the " +
                    engine.layout + " layout of '" + engine.source + "' has '" +
                    engine.tokens[static_cast<std::size_t>(id)] + "' there");
      bool known = false;
      for (AddedToken& t : added) {
        if (t.id != id) continue;
        t.lstrip = token.lstrip;  // the file's flags for the layout's token
        t.rstrip = token.rstrip;
        t.single_word = token.single_word;
        known = true;
      }
      if (!known && token.special) added.push_back(token);
      continue;
    }
    if (id != size || id > tokjson::kMaxTokenId)
      throw Error("'" + source + "': token '" + token.content + "' has id " + std::to_string(id) + "; the next free id of '" +
                  engine.source + "' is " + std::to_string(size));
    engine.tokens.push_back(token.content);
    added.push_back(token);
  }
  engine.added.build(std::move(added));
}

}  // namespace

bool spm_read_folder(const std::string& prefix, tokjson::FileMap& files, std::string& model_type) {
  std::string not_a_file;  // the first model name taken by something else
  for (const char* model : kSpmModelFiles) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(prefix + model, error)) {
      const std::string what = tokjson::describe_non_file(prefix + model);
      if (not_a_file.empty() && !what.empty())
        not_a_file = "'" + prefix + model + "' is " + what + ", not a SentencePiece model file";
      continue;
    }
    for (const char* file : {model, "added_tokens.json"})
      if (std::optional<std::string> text = tokjson::read_optional(prefix + file)) files[file] = std::move(*text);
    if (const std::optional<std::string> config = tokjson::read_optional(prefix + "config.json")) {
      const json parsed = tokjson::parse_object(*config, prefix + "config.json");
      if (parsed.contains("model_type") && parsed["model_type"].is_string())
        model_type = parsed["model_type"].get<std::string>();
    }
    return true;
  }
  if (!not_a_file.empty()) throw Error(not_a_file);
  return false;
}

namespace {

// DebertaV2Converter's layout of `spec` into `engine`, its special tokens
// appended to `added`; returns the tokenizer class.
std::string spm_deberta_layout(Tokenizer::Spm* engine, const spm::ModelSpec& spec, const tokjson::Configs& configs,
                               const std::string& name, std::vector<AddedToken>& added) {
  std::string tokenizer_class;
  const auto count = static_cast<int32_t>(spec.pieces.size());
  auto piece_id = [&](const std::string& text) {
    for (int32_t i = 0; i < count; ++i)
      if (spec.pieces[static_cast<std::size_t>(i)].text == text) return i;
    return -1;
  };
  // DebertaV2Converter: the pieces as they are, [MASK] after them when the
  // model lacks it; Lowercase, Strip, Precompiled; [CLS] A [SEP] B:1 [SEP]:1.
  tokenizer_class = "DebertaV2Tokenizer";
  engine->layout = "deberta-v2";
  engine->spm_to_id.resize(static_cast<std::size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    engine->spm_to_id[static_cast<std::size_t>(i)] = i;
    engine->tokens.push_back(spec.pieces[static_cast<std::size_t>(i)].text);
  }
  auto special = [&](const char* key, const char* fallback, bool required) {
    std::string token = configs.special_token(key);
    if (token.empty()) token = fallback;
    int32_t id = piece_id(token);
    if (id < 0 && !required) {
      id = static_cast<int32_t>(engine->tokens.size());
      engine->tokens.push_back(token);
    }
    if (id < 0)
      throw Error("'" + name + "' has no piece '" + token + "' (" + key +
                  "); a DeBERTa-v2 SentencePiece model has [CLS], [SEP], [PAD] and [UNK]");
    added.push_back(spm_special(token, id));
    return id;
  };
  engine->cls_id = special("cls_token", "[CLS]", true);
  engine->sep_id = special("sep_token", "[SEP]", true);
  engine->pad_id = special("pad_token", "[PAD]", true);
  engine->unk_id = special("unk_token", "[UNK]", true);
  engine->mask_id = special("mask_token", "[MASK]", false);
  if (engine->unk_id != spec.unk_id)
    throw Error("'" + name + "': trainer_spec.unk_id " + std::to_string(spec.unk_id) + " is not the unk_token '" +
                engine->tokens[static_cast<std::size_t>(engine->unk_id)] + "'");
  engine->lowercase = configs.has_config && tokjson::get_bool(configs.config, "do_lower_case", false, configs.config_name);
  engine->split_by_punct =
      configs.has_config && tokjson::get_bool(configs.config, "split_by_punct", false, configs.config_name);
  engine->strip_left = true;
  engine->post.single = {{-1, {engine->cls_id}, 0}, {0, {}, 0}, {-1, {engine->sep_id}, 0}};
  engine->post.pair = {{-1, {engine->cls_id}, 0}, {0, {}, 0}, {-1, {engine->sep_id}, 0}, {1, {}, 1},
                       {-1, {engine->sep_id}, 1}};
  return tokenizer_class;
}

// XLMRobertaConverter's or CamembertConverter's layout of `spec` into
// `engine`, its special tokens appended to `added`; returns the tokenizer class.
std::string spm_fairseq_layout(Tokenizer::Spm* engine, const spm::ModelSpec& spec, SpmLayout layout,
                               const std::string& name, std::vector<AddedToken>& added) {
  std::string tokenizer_class;
  const auto count = static_cast<int32_t>(spec.pieces.size());
  // XLMRobertaConverter / CamembertConverter: fairseq's ids. XLM-R: <s>
  // <pad> </s> <unk>, then pieces 3.. (each one id up), <mask> last.
  // CamemBERT: <s>NOTUSED <pad> </s>NOTUSED <unk> <unk>NOTUSED, then pieces
  // 1.. (four ids up, so <s> and </s> are 5 and 6), <mask> last.
  const bool xlmr = layout == SpmLayout::kXlmRoberta;
  tokenizer_class = xlmr ? "XLMRobertaTokenizer" : "CamembertTokenizer";
  engine->layout = xlmr ? "xlm-roberta" : "camembert";
  const char* what = xlmr ? "XLM-R" : "CamemBERT";
  if (spec.unk_id != 0 || count < 3 || spec.pieces[1].text != "<s>" || spec.pieces[2].text != "</s>")
    throw Error("'" + name + "': pieces 0, 1, 2 must be <unk>, <s>, </s> for the " + std::string(what) +
                " layout (trainer_spec.unk_id 0, bos_id 1, eos_id 2, as spm_train writes them)");
  const int32_t offset = xlmr ? 1 : 4;
  engine->tokens = xlmr ? std::vector<std::string>{"<s>", "<pad>", "</s>", "<unk>"}
                        : std::vector<std::string>{"<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED"};
  const int32_t first_piece = xlmr ? 3 : 1;
  for (int32_t i = first_piece; i < count; ++i) engine->tokens.push_back(spec.pieces[static_cast<std::size_t>(i)].text);
  engine->spm_to_id.resize(static_cast<std::size_t>(count));
  for (int32_t i = 0; i < count; ++i) engine->spm_to_id[static_cast<std::size_t>(i)] = i + offset;
  engine->spm_to_id[0] = 3;  // SentencePiece's unknown is fairseq's <unk>
  if (xlmr) {
    engine->spm_to_id[1] = 0;
    engine->spm_to_id[2] = 2;
  }
  engine->tokens.push_back("<mask>");
  engine->cls_id = xlmr ? 0 : 1 + offset;
  engine->sep_id = xlmr ? 2 : 2 + offset;
  engine->pad_id = 1;
  engine->unk_id = 3;
  engine->mask_id = static_cast<int32_t>(engine->tokens.size()) - 1;
  for (int32_t id = 0; id < (xlmr ? 4 : 5); ++id) added.push_back(spm_special(engine->tokens[static_cast<std::size_t>(id)], id));
  if (!xlmr) {
    added.push_back(spm_special("<s>", engine->cls_id));
    added.push_back(spm_special("</s>", engine->sep_id));
  }
  added.push_back(spm_special("<mask>", engine->mask_id, true));  // <mask> takes the space before it
  engine->strip_left = false;  // the converter strips right only
  engine->post.single = {{-1, {engine->cls_id}, 0}, {0, {}, 0}, {-1, {engine->sep_id}, 0}};
  engine->post.pair = {{-1, {engine->cls_id}, 0}, {0, {}, 0}, {-1, {engine->sep_id, engine->sep_id}, 0},
                       {1, {}, 0}, {-1, {engine->sep_id}, 0}};
  return tokenizer_class;
}

}  // namespace

std::shared_ptr<Tokenizer::Spm> spm_from_model_file(const tokjson::FileMap& files, const tokjson::Where& where,
                                                    const std::string& model_file, const std::string& model_type,
                                                    std::string* tokenizer_class) {
  const std::string name = where(model_file);
  const std::string& bytes = files.at(model_file);
  const spm::ModelSpec spec = spm::parse_model(bytes, name);
  const tokjson::Configs configs = tokjson::read_configs(files, where);
  const SpmLayout layout = spm_layout(configs, model_type, model_file, name);
  auto engine = std::make_shared<Tokenizer::Spm>();
  engine->source = name;
  engine->load(bytes, name);
  spm_set_chunks(*engine, spec);
  std::vector<AddedToken> added;
  *tokenizer_class = layout == SpmLayout::kDeberta ? spm_deberta_layout(engine.get(), spec, configs, name, added)
                                                   : spm_fairseq_layout(engine.get(), spec, layout, name, added);
  engine->added.build(added);
  spm_check_added(*engine, files, configs, where);
  spm_index_tokens(*engine, spec);
  return engine;
}

namespace {

// The normalizer steps of a Unigram tokenizer.json (SpmConverter's).
struct UnigramNormalizer {
  std::string charsmap;
  bool collapse_spaces = false;
  bool strip = false;
  bool strip_left = false;
  bool lowercase = false;
};

void read_unigram_normalizer(const json& step, const std::string& name, UnigramNormalizer& out) {
  if (step.is_null()) return;
  const std::string type = tokjson::type_of(step, name, "normalizer");
  if (type == "Sequence") {
    const json& steps = tokjson::field(step, "normalizers", name, "normalizer Sequence");
    if (!steps.is_array()) throw Error("'" + name + "': normalizer.normalizers must be a list");
    for (const json& inner : steps) read_unigram_normalizer(inner, name, out);
  } else if (type == "Precompiled") {
    const json charsmap = step.value("precompiled_charsmap", json());
    if (charsmap.is_null()) return;
    if (!charsmap.is_string()) throw Error("'" + name + "': normalizer Precompiled.precompiled_charsmap must be base64 text");
    out.charsmap = tokjson::base64_decode(charsmap.get<std::string>(), name, "normalizer Precompiled.precompiled_charsmap");
  } else if (type == "Replace") {
    // SpmConverter: " {2,}" -> " " or "▁" (runs of spaces to one), or " " -> "▁".
    const json pattern = step.value("pattern", json());
    const json content = step.value("content", json());
    const bool runs = pattern.is_object() && pattern.value("Regex", json()) == " {2,}";
    const bool single = pattern.is_object() && pattern.value("String", json()) == " ";
    if (!(runs || single) || !(content == " " || content == "\xE2\x96\x81"))
      throw Error("'" + name + "': normalizer Replace " + pattern.dump() + " -> " + content.dump() +
                  " is not supported (a Unigram model reads SentencePiece's: \" {2,}\" or \" \" to \" \" or \"\xE2\x96\x81\")");
    out.collapse_spaces = out.collapse_spaces || runs;
  } else if (type == "Strip") {
    out.strip = true;
    out.strip_left = tokjson::get_bool(step, "left", true, name);
  } else if (type == "Lowercase") {
    out.lowercase = true;
  } else {
    throw Error("'" + name + "': normalizer type '" + type +
                "' is not supported with a Unigram model (Precompiled, Replace, Strip, Lowercase, Sequence)");
  }
}

struct UnigramPreTokenizer {
  bool metaspace = false;
  bool prepend = true;
  bool split_by_punct = false;
};

void read_unigram_pre_tokenizer(const json& step, const std::string& name, UnigramPreTokenizer& out) {
  const std::string type = step.is_null() ? "null" : tokjson::type_of(step, name, "pre_tokenizer");
  if (type == "Sequence") {
    const json& steps = tokjson::field(step, "pretokenizers", name, "pre_tokenizer Sequence");
    if (!steps.is_array()) throw Error("'" + name + "': pre_tokenizer.pretokenizers must be a list");
    for (const json& inner : steps) read_unigram_pre_tokenizer(inner, name, out);
  } else if (type == "Metaspace") {
    const MetaspaceSpec metaspace = tokjson::read_metaspace(step, name);
    if (metaspace.replacement != "\xE2\x96\x81")
      throw Error("'" + name + "': pre_tokenizer Metaspace replacement \"" + metaspace.replacement +
                  "\" is not supported (SentencePiece's is \"\xE2\x96\x81\")");
    if (metaspace.prepend == MetaspaceSpec::Prepend::kFirst)
      throw Error("'" + name + "': pre_tokenizer Metaspace prepend_scheme \"first\" is not supported with a Unigram "
                  "model (\"always\" and \"never\" are)");
    // split is read but not used: SentencePiece splits at the spaces either way.
    out.metaspace = true;
    out.prepend = metaspace.prepend == MetaspaceSpec::Prepend::kAlways;
  } else if (type == "Punctuation") {
    if (step.value("behavior", json("isolated")) != "isolated")
      throw Error("'" + name + "': pre_tokenizer Punctuation behavior " + step["behavior"].dump() +
                  " is not supported (\"isolated\", DeBERTa's split_by_punct)");
    out.split_by_punct = true;
  } else if (type != "WhitespaceSplit") {
    throw Error("'" + name + "': a Unigram model needs the Metaspace pre_tokenizer (SentencePiece), not '" + type + "'");
  }
}

}  // namespace

std::shared_ptr<Tokenizer::Spm> spm_from_tokenizer_json(const json& root, const tokjson::FileMap& files,
                                                        const tokjson::Where& where) {
  const std::string name = where("tokenizer.json");
  const tokjson::Configs configs = tokjson::read_configs(files, where);
  const json& model = root["model"];
  const json& vocab = tokjson::field(model, "vocab", name, "the Unigram vocabulary");
  if (!vocab.is_array() || vocab.empty()) throw Error("'" + name + "': model.vocab must be a non-empty list of [piece, score]");
  if (vocab.size() > static_cast<std::size_t>(tokjson::kMaxTokenId) + 1)
    throw Error("'" + name + "': model.vocab has more than " + std::to_string(tokjson::kMaxTokenId + 1) + " pieces");
  const json unk = model.value("unk_id", json());
  if (unk.is_null())
    throw Error("'" + name + "': model.unk_id is null; shardtrain reads Unigram models with an unknown token");
  if (!unk.is_number_integer() || unk.get<int64_t>() < 0 || unk.get<int64_t>() >= static_cast<int64_t>(vocab.size()))
    throw Error("'" + name + "': model.unk_id " + unk.dump() + " is not an id of model.vocab");
  const bool byte_fallback = tokjson::get_bool(model, "byte_fallback", false, name);

  auto engine = std::make_shared<Tokenizer::Spm>();
  engine->source = name;
  engine->layout = "tokenizer.json";
  const std::vector<AddedToken> added = tokjson::read_added_tokens(root, name);

  spm::ModelSpec spec;
  spec.model_type = spm::ModelType::kUnigram;
  spec.byte_fallback = byte_fallback;
  spec.unk_id = static_cast<int32_t>(unk.get<int64_t>());
  spec.bos_id = spec.eos_id = spec.pad_id = -1;
  spec.pieces.reserve(vocab.size());
  for (std::size_t i = 0; i < vocab.size(); ++i) {
    const json& entry = vocab[i];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
      throw Error("'" + name + "': model.vocab[" + std::to_string(i) + "] must be [piece, score]");
    spm::Piece piece;
    piece.text = entry[0].get<std::string>();
    piece.score = entry[1].get<float>();
    if (piece.text.empty()) throw Error("'" + name + "': model.vocab[" + std::to_string(i) + "] is an empty piece");
    const bool is_byte = piece.text.size() == 6 && piece.text.compare(0, 3, "<0x") == 0 && piece.text[5] == '>';
    if (static_cast<int64_t>(i) == spec.unk_id) {
      piece.type = spm::PieceType::kUnknown;
    } else if (byte_fallback && is_byte) {
      piece.type = spm::PieceType::kByte;
    }
    spec.pieces.push_back(std::move(piece));
  }
  for (const AddedToken& t : added) {
    // Special added tokens are cut out before SentencePiece: never a piece of text.
    if (t.special && static_cast<std::size_t>(t.id) < spec.pieces.size() && t.id != spec.unk_id)
      spec.pieces[static_cast<std::size_t>(t.id)].type = spm::PieceType::kControl;
  }
  UnigramNormalizer normalizer;
  read_unigram_normalizer(root.value("normalizer", json()), name, normalizer);
  UnigramPreTokenizer pre;
  read_unigram_pre_tokenizer(root.value("pre_tokenizer", json()), name, pre);
  if (!pre.metaspace)
    throw Error("'" + name + "': a Unigram model needs the Metaspace pre_tokenizer (SentencePiece's spaces)");
  spec.normalizer_name = normalizer.charsmap.empty() ? "identity" : "tokenizer.json";
  spec.precompiled_charsmap = normalizer.charsmap;
  spec.add_dummy_prefix = pre.prepend;
  // HF's Strip and Replace(" {2,}") are what SentencePiece's
  // remove_extra_whitespaces does (docs/DESIGN.md "SentencePiece").
  spec.remove_extra_whitespaces = normalizer.collapse_spaces || normalizer.strip;
  spec.escape_whitespaces = true;
  const std::string bytes = spm::write_model(spec);
  spm::parse_model(bytes, name);  // the checks a model file gets (one UNKNOWN, byte pieces, ...)
  engine->load(bytes, name);
  spm_set_chunks(*engine, spec);
  engine->lowercase = normalizer.lowercase;
  engine->strip_left = normalizer.strip && normalizer.strip_left;
  engine->split_by_punct = pre.split_by_punct;

  int32_t largest = static_cast<int32_t>(vocab.size()) - 1;
  for (const AddedToken& t : added) largest = std::max(largest, t.id);
  engine->tokens.assign(static_cast<std::size_t>(largest) + 1, std::string());
  for (std::size_t i = 0; i < spec.pieces.size(); ++i) engine->tokens[i] = spec.pieces[i].text;
  for (const AddedToken& t : added) engine->tokens[static_cast<std::size_t>(t.id)] = t.content;
  engine->spm_to_id.resize(spec.pieces.size());
  for (std::size_t i = 0; i < spec.pieces.size(); ++i) engine->spm_to_id[i] = static_cast<int32_t>(i);
  engine->added.build(added);
  spm_index_tokens(*engine, spec);

  tokjson::read_post_processor(root.value("post_processor", json()), name, engine->post);
  std::vector<bool> has_token(engine->tokens.size(), false);
  for (std::size_t i = 0; i < spec.pieces.size(); ++i) has_token[i] = true;
  for (const AddedToken& t : added) has_token[static_cast<std::size_t>(t.id)] = true;
  tokjson::check_template_ids(engine->post, has_token, name);
  engine->post.trim_offsets = false;  // ByteLevel trimming has nothing to trim in "▁" tokens
  tokjson::resolve_specials(*engine, engine->token_ids, configs, name, engine->tokens[static_cast<std::size_t>(spec.unk_id)]);
  return engine;
}

}  // namespace shardtrain
