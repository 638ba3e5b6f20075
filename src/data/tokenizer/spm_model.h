// Private to the data layer: a SentencePiece model file (the ModelProto of
// sentencepiece_model.proto) read field by field and written back, so that a
// damaged or unsupported file is refused naming the file and the field
// before libsentencepiece sees it, and so that a tokenizer.json Unigram model
// can be handed to libsentencepiece as a ModelProto (docs/DESIGN.md
// "SentencePiece"). Only the fields shardtrain uses are kept; parsing checks
// the whole message's wire format.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain::spm {

// ModelProto.SentencePiece.Type.
enum class PieceType : int { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Piece {
  std::string text;
  float score = 0.0f;
  PieceType type = PieceType::kNormal;
};

// TrainerSpec.ModelType.
enum class ModelType : int { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

struct ModelSpec {
  std::vector<Piece> pieces;
  // trainer_spec
  ModelType model_type = ModelType::kUnigram;
  bool byte_fallback = false;
  bool split_by_whitespace = true;
  bool treat_whitespace_as_suffix = false;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  // normalizer_spec
  std::string normalizer_name;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Parses a serialized ModelProto. Throws shardtrain::Error naming `file` and
// the field when the bytes are not one (truncated, a wrong wire type, a
// piece that is empty or not UTF-8, no or two UNKNOWN pieces, an id outside
// the pieces) or use what shardtrain does not read (WORD / CHAR models).
ModelSpec parse_model(std::string_view bytes, const std::string& file);

// The serialized ModelProto of `spec` (pieces, trainer_spec, normalizer_spec).
std::string write_model(const ModelSpec& spec);

}  // namespace shardtrain::spm
