// Private to the data layer: Tokenizer::Loader, which builds a Tokenizer from
// a folder's files held in memory (include/shardtrain/data/tokenizer.h says
// what is read). Its members are defined by engine: tokenizer_files.cpp (the
// choice of engine, the saved files, SentencePiece folders), wordpiece_files.cpp
// and bpe_files.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/tokenizer_json.h"
#include "shardtrain/data/tokenizer.h"

namespace shardtrain {

struct Tokenizer::Loader {
  // The engine for `files` (tokenizer.json, vocab.json + merges.txt, vocab.txt
  // or a SentencePiece model, in that order); `dir` names the folder in messages.
  static Tokenizer from_files(const tokjson::FileMap& files, const tokjson::Where& where, const std::string& dir,
                              const std::string& model_type = "");
  // `tokenizer` with its saved files, model_max_length and truncation side.
  // `root`: the parsed tokenizer.json, when the tokenizer came from one.
  static Tokenizer finish(Tokenizer tokenizer, const tokjson::FileMap& files, int64_t model_max_length,
                          const tokjson::Where& where = tokjson::Where{}, const tokjson::json* root = nullptr);
  // AutoTokenizer's truncation_side: tokenizer_config.json's, else
  // tokenizer.json's truncation.direction, else right.
  static bool truncation_left(const tokjson::FileMap& files, const tokjson::Where& where, const tokjson::json* root);
  // Whether a folder file is stored base64-encoded (a SentencePiece ModelProto).
  static bool is_binary_file(const std::string& file);

  // wordpiece_files.cpp
  // vocab.txt (+ tokenizer_config.json): the WordPiece folder rules of from_model_dir.
  static Tokenizer wordpiece_folder(const tokjson::FileMap& files, const tokjson::Where& where,
                                    const std::string& dir);
  // tokenizer.json with a WordPiece model, mapped onto the WordPiece engine:
  // BertNormalizer options, the [CLS] A [SEP] B [SEP] template.
  static Tokenizer wordpiece_from_tokenizer_json(const tokjson::json& root, const tokjson::FileMap& files,
                                                 const tokjson::Where& where);

  // bpe_files.cpp
  // tokenizer.json with a byte-level BPE model.
  static Tokenizer bpe_from_tokenizer_json(const tokjson::json& root, const tokjson::FileMap& files,
                                           const tokjson::Where& where);
  // vocab.json + merges.txt: RoBERTa's tokenizer as the fast converter builds it.
  static Tokenizer bpe_from_vocab_merges(const tokjson::FileMap& files, const tokjson::Where& where);
  // tokenizer_config.json's add_prefix_space and do_lower_case (see tokenizer.h).
  static void apply_configs(Bpe& bpe, const tokjson::Configs& configs);

  // A SentencePiece model file with tokenizer_config.json (spm_files.h).
  static Tokenizer spm_folder(const tokjson::FileMap& files, const tokjson::Where& where, const std::string& model_file,
                              const std::string& model_type);
};

}  // namespace shardtrain
