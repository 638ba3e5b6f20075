// A Llama-3-style byte-level BPE tokenizer.json (the structure EuroBERT's
// has: the Llama-3 Split regex, then ByteLevel without its own regex; BPE
// with ignore_merges; <|begin_of_text|> / <|end_of_text|> added as special
// tokens and a TemplateProcessing post-processor), built from
// data/vocab/roberta-base/tokenizer.json's vocabulary and merges (the real
// files are too large to ship), and Hugging Face's ids for it.
//
//   cd tests/data/llama3_bpe && npm install @anush008/tokenizers@0.6.0 && node make_llama3_bpe.js
//
// writes tokenizer.json (only `llama3_tokenizer_json` below changes
// roberta-base's; tests/test_tokenizer_bpe.cpp makes the same file itself) and
// ids.jsonl: for MRPC dev's first 120 pairs, 40 SIB-200 dev sentences in each
// language of data/sib200 and hand-made edge cases, the ids HF's Rust
// tokenizers give (@anush008/tokenizers binds them), one line each: a shipped
// file's row {"file", "row" (0-based, after the header), "a", "b" (columns)}
// or a hand-made {"a", "b" (or null)}, and "ids" and "offsets" ([begin, end)
// in characters of the token's text; [0, 0] for the template's tokens).
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("@anush008/tokenizers");

const root = path.resolve(__dirname, "../../..");
const kLlama3Pattern =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function llama3_tokenizer_json() {
  const t = JSON.parse(fs.readFileSync(path.join(root, "data/vocab/roberta-base/tokenizer.json"), "utf8"));
  const n = Object.keys(t.model.vocab).length;  // 50265: the new tokens follow
  const special = (content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
                                      normalized: false, special: true });
  t.added_tokens.push(special("<|begin_of_text|>", n), special("<|end_of_text|>", n + 1));
  t.normalizer = null;
  t.pre_tokenizer = { type: "Sequence", pretokenizers: [
    { type: "Split", pattern: { Regex: kLlama3Pattern }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false } ] };
  t.model.ignore_merges = true;
  const bos = { SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } };
  const eos = { SpecialToken: { id: "<|end_of_text|>", type_id: 0 } };
  t.post_processor = { type: "Sequence", processors: [
    { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    { type: "TemplateProcessing",
      single: [bos, { Sequence: { id: "A", type_id: 0 } }, eos],
      pair: [bos, { Sequence: { id: "A", type_id: 0 } }, eos, { Sequence: { id: "B", type_id: 0 } }, eos],
      special_tokens: {
        "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [n], tokens: ["<|begin_of_text|>"] },
        "<|end_of_text|>": { id: "<|end_of_text|>", ids: [n + 1], tokens: ["<|end_of_text|>"] } } } ] };
  return t;
}

// Each text as [a, b, where]: `where` names a row of a shipped data file (its
// text is read from there, not copied here: the files carry their licenses),
// or is null for a hand-made case, whose text is written out.
function texts() {
  const out = [];
  const mrpc = fs.readFileSync(path.join(root, "data/glue/MRPC/dev.tsv"), "utf8").split("\n").slice(1);
  mrpc.slice(0, 120).forEach((line, row) => {
    const f = line.replace(/\r$/, "").split("\t");
    if (f.length === 5) out.push([f[3], f[4], { file: "data/glue/MRPC/dev.tsv", row, a: 3, b: 4 }]);
  });
  const sib = path.join(root, "data/sib200");
  for (const lang of fs.readdirSync(sib).sort()) {
    const dev = path.join(sib, lang, "dev.tsv");
    if (!fs.existsSync(dev)) continue;
    fs.readFileSync(dev, "utf8").split("\n").slice(1, 41).forEach((line, row) => {
      const f = line.replace(/\r$/, "").split("\t");
      if (f.length === 3) out.push([f[2], null, { file: `data/sib200/${lang}/dev.tsv`, row, a: 2 }]);
    });
  }
  // What the regex's alternatives decide: contractions in any case (and the
  // long s), a mark or punctuation before letters, digit runs in threes,
  // punctuation with trailing newlines, whitespace runs before newlines, a
  // letter and before the end, tabs, CR LF, letters of other scripts.
  for (const t of ["I'M HERE, they'RE 'Ll '\u017f 'S 'x", "(hello) [world] \"quoted\" ..dots!! ?!x",
                   "1234567 12,345.6789 x1y22z333", "line one\nline two\r\n\r\nend  \n  \t\nx",
                   "  leading and trailing  ", "a\tb\t\tc  d   e", "na\u00efve caf\u00e9 \u0396\u03b5\u03c5\u03c2 \u6771\u4eac \u0645\u0631\u062d\u0628\u0627",
                   "e\u0301 \u0301a x\u200bz", "don't won't y'all ''quote'' ' s", "\n\n", " ", "a"])
    out.push([t, null, null]);
  out.push(["Who's there?", "It's me\n\u2014 again.", null]);
  return out;
}

const json = llama3_tokenizer_json();
fs.writeFileSync(path.join(__dirname, "tokenizer.json"), JSON.stringify(json));
const tokenizer = Tokenizer.fromFile(path.join(__dirname, "tokenizer.json"));
(async () => {
  const lines = [];
  for (const [a, b, where] of texts()) {
    const encoding = b === null ? await tokenizer.encode(a) : await tokenizer.encode(a, b);
    const ids = encoding.getIds(), offsets = encoding.getOffsets();
    lines.push(JSON.stringify(where ? { ...where, ids, offsets } : { a, b, ids, offsets }));
  }
  fs.writeFileSync(path.join(__dirname, "ids.jsonl"), lines.join("\n") + "\n");
  fs.unlinkSync(path.join(__dirname, "tokenizer.json"));
  console.log(`${lines.length} texts`);
})();
