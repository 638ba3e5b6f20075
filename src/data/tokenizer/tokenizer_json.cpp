#include "data/tokenizer/tokenizer_json.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shardtrain/core/json_read.h"
#include "shardtrain/core/check.h"
#include "shardtrain/core/text.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/unicode_text.h"

namespace shardtrain::tokjson {


std::string describe_non_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status link = fs::symlink_status(path, error);
  if (error || link.type() == fs::file_type::not_found) return "";
  const fs::file_status target = fs::status(path, error);
  if (link.type() == fs::file_type::symlink && error) {
    if (error.value() == ELOOP) return "a symbolic link loop (too many levels of symbolic links)";
    if (target.type() == fs::file_type::not_found)
      return "a symbolic link to '" + fs::read_symlink(path, error).string() + "', which does not exist";
  }
  if (error) return "unreadable (" + error.message() + ")";
  switch (target.type()) {
    case fs::file_type::regular: return "";
    case fs::file_type::directory: return "a folder";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::block: return "a block device";
    case fs::file_type::character: return "a character device";
    default: return "not a regular file";
  }
}

std::optional<std::string> read_optional(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return std::nullopt;
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error("cannot open '" + path + "'");
  std::stringstream buffer;
  buffer << file.rdbuf();
  if (file.bad()) throw Error("cannot read '" + path + "'");
  return buffer.str();
}

json parse_object(const std::string& text, const std::string& name) {
  // Bounded nesting, duplicate keys refused, clipped messages (core/json_read.h).
  const json value = parse_user_json(text, "cannot parse '" + name + "' as JSON");
  if (!value.is_object()) throw Error("'" + name + "' must hold a JSON object");
  return value;
}

bool get_bool(const json& object, const char* key, bool fallback, const std::string& name) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw Error("'" + name + "': key '" + key + "' must be true or false");
  return it->get<bool>();
}

// A special token name in tokenizer_config.json / special_tokens_map.json: a
// string, or {"content": ...}; empty when absent.
std::string special_name(const json& config, const char* key, const std::string& name) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw Error("'" + name + "': key '" + key + "' must be a string or an object with a string \"content\"");
}

std::string Configs::special_token(const char* key) const {
  std::string value = special_name(config, key, config_name);
  return value.empty() ? special_name(special, key, special_file) : value;
}

int64_t Configs::model_max_length() const {
  const auto it = config.find("model_max_length");
  if (it == config.end() || it->is_null()) return 0;
  if (!it->is_number() || it->get<double>() < 1)
    throw Error("'" + config_name + "': model_max_length must be a positive number");
  const double value = it->get<double>();
  return value >= 1e18 ? 0 : static_cast<int64_t>(value);  // HF's 1e30 "no limit" sentinel
}

Configs read_configs(const FileMap& files, const Where& where) {
  Configs c;
  c.config_name = where("tokenizer_config.json");
  c.special_file = where("special_tokens_map.json");
  if (const auto it = files.find("tokenizer_config.json"); it != files.end()) {
    c.config = parse_object(it->second, c.config_name);
    c.has_config = true;
  }
  if (const auto it = files.find("special_tokens_map.json"); it != files.end())
    c.special = parse_object(it->second, c.special_file);
  return c;
}

const json& field(const json& object, const char* key, const std::string& name, const char* what) {
  const auto it = object.find(key);
  if (it == object.end()) throw Error("'" + name + "' has no field '" + key + "' (" + what + ")");
  return *it;
}

std::string type_of(const json& object, const std::string& name, const std::string& field) {
  if (!object.is_object() || !object.contains("type") || !object["type"].is_string())
    throw Error("'" + name + "': field '" + field + "' needs a string \"type\"");
  return object["type"].get<std::string>();
}

int32_t lookup(const std::unordered_map<std::string, int32_t>& ids, const std::string& token) {
  const auto it = ids.find(token);
  return it == ids.end() ? -1 : it->second;
}

std::vector<AddedToken> read_added_tokens(const json& root, const std::string& name) {
  std::vector<AddedToken> tokens;
  if (!root.contains("added_tokens")) return tokens;
  const json& added = root["added_tokens"];
  if (!added.is_array()) throw Error("'" + name + "': added_tokens must be a list");
  for (const json& entry : added) {
    if (!entry.is_object() || !entry.contains("id") || !entry.contains("content") || !entry["content"].is_string())
      throw Error("'" + name + "': each added_tokens entry needs an integer \"id\" and a string \"content\"");
    AddedToken t;
    t.content = entry["content"].get<std::string>();
    t.id = token_id_value(entry["id"], name, "added token '" + t.content + "'");
    t.special = get_bool(entry, "special", false, name);
    t.single_word = get_bool(entry, "single_word", false, name);
    t.lstrip = get_bool(entry, "lstrip", false, name);
    t.rstrip = get_bool(entry, "rstrip", false, name);
    t.normalized = get_bool(entry, "normalized", !t.special, name);
    tokens.push_back(std::move(t));
  }
  return tokens;
}

namespace {

// One template ("single" or "pair", `key`) of a TemplateProcessing
// post-processor; `specials` is its special_tokens.
std::vector<TemplatePiece> read_template(const json& processor, const json& specials, const char* key,
                                         const std::string& name) {
  std::vector<TemplatePiece> pieces;
  const json& list = field(processor, key, name, "TemplateProcessing");
  if (!list.is_array()) throw Error("'" + name + "': post_processor." + key + " must be a list");
  for (const json& item : list) {
    TemplatePiece piece;
    const bool is_special = item.contains("SpecialToken");
    const json& body = is_special ? item["SpecialToken"] : item.contains("Sequence") ? item["Sequence"] : json();
    if (!body.is_object() || !body.contains("id") || !body["id"].is_string())
      throw Error("'" + name + "': post_processor." + key + " items must be {\"SpecialToken\": {\"id\": ...}} "
                  "or {\"Sequence\": {\"id\": \"A\" or \"B\"}}");
    const std::string id = body["id"].get<std::string>();
    // Token types 0 and 1: what a sentence pair needs, and all that the
    // encoders' type embeddings hold (type_vocab_size <= 2).
    const json type_id = body.value("type_id", json(0));
    if (!type_id.is_number_integer() || type_id.get<int64_t>() < 0 || type_id.get<int64_t>() > 1)
      throw Error("'" + name + "': post_processor." + key + " item '" + id + "' has type_id " +
                  type_id.dump() + "; token types are 0 or 1");
    piece.type_id = static_cast<uint8_t>(type_id.get<int64_t>());
    if (is_special) {
      if (!specials.is_object() || !specials.contains(id) || !specials[id].is_object() ||
          !specials[id].contains("ids") || !specials[id]["ids"].is_array())
        throw Error("'" + name + "': post_processor special token '" + id + "' is not in its special_tokens");
      for (const json& value : specials[id]["ids"])
        piece.ids.push_back(token_id_value(value, name, "post_processor special token '" + id + "'s id"));
    } else if (id == "A" || id == "B") {
      piece.sequence = id == "A" ? 0 : 1;
    } else {
      throw Error("'" + name + "': post_processor sequence id '" + id + "' must be A or B");
    }
    pieces.push_back(std::move(piece));
  }
  // encode() fits A (and B) into max_length once each: a text repeated
  // would pass it. Single: A once, no B; pair: A once and B once.
  const bool pair = std::string(key) == "pair";
  for (const int sequence : {0, 1}) {
    const auto uses = std::count_if(pieces.begin(), pieces.end(),
                                    [&](const TemplatePiece& p) { return p.sequence == sequence; });
    const auto wanted = sequence == 0 || pair ? 1 : 0;
    if (uses != wanted)
      throw Error("'" + name + "': post_processor." + key + " names sequence " + (sequence == 0 ? "A" : "B") + " " +
                  std::to_string(uses) + " times; the " + key + " template takes " +
                  (pair ? "A once and B once" : "A once and no B"));
  }
  return pieces;
}

}  // namespace

// Post-processor -> templates; the names of the [CLS]-like and [SEP]-like tokens.
void read_post_processor(const json& processor, const std::string& name, Tokenizer::Template& post) {
  if (processor.is_null()) {
    post.single = {{0, {}, 0}};
    post.pair = {{0, {}, 0}, {1, {}, 1}};  // HF: no processor concatenates, B with type id 1
    return;
  }
  // RobertaProcessing and ByteLevel trim offsets (both default to
  // trim_offsets = add_prefix_space = true in HF).
  auto read_trimming = [&] {
    post.trim_offsets = get_bool(processor, "trim_offsets", true, name);
    post.trim_add_prefix_space = get_bool(processor, "add_prefix_space", true, name);
  };
  const std::string type = type_of(processor, name, "post_processor");
  auto token_id = [&](const json& pair, const char* key) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_number_integer())
      throw Error("'" + name + "': post_processor." + key + " must be [\"token\", id]");
    return token_id_value(pair[1], name, std::string("post_processor.") + key + "'s id");
  };
  if (type == "Sequence") {
    const json* chosen = nullptr;
    const json* byte_level = nullptr;
    for (const json& step : field(processor, "processors", name, "post_processor Sequence")) {
      if (type_of(step, name, "post_processor.processors") == "ByteLevel") {  // offsets only
        byte_level = &step;
        continue;
      }
      if (chosen != nullptr) throw Error("'" + name + "': post_processor Sequence with two templates");
      chosen = &step;
    }
    read_post_processor(chosen ? *chosen : json(), name, post);
    if (byte_level != nullptr && !post.trim_offsets) {
      post.trim_offsets = get_bool(*byte_level, "trim_offsets", true, name);
      post.trim_add_prefix_space = get_bool(*byte_level, "add_prefix_space", true, name);
    }
  } else if (type == "ByteLevel") {
    read_post_processor(json(), name, post);
    read_trimming();
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    const int32_t cls = token_id(field(processor, "cls", name, "post_processor"), "cls");
    const int32_t sep = token_id(field(processor, "sep", name, "post_processor"), "sep");
    if (type == "RobertaProcessing") {  // <s> A </s></s> B </s>, type ids all 0
      post.single = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}};
      post.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep, sep}, 0}, {1, {}, 0}, {-1, {sep}, 0}};
      read_trimming();
    } else {  // [CLS] A [SEP] B [SEP], B and its [SEP] type 1
      post.single = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}};
      post.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}, {1, {}, 1}, {-1, {sep}, 1}};
    }
  } else if (type == "TemplateProcessing") {
    const json& specials = field(processor, "special_tokens", name, "TemplateProcessing");
    post.single = read_template(processor, specials, "single", name);
    post.pair = read_template(processor, specials, "pair", name);
  } else {
    throw Error("'" + name + "': post_processor type '" + type +
                "' is not supported (RobertaProcessing, BertProcessing, TemplateProcessing, ByteLevel, Sequence)");
  }
}

void check_template_ids(const Tokenizer::Template& post, const std::vector<bool>& has_token, const std::string& name) {
  for (const auto* pieces : {&post.single, &post.pair}) {
    for (const TemplatePiece& piece : *pieces) {
      for (const int32_t id : piece.ids) {
        if (static_cast<std::size_t>(id) >= has_token.size())
          throw Error("'" + name + "': post_processor names token id " + std::to_string(id) +
                      ", beyond the vocabulary's " + std::to_string(has_token.size()) + " ids");
        if (!has_token[static_cast<std::size_t>(id)])
          throw Error("'" + name + "': post_processor names token id " + std::to_string(id) +
                      ", which no token of the vocabulary or added_tokens has");
      }
    }
  }
}

void read_normalizer(const json& normalizer, const std::string& name, std::vector<BpeNormalizerStep>& out) {
  if (normalizer.is_null()) return;
  const std::string type = type_of(normalizer, name, "normalizer");
  auto step = [&](BpeNormalizerStep::Kind kind) { out.push_back(BpeNormalizerStep{kind, {}, {}}); };
  if (type == "Sequence") {
    const json& steps = field(normalizer, "normalizers", name, "normalizer Sequence");
    if (!steps.is_array()) throw Error("'" + name + "': normalizer.normalizers must be a list");
    for (const json& inner : steps) read_normalizer(inner, name, out);
  } else if (type == "NFC") {
    step(BpeNormalizerStep::kNfc);
  } else if (type == "NFD") {
    step(BpeNormalizerStep::kNfd);
  } else if (type == "NFKC") {
    step(BpeNormalizerStep::kNfkc);
  } else if (type == "NFKD") {
    step(BpeNormalizerStep::kNfkd);
  } else if (type == "Lowercase") {
    step(BpeNormalizerStep::kLowercase);
  } else if (type == "Replace") {  // Gemma, mmBERT, Llama-2: " " -> "▁"
    const json& pattern = field(normalizer, "pattern", name, "normalizer Replace");
    const json& content = field(normalizer, "content", name, "normalizer Replace");
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
        pattern["String"].get<std::string>().empty())
      throw Error("'" + name + "': normalizer Replace pattern " + clip_for_message(pattern.dump(), 80) +
                  " is not supported with a BPE model (a non-empty {\"String\": ...} is; a Regex pattern is not)");
    if (!content.is_string()) throw Error("'" + name + "': normalizer Replace content must be a string");
    out.push_back(BpeNormalizerStep{BpeNormalizerStep::kReplace, pattern["String"].get<std::string>(),
                                    content.get<std::string>()});
  } else if (type == "Prepend") {  // Llama-2: "▁" before the text
    const json& prepend = field(normalizer, "prepend", name, "normalizer Prepend");
    if (!prepend.is_string()) throw Error("'" + name + "': normalizer Prepend prepend must be a string");
    out.push_back(BpeNormalizerStep{BpeNormalizerStep::kPrepend, {}, prepend.get<std::string>()});
  } else {
    throw Error("'" + name + "': normalizer type '" + type +
                "' is not supported with a BPE model (NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Sequence)");
  }
}

MetaspaceSpec read_metaspace(const json& step, const std::string& name) {
  MetaspaceSpec spec;
  if (step.contains("replacement")) {
    const json& replacement = step["replacement"];
    const std::string text = replacement.is_string() ? replacement.get<std::string>() : std::string();
    if (text.empty() || static_cast<std::size_t>(unicode::utf8_length(static_cast<unsigned char>(text[0]))) != text.size())
      throw Error("'" + name + "': pre_tokenizer Metaspace replacement must be one character, not " +
                  clip_for_message(replacement.dump(), 40));
    spec.replacement = text;
  }
  // Both schemas: add_prefix_space (tokenizers < 0.19) or prepend_scheme (+ split).
  const bool add_prefix_space = get_bool(step, "add_prefix_space", true, name);
  spec.prepend = add_prefix_space ? MetaspaceSpec::Prepend::kAlways : MetaspaceSpec::Prepend::kNever;
  if (step.contains("prepend_scheme") && !step["prepend_scheme"].is_null()) {
    const json& scheme = step["prepend_scheme"];
    if (scheme != "always" && scheme != "never" && scheme != "first")
      throw Error("'" + name + "': pre_tokenizer Metaspace prepend_scheme must be \"always\", \"first\" or \"never\", "
                  "not " + clip_for_message(scheme.dump(), 40));
    if (!add_prefix_space && scheme != "never")
      throw Error("'" + name + "': pre_tokenizer Metaspace add_prefix_space false contradicts prepend_scheme " +
                  scheme.dump());
    spec.prepend = scheme == "always" ? MetaspaceSpec::Prepend::kAlways
                   : scheme == "first" ? MetaspaceSpec::Prepend::kFirst
                                       : MetaspaceSpec::Prepend::kNever;
  }
  spec.split = get_bool(step, "split", true, name);
  return spec;
}

// Llama-3's (EuroBERT's) Split: its regex, Isolated, not inverted.
bool is_llama3_split(const json& step, const std::string& name) {
  if (!step.is_object() || type_of(step, name, "pre_tokenizer") != "Split") return false;
  const json& pattern = field(step, "pattern", name, "pre_tokenizer Split");
  const bool regex = pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string();
  if (!regex || pattern["Regex"].get<std::string>() != byte_level::kLlama3SplitPattern ||
      !step.contains("behavior") || step["behavior"] != "Isolated" || get_bool(step, "invert", false, name))
    throw Error("'" + name + "': a Split pre_tokenizer is read only with Llama-3's regex, behavior Isolated, not "
                "inverted (Llama-3, EuroBERT); this one has pattern " + clip_for_message(pattern.dump(), 120) +
                ", behavior " + clip_for_message(step.value("behavior", json()).dump(), 40));
  return true;
}

void read_pre_tokenizer(const json& pre, const std::string& name, Tokenizer::Bpe& bpe) {
  const std::string type = pre.is_null() ? "null" : type_of(pre, name, "pre_tokenizer");
  if (type == "null" || type == "Metaspace") {  // SentencePiece-style BPE (Gemma, mmBERT, Llama-2)
    bpe.byte_level = false;
    if (type == "Metaspace") bpe.metaspace = read_metaspace(pre, name);
    return;
  }
  if (type == "Sequence") {
    const json& steps = field(pre, "pretokenizers", name, "pre_tokenizer Sequence");
    if (steps.is_array() && steps.size() == 1) return read_pre_tokenizer(steps[0], name, bpe);
    // Split (Llama-3's regex), then ByteLevel without its own regex.
    if (steps.is_array() && steps.size() == 2 && is_llama3_split(steps[0], name)) {
      read_pre_tokenizer(steps[1], name, bpe);
      if (!bpe.byte_level || bpe.use_regex || bpe.add_prefix_space)
        throw Error("'" + name + "': after Llama-3's Split, the ByteLevel pre_tokenizer must have use_regex false "
                    "and add_prefix_space false (as Llama-3's and EuroBERT's files do)");
      bpe.llama3_split = true;
      return;
    }
  }
  if (type != "ByteLevel")
    throw Error("'" + name + "': pre_tokenizer '" + type + "' is not supported with a BPE model (ByteLevel, "
                "Llama-3's Split then ByteLevel, Metaspace, or none; shardtrain reads byte-level BPE (GPT-2, "
                "RoBERTa, ModernBERT, Llama-3) and SentencePiece-style BPE (Gemma, mmBERT, Llama-2))");
  bpe.add_prefix_space = get_bool(pre, "add_prefix_space", false, name);
  bpe.use_regex = get_bool(pre, "use_regex", true, name);
}

// Special ids every tokenizer needs: pad (for batches), and cls / sep / unk /
// mask where the tokens exist.
void resolve_specials(Tokenizer::Core& core, const std::unordered_map<std::string, int32_t>& token_ids,
                      const Configs& configs, const std::string& name, const std::string& model_unk) {
  auto resolve = [&](const char* key, std::initializer_list<const char*> defaults) {
    const std::string configured = configs.special_token(key);
    if (!configured.empty()) {
      const int32_t id = lookup(token_ids, configured);
      if (id < 0)
        throw Error("'" + configs.config_name + "': " + key + " '" + configured + "' is not a token of '" + name + "'");
      return id;
    }
    for (const char* token : defaults) {
      const int32_t id = lookup(token_ids, token);
      if (id >= 0) return id;
    }
    return -1;
  };
  core.pad_id = resolve("pad_token", {"<pad>", "[PAD]", "<|padding|>"});
  if (core.pad_id < 0)
    throw Error("'" + name + "' has no padding token (none of <pad>, [PAD], <|padding|>); set pad_token in " +
                configs.config_name);
  core.unk_id = model_unk.empty() ? resolve("unk_token", {"<unk>", "[UNK]"}) : lookup(token_ids, model_unk);
  core.mask_id = resolve("mask_token", {"<mask>", "[MASK]"});
  auto first_special = [](const std::vector<TemplatePiece>& t, bool last) {
    int32_t id = -1;
    for (const auto& piece : t) {
      if (piece.sequence >= 0 || piece.ids.empty()) continue;
      if (!last) return piece.ids.front();
      id = piece.ids.back();
    }
    return id;
  };
  core.cls_id = first_special(core.post.single, false);
  core.sep_id = first_special(core.post.single, true);
}

void index_tokens(Tokenizer::Bpe& bpe, const std::vector<std::pair<std::string, int32_t>>& vocab) {
  int32_t largest = -1;
  for (const auto& [token, id] : vocab) largest = std::max(largest, id);
  for (const auto& t : bpe.added) largest = std::max(largest, t.id);
  bpe.tokens.assign(static_cast<std::size_t>(largest + 1), std::string());
  for (const auto& [token, id] : vocab) {
    bpe.tokens[static_cast<std::size_t>(id)] = token;
    bpe.token_ids[token] = id;
  }
  for (const auto& t : bpe.added) {  // HF looks added tokens up first
    bpe.tokens[static_cast<std::size_t>(t.id)] = t.content;
    bpe.token_ids[t.content] = t.id;
  }
}

int32_t token_id_value(const json& value, const std::string& name, const std::string& what) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxTokenId)
    throw Error("'" + name + "': " + what + " must be an integer id from 0 to " + std::to_string(kMaxTokenId) +
                ", not " + value.dump());
  return static_cast<int32_t>(value.get<int64_t>());
}

std::vector<std::pair<std::string, int32_t>> vocab_object(const json& vocab, const std::string& name,
                                                                       const std::string& field) {
  if (!vocab.is_object()) throw Error("'" + name + "': " + field + " must be an object {token: id}");
  std::vector<std::pair<std::string, int32_t>> out;
  out.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    out.emplace_back(it.key(), token_id_value(it.value(), name, field + " entry '" + it.key() + "'"));
  if (out.empty()) throw Error("'" + name + "': " + field + " is empty");
  return out;
}

namespace {
constexpr char kBase64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) group |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) group |= static_cast<unsigned char>(bytes[i + 2]);
    out.push_back(kBase64Alphabet[(group >> 18) & 63]);
    out.push_back(kBase64Alphabet[(group >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kBase64Alphabet[(group >> 6) & 63] : '=');
    out.push_back(i + 2 < bytes.size() ? kBase64Alphabet[group & 63] : '=');
  }
  return out;
}

std::string base64_decode(std::string_view text, const std::string& name, const std::string& field) {
  int8_t value_of[256];
  std::fill(std::begin(value_of), std::end(value_of), static_cast<int8_t>(-1));
  for (int k = 0; k < 64; ++k) value_of[static_cast<unsigned char>(kBase64Alphabet[k])] = static_cast<int8_t>(k);
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) throw Error("'" + name + "': " + field + " is not base64 (its length)");
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t group = 0;
  int bits = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const int8_t value = value_of[static_cast<unsigned char>(text[i])];
    if (value < 0)
      throw Error("'" + name + "': " + field + " is not base64 (character " + std::to_string(i) + ")");
    group = (group << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((group >> bits) & 0xFF));
    }
  }
  return out;
}

}  // namespace shardtrain::tokjson
