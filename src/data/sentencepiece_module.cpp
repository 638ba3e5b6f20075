// libshardtrain_sentencepiece.so: libsentencepiece behind a C interface
// (data/sentencepiece_module.h says why it is a module). Built by CMake as
// its own target, never part of the library.
#include "data/sentencepiece_module.h"

#include <sentencepiece_processor.h>

#include <cstdio>
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

extern "C" long shardtrain_spm_encode(const ShardtrainSpm* spm, const char* text, size_t size, int32_t* triples,
                                      size_t capacity, char* error, size_t error_size) {
  sentencepiece::ImmutableSentencePieceText pieces;
  const sentencepiece::util::Status status = spm->processor.Encode(std::string_view(text, size), pieces.mutable_proto());
  if (!status.ok()) {
    copy_message(status.ToString(), error, error_size);
    return -1;
  }
  const size_t count = pieces.pieces_size();
  for (size_t i = 0; i < count && i < capacity; ++i) {
    const auto piece = pieces.pieces(static_cast<int>(i));
    triples[3 * i] = static_cast<int32_t>(piece.id());
    triples[3 * i + 1] = static_cast<int32_t>(piece.begin());
    triples[3 * i + 2] = static_cast<int32_t>(piece.end());
  }
  return static_cast<long>(count);
}

extern "C" void shardtrain_spm_free(ShardtrainSpm* spm) { delete spm; }
