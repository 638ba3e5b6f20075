// Byte-level BPE edge cases (roberta-base and ModernBERT files in data/vocab/).
// Expected tokens follow from the GPT-2 pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (Ġ = space, Ċ = \n, ĉ = \t in the byte alphabet); where the merges decide
// the pieces, the checks are properties that hold whatever they are: the
// tokens spell the text's bytes back, and text the regex cuts in two
// tokenizes as its two halves.
#include <torch/torch.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "shardtrain/core/check.h"
#include "shardtrain/data/tokenizer.h"
#include "support/tokenizer_fixtures.h"

namespace {

using shardtrain::Encoding;
using shardtrain::Tokenizer;
using CaseIds = std::vector<int32_t>;

const Tokenizer& cases_roberta() { return shardtrain_test::roberta_base(); }
const Tokenizer& cases_modernbert() { return shardtrain_test::modernbert_tokenizer(); }

CaseIds cases_tokens(const Tokenizer& tokenizer, std::string_view text) {
  CaseIds ids;
  tokenizer.tokenize(text, ids);
  return ids;
}

// Ids of tokens given as strings of the byte alphabet.
CaseIds cases_ids(const Tokenizer& tokenizer, const std::vector<std::string>& tokens) {
  CaseIds ids;
  for (const std::string& token : tokens) {
    const int32_t id = tokenizer.token_to_id(token);
    REQUIRE_MESSAGE(id >= 0, "token ", token, " is not in the vocabulary");
    ids.push_back(id);
  }
  return ids;
}

// The bytes the tokens spell (the GPT-2 alphabet decoded: printable Latin-1
// as itself, the rest as U+0100 + n in byte order).
std::string cases_decode(const Tokenizer& tokenizer, const CaseIds& ids) {
  std::string out;
  for (const int32_t id : ids) REQUIRE_MESSAGE(shardtrain_test::byte_level_bytes(tokenizer.token(id), out), id);
  return out;
}

CaseIds cases_concat(CaseIds a, const CaseIds& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("byte-level BPE: words, leading and repeated spaces, newlines and tabs") {
  const Tokenizer& t = cases_roberta();
  CHECK(cases_tokens(t, "Hello world") == CaseIds{31414, 232});        // Hello Ġworld
  CHECK(cases_tokens(t, " Hello") == CaseIds{20920});                  // ĠHello
  CHECK(cases_tokens(t, "a  b") == CaseIds{102, 1437, 741});           // a Ġ Ġb: \s+(?!\S) leaves the last space
  CHECK(cases_tokens(t, "a\nb") == CaseIds{102, 50118, 428});          // a Ċ b
  CHECK(cases_tokens(t, "a\n\nb") == CaseIds{102, 50118, 50118, 428}); // \n then \n: each its own piece
  CHECK(cases_tokens(t, "a\tb") == CaseIds{102, 50117, 428});          // a ĉ b
  CHECK(cases_tokens(t, "") == CaseIds{});
  // The same text, cut where the regex cuts it.
  CHECK(cases_tokens(t, "word   \t next") == cases_concat(cases_tokens(t, "word"), cases_concat(cases_tokens(t, "   \t"),
                                                                                                cases_tokens(t, " next"))));
  CHECK(cases_decode(t, cases_tokens(t, "  two\n\n\tspaces  ")) == "  two\n\n\tspaces  ");
}

TEST_CASE("byte-level BPE: contractions, numbers, punctuation") {
  const Tokenizer& t = cases_roberta();
  CHECK(cases_tokens(t, "don't") == cases_ids(t, {"don", "'t"}));
  CHECK(cases_tokens(t, "we're") == cases_ids(t, {"we", "'re"}));
  CHECK(cases_tokens(t, "it's") == cases_ids(t, {"it", "'s"}));
  CHECK(cases_tokens(t, "It'S") == cases_ids(t, {"It", "'", "S"}));  // the contractions are lowercase only
  CHECK(cases_tokens(t, "3rd") == cases_ids(t, {"3", "rd"}));         // \p{N}+ then \p{L}+
  CHECK(cases_tokens(t, "in 2024, 12345 people") ==
        cases_concat(cases_concat(cases_tokens(t, "in"), cases_tokens(t, " 2024")),
                     cases_concat(cases_concat(cases_tokens(t, ","), cases_tokens(t, " 12345")), cases_tokens(t, " people"))));
  CHECK(cases_tokens(t, "x.'s") == cases_concat(cases_tokens(t, "x"), cases_concat(cases_tokens(t, ".'"), cases_tokens(t, "s"))));
}

TEST_CASE("byte-level BPE: accents, emoji, CJK and invalid UTF-8 spell their bytes back") {
  const Tokenizer& t = cases_roberta();
  for (const std::string text : {"café naïve Zoë", "thumbs \xF0\x9F\x91\x8D up \xF0\x9F\x98\x80\xF0\x9F\x98\x80",
                                 "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C world", "\xC3\x85ngstr\xC3\xB6m"}) {
    CHECK_MESSAGE(cases_decode(t, cases_tokens(t, text)) == text, text);
  }
  // CJK ideographs are \p{L}: one piece with the letters after them, cut before the space.
  CHECK(cases_tokens(t, "\xE4\xBD\xA0\xE5\xA5\xBD world") ==
        cases_concat(cases_tokens(t, "\xE4\xBD\xA0\xE5\xA5\xBD"), cases_tokens(t, " world")));
  // Each maximal invalid subpart reads as one U+FFFD (EF BF BD).
  CHECK(cases_decode(t, cases_tokens(t, "a\xFF" "b")) == "a\xEF\xBF\xBD" "b");
  CHECK(cases_decode(t, cases_tokens(t, "a\xE2\x82" "b")) == "a\xEF\xBF\xBD" "b");
  // ModernBERT's NFC normalizer composes e + U+0301 into U+00E9 first.
  const Tokenizer& m = cases_modernbert();
  CHECK(cases_tokens(m, "caf\x65\xCC\x81") == cases_tokens(m, "caf\xC3\xA9"));
  CHECK(cases_tokens(t, "caf\x65\xCC\x81") != cases_tokens(t, "caf\xC3\xA9"));  // roberta has no normalizer
}

TEST_CASE("byte-level BPE: very long words") {
  const Tokenizer& t = cases_roberta();
  const std::string word(5000, 'a');
  const CaseIds ids = cases_tokens(t, word);
  CHECK(cases_decode(t, ids) == word);
  CHECK(ids.size() * 2 < word.size());  // merged, not one token per byte
  CHECK(cases_tokens(t, word) == ids);  // the same from the cache path as from a fresh merge
  std::string mixed;
  for (int i = 0; i < 300; ++i) mixed += "Supercalifragilistic";
  CHECK(cases_decode(t, cases_tokens(t, mixed)) == mixed);
}

TEST_CASE("byte-level BPE: added tokens, templates, ModernBERT's space tokens") {
  const Tokenizer& t = cases_roberta();
  CHECK(t.cls_id() == 0);
  CHECK(t.sep_id() == 2);
  CHECK(t.pad_id() == 1);
  CHECK(t.unk_id() == 3);
  CHECK(t.mask_id() == 50264);
  CHECK(t.vocab_size() == 50265);
  CHECK(t.num_special_tokens(false) == 2);
  CHECK(t.num_special_tokens(true) == 4);
  CHECK(cases_tokens(t, "<s>Hello</s>") == CaseIds{0, 31414, 2});
  CHECK(cases_tokens(t, "a <mask> b") == CaseIds{102, 50264, 741});  // <mask> lstrip takes the space before it
  const Encoding pair = t.encode("Hello", std::string_view(" world"), 0);
  CHECK(pair.input_ids == CaseIds{0, 31414, 2, 2, 232, 2});
  CHECK(pair.token_type_ids == std::vector<uint8_t>(6, 0));
  CHECK(t.encode("", std::string_view(""), 0).input_ids == CaseIds{0, 2, 2, 2});

  const Tokenizer& m = cases_modernbert();
  CHECK(m.cls_id() == 50281);
  CHECK(m.sep_id() == 50282);
  CHECK(m.pad_id() == 50283);
  CHECK(m.mask_id() == 50284);
  CHECK(m.vocab_size() == 50368);
  CHECK(m.num_special_tokens(true) == 3);
  CHECK(m.model_max_length() == 0);  // 1e30 in tokenizer_config.json: no limit
  // "  " is an added (normalized) token: it is cut out before the pre-tokenizer.
  CHECK(cases_tokens(m, "a  b") == CaseIds{m.token_to_id("a"), 50276, m.token_to_id("b")});
  const Encoding mp = m.encode("Hello", std::string_view("world"), 0);
  CHECK(mp.input_ids.front() == 50281);
  CHECK(mp.input_ids.back() == 50282);
  CHECK(mp.input_ids.size() == 5);
}

TEST_CASE("byte-level BPE: longest_first truncation and max_length") {
  const Tokenizer& t = cases_roberta();
  const std::string ten = "a b c d e f g h i j";  // 10 tokens
  const CaseIds a = cases_tokens(t, ten);
  const CaseIds b = cases_tokens(t, "x y z");
  REQUIRE(a.size() == 10);
  REQUIRE(b.size() == 3);
  // Budget 12 - 4 = 8: b (3) fits in half, a gets the other 5.
  CaseIds want = {0};
  want.insert(want.end(), a.begin(), a.begin() + 5);
  want.insert(want.end(), {2, 2});
  want.insert(want.end(), b.begin(), b.end());
  want.push_back(2);
  CHECK(t.encode(ten, std::string_view("x y z"), 12).input_ids == want);
  // Budget 4 - 4 = 0 keeps only the specials; both long: 3 and 3 of budget 6 (max_length 10).
  CHECK(t.encode(ten, std::string_view("x y z"), 4).input_ids == CaseIds{0, 2, 2, 2});
  const Encoding both = t.encode(ten, std::string_view(ten), 10);
  CHECK(both.input_ids.size() == 10);
  CHECK(CaseIds(both.input_ids.begin() + 1, both.input_ids.begin() + 4) == CaseIds(a.begin(), a.begin() + 3));
  CHECK(t.encode(ten, std::nullopt, 5).input_ids == CaseIds{0, a[0], a[1], a[2], 2});
  CHECK_THROWS_AS(t.encode(ten, std::string_view("x"), 3), shardtrain::Error);  // below the 4 specials
  CHECK_THROWS_AS(t.encode(ten, std::nullopt, -1), shardtrain::Error);
  const Tokenizer& m = cases_modernbert();
  CHECK(m.encode(ten, std::string_view("x y z"), 3).input_ids == CaseIds{50281, 50282, 50282});
  CHECK_THROWS_AS(m.encode(ten, std::string_view("x"), 2), shardtrain::Error);
}
