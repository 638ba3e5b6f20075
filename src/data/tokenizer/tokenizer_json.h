// Private to the data layer: reading the JSON of a tokenizer folder
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json) for
// tokenizer_files.cpp (include/shardtrain/data/tokenizer.h). Every error
// names the file and the field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer/added_tokens.h"
#include "data/tokenizer/bpe_tokenizer.h"

namespace shardtrain::tokjson {

using json = nlohmann::json;
// File name in the folder -> content.
using FileMap = std::map<std::string, std::string>;

// Names a file of the tokenizer in messages: "dir/tokenizer.json", or
// "ckpt.h5 (attribute tokenizer_files): tokenizer.json".
struct Where {
  std::string folder;  // with a trailing '/', or empty
  std::string saved;   // the checkpoint attribute, or empty
  std::string operator()(const std::string& file) const { return saved.empty() ? folder + file : saved + ": " + file; }
};

// The optional JSON files beside the tokenizer.
struct Configs {
  json config = json::object();   // tokenizer_config.json
  json special = json::object();  // special_tokens_map.json
  std::string config_name, special_file;
  bool has_config = false;
  // tokenizer_config.json's name for `key` (e.g. "pad_token"), else
  // special_tokens_map.json's; empty when neither has it.
  std::string special_token(const char* key) const;
  // model_max_length; 0 when absent or HF's "no limit" sentinel.
  int64_t model_max_length() const;
};

// What is at `path` when it is there but is not a regular file (or a link
// to one): "a folder", "a FIFO (named pipe)", "a symbolic link loop", "a
// symbolic link to 'x', which does not exist", ...; empty for a regular file
// or nothing at all.
std::string describe_non_file(const std::string& path);

std::optional<std::string> read_optional(const std::string& path);
json parse_object(const std::string& text, const std::string& name);
bool get_bool(const json& object, const char* key, bool fallback, const std::string& name);
std::string special_name(const json& config, const char* key, const std::string& name);
Configs read_configs(const FileMap& files, const Where& where);
const json& field(const json& object, const char* key, const std::string& name, const char* what);
std::string type_of(const json& object, const std::string& name, const std::string& field_name);
int32_t lookup(const std::unordered_map<std::string, int32_t>& ids, const std::string& token);
// The largest token id a tokenizer file may use (2^20 - 1, four times the
// largest released vocabularies, about 262k): token ids size the embedding
// matrix and this tokenizer's id table, so a hostile id of 2^31 is refused by
// name instead of allocating gigabytes (2^20 ids: 32 MiB of empty strings).
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 20) - 1;
// {token: id} with ids in [0, kMaxTokenId].
std::vector<std::pair<std::string, int32_t>> vocab_object(const json& vocab, const std::string& name,
                                                          const std::string& field_name);
// An integer id in [0, kMaxTokenId], or an Error naming `what` in `name`.
int32_t token_id_value(const json& value, const std::string& name, const std::string& what);

// tokenizer.json's added_tokens (empty when absent), each entry checked.
std::vector<AddedToken> read_added_tokens(const json& root, const std::string& name);
// The parts of a BPE tokenizer.json (tokenizer.h lists what is supported).
void read_post_processor(const json& processor, const std::string& name, Tokenizer::Template& post);
// Every special id of post.single / post.pair names a token: has_token[id], one
// entry per id of the vocabulary (the id table may have holes); an Error
// naming the post_processor otherwise.
void check_template_ids(const Tokenizer::Template& post, const std::vector<bool>& has_token, const std::string& name);
void read_normalizer(const json& normalizer, const std::string& name, std::vector<BpeNormalizerStep>& out);
void read_pre_tokenizer(const json& pre, const std::string& name, Tokenizer::Bpe& bpe);
// A Metaspace pre-tokenizer's fields, in either schema (add_prefix_space, or
// prepend_scheme and split).
MetaspaceSpec read_metaspace(const json& step, const std::string& name);
// bpe.tokens / token_ids from the model vocabulary and bpe.added.
void index_tokens(Tokenizer::Bpe& bpe, const std::vector<std::pair<std::string, int32_t>>& vocab);
// pad (required), unk, mask from the configs or the usual names; cls / sep
// from the single template.
void resolve_specials(Tokenizer::Core& core, const std::unordered_map<std::string, int32_t>& token_ids,
                      const Configs& configs, const std::string& name, const std::string& model_unk);
// Base64 (RFC 4648, with or without padding): binary files in a checkpoint's
// saved files, the Precompiled charsmap in a tokenizer.json. Decoding names
// `field` in `name` when the text is not base64.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text, const std::string& name, const std::string& field);

}  // namespace shardtrain::tokjson
