// A small Gemma-style (mmBERT's structure) BPE tokenizer.json and Hugging
// Face's ids for it: the real files (256k tokens) are too large to ship.
//
//   cd tests/data/gemma_bpe && npm install @anush008/tokenizers@0.6.0 && node make_gemma_bpe.js
//
// writes tokenizer.json and ids.jsonl (node_modules stays out of git).
//
// tokenizer.json: a SentencePiece-style BPE model (tokens are text, "▁" for a
// space; byte_fallback with the 256 <0x00>..<0xFF> tokens; fuse_unk; no
// pre-tokenizer), trained here (plain BPE, ties broken by the pair's text) on
// the SIB-200 training text of data/sib200 (English, Chinese, Arabic) with a
// Replace(" " -> "▁") normalizer, so a character seen fewer than twice there
// (emoji, tabs, newlines, rare CJK) goes through byte fallback; a
// TemplateProcessing <bos> A <eos> / <bos> A <eos> B:1 <eos>:1 post-processor;
// Gemma's decoders (Replace, ByteFallback, Fuse). Ids 0-4 are Gemma's
// <pad> <eos> <bos> <unk> <mask>.
//
// ids.jsonl: one line per text and variant (`variants` below: the same file
// with one structure changed: Gemma's template, Llama-2's Prepend normalizer,
// Metaspace pre-tokenizers, ignore_merges, fuse_unk without byte fallback, no
// fusing, byte fallback with byte tokens missing), the ids HF's Rust
// tokenizers give (@anush008/tokenizers binds tokenizers 0.22): {"variant",
// then a shipped file's row {"file", "row" (0-based, after the header), "a",
// "b" (columns)} or a hand-made {"a", "b" (or null)}, and "ids" and
// "offsets" ([begin, end) in characters of the token's text; [0, 0] for the
// template's tokens)}. tests/test_tokenizer_bpe.cpp makes the variants from
// tokenizer.json with the same edits.
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("@anush008/tokenizers");

const root = path.resolve(__dirname, "../../..");
const kMeta = "\u2581";
const kNumMerges = 2500;

function tsv_rows(file) {
  return fs.readFileSync(path.join(root, file), "utf8").split("\n").slice(1)
    .map((line) => line.replace(/\r$/, "")).filter((line) => line.length > 0).map((line) => line.split("\t"));
}

// Plain BPE over the words of the training text ("▁" for spaces, cut before
// each "▁"): the most frequent pair is merged, the smallest "left right" text
// on ties.
function train() {
  const counts = new Map();  // word -> count
  const chars = new Map();   // character -> count
  for (const lang of ["arb_Arab", "eng_Latn", "zho_Hans"]) {
    for (const f of tsv_rows(`data/sib200/${lang}/train.tsv`)) {
      const text = f[2].split(" ").join(kMeta);
      for (const word of text.split(/(?=\u2581)/u)) counts.set(word, (counts.get(word) || 0) + 1);
      for (const c of text) chars.set(c, (chars.get(c) || 0) + 1);
    }
  }
  const alphabet = [...chars.entries()].filter(([, n]) => n >= 2).map(([c]) => c)
    .sort((x, y) => (chars.get(y) - chars.get(x)) || (x < y ? -1 : x > y ? 1 : 0));
  const known = new Set(alphabet);
  const words = [...counts.entries()].sort((x, y) => (x[0] < y[0] ? -1 : 1))
    .map(([w, n]) => ({ symbols: [...w], n }));
  const merges = [];
  for (let m = 0; m < kNumMerges; ++m) {
    const pairs = new Map();
    for (const { symbols, n } of words) {
      for (let i = 0; i + 1 < symbols.length; ++i) {
        if (!known.has(symbols[i]) || !known.has(symbols[i + 1])) continue;
        const key = symbols[i] + " " + symbols[i + 1];
        pairs.set(key, (pairs.get(key) || 0) + n);
      }
    }
    let best = null, best_count = 1;
    for (const [key, n] of pairs) {
      if (n > best_count || (n === best_count && best !== null && key < best)) { best = key; best_count = n; }
    }
    if (best === null) break;
    const [left, right] = best.split(" ");
    merges.push([left, right]);
    known.add(left + right);
    for (const word of words) {
      const s = word.symbols, out = [];
      for (let i = 0; i < s.length; ++i) {
        if (i + 1 < s.length && s[i] === left && s[i + 1] === right) { out.push(left + right); ++i; } else out.push(s[i]);
      }
      word.symbols = out;
    }
  }
  // Runs of spaces and a token no merge reaches (what ignore_merges finds).
  for (const [left, right] of [[kMeta, kMeta], [kMeta + kMeta, kMeta + kMeta]]) {
    if (!merges.some(([l, r]) => l === left && r === right)) merges.push([left, right]);
  }
  return { alphabet, merges, extra: [kMeta + "zzyzx"] };
}

function gemma_tokenizer_json() {
  const { alphabet, merges, extra } = train();
  const vocab = {};
  let next = 0;
  const add = (token) => { if (!(token in vocab)) vocab[token] = next++; };
  for (const t of ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]) add(t);
  for (let b = 0; b < 256; ++b) add(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  for (const c of alphabet) add(c);
  for (const [l, r] of merges) add(l + r);
  for (const t of extra) add(t);
  const special = (content) => ({ id: vocab[content], content, single_word: false, lstrip: false, rstrip: false,
                                  normalized: false, special: true });
  const token = (id, type_id) => ({ SpecialToken: { id, type_id } });
  const sequence = (id, type_id) => ({ Sequence: { id, type_id } });
  const specials = {};
  for (const t of ["<bos>", "<eos>"]) specials[t] = { id: t, ids: [vocab[t]], tokens: [t] };
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"].map(special),
    normalizer: { type: "Replace", pattern: { String: " " }, content: kMeta },
    pre_tokenizer: null,
    post_processor: { type: "TemplateProcessing",
      single: [token("<bos>", 0), sequence("A", 0), token("<eos>", 0)],
      pair: [token("<bos>", 0), sequence("A", 0), token("<eos>", 0), sequence("B", 1), token("<eos>", 1)],
      special_tokens: specials },
    decoder: { type: "Sequence", decoders: [
      { type: "Replace", pattern: { String: kMeta }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }] },
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges },
  };
}

// The variants: each one edit of the tokenizer.json (test_tokenizer_bpe.cpp
// makes the same). "mmbert" is the file as it is.
const variants = {
  mmbert: () => {},
  gemma: (t) => {  // Gemma's template: <bos> A, <bos> A <bos>:1 B:1
    const bos = t.post_processor.single[0];
    t.post_processor.single = [bos, { Sequence: { id: "A", type_id: 0 } }];
    t.post_processor.pair = [bos, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "<bos>", type_id: 1 } },
                             { Sequence: { id: "B", type_id: 1 } }];
    delete t.post_processor.special_tokens["<eos>"];
  },
  llama2: (t) => {  // Llama-2's (legacy) normalizer: "▁" before the text
    t.normalizer = { type: "Sequence", normalizers: [{ type: "Prepend", prepend: kMeta }, t.normalizer] };
    t.decoder.decoders.push({ type: "Strip", content: " ", start: 1, stop: 0 });
  },
  metaspace_first: (t) => {  // Llama-2 converted with legacy=False
    t.normalizer = null;
    t.pre_tokenizer = { type: "Metaspace", replacement: kMeta, prepend_scheme: "first", split: false };
  },
  metaspace_split: (t) => {
    t.normalizer = null;
    t.pre_tokenizer = { type: "Metaspace", replacement: kMeta, prepend_scheme: "always", split: true };
  },
  ignore_merges: (t) => { t.model.ignore_merges = true; },
  unk_fused: (t) => { t.model.byte_fallback = false; },
  unk_unfused: (t) => { t.model.byte_fallback = false; t.model.fuse_unk = false; },
  bytes_missing: (t) => {  // no <0xF0>..<0xF7>: characters of 4 bytes (emoji) are unk
    for (let b = 0xF0; b <= 0xF7; ++b) delete t.model.vocab[`<0x${b.toString(16).toUpperCase()}>`];
  },
};

// Each text as [a, b, where]: `where` names a row of a shipped data file (its
// text is read from there, not copied here: the files carry their licenses),
// or is null for a hand-made case, whose text is written out. `full`: every
// text, else 10 MRPC pairs and 10 SIB-200 sentences per language.
function texts(full) {
  const out = [];
  tsv_rows("data/glue/MRPC/dev.tsv").slice(0, full ? 120 : 10).forEach((f, row) => {
    if (f.length === 5) out.push([f[3], f[4], { file: "data/glue/MRPC/dev.tsv", row, a: 3, b: 4 }]);
  });
  for (const lang of ["arb_Arab", "eng_Latn", "zho_Hans"]) {
    tsv_rows(`data/sib200/${lang}/dev.tsv`).slice(0, full ? 40 : 10).forEach((f, row) => {
      if (f.length === 3) out.push([f[2], null, { file: `data/sib200/${lang}/dev.tsv`, row, a: 2 }]);
    });
  }
  // Spaces at the ends and in runs, newlines and tabs (byte fallback),
  // emoji, CJK, accents (composed and combining), text with no known
  // character at all, unknown runs between known text, a non-breaking space
  // (not a space to Replace), added tokens in the text, the token only
  // ignore_merges finds, empty text.
  for (const t of ["Hello world", " leading space", "trailing space ", "  many   spaces  here  ", "   ",
                   "line one\nline two\r\n\r\nend", "tab\tseparated\t\tvalues", "emoji \u{1F600}\u{1F44D}\u{1F3FD} end",
                   "\u{1F600}\u{1F600}\u{1F600}", "\uA66E\uA66E \u{13000}\u{13001}", "a\u{1F600}\uA66Eb \u{1F600}\u02AC x",
                   "\u65E5\u672C\u8A9E\u306E\u30C6\u30AD\u30B9\u30C8 \u6771\u4EAC\u3002", "na\u00EFve caf\u00E9 Z\u00FCrich \u00F1",
                   "cafe\u0301 \u0301", "\u0645\u0631\u062D\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
                   "non\u00A0breaking", "a <mask> b<eos>", "<bos>start", " zzyzx", "zzyzx", "", "x"])
    out.push([t, null, null]);
  out.push(["Who's there?", "", null]);
  out.push(["", "  only b  ", null]);
  out.push(["The cat.", "\u4F60\u597D \u{1F600}", null]);
  return out;
}

const base = gemma_tokenizer_json();
fs.writeFileSync(path.join(__dirname, "tokenizer.json"), JSON.stringify(base) + "\n");
(async () => {
  const lines = [];
  const scratch = path.join(__dirname, "variant.json");
  for (const [variant, edit] of Object.entries(variants)) {
    const t = JSON.parse(JSON.stringify(base));
    edit(t);
    fs.writeFileSync(scratch, JSON.stringify(t));
    const tokenizer = Tokenizer.fromFile(scratch);
    for (const [a, b, where] of texts(variant === "mmbert")) {
      const encoding = b === null ? await tokenizer.encode(a) : await tokenizer.encode(a, b);
      const ids = encoding.getIds(), offsets = encoding.getOffsets();
      lines.push(JSON.stringify(where ? { variant, ...where, ids, offsets } : { variant, a, b, ids, offsets }));
    }
  }
  fs.unlinkSync(scratch);
  fs.writeFileSync(path.join(__dirname, "ids.jsonl"), lines.join("\n") + "\n");
  console.log(`${Object.keys(base.model.vocab).length} tokens, ${base.model.merges.length} merges, ${lines.length} texts`);
})();
