// The protobuf wire format of a SentencePiece ModelProto, read and written by
// hand: the message is small and fixed, and reading it ourselves is what lets
// an error name the field (libsentencepiece says only "parse failed"), before
// any of its bytes reach the library.
#include "data/tokenizer/spm_model.h"

#include <cstring>

#include "data/tokenizer/unicode_text.h"
#include "shardtrain/core/check.h"

namespace shardtrain::spm {

namespace {

enum WireType : int { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

const char* wire_type_name(int type) {
  switch (type) {
    case kVarint: return "varint";
    case kFixed64: return "fixed64";
    case kLength: return "length-delimited";
    case kFixed32: return "fixed32";
    default: return "group (unsupported)";
  }
}

// One message's bytes; `path` names it in errors ("ModelProto.pieces[3]").
class WireReader {
 public:
  WireReader(std::string_view bytes, const std::string& file, std::string path)
      : bytes_(bytes), file_(file), path_(std::move(path)) {}

  bool done() const { return position_ >= bytes_.size(); }

  // The next field's number and wire type.
  void next(uint32_t* field, int* wire_type) {
    const uint64_t key = varint("a field key");
    *field = static_cast<uint32_t>(key >> 3);
    *wire_type = static_cast<int>(key & 7);
    if (*field == 0) fail("field number 0 (not a protobuf message)");
  }

  uint64_t varint(const char* what) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (position_ >= bytes_.size()) fail(std::string("ends inside ") + what);
      const auto byte = static_cast<unsigned char>(bytes_[position_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail(std::string("has a varint longer than 10 bytes in ") + what);
  }

  std::string_view length_delimited(const std::string& field) {
    const uint64_t length = varint(field.c_str());
    if (length > bytes_.size() - position_)
      fail("field " + field + " says " + std::to_string(length) + " bytes, but only " +
           std::to_string(bytes_.size() - position_) + " are left (a truncated or damaged file)");
    const std::string_view value = bytes_.substr(position_, static_cast<std::size_t>(length));
    position_ += static_cast<std::size_t>(length);
    return value;
  }

  float fixed32_float(const std::string& field) {
    if (bytes_.size() - position_ < 4) fail("ends inside " + field);
    float value;
    std::memcpy(&value, bytes_.data() + position_, 4);
    position_ += 4;
    return value;
  }

  // Reads (and drops) a field shardtrain does not use.
  void skip(uint32_t field, int wire_type) {
    const std::string name = "field " + std::to_string(field);
    switch (wire_type) {
      case kVarint: varint(name.c_str()); break;
      case kLength: length_delimited(name); break;
      case kFixed64:
      case kFixed32: {
        const std::size_t size = wire_type == kFixed64 ? 8 : 4;
        if (bytes_.size() - position_ < size) fail("ends inside " + name);
        position_ += size;
        break;
      }
      default: fail(name + " has wire type " + std::to_string(wire_type) + ", which no SentencePiece field has");
    }
  }

  void expect(const std::string& field, int wire_type, int wanted) {
    if (wire_type != wanted)
      fail("field " + field + " is " + wire_type_name(wire_type) + ", not " + wire_type_name(wanted) +
           " (not a SentencePiece model, or a damaged one)");
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("'" + file_ + "': " + path_ + ": " + what);
  }
  const std::string& path() const { return path_; }

 private:
  std::string_view bytes_;
  const std::string& file_;
  std::string path_;
  std::size_t position_ = 0;
};

int32_t as_int32(uint64_t value) { return static_cast<int32_t>(static_cast<uint32_t>(value)); }

Piece read_piece(std::string_view bytes, const std::string& file, std::size_t index) {
  WireReader reader(bytes, file, "ModelProto.pieces[" + std::to_string(index) + "]");
  Piece piece;
  while (!reader.done()) {
    uint32_t field;
    int wire_type;
    reader.next(&field, &wire_type);
    if (field == 1) {
      reader.expect("piece", wire_type, kLength);
      piece.text = std::string(reader.length_delimited("piece"));
    } else if (field == 2) {
      reader.expect("score", wire_type, kFixed32);
      piece.score = reader.fixed32_float("score");
    } else if (field == 3) {
      reader.expect("type", wire_type, kVarint);
      const uint64_t type = reader.varint("type");
      if (type < 1 || type > 6) reader.fail("type " + std::to_string(type) + " is not a SentencePiece piece type (1-6)");
      piece.type = static_cast<PieceType>(type);
    } else {
      reader.skip(field, wire_type);
    }
  }
  if (piece.text.empty()) reader.fail("piece is empty");
  std::string replaced;
  if (unicode::sanitize_utf8(piece.text, replaced)) reader.fail("piece is not UTF-8");
  return piece;
}

void read_trainer_spec(std::string_view bytes, const std::string& file, ModelSpec& spec) {
  WireReader reader(bytes, file, "ModelProto.trainer_spec");
  while (!reader.done()) {
    uint32_t field;
    int wire_type;
    reader.next(&field, &wire_type);
    auto read_varint = [&](const char* name) {
      reader.expect(name, wire_type, kVarint);
      return reader.varint(name);
    };
    switch (field) {
      case 3: {
        const uint64_t type = read_varint("model_type");
        if (type < 1 || type > 4) reader.fail("model_type " + std::to_string(type) + " is not UNIGRAM, BPE, WORD or CHAR");
        spec.model_type = static_cast<ModelType>(type);
        break;
      }
      case 22: spec.split_by_whitespace = read_varint("split_by_whitespace") != 0; break;
      case 24: spec.treat_whitespace_as_suffix = read_varint("treat_whitespace_as_suffix") != 0; break;
      case 35: spec.byte_fallback = read_varint("byte_fallback") != 0; break;
      case 40: spec.unk_id = as_int32(read_varint("unk_id")); break;
      case 41: spec.bos_id = as_int32(read_varint("bos_id")); break;
      case 42: spec.eos_id = as_int32(read_varint("eos_id")); break;
      case 43: spec.pad_id = as_int32(read_varint("pad_id")); break;
      default: reader.skip(field, wire_type);
    }
  }
}

void read_normalizer_spec(std::string_view bytes, const std::string& file, ModelSpec& spec) {
  WireReader reader(bytes, file, "ModelProto.normalizer_spec");
  while (!reader.done()) {
    uint32_t field;
    int wire_type;
    reader.next(&field, &wire_type);
    auto read_bool = [&](const char* name) {
      reader.expect(name, wire_type, kVarint);
      return reader.varint(name) != 0;
    };
    switch (field) {
      case 1:
        reader.expect("name", wire_type, kLength);
        spec.normalizer_name = std::string(reader.length_delimited("name"));
        break;
      case 2:
        reader.expect("precompiled_charsmap", wire_type, kLength);
        spec.precompiled_charsmap = std::string(reader.length_delimited("precompiled_charsmap"));
        break;
      case 3: spec.add_dummy_prefix = read_bool("add_dummy_prefix"); break;
      case 4: spec.remove_extra_whitespaces = read_bool("remove_extra_whitespaces"); break;
      case 5: spec.escape_whitespaces = read_bool("escape_whitespaces"); break;
      default: reader.skip(field, wire_type);
    }
  }
  // The charsmap starts with the byte size of its trie (libsentencepiece's
  // DecodePrecompiledCharsMap); a size past the end is a damaged map.
  const std::string& map = spec.precompiled_charsmap;
  if (!map.empty()) {
    uint32_t trie_bytes = 0;
    if (map.size() > 4) std::memcpy(&trie_bytes, map.data(), 4);
    if (map.size() <= 4 || trie_bytes > map.size() - 4 || trie_bytes % 4 != 0)
      reader.fail("precompiled_charsmap is damaged (its trie size does not fit the " + std::to_string(map.size()) +
                  " bytes)");
  }
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void put_key(std::string& out, uint32_t field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLength);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}
void put_int(std::string& out, uint32_t field, int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(value));  // negative int32: ten bytes, as protobuf writes them
}

}  // namespace

ModelSpec parse_model(std::string_view bytes, const std::string& file) {
  if (bytes.empty()) throw Error("'" + file + "' is empty (a SentencePiece model is a ModelProto)");
  ModelSpec spec;
  WireReader reader(bytes, file, "ModelProto");
  bool has_trainer_spec = false;
  while (!reader.done()) {
    uint32_t field;
    int wire_type;
    reader.next(&field, &wire_type);
    if (field == 1) {
      reader.expect("pieces", wire_type, kLength);
      spec.pieces.push_back(read_piece(reader.length_delimited("pieces"), file, spec.pieces.size()));
    } else if (field == 2) {
      reader.expect("trainer_spec", wire_type, kLength);
      read_trainer_spec(reader.length_delimited("trainer_spec"), file, spec);
      has_trainer_spec = true;
    } else if (field == 3) {
      reader.expect("normalizer_spec", wire_type, kLength);
      read_normalizer_spec(reader.length_delimited("normalizer_spec"), file, spec);
    } else {
      reader.skip(field, wire_type);
    }
  }
  if (spec.pieces.empty()) reader.fail("pieces is empty (not a SentencePiece model, or a damaged one)");
  if (!has_trainer_spec) reader.fail("has no trainer_spec (not a SentencePiece model, or a damaged one)");
  if (spec.model_type == ModelType::kWord || spec.model_type == ModelType::kChar)
    reader.fail(std::string("trainer_spec.model_type is ") + (spec.model_type == ModelType::kWord ? "WORD" : "CHAR") +
                "; shardtrain reads UNIGRAM and BPE SentencePiece models");
  if (spec.pieces.size() > (std::size_t{1} << 20))
    reader.fail("has " + std::to_string(spec.pieces.size()) + " pieces, more than the 1,048,576 token ids shardtrain "
                "accepts");
  std::size_t unknown = 0;
  for (const Piece& piece : spec.pieces) unknown += piece.type == PieceType::kUnknown ? 1 : 0;
  if (unknown != 1)
    reader.fail("has " + std::to_string(unknown) + " pieces of type UNKNOWN; a SentencePiece model has exactly one");
  if (spec.unk_id < 0 || static_cast<std::size_t>(spec.unk_id) >= spec.pieces.size() ||
      spec.pieces[static_cast<std::size_t>(spec.unk_id)].type != PieceType::kUnknown)
    reader.fail("trainer_spec.unk_id " + std::to_string(spec.unk_id) + " is not the UNKNOWN piece");
  if (spec.byte_fallback) {
    std::size_t bytes_found = 0;
    for (const Piece& piece : spec.pieces) bytes_found += piece.type == PieceType::kByte ? 1 : 0;
    if (bytes_found != 256)
      reader.fail("trainer_spec.byte_fallback is set but the model has " + std::to_string(bytes_found) +
                  " BYTE pieces, not the 256 <0x00> .. <0xFF>");
  }
  return spec;
}

std::string write_model(const ModelSpec& spec) {
  std::string out;
  for (const Piece& piece : spec.pieces) {
    std::string message;
    put_bytes(message, 1, piece.text);
    put_key(message, 2, kFixed32);
    char score[4];
    std::memcpy(score, &piece.score, 4);
    message.append(score, 4);
    put_int(message, 3, static_cast<int>(piece.type));
    put_bytes(out, 1, message);
  }
  std::string trainer;
  put_int(trainer, 3, static_cast<int>(spec.model_type));
  put_int(trainer, 22, spec.split_by_whitespace ? 1 : 0);
  put_int(trainer, 24, spec.treat_whitespace_as_suffix ? 1 : 0);
  put_int(trainer, 35, spec.byte_fallback ? 1 : 0);
  put_int(trainer, 40, spec.unk_id);
  put_int(trainer, 41, spec.bos_id);
  put_int(trainer, 42, spec.eos_id);
  put_int(trainer, 43, spec.pad_id);
  put_bytes(out, 2, trainer);
  std::string normalizer;
  put_bytes(normalizer, 1, spec.normalizer_name);
  if (!spec.precompiled_charsmap.empty()) put_bytes(normalizer, 2, spec.precompiled_charsmap);
  put_int(normalizer, 3, spec.add_dummy_prefix ? 1 : 0);
  put_int(normalizer, 4, spec.remove_extra_whitespaces ? 1 : 0);
  put_int(normalizer, 5, spec.escape_whitespaces ? 1 : 0);
  put_bytes(out, 3, normalizer);
  return out;
}

}  // namespace shardtrain::spm
