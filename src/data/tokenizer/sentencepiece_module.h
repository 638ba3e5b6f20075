// Private to the data layer: the C interface of libshardtrain_sentencepiece.so,
// the small module that holds libsentencepiece (docs/DESIGN.md
// "SentencePiece"). Debian's libsentencepiece carries its own copy of
// protobuf 3.14 with exported symbols; linked into a process that also loads
// the system protobuf (LibTorch, the TensorBoard writer), its calls bind to
// that one and it aborts ("compiled against 3.14.0 ... installed 3.21.12").
// So it lives in a module that spm_tokenizer.cpp loads with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND): the module and libsentencepiece resolve
// their symbols among themselves first, and nothing of them reaches the
// process's global scope. Plain C types only cross the boundary.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ShardtrainSpm ShardtrainSpm;

// A processor for the serialized ModelProto model[0 .. size); NULL on failure,
// with libsentencepiece's message in error[0 .. error_size).
ShardtrainSpm* shardtrain_spm_load(const char* model, size_t size, char* error, size_t error_size);

// Encodes text[0 .. size): for each piece, (id, begin byte, end byte) into
// triples[3 * i .. 3 * i + 2] while i < capacity. With `normalized` not NULL,
// also the text SentencePiece's model segmented (the normalized text: U+2581
// for spaces, the dummy prefix; the pieces' text, a byte piece as its byte)
// into normalized[0 .. normalized_capacity), its size into *normalized_size.
// Returns the number of pieces (call again with more room when it exceeds
// capacity or *normalized_size exceeds normalized_capacity), or -1 with the
// message in `error`. Thread-safe (SentencePieceProcessor::Encode is const).
long shardtrain_spm_encode_normalized(const ShardtrainSpm* processor, const char* text, size_t size, int32_t* triples,
                                      size_t capacity, char* normalized, size_t normalized_capacity,
                                      size_t* normalized_size, char* error, size_t error_size);

void shardtrain_spm_free(ShardtrainSpm* processor);

#ifdef __cplusplus
}
#endif
