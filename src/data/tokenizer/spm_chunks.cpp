// A SentencePiece segment encoded chunk by chunk (data/spm_tokenizer.h,
// docs/DESIGN.md "SentencePiece").
//
// Speed: one Encode call costs about 90 us a sentence pair (a protobuf per
// call), 40x WordPiece. When the model allows it (SentencePieceTokenizer's
// `chunks`), a text is cut at ASCII spaces and each chunk is encoded alone
// and cached per thread (data/word_cache.h). That gives the same pieces as
// encoding the whole text: the normalizer removes extra whitespace and adds
// the dummy prefix, so " word" in a sentence and "word" alone both become
// "▁word"; no piece holds U+2581 after its first character (checked at
// load), so no piece crosses a space; and the charsmap maps characters, not
// spans across a space. MRPC and SIB-200 in three languages check it against
// the reference ids (tests/test_tokenizer_spm.cpp).
//
// Unigram ties: SentencePiece's Viterbi runs over the whole text with a float
// running score, and where two paths through a chunk tie ("0" "00" and "00"
// "0") the rounding of that score, i.e. the text before the chunk, picks one
// (data/spm_unigram.h). So a Unigram chunk is cached with its normalized
// text, its path (libsentencepiece's for the chunk alone, which spm::Unigram's
// Viterbi must reproduce, else texts with it are encoded whole) and the bound
// on the running score below which that path holds. Walking a text's chunks,
// a bound on the running score is kept until a chunk's bound is not above
// it; from there the exact score is replayed and such a chunk re-decided by
// spm::Unigram's Viterbi. A changed path gives its ids; with offsets the
// whole text goes to libsentencepiece (tests/test_tokenizer_spm_ties.cpp).
#include "data/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "data/tokenizer/word_cache.h"

namespace shardtrain {

namespace {

struct ChunkScratch {
  std::vector<int32_t> values, side;  // a chunk's values when not read from the cache
  std::string normalized;
  std::vector<spm::Unigram::Node> nodes;
  std::vector<int32_t> path, ids;
};
ChunkScratch& chunk_scratch() {
  thread_local ChunkScratch buffers;
  return buffers;
}

// Calls visit(chunk begin, chunk end) for each run of non-spaces in [begin,
// end) of `text` while it returns true; whether all were visited.
template <class Visit>
bool for_each_chunk(std::string_view text, std::size_t begin, std::size_t end, Visit&& visit) {
  std::size_t position = begin;
  while (position < end) {
    while (position < end && text[position] == ' ') ++position;
    std::size_t chunk_end = position;
    while (chunk_end < end && text[chunk_end] != ' ') ++chunk_end;
    if (chunk_end > position && !visit(position, chunk_end)) return false;
    position = chunk_end;
  }
  return true;
}

}  // namespace

// A chunk's cached values: [n], for a Unigram model [bound] [magnitude]
// (floats, rounded so as to be safe) [k] [side offset], then the n (id,
// begin, end) triples: what every use reads, dense. A Unigram chunk's other
// values lie in the cache's side store (word_cache.h): [k SentencePiece ids,
// the path] [b] [b bytes of normalized text in ceil(b / 4) int32]. k = -1
// when spm::Unigram's Viterbi does not give libsentencepiece's pieces for the
// chunk alone (then its texts are encoded whole).
struct Tokenizer::Spm::Chunk {
  const int32_t* triples = nullptr;
  std::size_t num_triples = 0;
  float stable_below = 0.0f;  // spm::Unigram::stable_below
  float magnitude = 0.0f;     // spm::Unigram::magnitude of the path
  int32_t path_size = -1;
  const int32_t* path = nullptr;
  std::string_view normalized() const {
    const int32_t* at = path + std::max(path_size, 0);
    return std::string_view(reinterpret_cast<const char*>(at + 1), static_cast<std::size_t>(*at));
  }
};

namespace {

constexpr std::size_t kUnigramHeader = 5;  // n, bound, magnitude, k, side offset

// `value` as a float no larger (`down`) or no smaller than it.
float float_bound(double value, bool down) {
  float rounded = static_cast<float>(value);
  if (down ? static_cast<double>(rounded) > value : static_cast<double>(rounded) < value)
    rounded = std::nextafter(rounded, down ? -INFINITY : INFINITY);
  return rounded;
}

}  // namespace

// The chunk's values into `values` and, for a Unigram model, the side values into `side`.
void Tokenizer::Spm::chunk_values(std::string_view chunk, std::vector<int32_t>& values,
                                  std::vector<int32_t>& side) const {
  ChunkScratch& scratch = chunk_scratch();
  const std::size_t header = unigram ? kUnigramHeader : 1;
  values.assign(header, 0);
  encode_unit(chunk, values, unigram ? &scratch.normalized : nullptr);
  const std::size_t num_triples = (values.size() - header) / 3;
  values[0] = static_cast<int32_t>(num_triples);
  if (!unigram) return;
  const std::string& normalized = scratch.normalized;
  unigram->lattice(normalized, scratch.nodes);
  unigram->viterbi(normalized, scratch.nodes, 0.0f, scratch.path);
  unigram->reported_ids(normalized, scratch.path, scratch.ids);
  bool same = scratch.ids.size() == num_triples;
  for (std::size_t k = 0; same && k < num_triples; ++k)
    same = spm_to_id[static_cast<std::size_t>(scratch.ids[k])] == values[header + 3 * k];
  const float floats[2] = {float_bound(unigram->stable_below(normalized, scratch.nodes), true),
                           float_bound(unigram->magnitude(scratch.path), false)};
  std::memcpy(values.data() + 1, floats, sizeof(floats));
  values[3] = same ? static_cast<int32_t>(scratch.path.size()) : -1;
  side.assign(scratch.path.begin(), same ? scratch.path.end() : scratch.path.begin());
  side.push_back(static_cast<int32_t>(normalized.size()));
  const std::size_t at = side.size();
  side.resize(at + (normalized.size() + 3) / 4);
  std::memcpy(side.data() + at, normalized.data(), normalized.size());
}

// A chunk not in the cache: its values computed into the scratch (and
// cached, unless too long). Out of line: the hits are the hot path.
[[gnu::noinline]] void Tokenizer::Spm::chunk_miss(std::string_view chunk, bool cached) const {
  ChunkScratch& scratch = chunk_scratch();
  chunk_values(chunk, scratch.values, scratch.side);
  if (!cached) return;
  WordCache& cache = WordCache::for_thread(cache_owner);
  if (unigram) scratch.values[4] = static_cast<int32_t>(cache.insert_side(scratch.side.data(), scratch.side.size()));
  cache.insert(chunk, scratch.values.data(), scratch.values.size());
}

// The chunk's values, cached or computed; valid until the next chunk_at.
inline Tokenizer::Spm::Chunk Tokenizer::Spm::chunk_at(std::string_view chunk) const {
  const bool cached = chunk.size() <= WordCache::kMaxWordBytes;
  WordCache* cache = cached ? &WordCache::for_thread(cache_owner) : nullptr;
  const int32_t* values = cached ? cache->find(chunk).data : nullptr;
  const int32_t* side = nullptr;
  if (values == nullptr) {
    chunk_miss(chunk, cached);
    values = chunk_scratch().values.data();
    side = chunk_scratch().side.data();
  } else if (unigram) {
    side = cache->side(static_cast<uint32_t>(values[4]));
  }
  Chunk view;
  view.num_triples = static_cast<std::size_t>(values[0]);
  if (!unigram) {
    view.triples = values + 1;
    return view;
  }
  std::memcpy(&view.stable_below, values + 1, sizeof(float));
  std::memcpy(&view.magnitude, values + 2, sizeof(float));
  view.path_size = values[3];
  view.triples = values + kUnigramHeader;
  view.path = side;
  return view;
}

// Whether the chunk keeps its cached pieces after the text before it, whose
// running score is `score`; moves `score` past the chunk. When not, the
// chunk's path is left in the scratch path.
bool Tokenizer::Spm::unigram_follows(const Chunk& chunk, float& score) const {
  const auto size = static_cast<std::size_t>(chunk.path_size);
  if (std::fabs(score) < chunk.stable_below) {
    score = unigram->advance(score, chunk.path, size);
    return true;
  }
  ChunkScratch& scratch = chunk_scratch();
  unigram->lattice(chunk.normalized(), scratch.nodes);
  score = unigram->viterbi(chunk.normalized(), scratch.nodes, score, scratch.path);
  return scratch.path.size() == size && std::equal(scratch.path.begin(), scratch.path.end(), chunk.path);
}

// SentencePiece's running score after the chunks of [begin, end) of `text`
// (each one's cached path holds there).
float Tokenizer::Spm::running_score(std::string_view text, std::size_t begin, std::size_t end) const {
  float score = 0.0f;
  for_each_chunk(text, begin, end, [&](std::size_t position, std::size_t chunk_end) {
    const Chunk chunk = chunk_at(text.substr(position, chunk_end - position));
    score = unigram->advance(score, chunk.path, static_cast<std::size_t>(std::max(chunk.path_size, 0)));
    return true;
  });
  return score;
}

// Bytes [begin, end) of pass.text: encoded as one unit, or chunk by chunk.
// A Unigram model's chunks keep their cached pieces while the running score
// before them stays below their bound; that score is bounded by the sum of
// the |score| of the pieces before (widened by float rounding, 2^-23 per
// addition), and computed exactly only from the first chunk that needs it.
void Tokenizer::Spm::piece(std::string_view text, std::size_t begin, std::size_t end, bool gap_start,
                           Pass& pass) const {
  if (!chunks) {
    encode_whole(text, begin, end, gap_start, pass);
    return;
  }
  if (unigram && begin < end) {
    // One chunk too long for the cache (text without spaces): nothing to
    // cache or re-decide, SentencePiece on it as it is.
    const std::size_t first = text.find_first_not_of(' ', begin), last = text.find_last_not_of(' ', end - 1);
    if (first < end && last - first >= WordCache::kMaxWordBytes &&
        text.substr(first, last - first).find(' ') == std::string_view::npos) {
      encode_whole(text, begin, end, gap_start, pass);
      return;
    }
  }
  const std::size_t ids_before = pass.out.size(), spans_before = pass.spans ? pass.spans->size() : 0;
  double magnitude = 0.0;      // the pieces' |score| so far
  std::size_t num_pieces = 0;  // ... and their count
  bool exact = false;          // from here on `score` is SentencePiece's running score
  float score = 0.0f;
  const bool kept = for_each_chunk(text, begin, end, [&](std::size_t position, std::size_t chunk_end) {
    const std::string_view unit = text.substr(position, chunk_end - position);
    Chunk chunk = chunk_at(unit);
    if (unigram) {
      if (!exact && magnitude != 0.0 &&
          !(magnitude * (1.0 + static_cast<double>(num_pieces) * 0x1p-23) < static_cast<double>(chunk.stable_below))) {
        exact = true;
        score = running_score(text, begin, position);
        chunk = chunk_at(unit);  // running_score moved the scratch values
      }
      if (chunk.path_size < 0) return false;
      if (exact && !unigram_follows(chunk, score)) {
        // A tie decided otherwise here than in the chunk alone: the ids of
        // that path; offsets need libsentencepiece's pieces of the whole text.
        if (pass.spans) return false;
        ChunkScratch& scratch = chunk_scratch();
        unigram->reported_ids(chunk.normalized(), scratch.path, scratch.ids);
        for (const int32_t id : scratch.ids) pass.out.push_back(spm_to_id[static_cast<std::size_t>(id)]);
        return true;
      }
      magnitude += static_cast<double>(chunk.magnitude);
      num_pieces += static_cast<std::size_t>(chunk.path_size);
    }
    if (pass.spans) {
      emit(text, position, chunk.triples, chunk.num_triples, begin, end, gap_start, pass);
    } else {
      for (std::size_t k = 0; k < chunk.num_triples; ++k) pass.out.push_back(chunk.triples[3 * k]);
    }
    return true;
  });
  if (!kept) {
    // An opaque chunk, or offsets where a tie went otherwise: SentencePiece on all of it.
    pass.out.resize(ids_before);
    if (pass.spans) pass.spans->resize(spans_before);
    encode_whole(text, begin, end, gap_start, pass);
  }
}

}  // namespace shardtrain
