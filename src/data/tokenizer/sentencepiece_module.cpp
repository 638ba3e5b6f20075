// libshardtrain_sentencepiece.so: libsentencepiece behind a C interface
// (data/sentencepiece_module.h says why it is a module). Built by CMake as
// its own target, never part of the library.
#include "data/tokenizer/sentencepiece_module.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

struct ShardtrainSpm {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

void copy_message(const std::string& message, char* error, size_t error_size) {
  if (error_size == 0) return;
  std::snprintf(error, error_size, "%s", message.c_str());
}

}  // namespace

extern "C" ShardtrainSpm* shardtrain_spm_load(const char* model, size_t size, char* error, size_t error_size) {
  auto spm = std::make_unique<ShardtrainSpm>();
  const sentencepiece::util::Status status = spm->processor.LoadFromSerializedProto(std::string_view(model, size));
  if (!status.ok()) {
    copy_message(status.ToString(), error, error_size);
    return nullptr;
  }
  return spm.release();
}

extern "C" long shardtrain_spm_encode_normalized(const ShardtrainSpm* spm, const char* text, size_t size,
                                                 int32_t* triples, size_t capacity, char* normalized,
                                                 size_t normalized_capacity, size_t* normalized_size, char* error,
                                                 size_t error_size) {
  sentencepiece::ImmutableSentencePieceText pieces;
  const sentencepiece::util::Status status = spm->processor.Encode(std::string_view(text, size), pieces.mutable_proto());
  if (!status.ok()) {
    copy_message(status.ToString(), error, error_size);
    return -1;
  }
  const size_t count = pieces.pieces_size();
  size_t normalized_bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    const auto piece = pieces.pieces(static_cast<int>(i));
    if (i < capacity) {
      triples[3 * i] = static_cast<int32_t>(piece.id());
      triples[3 * i + 1] = static_cast<int32_t>(piece.begin());
      triples[3 * i + 2] = static_cast<int32_t>(piece.end());
    }
    if (normalized == nullptr) continue;
    // The normalized text is the pieces' text (an unknown piece holds its
    // text); a byte-fallback piece <0xXX> stands for one byte of it.
    std::string_view piece_text = piece.piece();
    char byte;
    if (spm->processor.IsByte(static_cast<int>(piece.id())) && piece_text.size() == 6) {
      byte = static_cast<char>(std::stoi(std::string(piece_text.substr(3, 2)), nullptr, 16));
      piece_text = std::string_view(&byte, 1);
    }
    if (normalized_bytes + piece_text.size() <= normalized_capacity)
      std::memcpy(normalized + normalized_bytes, piece_text.data(), piece_text.size());
    normalized_bytes += piece_text.size();
  }
  if (normalized_size != nullptr) *normalized_size = normalized_bytes;
  return static_cast<long>(count);
}

extern "C" void shardtrain_spm_free(ShardtrainSpm* spm) { delete spm; }
