// Private to the data layer: building the SentencePiece engine
// (data/spm_tokenizer.h) from a folder's files, for tokenizer_files.cpp
// (include/shardtrain/data/tokenizer.h lists what is read).
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer/spm_tokenizer.h"
#include "data/tokenizer/tokenizer_json.h"

namespace shardtrain {

// The SentencePiece model files a folder may hold, in the order they are looked for.
inline constexpr const char* kSpmModelFiles[] = {"spm.model", "sentencepiece.bpe.model", "spiece.model",
                                                 "sentencepiece.model", "tokenizer.model"};

// `files[model_file]` (a ModelProto) with HF's special-token layout, chosen
// by tokenizer_config.json's tokenizer_class, else `model_type` (config.json's,
// may be empty), else the file's name (spm.model: DeBERTa-v2,
// sentencepiece.bpe.model: XLM-R). `tokenizer_class` gets the class the
// layout stands for (saved with the files, so the copy loads the same way).
std::shared_ptr<Tokenizer::Spm> spm_from_model_file(const tokjson::FileMap& files, const tokjson::Where& where,
                                                    const std::string& model_file, const std::string& model_type,
                                                    std::string* tokenizer_class);

// The SentencePiece model of the folder `prefix` (the first of
// kSpmModelFiles that is a file) with added_tokens.json into `files`, and
// config.json's model_type (AutoTokenizer's fallback when
// tokenizer_config.json names no class) into `model_type`; false when there
// is no model file. When none is a file but one of the names is taken by
// something else (a folder, a FIFO, a symbolic link loop), that is refused,
// naming the path and what it is.
bool spm_read_folder(const std::string& prefix, tokjson::FileMap& files, std::string& model_type);

// A tokenizer.json whose model is Unigram (root parsed; see tokenizer.h).
std::shared_ptr<Tokenizer::Spm> spm_from_tokenizer_json(const tokjson::json& root, const tokjson::FileMap& files,
                                                        const tokjson::Where& where);

}  // namespace shardtrain
