#!/usr/bin/env bash
# End-to-end checks of the shardtrain command line: tokenize, config, predict.
# Usage: test_cli.sh SHARDTRAIN_BINARY SOURCE_DIR [MPIEXEC [MPIEXEC_FLAGS...]]
# Needs only bash and plain python3 (no torch, no jq). Every failed check prints
# "FAIL: <what>" with the command's output; the script exits 1 if any failed.
set -u
BIN=${1:?usage: test_cli.sh SHARDTRAIN_BINARY SOURCE_DIR [MPIEXEC [FLAGS...]]}
SRC=${2:?source dir}
MPIEXEC=${3:-}
shift 3 2>/dev/null || shift $#
MPI_FLAGS=("$@")
PY=python3

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardtrain_test_cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

DEV=$SRC/data/glue/MRPC/dev.tsv
VOCAB=$SRC/data/vocab/bert-base-cased-vocab.txt
REF=$SRC/tests/data/mrpc_dev_bert-base-cased_ids.jsonl
FAILURES=0
CHECKS=0

fail() {
  FAILURES=$((FAILURES + 1))
  echo "FAIL: $1"
  if [ -n "${2:-}" ] && [ -f "$2" ]; then sed 's/^/    | /' "$2" | head -20; fi
}
pass() { echo "ok:   $1"; }

# run NAME EXPECTED_STATUS CMD...: runs CMD with stdout/stderr in $TMP/NAME.{out,err}.
run() {
  local name=$1 expected=$2
  shift 2
  CHECKS=$((CHECKS + 1))
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  local status=$?
  if [ "$status" -ne "$expected" ]; then
    fail "$name: exit status $status, expected $expected: $*" "$TMP/$name.err"
    return 1
  fi
  return 0
}

# expect_in NAME FILE TEXT: FILE contains TEXT (fixed string).
expect_in() {
  CHECKS=$((CHECKS + 1))
  if grep -qF -- "$3" "$2"; then pass "$1"; else fail "$1: '$3' not in $(basename "$2")" "$2"; fi
}

# same_ids NAME FILE: FILE has exactly the reference ids of MRPC dev.
same_ids() {
  CHECKS=$((CHECKS + 1))
  if $PY - "$REF" "$2" >"$TMP/$1.cmp" 2>&1 <<'PYEOF'
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
got = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8") if l.strip()]
if len(ref) != len(got):
    sys.exit(f"{len(got)} lines, expected {len(ref)}")
for i, (r, g) in enumerate(zip(ref, got)):
    for key in ("input_ids", "token_type_ids"):
        if r[key] != g[key]:
            sys.exit(f"row {i}: {key} differ:\n  expected {r[key]}\n  got      {g[key]}")
PYEOF
  then pass "$1: ids equal the HF reference"; else fail "$1: ids differ from $REF" "$TMP/$1.cmp"; fi
}

echo "== tokenize"
if run tok_names 0 "$BIN" tokenize --vocab "$VOCAB" --data "$DEV" --text-a "#1 String" --text-b "#2 String" \
     --output "$TMP/names.jsonl"; then same_ids tok_names "$TMP/names.jsonl"; fi
if run tok_index 0 "$BIN" tokenize --vocab "$VOCAB" --data "$DEV" --text-a 3 --text-b 4; then
  same_ids tok_index "$TMP/tok_index.out"
fi

# The same pairs as CSV (RFC 4180 quoting: MRPC has quotes and commas) and JSONL.
$PY - "$DEV" "$TMP/dev.csv" "$TMP/dev.jsonl" <<'PYEOF'
import csv, json, sys
with open(sys.argv[1], encoding="utf-8-sig") as f:
    rows = [line.rstrip("\r\n").split("\t") for line in f if line.strip()]
header, body = rows[0], rows[1:]
with open(sys.argv[2], "w", newline="", encoding="utf-8") as f:
    w = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
    w.writerow(["label", "sentence1", "sentence2"])
    for r in body:
        w.writerow([r[0], r[3], r[4]])
with open(sys.argv[3], "w", encoding="utf-8") as f:
    for r in body:
        f.write(json.dumps({"sentence1": r[3], "sentence2": r[4], "label": int(r[0])}, ensure_ascii=False) + "\n")
PYEOF
if run tok_csv 0 "$BIN" tokenize --vocab "$VOCAB" --data "$TMP/dev.csv" --text-a sentence1 --text-b sentence2; then
  same_ids tok_csv "$TMP/tok_csv.out"
fi
if run tok_jsonl 0 "$BIN" tokenize --vocab "$VOCAB" --data "$TMP/dev.jsonl" --text-a sentence1 --text-b sentence2; then
  same_ids tok_jsonl "$TMP/tok_jsonl.out"
fi
# --format overrides the extension.
cp "$TMP/dev.jsonl" "$TMP/dev_jsonl.txt"
if run tok_format 0 "$BIN" tokenize --vocab "$VOCAB" --data "$TMP/dev_jsonl.txt" --format jsonl \
     --text-a sentence1 --text-b sentence2; then same_ids tok_format "$TMP/tok_format.out"; fi

if run tok_badcol 2 "$BIN" tokenize --vocab "$VOCAB" --data "$DEV" --text-a "#3 String"; then
  expect_in "tok_badcol: message names the column" "$TMP/tok_badcol.err" "'#3 String' is not a column"
  expect_in "tok_badcol: message names the flag" "$TMP/tok_badcol.err" "--text-a"
fi

# Bad rows: line 3 has too few columns.
printf 'label\ta\tb\n1\tHello there.\tHi.\n0\tonly two\n1\tGood morning.\tMorning!\n' >"$TMP/bad.tsv"
if run tok_badrow 2 "$BIN" tokenize --vocab "$VOCAB" --data "$TMP/bad.tsv" --text-a a --text-b b; then
  expect_in "tok_badrow: error names file:line" "$TMP/tok_badrow.err" "bad.tsv:3"
fi
if run tok_skip 0 "$BIN" tokenize --vocab "$VOCAB" --data "$TMP/bad.tsv" --text-a a --text-b b --on-bad-row skip; then
  CHECKS=$((CHECKS + 1))
  n=$(wc -l <"$TMP/tok_skip.out")
  if [ "$n" -eq 2 ]; then pass "tok_skip: 2 good rows kept"; else fail "tok_skip: $n lines, expected 2" "$TMP/tok_skip.out"; fi
  expect_in "tok_skip: skipped rows are reported" "$TMP/tok_skip.err" "skipped 1 bad rows"
fi

# Truncation only when asked: --max-length 20 caps every row, without it row 0 has 42 ids.
if run tok_trunc 0 "$BIN" tokenize --vocab "$VOCAB" --data "$DEV" --text-a 3 --text-b 4 --max-length 20; then
  CHECKS=$((CHECKS + 1))
  if $PY -c '
import json, sys
lens = [len(json.loads(l)["input_ids"]) for l in open(sys.argv[1])]
sys.exit(0 if len(lens) == 408 and max(lens) == 20 else f"lengths {min(lens)}..{max(lens)}, {len(lens)} rows")
' "$TMP/tok_trunc.out" >"$TMP/tok_trunc.cmp" 2>&1; then pass "tok_trunc: every row <= 20 ids"; else
    fail "tok_trunc" "$TMP/tok_trunc.cmp"; fi
fi

echo "== config"
cat >"$TMP/good.toml" <<TOML
[model]
init = "random"
config = "$SRC/tests/fixtures/bert_golden/tiny_gelu_l1/config.json"
vocab = "$VOCAB"

[data]
train_file = "$SRC/data/glue/MRPC/train.tsv"
text_a = "#1 String"
text_b = "#2 String"
label = "Quality"

[train]
lr = 3e-5
num_epochs = 2
TOML
if run cfg_good 0 "$BIN" config --config "$TMP/good.toml" --train.batch_size 8; then
  expect_in "cfg_good: prints [train]" "$TMP/cfg_good.out" "[train]"
  expect_in "cfg_good: file value" "$TMP/cfg_good.out" "num_epochs = 2"
  expect_in "cfg_good: flag value" "$TMP/cfg_good.out" "batch_size = 8"
fi
printf '[train]\nlrr = 3e-5\n' >"$TMP/typo.toml"
if run cfg_typo_file 2 "$BIN" config --config "$TMP/typo.toml"; then
  expect_in "cfg_typo_file: names the key" "$TMP/cfg_typo_file.err" "train.lrr"
  expect_in "cfg_typo_file: suggests" "$TMP/cfg_typo_file.err" "did you mean 'train.lr'"
fi
if run cfg_typo_flag 2 "$BIN" config --train.num_epoch 3; then
  expect_in "cfg_typo_flag: names the key" "$TMP/cfg_typo_flag.err" "train.num_epoch"
  expect_in "cfg_typo_flag: suggests" "$TMP/cfg_typo_flag.err" "did you mean 'train.num_epochs'"
fi

echo "== predict"
# A small random BertForSequenceClassification as a HF folder, written with
# plain python (safetensors is a JSON header + raw little-endian floats).
# make_model DIR WITH_CLASSIFIER
make_model() {
  $PY - "$1" "$2" "$VOCAB" <<'PYEOF'
import json, os, random, shutil, struct, sys
out, with_classifier, vocab = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
os.makedirs(out, exist_ok=True)
V, H, I, P, L, C = sum(1 for _ in open(vocab, encoding="utf-8")), 16, 32, 512, 2, 2
config = dict(architectures=["BertForSequenceClassification"], model_type="bert", vocab_size=V, hidden_size=H,
              num_hidden_layers=L, num_attention_heads=2, intermediate_size=I, hidden_act="gelu",
              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, max_position_embeddings=P,
              type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0,
              id2label={"0": "not_equivalent", "1": "equivalent"}, label2id={"not_equivalent": 0, "equivalent": 1})
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
shapes = [("bert.embeddings.word_embeddings.weight", [V, H]), ("bert.embeddings.position_embeddings.weight", [P, H]),
          ("bert.embeddings.token_type_embeddings.weight", [2, H]),
          ("bert.embeddings.LayerNorm.weight", [H]), ("bert.embeddings.LayerNorm.bias", [H])]
for l in range(L):
    p = f"bert.encoder.layer.{l}."
    for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
        shapes += [(p + name + ".weight", [H, H]), (p + name + ".bias", [H])]
    shapes += [(p + "attention.output.LayerNorm.weight", [H]), (p + "attention.output.LayerNorm.bias", [H]),
               (p + "intermediate.dense.weight", [I, H]), (p + "intermediate.dense.bias", [I]),
               (p + "output.dense.weight", [H, I]), (p + "output.dense.bias", [H]),
               (p + "output.LayerNorm.weight", [H]), (p + "output.LayerNorm.bias", [H])]
shapes += [("bert.pooler.dense.weight", [H, H]), ("bert.pooler.dense.bias", [H])]
if with_classifier:
    shapes += [("classifier.weight", [C, H]), ("classifier.bias", [C])]
rng = random.Random(1234)
header, blobs, offset = {}, [], 0
for name, shape in shapes:
    n = 1
    for s in shape:
        n *= s
    if name.endswith("LayerNorm.weight"):
        values = [1.0] * n
    else:
        values = [rng.gauss(0.0, 0.4) for _ in range(n)]
    blob = struct.pack("<%df" % n, *values)
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
    blobs.append(blob)
    offset += len(blob)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
shutil.copy(vocab, os.path.join(out, "vocab.txt"))
json.dump({"do_lower_case": False}, open(os.path.join(out, "tokenizer_config.json"), "w"))
PYEOF
}
make_model "$TMP/model" 1
make_model "$TMP/model_nohead" 0

MRPC=(--data "$DEV" --text-a "#1 String" --text-b "#2 String")
PRED=(predict --model "$TMP/model" "${MRPC[@]}" --label Quality)
if run pred_np1 0 "$BIN" "${PRED[@]}" --output "$TMP/p1.jsonl"; then
  CHECKS=$((CHECKS + 1))
  if grep -qF "newly initialized" "$TMP/pred_np1.err"; then fail "pred_np1: complete folder reported missing weights" "$TMP/pred_np1.err"; else pass "pred_np1: no load warning"; fi
  expect_in "pred_np1: prints metrics" "$TMP/pred_np1.err" "eval: accuracy"
  CHECKS=$((CHECKS + 1))
  # Lines in input order, one per row; label = argmax; printed metrics = metrics of the file.
  if $PY - "$TMP/p1.jsonl" "$DEV" "$TMP/pred_np1.err" >"$TMP/pred_np1.cmp" 2>&1 <<'PYEOF'
import json, re, sys
preds = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], encoding="utf-8-sig") as f:
    labels = [int(l.split("\t")[0]) for l in list(f)[1:] if l.strip()]
assert len(preds) == 408, f"{len(preds)} lines"
assert [p["row"] for p in preds] == list(range(408)), "rows not 0..407 in order"
assert [p["line"] for p in preds] == list(range(2, 410)), "line numbers"
names = ["not_equivalent", "equivalent"]
for p in preds:
    lg = p["logits"]
    assert len(lg) == 2, p
    assert p["label"] == (1 if lg[1] > lg[0] else 0), p
    assert p["label_name"] == names[p["label"]], p
pred = [p["label"] for p in preds]
acc = sum(a == b for a, b in zip(pred, labels)) / 408
tp = sum(a == 1 and b == 1 for a, b in zip(pred, labels))
fp = sum(a == 1 and b == 0 for a, b in zip(pred, labels))
fn = sum(a == 0 and b == 1 for a, b in zip(pred, labels))
f1 = 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0
m = re.search(r"eval: accuracy ([0-9.]+) f1 ([0-9.]+)", open(sys.argv[3]).read())
assert m, "no 'eval: accuracy .. f1 ..' line"
assert m.group(1) == f"{acc:.4f}" and m.group(2) == f"{f1:.4f}", f"printed {m.group(0)}, expected {acc:.4f} {f1:.4f}"
assert len(set(pred)) == 2, "the random model predicts one class only: the test would not see swapped rows"
PYEOF
  then pass "pred_np1: 408 rows in order, labels = argmax, metrics match"; else fail "pred_np1: output" "$TMP/pred_np1.cmp"; fi
fi

# np 2 must give the same predictions. Rows in the last, partial global batch get
# other padding lengths, which may change fp32 logits by rounding only: logits
# agree to 1e-4 (they are O(1)), labels exactly unless the two logits are within 1e-4.
if [ -n "$MPIEXEC" ]; then
  if run pred_np2 0 "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" "${PRED[@]}" --output "$TMP/p2.jsonl"; then
    CHECKS=$((CHECKS + 1))
    if $PY - "$TMP/p1.jsonl" "$TMP/p2.jsonl" >"$TMP/pred_np2.cmp" 2>&1 <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 408, (len(a), len(b))
for x, y in zip(a, b):
    assert x["row"] == y["row"] and x["line"] == y["line"], (x, y)
    d = max(abs(p - q) for p, q in zip(x["logits"], y["logits"]))
    assert d <= 1e-4, f"row {x['row']}: logits {x['logits']} vs {y['logits']}"
    if abs(x["logits"][1] - x["logits"][0]) > 1e-4:
        assert x["label"] == y["label"], f"row {x['row']}: label {x['label']} vs {y['label']}"
PYEOF
    then pass "pred_np2: same rows, logits and labels as np 1"; else fail "pred_np2: differs from np 1" "$TMP/pred_np2.cmp"; fi
    CHECKS=$((CHECKS + 1))
    n=$(grep -c "eval: accuracy" "$TMP/pred_np2.err")
    if [ "$n" -eq 1 ]; then pass "pred_np2: metrics printed once"; else fail "pred_np2: metrics printed $n times" "$TMP/pred_np2.err"; fi
  fi
  grep -h "predict: " "$TMP/pred_np1.err" "$TMP/pred_np2.err" 2>/dev/null | sed 's/^/    throughput | /'
fi

if run pred_nohead 0 "$BIN" predict --model "$TMP/model_nohead" "${MRPC[@]}" --output "$TMP/p3.jsonl"; then
  expect_in "pred_nohead: warns" "$TMP/pred_nohead.err" "WARNING"
  expect_in "pred_nohead: HF-style report" "$TMP/pred_nohead.err" "newly initialized: ['classifier.weight', 'classifier.bias']"
fi

cp "$DEV" "$TMP/input.tsv"
if run pred_overwrite 2 "$BIN" predict --model "$TMP/model" --data "$TMP/input.tsv" --text-a 3 --output "$TMP/input.tsv"; then
  expect_in "pred_overwrite: refused" "$TMP/pred_overwrite.err" "is the input file"
  CHECKS=$((CHECKS + 1))
  if cmp -s "$DEV" "$TMP/input.tsv"; then pass "pred_overwrite: input untouched"; else fail "pred_overwrite: input changed"; fi
fi
if run pred_nolabel 0 "$BIN" predict --model "$TMP/model" --data "$TMP/dev.jsonl" --text-a sentence1 \
     --text-b sentence2 --batch-size 7 --output "$TMP/p4.jsonl"; then
  CHECKS=$((CHECKS + 1))
  if grep -qF "eval:" "$TMP/pred_nolabel.err"; then fail "pred_nolabel: metrics without labels" "$TMP/pred_nolabel.err"; else pass "pred_nolabel: no metrics"; fi
  CHECKS=$((CHECKS + 1))
  # Same pairs from the JSONL copy, other batch size: same labels.
  if $PY -c '
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 408
for x, y in zip(a, b):
    assert max(abs(p - q) for p, q in zip(x["logits"], y["logits"])) <= 1e-4, (x, y)
' "$TMP/p1.jsonl" "$TMP/p4.jsonl" >"$TMP/pred_nolabel.cmp" 2>&1; then pass "pred_nolabel: jsonl input, batch 7 = tsv, batch 32"; else
    fail "pred_nolabel: differs" "$TMP/pred_nolabel.cmp"; fi
fi
if run pred_badlabel 2 "$BIN" predict --model "$TMP/model" "${MRPC[@]}" --label Qualty --output "$TMP/p5.jsonl"; then
  expect_in "pred_badlabel: names the column" "$TMP/pred_badlabel.err" "--label = 'Qualty' is not a column"
  CHECKS=$((CHECKS + 1))
  if [ -e "$TMP/p5.jsonl" ]; then fail "pred_badlabel: output written anyway"; else pass "pred_badlabel: no output"; fi
fi

echo "== $CHECKS checks, $FAILURES failed"
[ "$FAILURES" -eq 0 ]
