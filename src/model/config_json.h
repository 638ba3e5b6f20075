// Typed reads of HF config.json keys for encoder_config.cpp and the family
// files (src/model/families/): every accessor names the key and the file in
// its error. Private to the model layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardtrain::detail {

[[noreturn]] void config_key_error(const std::string& source, const std::string& key, const std::string& problem);

// Each returns `fallback` when the key is absent or null.
int64_t read_int(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& source);
double read_double(const nlohmann::json& j, const char* key, double fallback, const std::string& source);
std::string read_string(const nlohmann::json& j, const char* key, const std::string& fallback,
                        const std::string& source);
bool read_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& source);
// id2label {"0": "name", ...}: exactly the ids 0..n-1, once each, string names.
std::vector<std::string> read_id2label(const nlohmann::json& j, const std::string& source);

// Error naming both keys unless config.json's "label2id" is the inverse of
// `id2label` (every name to its id, each label once), as the labels of a
// fine-tuned model must be; transformers keeps both without comparing them.
void check_label2id(const nlohmann::json& j, const std::vector<std::string>& id2label, const std::string& source);

// Checks of one value, as EncoderConfig::validate words them.
void check_positive(const std::string& source, const char* key, int64_t value);          // > 0
void check_probability(const std::string& source, const char* key, double p);             // in [0, 1)
void check_activation(const std::string& source, const char* key, const std::string& name);  // an ACT2FN name

// transformers' [x.strip() for x in text.lower().split("|")] (DeBERTa's
// pos_att_type and norm_rel_ebd).
std::vector<std::string> split_bar_list(const std::string& text);

}  // namespace shardtrain::detail
