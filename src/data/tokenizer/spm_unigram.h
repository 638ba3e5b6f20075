// Private to the data layer: SentencePiece's Unigram segmentation of
// normalized text, computed the way libsentencepiece 0.1.97 computes it
// (unigram::Model::EncodeOptimized), so that text cut at spaces and cached per
// chunk gets the ids SentencePiece gives the whole text, ties included
// (docs/DESIGN.md "SentencePiece", spm_chunks.cpp).
//
// SentencePiece's Viterbi keeps, per byte position, the float score of the
// best path ending there; a piece's candidate is its score plus that float
// (in double), and replaces the position's best only when strictly greater,
// so of two paths with equal scores the one whose last piece starts first
// wins, and what "equal" means depends on the float rounding of the running
// score, which is the sum over the whole text before the chunk. Two chunk
// paths with the same pieces in another order ("00" "0" and "0" "00") tie in
// exact arithmetic and are decided by that rounding. So a chunk's best path
// depends on the running score it starts from, and this class says when:
//
//   spm::Unigram unigram(spec);                      // at load
//   unigram.lattice(normalized, nodes);              // a chunk's pieces
//   float end = unigram.viterbi(normalized, nodes, start_score, path);
//   double bound = unigram.stable_below(normalized, nodes);
//   // |start| < bound: viterbi's path is the same for every such start, and
//   // unigram.advance(start, path) is its end score.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "data/tokenizer/spm_model.h"

namespace shardtrain::spm {

class Unigram {
 public:
  // A lattice node: the piece `id` (or the unknown piece, one character)
  // over normalized bytes [begin, end).
  struct Node {
    int32_t begin, end, id;
  };

  explicit Unigram(const ModelSpec& spec);

  // The nodes of `normalized` in the order SentencePiece visits them: by
  // start, each start's pieces by end, then its unknown node (when no piece
  // is the start's one character).
  void lattice(std::string_view normalized, std::vector<Node>& nodes) const;

  // SentencePiece's best path through `nodes` (a lattice of `normalized`)
  // when the running score at its start is `start`: the pieces' ids into
  // `path`; returns the running score at its end.
  float viterbi(std::string_view normalized, const std::vector<Node>& nodes, float start,
                std::vector<int32_t>& path) const;

  // The running score after `path` (from viterbi), starting at `start`.
  float advance(float start, const int32_t* path, std::size_t size) const;

  // A bound on |start| below which viterbi() returns the same path, from the
  // exact margin between the best and second-best paths and a bound on the
  // float rounding along the chunk; negative when two paths tie.
  double stable_below(std::string_view normalized, const std::vector<Node>& nodes) const;

  // The sum of |score| over `path`'s pieces: |start| + this bounds the
  // running score after it (before float rounding).
  double magnitude(const std::vector<int32_t>& path) const;

  // The ids libsentencepiece reports for `path` over `normalized`: runs of
  // unknown characters merged into one unknown piece, or each unknown
  // character's bytes as byte pieces (byte fallback).
  void reported_ids(std::string_view normalized, const std::vector<int32_t>& path, std::vector<int32_t>& ids) const;

 private:
  // A byte trie of the pieces SentencePiece's model matches (NORMAL and
  // USER_DEFINED) in one array, breadth first, so that its first levels,
  // where every match starts, share a few cache lines. A node at offset o:
  // [id of the piece it completes, or -1] [count] [count bytes, four a word]
  // [count child offsets]; one step reads one node, mostly one cache line.
  void build_trie(std::vector<std::pair<std::string_view, int32_t>>& pieces);
  std::vector<uint32_t> trie_;
  uint32_t root_children_[256];  // the root's child for each first byte, or 0
  std::vector<double> scores_;          // per id: the score a candidate adds (in double, as SentencePiece)
  std::vector<int32_t> piece_bytes_;    // per id: the piece's length in bytes
  int32_t byte_ids_[256];               // byte-fallback piece of each byte
  int32_t unk_id_ = 0;
  float unk_score_ = 0.0f;              // the lowest NORMAL score - 10, added in float
  bool byte_fallback_ = false;
};

}  // namespace shardtrain::spm
