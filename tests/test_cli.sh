#!/usr/bin/env bash
# End-to-end checks of the shardtrain command line: tokenize, config, predict,
# inspect and export (on a checkpoint from tests/train_checkpoint_probe).
# Usage: test_cli.sh SHARDTRAIN_BINARY SOURCE_DIR [MPIEXEC [MPIEXEC_FLAGS...]]
# Needs only bash and plain python3 (no torch, no jq). Every failed check prints
# "FAIL: <what>" with the command's output; the script exits 1 if any failed.
set -u
source "$(dirname "$0")/suite_lib.sh"
suite_start --mpiexec-optional "$@"
# A failed check shows the start of the command's output (its error comes first).
log_excerpt() { sed 's/^/    | /' "$1" | head -20; }

DEV=$SRC/data/glue/MRPC/dev.tsv
VOCAB=$SRC/data/vocab/bert-base-cased-vocab.txt
REF=$SRC/tests/data/mrpc_dev_bert-base-cased_ids.jsonl

# run NAME EXPECTED_STATUS CMD...: runs CMD with stdout/stderr in $TMP/NAME.{out,err}.
run() {
  local name=$1 expected=$2
  shift 2
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
  if grep -qF -- "$3" "$2"; then pass "$1"; else fail "$1: '$3' not in $(basename "$2")" "$2"; fi
}

# same_ids NAME FILE: FILE has exactly the reference ids of MRPC dev.
same_ids() {
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
  n=$(wc -l <"$TMP/tok_skip.out")
  if [ "$n" -eq 2 ]; then pass "tok_skip: 2 good rows kept"; else fail "tok_skip: $n lines, expected 2" "$TMP/tok_skip.out"; fi
  expect_in "tok_skip: skipped rows are reported" "$TMP/tok_skip.err" "skipped 1 bad rows"
fi

# Truncation only when asked: --max-length 20 caps every row, without it row 0 has 42 ids.
if run tok_trunc 0 "$BIN" tokenize --vocab "$VOCAB" --data "$DEV" --text-a 3 --text-b 4 --max-length 20; then
  if $PY -c '
import json, sys
lens = [len(json.loads(l)["input_ids"]) for l in open(sys.argv[1])]
sys.exit(0 if len(lens) == 408 and max(lens) == 20 else f"lengths {min(lens)}..{max(lens)}, {len(lens)} rows")
' "$TMP/tok_trunc.out" >"$TMP/tok_trunc.cmp" 2>&1; then pass "tok_trunc: every row <= 20 ids"; else
    fail "tok_trunc" "$TMP/tok_trunc.cmp"; fi
fi

# Byte-level BPE: a folder with tokenizer.json, a lone tokenizer.json, and
# errors that name the file and the type.
for bpe in roberta-base modernbert; do
  if run "tok_bpe_$bpe" 0 "$BIN" tokenize --vocab "$SRC/data/vocab/$bpe" --data "$DEV" --text-a 3 --text-b 4; then
    REF=$SRC/tests/data/mrpc_dev_${bpe}_ids.jsonl same_ids "tok_bpe_$bpe" "$TMP/tok_bpe_$bpe.out"
  fi
done
if run tok_bpe_json 0 "$BIN" tokenize --vocab "$SRC/data/vocab/modernbert/tokenizer.json" --data "$DEV" --text-a 3 --text-b 4; then
  REF=$SRC/tests/data/mrpc_dev_modernbert_ids.jsonl same_ids tok_bpe_json "$TMP/tok_bpe_json.out"
fi
mkdir -p "$TMP/unigram"
echo '{"model": {"type": "Unigram", "vocab": []}}' >"$TMP/unigram/tokenizer.json"
if run tok_unigram 2 "$BIN" tokenize --vocab "$TMP/unigram" --data "$DEV" --text-a 3 --text-b 4; then
  expect_in "tok_unigram: file and field named" "$TMP/tok_unigram.err" "$TMP/unigram/tokenizer.json': model.vocab must be a non-empty list"
fi
# SentencePiece through the executable (its module, libshardtrain_sentencepiece.so, beside it):
# DeBERTa-v3's ids for MRPC dev are the first 408 lines of the SentencePiece reference.
if run tok_spm 0 "$BIN" tokenize --vocab "$SRC/data/vocab/deberta-v3" --data "$DEV" --text-a 3 --text-b 4; then
  head -n 408 "$SRC/tests/data/spm/deberta-v3_ids.jsonl" | $PY -c '
import json, sys
for line in sys.stdin:
    row = json.loads(line)
    ids = row["input_ids"]
    sep = ids.index(2)
    print(json.dumps({"input_ids": ids, "token_type_ids": [0] * (sep + 1) + [1] * (len(ids) - sep - 1)}))' >"$TMP/spm_ref.jsonl"
  REF=$TMP/spm_ref.jsonl same_ids tok_spm "$TMP/tok_spm.out"
fi
if run tok_bpe_lower 2 "$BIN" tokenize --vocab "$SRC/data/vocab/roberta-base" --lowercase --data "$DEV" --text-a 3; then
  expect_in "tok_bpe_lower: --lowercase is for vocab.txt" "$TMP/tok_bpe_lower.err" "do_lower_case in its tokenizer_config.json"
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
GOOD_TOML=$TMP/good.toml
if run cfg_good 0 "$BIN" config --config "$TMP/good.toml" --train.batch_size 8; then
  expect_in "cfg_good: prints [train]" "$TMP/cfg_good.out" "[train]"
  expect_in "cfg_good: file value" "$TMP/cfg_good.out" "num_epochs = 2"
  expect_in "cfg_good: flag value" "$TMP/cfg_good.out" "batch_size = 8"
fi
printf '[train]\nlrr = 3e-5\n' >"$TMP/typo.toml"
# A list-valued key on the command line: a TOML array as in the file, or the
# comma form where it is unambiguous; ["O","B-PER"] once gave the tags
# '["O"' and '"B-PER"]'.
TOKEN=(--config "$TMP/good.toml" --model.task token_classification --data.text_b "")
if run cfg_list_toml 0 "$BIN" config "${TOKEN[@]}" --data.labels '["O","B-PER"]'; then
  expect_in "cfg_list_toml: a TOML array flag" "$TMP/cfg_list_toml.out" 'labels = ["O", "B-PER"]'
fi
if run cfg_list_comma 0 "$BIN" config "${TOKEN[@]}" --data.labels=O,B-PER; then
  expect_in "cfg_list_comma: the comma form" "$TMP/cfg_list_comma.out" 'labels = ["O", "B-PER"]'
fi
if run cfg_list_mangled 2 "$BIN" config "${TOKEN[@]}" --data.labels '[O,B-PER]'; then
  expect_in "cfg_list_mangled: shows the TOML form" "$TMP/cfg_list_mangled.err" \
    "data.labels = '[O,B-PER]': not a TOML array of strings (on the command line a list is a TOML array, in single quotes for the shell: '[\"O\", \"B-PER\"]', or the comma form O,B-PER)"
fi
if run cfg_list_spaced 2 "$BIN" config "${TOKEN[@]}" --data.labels 'O, B-PER'; then
  expect_in "cfg_list_spaced: the comma form with a space is refused" "$TMP/cfg_list_spaced.err" \
    "data.labels = 'O, B-PER': the item ' B-PER' has quotes or brackets, or spaces at its ends"
fi
if run cfg_choices_toml 0 "$BIN" config --config "$TMP/good.toml" --model.task multiple_choice \
     --data.choices '["ending0", "ending1"]'; then
  expect_in "cfg_choices_toml: data.choices as a TOML array" "$TMP/cfg_choices_toml.out" 'choices = ["ending0", "ending1"]'
fi
if run cfg_typo_file 2 "$BIN" config --config "$TMP/typo.toml"; then
  expect_in "cfg_typo_file: names the key" "$TMP/cfg_typo_file.err" "train.lrr"
  expect_in "cfg_typo_file: suggests" "$TMP/cfg_typo_file.err" "did you mean 'train.lr'"
fi
if run cfg_typo_flag 2 "$BIN" config --train.num_epoch 3; then
  expect_in "cfg_typo_flag: names the key" "$TMP/cfg_typo_flag.err" "train.num_epoch"
  expect_in "cfg_typo_flag: suggests" "$TMP/cfg_typo_flag.err" "did you mean 'train.num_epochs'"
fi

echo "== config with a DeepSpeed JSON"
# The reference ZeRO-3 JSON with fp16 off; the model's hidden_size is 8, so the
# "auto" sizes are 8*8 = 64, int(0.9*64) = 57 and 10*8 = 80, and
# train_batch_size "auto" = 8 per rank x 1 step x 4 ranks = 32.
cp "$GOOD_TOML" "$TMP/ds.toml"
printf '\n[parallel]\ndeepspeed_config = "%s"\n' "$SRC/configs/deepspeed/zero3_offload_fp32.json" >>"$TMP/ds.toml"
if run cfg_ds 0 "$BIN" config --config "$TMP/ds.toml" --train.batch_size 8 --world-size 4; then
  expect_in "cfg_ds: strategy from the stage" "$TMP/cfg_ds.out" 'strategy = "zero3"'
  expect_in "cfg_ds: JSON path kept" "$TMP/cfg_ds.out" "zero3_offload_fp32.json"
  expect_in "cfg_ds: reduce_bucket_size auto" "$TMP/cfg_ds.out" "reduce_bucket_size = 64"
  expect_in "cfg_ds: prefetch auto" "$TMP/cfg_ds.out" "stage3_prefetch_bucket_size = 57"
  expect_in "cfg_ds: persistence auto" "$TMP/cfg_ds.out" "stage3_param_persistence_threshold = 80"
  expect_in "cfg_ds: resolved lines printed" "$TMP/cfg_ds.out" \
    '# deepspeed: train_batch_size = "auto" -> 32 (8 per rank x 1 accumulation steps x 4 ranks)'
  expect_in "cfg_ds: offload" "$TMP/cfg_ds.out" 'offload_optimizer = "cpu"'
fi
if [ -n "$MPIEXEC" ] && run cfg_ds_np2 0 "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" config --config "$TMP/ds.toml"; then
  expect_in "cfg_ds_np2: world size of the job" "$TMP/cfg_ds_np2.out" "-> 32 (16 per rank x 1 accumulation steps x 2 ranks)"
fi
# The shipped reference JSON as is (fp16) with run.device = "cpu" (the default): refused with a hint.
sed "s|zero3_offload_fp32.json|zero3_offload.json|" "$TMP/ds.toml" >"$TMP/ds_fp16.toml"
if run cfg_ds_fp16 2 "$BIN" config --config "$TMP/ds_fp16.toml"; then
  expect_in "cfg_ds_fp16: names the key" "$TMP/cfg_ds_fp16.err" "fp16.enabled = true"
  expect_in "cfg_ds_fp16: hint" "$TMP/cfg_ds_fp16.err" 'On CPU use bf16: "fp16": {"enabled": false} and "bf16": {"enabled": true}'
fi

echo "== predict"
# A small random BertForSequenceClassification as a HF folder, written with
# plain python (safetensors is a JSON header + raw little-endian floats).
# make_model DIR WITH_CLASSIFIER (1, 0, qa: a BertForQuestionAnswering, ner: a BertForTokenClassification)
make_model() {
  $PY - "$1" "$2" "$VOCAB" <<'PYEOF'
import json, os, random, shutil, struct, sys
out, head, vocab = sys.argv[1], sys.argv[2], sys.argv[3]
with_classifier, qa, ner = head in ("1", "ner"), head == "qa", head == "ner"
os.makedirs(out, exist_ok=True)
V, H, I, P, L, C = sum(1 for _ in open(vocab, encoding="utf-8")), 16, 32, 512, 2, 2
architecture = "BertForQuestionAnswering" if qa else "BertForTokenClassification" if ner else "BertForSequenceClassification"
config = dict(architectures=[architecture], model_type="bert", vocab_size=V, hidden_size=H,
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
if qa:  # BertForQuestionAnswering has no pooler
    shapes += [("qa_outputs.weight", [2, H]), ("qa_outputs.bias", [2])]
elif ner:  # nor BertForTokenClassification
    pass
else:
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
  if grep -qF "newly initialized" "$TMP/pred_np1.err"; then fail "pred_np1: complete folder reported missing weights" "$TMP/pred_np1.err"; else pass "pred_np1: no load warning"; fi
  expect_in "pred_np1: prints evaluation's metrics" "$TMP/pred_np1.err" "eval: eval_accuracy"
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
m = re.search(r"eval: eval_accuracy ([0-9.]+) eval_f1 ([0-9.]+) eval_loss [0-9.]+ eval_mcc -?[0-9.]+ \(408 rows\)",
              open(sys.argv[3]).read())
assert m, "no 'eval: eval_accuracy .. eval_f1 .. eval_loss .. eval_mcc ..' line"
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
    n=$(grep -c "eval: eval_accuracy" "$TMP/pred_np2.err")
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
  if cmp -s "$DEV" "$TMP/input.tsv"; then pass "pred_overwrite: input untouched"; else fail "pred_overwrite: input changed"; fi
fi
if run pred_nolabel 0 "$BIN" predict --model "$TMP/model" --data "$TMP/dev.jsonl" --text-a sentence1 \
     --text-b sentence2 --batch-size 7 --output "$TMP/p4.jsonl"; then
  if grep -qF "eval:" "$TMP/pred_nolabel.err"; then fail "pred_nolabel: metrics without labels" "$TMP/pred_nolabel.err"; else pass "pred_nolabel: no metrics"; fi
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
  if [ -e "$TMP/p5.jsonl" ]; then fail "pred_badlabel: output written anyway"; else pass "pred_badlabel: no output"; fi
fi

# Outputs never replace what is at their path (issue 37, item 1; the writer
# itself: tests/test_fs_util.cpp): "-" is standard output, a link is written
# through and stays a link (one to /dev/stdout too), a file named like the old
# fixed temporary name is another file and survives.
# (A one-row input: these check where the lines go, not what they hold.)
printf 'a\tb\n1\tHello there.\n' >"$TMP/out.jsonl.tmp"
cp "$TMP/out.jsonl.tmp" "$TMP/own_input.copy"
ONE_ROW=(--data "$TMP/out.jsonl.tmp" --format tsv --text-a b)
if run pred_stdout 0 "$BIN" predict --model "$TMP/model" "${ONE_ROW[@]}" --output -; then
  if [ "$(wc -l <"$TMP/pred_stdout.out")" -eq 1 ] && [ ! -e ./- ] && [ ! -e "$TMP/-" ]; then
    pass "predict --output -: the line on standard output, no file named -"; else
    fail "predict --output -" "$TMP/pred_stdout.err"; fi
fi
echo "old target" >"$TMP/target.txt"
ln -s target.txt "$TMP/link.jsonl"
ln -s /dev/stdout "$TMP/stdout_link"
if run pred_link 0 "$BIN" predict --model "$TMP/model" "${ONE_ROW[@]}" --output "$TMP/link.jsonl" &&
   run pred_stdout_link 0 "$BIN" predict --model "$TMP/model" "${ONE_ROW[@]}" --output "$TMP/stdout_link"; then
  if [ -L "$TMP/link.jsonl" ] && [ "$(wc -l <"$TMP/target.txt")" -eq 1 ] && [ -L "$TMP/stdout_link" ] &&
     [ "$(wc -l <"$TMP/pred_stdout_link.out")" -eq 1 ]; then
    pass "predict --output LINK: written through to its target, the link kept (also to /dev/stdout)"; else
    fail "predict --output LINK: the link was replaced or the target not written"; fi
fi
if run pred_tmp_input 0 "$BIN" predict --model "$TMP/model" "${ONE_ROW[@]}" --output "$TMP/out.jsonl"; then
  if cmp -s "$TMP/out.jsonl.tmp" "$TMP/own_input.copy" && [ "$(wc -l <"$TMP/out.jsonl")" -eq 1 ]; then
    pass "predict --data out.jsonl.tmp --output out.jsonl: the input survives"; else
    fail "predict deleted or changed its input out.jsonl.tmp"; fi
fi
if run pred_empty_output 2 "$BIN" predict --model "$TMP/model" "${ONE_ROW[@]}" --output ""; then
  expect_in "predict --output '': says the path is empty" "$TMP/pred_empty_output.err" \
    "--output '': the path is empty; name a file (or - for standard output)"
fi

# Hostile model folders (issue 37, items 4 and 5; tests/test_hf_folder.cpp has
# the loader's cases): no model_type, and a weight set to NaN, are refused by
# name instead of predicting from random or NaN weights with exit 0.
cp -r "$TMP/model" "$TMP/model_untyped"
$PY - "$TMP/model_untyped/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
del c["model_type"]
json.dump(c, open(sys.argv[1], "w"))
PYEOF
if run pred_untyped 2 "$BIN" predict --model "$TMP/model_untyped" "${ONE_ROW[@]}" --output "$TMP/untyped.jsonl"; then
  expect_in "predict: a config.json without model_type is refused" "$TMP/pred_untyped.err" \
    "config.json: no \"model_type\" key, so the model family is unknown"
fi
cp -r "$TMP/model" "$TMP/model_nan"
$PY - "$TMP/model_nan/model.safetensors" <<'PYEOF'
import json, struct, sys
blob = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", blob[:8])[0]
begin = json.loads(blob[8:8 + n])["bert.pooler.dense.weight"]["data_offsets"][0]
blob[8 + n + begin:8 + n + begin + 4] = struct.pack("<f", float("nan"))
open(sys.argv[1], "wb").write(blob)
PYEOF
if run pred_nan 2 "$BIN" predict --model "$TMP/model_nan" "${ONE_ROW[@]}" --output "$TMP/nan.jsonl"; then
  expect_in "predict: a NaN weight is refused, naming the tensor" "$TMP/pred_nan.err" \
    "tensor 'bert.pooler.dense.weight' holds 1 non-finite values"
fi
# --max-length beyond what the model takes is refused before any row is read,
# naming the flag (RoBERTa: max_position_embeddings 14 hold 12 tokens).
mkdir -p "$TMP/roberta"
cp "$SRC"/data/vocab/roberta-base/* "$TMP/roberta/"
cp "$SRC/tests/fixtures/family_golden/roberta_l2/config.json" "$SRC/tests/fixtures/family_golden/roberta_l2/model.safetensors" \
  "$TMP/roberta/"
if run pred_max_length 2 "$BIN" predict --model "$TMP/roberta" "${ONE_ROW[@]}" --max-length 13 --output "$TMP/r.jsonl"; then
  expect_in "predict --max-length: names the flag and the limit" "$TMP/pred_max_length.err" \
    "--max-length 13 exceeds the 12 tokens the roberta model takes"
fi
# estimate-memory's flags reach the config's reading of numbers (issue 37, item
# 12; the cases: tests/test_memory_estimate.cpp): 0 is not "the default".
if run est_zero_batch 2 "$BIN" estimate-memory --model "$SRC/configs/models/bert_tiny.json" --batch-size 0 &&
   run est_world_gap 2 "$BIN" estimate-memory --model "$SRC/configs/models/bert_tiny.json" --world-size ""; then
  expect_in "estimate-memory --batch-size 0: refused" "$TMP/est_zero_batch.err" "--batch-size = 0: must be >= 1"
  expect_in "estimate-memory --world-size '': refused" "$TMP/est_world_gap.err" "an empty item"
fi

echo "== predict (question answering)"
# A random BertForQuestionAnswering over 4 questions of the shipped SQuAD dev
# part (SQuAD JSON; --max-length 64 makes several windows per question) and a
# v2 JSON Lines file with an unanswerable question. No --text-a: the question
# and context are SQuAD's fields.
make_model "$TMP/model_qa" qa
mkdir -p "$TMP/qa"
$PY - "$SRC/data/qa/squad-v1.1/dev-articles-24-29.json" "$TMP/qa" <<'PYEOF'
import json, sys
src, out = sys.argv[1], sys.argv[2]
article = json.load(open(src, encoding="utf-8"))["data"][0]
paragraph = dict(article["paragraphs"][0], qas=article["paragraphs"][0]["qas"][:2])
paragraph2 = dict(article["paragraphs"][1], qas=article["paragraphs"][1]["qas"][:2])
json.dump({"version": "1.1", "data": [dict(article, paragraphs=[paragraph, paragraph2])]},
          open(out + "/dev.json", "w", encoding="utf-8"), ensure_ascii=False)
with open(out + "/v2.jsonl", "w", encoding="utf-8") as f:
    q = paragraph["qas"][0]
    f.write(json.dumps({"id": "unicode", "context": "Caf\u00e9 \u00e9t\u00e9: " + paragraph["context"],
                        "question": q["question"], "answers": {"text": [], "answer_start": []}}) + "\n")
    f.write(json.dumps({"id": "none", "context": "Nothing here answers it.", "question": "Who won?",
                        "answers": {"text": [], "answer_start": []}}) + "\n")
PYEOF
if run qa_pred 0 "$BIN" predict --model "$TMP/model_qa" --data "$TMP/qa/dev.json" --max-length 64 --doc-stride 16 \
     --with-answers --output "$TMP/qa/answers.jsonl"; then
  expect_in "predict (QA): prints EM / F1" "$TMP/qa_pred.err" "eval: eval_exact_match "
  # One line per question in input order; each answer is its context's
  # characters [start, end) (code points); predictions.json beside the output
  # holds {id: answer} in the same order.
  if $PY - "$TMP/qa/dev.json" "$TMP/qa/answers.jsonl" "$TMP/qa/predictions.json" >"$TMP/qa_pred.cmp" 2>&1 <<'PYEOF'
import json, sys
data = json.load(open(sys.argv[1], encoding="utf-8"))
qas = [(qa["id"], p["context"]) for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]
lines = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
assert [l["id"] for l in lines] == [i for i, _ in qas], "ids not in input order"
assert [l["row"] for l in lines] == list(range(len(qas))), "rows"
assert [l["line"] for l in lines] == list(range(1, len(qas) + 1)), "question numbers"
for l, (_, context) in zip(lines, qas):
    assert "null_score" not in l, l
    assert l["answer"] and context[l["start"]:l["end"]] == l["answer"], l
    assert 0 < l["end"] - l["start"] and isinstance(l["score"], float) and 0 < l["probability"] <= 1, l
official = json.load(open(sys.argv[3], encoding="utf-8"), object_pairs_hook=list)
assert official == [(l["id"], l["answer"]) for l in lines], official
PYEOF
  then pass "predict (QA): answers in input order, character spans, predictions.json beside"
  else fail "predict (QA) output" "$TMP/qa_pred.cmp"; fi
fi
if run qa_pred_v2 0 "$BIN" predict --model "$TMP/model_qa" --data "$TMP/qa/v2.jsonl" --max-length 48 --doc-stride 8 \
     --version-2-with-negative --output "$TMP/qa/v2_answers.jsonl" --predictions-json "$TMP/qa/v2_predictions.json"; then
  # v2: "" exactly when the null score beats the best span by more than the
  # threshold (0); null_odds.json beside the output holds each score_diff.
  if $PY - "$TMP/qa/v2.jsonl" "$TMP/qa/v2_answers.jsonl" "$TMP/qa/v2_predictions.json" "$TMP/qa/null_odds.json" \
       >"$TMP/qa_pred_v2.cmp" 2>&1 <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
lines = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
assert [l["id"] for l in lines] == [r["id"] for r in rows], "ids"
for l, r in zip(lines, rows):
    if l["score_diff"] > 0:
        assert l["answer"] == "" and l["start"] is None and l["score"] == l["null_score"], l
    else:
        assert l["answer"] and r["context"][l["start"]:l["end"]] == l["answer"], l
        assert abs(l["score_diff"] - (l["null_score"] - l["score"])) < 1e-4, l
assert json.load(open(sys.argv[3], encoding="utf-8")) == {l["id"]: l["answer"] for l in lines}
odds = json.load(open(sys.argv[4], encoding="utf-8"))  # full double digits; the lines have 9
assert list(odds) == [l["id"] for l in lines], odds
assert all(abs(odds[l["id"]] - l["score_diff"]) <= 1e-6 * max(1.0, abs(l["score_diff"])) for l in lines), odds
PYEOF
  then pass "predict (QA, v2): \"\" when the null score wins, null_odds.json, --predictions-json"
  else fail "predict (QA, v2) output" "$TMP/qa_pred_v2.cmp"; fi
  # A threshold between the two questions' score_diff: the one above it answers "".
  THRESHOLD=$($PY -c 'import json, sys; d = [json.loads(l)["score_diff"] for l in open(sys.argv[1])]; print(repr((d[0] + d[1]) / 2))' \
    "$TMP/qa/v2_answers.jsonl")
  if run qa_pred_v2_threshold 0 "$BIN" predict --model "$TMP/model_qa" --data "$TMP/qa/v2.jsonl" --max-length 48 \
       --doc-stride 8 --version-2-with-negative --null-score-diff-threshold "$THRESHOLD" --output "$TMP/qa/v2_t.jsonl"; then
    if $PY - "$TMP/qa/v2_answers.jsonl" "$TMP/qa/v2_t.jsonl" "$THRESHOLD" >"$TMP/qa_pred_v2_t.cmp" 2>&1 <<'PYEOF'
import json, sys
before = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
after = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
threshold = float(sys.argv[3])
assert before[0]["score_diff"] != before[1]["score_diff"], before
for b, a in zip(before, after):
    assert a["score_diff"] == b["score_diff"], (a, b)
    assert (a["answer"] == "") == (a["score_diff"] > threshold), (a, threshold)
    if a["answer"]:
        assert a["answer"] == b["answer"] and a["start"] == b["start"], (a, b)
assert sum(a["answer"] == "" for a in after) == 1, after
PYEOF
    then pass "predict (QA, v2): --null-score-diff-threshold between two questions' score_diff makes one answer \"\""
    else fail "predict (QA, v2) --null-score-diff-threshold" "$TMP/qa_pred_v2_t.cmp"; fi
  fi
fi
if run qa_pred_text_a 2 "$BIN" predict --model "$TMP/model_qa" --data "$TMP/qa/dev.json" --text-a question \
     --output "$TMP/qa/x.jsonl"; then
  expect_in "predict (QA): --text-a is refused, saying why" "$TMP/qa_pred_text_a.err" "do not apply to a question-answering model"
fi
if run qa_pred_clash 2 "$BIN" predict --model "$TMP/model_qa" --data "$TMP/qa/dev.json" \
     --output "$TMP/qa/predictions.json"; then
  expect_in "predict (QA): an --output named predictions.json is refused" "$TMP/qa_pred_clash.err" "is also --output"
fi
# --predictions-json that cannot be written is refused before --output is.
mkdir -p "$TMP/qa/a_folder"
if run qa_pred_json_folder 2 "$BIN" predict --model "$TMP/model_qa" --data "$TMP/qa/dev.json" --max-length 64 \
     --output "$TMP/qa/first.jsonl" --predictions-json "$TMP/qa/a_folder"; then
  expect_in "predict (QA): a folder as --predictions-json is refused" "$TMP/qa_pred_json_folder.err" \
    "--predictions-json '$TMP/qa/a_folder' is a folder; name a file"
  if [ ! -e "$TMP/qa/first.jsonl" ]; then pass "predict (QA): nothing written before the refusal"; else
    fail "predict (QA): --output written before --predictions-json was refused"; fi
fi
# --output - has no folder for predictions.json: said, not silent.
if run qa_pred_stdout 0 "$BIN" predict --model "$TMP/model_qa" --data "$TMP/qa/dev.json" --max-length 64 --doc-stride 16 \
     --output -; then
  expect_in "predict (QA): --output - says where predictions.json is not" "$TMP/qa_pred_stdout.err" \
    "has no folder to put predictions.json in; give --predictions-json FILE"
fi
# A HF folder knows nothing of a run: the settings printed say so.
if run qa_pred_settings 0 "$BIN" predict --model "$TMP/model_qa" --data "$TMP/qa/dev.json" --output "$TMP/qa/s.jsonl"; then
  expect_in "predict (QA): settings printed, run_qa's defaults" "$TMP/qa_pred_settings.err" \
    "--max-length 384 (default), --doc-stride 128 (default)"
fi
# A question too long for the window: the message names the flag, not the config key.
if run qa_pred_short 2 "$BIN" predict --model "$TMP/model_qa" --data "$TMP/qa/dev.json" --max-length 8 --doc-stride 2 \
     --output "$TMP/qa/short.jsonl"; then
  expect_in "predict (QA): a window too short names --max-length" "$TMP/qa_pred_short.err" "nothing of the context fits in --max-length = 8; raise --max-length"
fi
# A token classifier's tags beyond its id2label: named as the model's labels
# (there is no --labels flag).
make_model "$TMP/model_ner" ner
printf '{"tokens": ["John", "went"], "ner_tags": [0, 7]}\n' >"$TMP/ner_ids.jsonl"
if run ner_pred_ids 2 "$BIN" predict --model "$TMP/model_ner" --data "$TMP/ner_ids.jsonl" --label ner_tags \
     --output "$TMP/ner_ids_pred.jsonl"; then
  expect_in "predict (NER): a tag id beyond id2label names the model's labels" "$TMP/ner_pred_ids.err" \
    "tag id 7 is not below the 2 names of the model's labels (id2label)"
fi
if run pred_no_text_a 2 "$BIN" predict --model "$TMP/model" --data "$DEV" --output "$TMP/no_text_a.jsonl"; then
  expect_in "predict: a sequence classifier without --text-a is refused" "$TMP/pred_no_text_a.err" "--text-a: the text column of a sequence classifier"
fi

echo "== inspect / export / predict --model CKPT"
# A training checkpoint from tests/train_checkpoint_probe.cpp (2 ranks writing
# uneven parts when mpiexec is given): a tiny random classifier over the
# bert-base-cased vocabulary, AdamW moments and a known TrainState.
PROBE=${SHARDTRAIN_TRAIN_CHECKPOINT_PROBE:-$(dirname "$BIN")/tests/train_checkpoint_probe}
CKPT_DIR=$TMP/run
CKPT=$CKPT_DIR/checkpoint_000002.h5
mkdir -p "$CKPT_DIR"
CKPT_NP=1
if [ -n "$MPIEXEC" ]; then CKPT_NP=2; fi
if [ ! -x "$PROBE" ]; then
  fail "checkpoint fixture: $PROBE is not built (cmake --build build --target train_checkpoint_probe)"
elif if [ "$CKPT_NP" -eq 2 ]; then
       run ckpt_probe 0 "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$PROBE" "$CKPT" "$VOCAB"
     else run ckpt_probe 0 "$PROBE" "$CKPT" "$VOCAB"; fi; then

  if run ckpt_inspect 0 "$BIN" inspect "$CKPT"; then
    I=$TMP/ckpt_inspect.out
    expect_in "inspect: path" "$I" "checkpoint:  $CKPT"
    expect_in "inspect: kind" "$I" "kind:        shardtrain-train-checkpoint"
    expect_in "inspect: progress" "$I" "step 12, epoch 1, 5 batches of the epoch consumed"
    expect_in "inspect: writer" "$I" "$CKPT_NP ranks, strategy zero1, seed 42"
    expect_in "inspect: schedule" "$I" "base lr 3e-05, 3 warmup steps, 30 training steps"
    expect_in "inspect: train loss" "$I" "train loss 1.625 since the last report (mean of 4)"
    expect_in "inspect: metrics" "$I" "metrics:     eval_accuracy 0.6875, eval_f1 0.8"
    expect_in "inspect: model" "$I" "2 layers, hidden 16, 2 heads, intermediate 32, vocab 28996, 2 labels (not_equivalent, equivalent)"
    expect_in "inspect: tokenizer" "$I" "tokenizer:   wordpiece, 28996 tokens, lowercase no"
    expect_in "inspect: parameters" "$I" "parameters:  476,946 in 41 tensors"
    expect_in "inspect: optimizer" "$I" "optimizer:   AdamW state present"
    expect_in "inspect: datasets" "$I" "datasets:    123"
  fi
  if run ckpt_inspect_json 0 "$BIN" inspect "$CKPT" --json; then
    # Parameter count from the architecture, not from the file.
    if $PY - "$TMP/ckpt_inspect_json.out" "$CKPT" "$CKPT_NP" >"$TMP/ckpt_inspect_json.cmp" 2>&1 <<'PYEOF'
import json, os, sys
s = json.load(open(sys.argv[1]))
V, H, I, P, L, C = 28996, 16, 32, 512, 2, 2
layer = 4 * (H * H + H) + 2 * H + (I * H + I) + (H * I + H) + 2 * H
n = V * H + P * H + 2 * H + 2 * H + L * layer + H * H + H + C * H + C
tensors = 5 + 16 * L + 2 + 2
expect = {"path": sys.argv[2], "size_bytes": os.path.getsize(sys.argv[2]), "kind": "shardtrain-train-checkpoint",
          "step": 12, "epoch": 1, "batches_consumed": 5, "seed": 42, "world_size": int(sys.argv[3]),
          "strategy": "zero1", "schedule": {"base_lr": 3e-05, "warmup_steps": 3, "num_training_steps": 30},
          "train": {"loss_sum": 6.5, "loss_count": 4, "train_seconds": 12.5},
          "metrics": {"eval_accuracy": 0.6875, "eval_f1": 0.8}, "optimizer_state": True,
          "optimizer_bytes": 2 * 4 * n, "num_datasets": 3 * tensors,
          "tokenizer": {"type": "wordpiece", "vocab_size": 28996, "lowercase": False}, "has_config_toml": True}
for key, value in expect.items():
    assert s.get(key) == value, f"{key}: {s.get(key)!r}, expected {value!r}"
m = s["model"]
want = {"num_hidden_layers": L, "hidden_size": H, "num_attention_heads": 2, "intermediate_size": I,
        "vocab_size": V, "num_labels": C, "id2label": ["not_equivalent", "equivalent"],
        "num_parameters": n, "parameter_bytes": 4 * n, "num_tensors": tensors}
for key, value in want.items():
    assert m.get(key) == value, f"model.{key}: {m.get(key)!r}, expected {value!r}"
PYEOF
    then pass "inspect --json: every field as written, parameter count from the architecture"; else
      fail "inspect --json" "$TMP/ckpt_inspect_json.cmp"; fi
  fi
  if run ckpt_inspect_config 0 "$BIN" inspect "$CKPT" --config; then
    if [ "$(cat "$TMP/ckpt_inspect_config.out")" = "$(printf '[train]\nlr = 3e-05\nnum_epochs = 3')" ]; then
      pass "inspect --config: the stored TOML"; else fail "inspect --config" "$TMP/ckpt_inspect_config.out"; fi
  fi
  if run ckpt_inspect_missing 2 "$BIN" inspect "$TMP/run/nope.h5"; then
    expect_in "inspect: missing file named" "$TMP/ckpt_inspect_missing.err" "$TMP/run/nope.h5 does not exist"
  fi
  if run ckpt_inspect_text 2 "$BIN" inspect "$DEV"; then
    expect_in "inspect: not HDF5" "$TMP/ckpt_inspect_text.err" "is not an HDF5 file"
  fi
  if run ckpt_inspect_folder 2 "$BIN" inspect "$TMP/model"; then
    expect_in "inspect: folder" "$TMP/ckpt_inspect_folder.err" "is a folder"
  fi
  # A FIFO would block an open(), a symbolic-link loop cannot be opened: both named, no hang.
  mkfifo "$TMP/fifo.h5" && ln -s "$TMP/loop.h5" "$TMP/loop.h5"
  if run ckpt_inspect_fifo 2 timeout "$((20 * SCALE))" "$BIN" inspect "$TMP/fifo.h5"; then
    expect_in "inspect: FIFO" "$TMP/ckpt_inspect_fifo.err" "is a FIFO (named pipe), not a file"
  fi
  if run ckpt_inspect_loop 2 timeout "$((20 * SCALE))" "$BIN" inspect "$TMP/loop.h5"; then
    expect_in "inspect: symlink loop" "$TMP/ckpt_inspect_loop.err" "a loop of symbolic links"
  fi
  if run ckpt_plain 0 "$PROBE" "$TMP/plain.h5" --plain && run ckpt_inspect_plain 2 "$BIN" inspect "$TMP/plain.h5"; then
    expect_in "inspect: not a training checkpoint" "$TMP/ckpt_inspect_plain.err" "not a training checkpoint"
  fi

  # A changed attribute (hidden_act gelu -> relu in the stored model config,
  # the same length: a byte patch) is refused by inspect --verify and predict,
  # naming the attribute (issue 37, item 2; tests/test_checkpoint_integrity_mpi.cpp).
  cp "$CKPT" "$TMP/relu.h5"
  if $PY - "$TMP/relu.h5" >"$TMP/relu.patch" 2>&1 <<'PYEOF'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
at = data.find(b'"hidden_act": "gelu"')
assert at >= 0 and data.find(b'"hidden_act": "gelu"', at + 1) < 0, "one hidden_act in the file"
data[at:at + 20] = b'"hidden_act": "relu"'
open(sys.argv[1], "wb").write(data)
PYEOF
  then
    if run ckpt_relu_verify 2 "$BIN" inspect --verify "$TMP/relu.h5"; then
      expect_in "inspect --verify: a changed model config is named" "$TMP/ckpt_relu_verify.err" \
        "$TMP/relu.h5: attribute 'model_config_json' fails its checksum"
    fi
    if run ckpt_relu_predict 2 "$BIN" predict --model "$TMP/relu.h5" "${ONE_ROW[@]}" --output "$TMP/relu.jsonl"; then
      expect_in "predict: a changed model config is refused" "$TMP/ckpt_relu_predict.err" \
        "attribute 'model_config_json' fails its checksum"
    fi
  else
    fail "patching hidden_act in a copy of the checkpoint" "$TMP/relu.patch"
  fi
  if run ckpt_verify 0 "$BIN" inspect --verify "$CKPT"; then
    expect_in "inspect --verify: attributes checked" "$TMP/ckpt_verify.out" "attributes match their checksums"
  fi

  # Export, then the HF folder and the checkpoint must predict the same: same
  # fp32 weights, same tokenizer settings, same code path -> identical lines.
  EXP=$TMP/exported
  if run ckpt_export 0 "$BIN" export "$CKPT" --output "$EXP"; then
    if cmp -s "$VOCAB" "$EXP/vocab.txt"; then pass "export: vocab.txt is the vocabulary"; else fail "export: vocab.txt differs"; fi
    if $PY - "$EXP" >"$TMP/ckpt_export.cmp" 2>&1 <<'PYEOF'
import json, os, sys
d = sys.argv[1]
t = json.load(open(os.path.join(d, "tokenizer_config.json")))
assert t["do_lower_case"] is False, t
c = json.load(open(os.path.join(d, "config.json")))
assert c["num_labels"] == 2 if "num_labels" in c else len(c["id2label"]) == 2, c
assert c["id2label"] == {"0": "not_equivalent", "1": "equivalent"}, c["id2label"]
assert c["hidden_size"] == 16 and c["num_hidden_layers"] == 2 and c["vocab_size"] == 28996, c
assert c["architectures"] == ["BertForSequenceClassification"], c
PYEOF
    then pass "export: config.json and tokenizer_config.json"; else fail "export: json files" "$TMP/ckpt_export.cmp"; fi
  fi
  if [ -n "$MPIEXEC" ] && run ckpt_export_np2 0 "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" export "$CKPT" --output "$TMP/exported_np2"; then
    if cmp -s "$EXP/model.safetensors" "$TMP/exported_np2/model.safetensors"; then pass "export np 2: same model.safetensors as np 1"; else
      fail "export np 2: model.safetensors differs from np 1"; fi
  fi

  # Never overwrite user data: a non-empty folder is refused, --force replaces
  # only the exported files.
  echo "my notes" >"$EXP/notes.txt"
  touch -d '2001-01-01' "$EXP/model.safetensors"
  if run ckpt_export_refuse 2 "$BIN" export "$CKPT" --output "$EXP"; then
    expect_in "export: refuses a non-empty folder" "$TMP/ckpt_export_refuse.err" "is not empty; refusing to write into it"
    expect_in "export: suggests --force" "$TMP/ckpt_export_refuse.err" "--force"
    if [ "$(date -r "$EXP/model.safetensors" +%Y)" = 2001 ]; then pass "export: refused run left the folder alone"; else
      fail "export: refused run rewrote model.safetensors"; fi
  fi
  # Tokenizer files of an earlier export of another tokenizer (a BPE one) that
  # this export does not write would be read beside it: removed (issue 37, item 9),
  # DeBERTa's spm.model too, and every SentencePiece model name a folder may hold.
  echo '{"model": {"type": "BPE"}}' >"$EXP/tokenizer.json"
  echo '{"unk_token": "<unk>"}' >"$EXP/special_tokens_map.json"
  echo '#version: 0.2' >"$EXP/merges.txt"
  echo 'sentencepiece' >"$EXP/spm.model"
  echo 'sentencepiece' >"$EXP/sentencepiece.model"
  if run ckpt_export_force 0 "$BIN" export "$CKPT" --output "$EXP" --force; then
    if [ "$(cat "$EXP/notes.txt")" = "my notes" ] && [ "$(date -r "$EXP/model.safetensors" +%Y)" != 2001 ]; then
      pass "export --force: rewrote the model, kept the user's file"; else fail "export --force: folder contents wrong"; fi
    if [ ! -e "$EXP/tokenizer.json" ] && [ ! -e "$EXP/special_tokens_map.json" ] && [ ! -e "$EXP/merges.txt" ] &&
       [ ! -e "$EXP/spm.model" ] && [ ! -e "$EXP/sentencepiece.model" ] && cmp -s "$VOCAB" "$EXP/vocab.txt"; then
      pass "export --force: the earlier export's other tokenizer files removed"; else
      fail "export --force: files of the earlier export left: $(ls "$EXP" | tr '\n' ' ')" "$TMP/ckpt_export_force.err"; fi
    expect_in "export --force: says what it removed" "$TMP/ckpt_export_force.err" \
      "removed special_tokens_map.json, tokenizer.json, merges.txt, spm.model, sentencepiece.model of an earlier export"
  fi
  # A command's own inputs are never its output (a hostile run turned a
  # checkpoint into a 1 KB JSONL file): the checkpoint, by another spelling;
  # a file of the model folder; the folder that holds the checkpoint.
  cp "$CKPT" "$TMP/own.h5"
  if run pred_own_ckpt 2 "$BIN" predict --model "$TMP/own.h5" "${MRPC[@]}" --output "$TMP/./own.h5"; then
    expect_in "predict: --output over its checkpoint refused" "$TMP/pred_own_ckpt.err" "is --model '$TMP/own.h5'"
    if cmp -s "$CKPT" "$TMP/own.h5"; then pass "predict: checkpoint untouched"; else fail "predict: checkpoint changed"; fi
  fi
  cp "$EXP/model.safetensors" "$TMP/own.safetensors"
  if run pred_own_folder 2 "$BIN" predict --model "$EXP" "${MRPC[@]}" --output "$EXP/model.safetensors"; then
    expect_in "predict: --output in its model folder refused" "$TMP/pred_own_folder.err" "is inside the folder of --model"
    if cmp -s "$EXP/model.safetensors" "$TMP/own.safetensors"; then pass "predict: model.safetensors untouched"; else
      fail "predict: model.safetensors changed"; fi
  fi
  if run ckpt_export_own 2 "$BIN" export "$CKPT" --output "$CKPT_DIR/" --force; then
    expect_in "export: into the checkpoint's folder refused" "$TMP/ckpt_export_own.err" "is the folder that holds the checkpoint"
  fi
  if run tok_own_vocab 2 "$BIN" tokenize --vocab "$EXP" "${MRPC[@]}" --output "$EXP/vocab.txt"; then
    expect_in "tokenize: --output over its vocabulary refused" "$TMP/tok_own_vocab.err" "is inside the folder of --vocab"
  fi
  if run ckpt_export_file 2 "$BIN" export "$CKPT" --output "$DEV"; then
    expect_in "export: --output is a file" "$TMP/ckpt_export_file.err" "exists and is not a folder"
  fi
  # An --output that is a loop of symbolic links, or has one on its way, is
  # named as one (exit 2), not a bare filesystem error (exit 1).
  ln -s "$TMP/loop_out" "$TMP/loop_out"
  if run ckpt_export_loop 2 "$BIN" export "$CKPT" --output "$TMP/loop_out"; then
    expect_in "export: --output a link loop" "$TMP/ckpt_export_loop.err" \
      "--output '$TMP/loop_out': a loop of symbolic links (Too many levels of symbolic links (ELOOP)); point --output at a real path"
  fi
  if run ckpt_export_loop_in 2 "$BIN" export "$CKPT" --output "$TMP/loop_out/model"; then
    expect_in "export: --output inside a link loop" "$TMP/ckpt_export_loop_in.err" \
      "--output '$TMP/loop_out/model': '$TMP/loop_out' is a loop of symbolic links"
  fi
  if run ckpt_export_loop_ckpt 2 "$BIN" export "$TMP/loop_out" --output "$TMP/exported_y"; then
    expect_in "export: a checkpoint that is a link loop" "$TMP/ckpt_export_loop_ckpt.err" \
      "checkpoint '$TMP/loop_out': a loop of symbolic links"
  fi
  if run tok_loop 2 "$BIN" tokenize --vocab "$VOCAB" "${MRPC[@]}" --output "$TMP/loop_out/ids.jsonl"; then
    expect_in "tokenize: --output inside a link loop" "$TMP/tok_loop.err" \
      "--output '$TMP/loop_out/ids.jsonl': '$TMP/loop_out' is a loop of symbolic links"
  fi
  ln -s "$TMP/loop.svg" "$TMP/loop.svg"
  if run plot_loop 2 "$BIN" plot "$TMP/run" --output "$TMP/loop.svg"; then
    expect_in "plot: --output a link loop" "$TMP/plot_loop.err" "--output '$TMP/loop.svg': a loop of symbolic links"
  fi
  if run ckpt_export_dtype 2 "$BIN" export "$CKPT" --output "$TMP/exported_x" --dtype int8; then
    expect_in "export: bad --dtype" "$TMP/ckpt_export_dtype.err" "--dtype 'int8'"
  fi

  # float16 / bfloat16: every value is the float32 value rounded to nearest even.
  if run ckpt_export_f16 0 "$BIN" export "$CKPT" --output "$TMP/exported_f16" --dtype float16 &&
     run ckpt_export_bf16 0 "$BIN" export "$CKPT" --output "$TMP/exported_bf16" --dtype bfloat16; then
    if $PY - "$EXP/model.safetensors" "$TMP/exported_f16/model.safetensors" "$TMP/exported_bf16/model.safetensors" \
         >"$TMP/ckpt_export_f16.cmp" 2>&1 <<'PYEOF'
import json, struct, sys
def load(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return header, blob[8 + n:]
h32, d32 = load(sys.argv[1])
h16, d16 = load(sys.argv[2])
hbf, dbf = load(sys.argv[3])
assert set(h32) == set(h16) == set(hbf), "tensor names differ"
for name, e in h32.items():
    assert e["dtype"] == "F32" and h16[name]["dtype"] == "F16" and hbf[name]["dtype"] == "BF16", name
    assert e["shape"] == h16[name]["shape"] == hbf[name]["shape"], name
    a, b = e["data_offsets"]
    count = (b - a) // 4
    x = struct.unpack("<%df" % count, d32[a:b])
    a16, b16 = h16[name]["data_offsets"]
    y = struct.unpack("<%de" % count, d16[a16:b16])
    want = struct.unpack("<%de" % count, struct.pack("<%de" % count, *x))
    assert y == want, f"{name}: float16 values are not the rounded float32 values"
    bits = struct.unpack("<%dI" % count, d32[a:b])
    abf, bbf = hbf[name]["data_offsets"]
    got = struct.unpack("<%dH" % count, dbf[abf:bbf])
    rne = tuple((u + 0x7FFF + ((u >> 16) & 1)) >> 16 for u in bits)
    assert got == rne, f"{name}: bfloat16 values are not the rounded float32 values"
PYEOF
    then pass "export --dtype float16/bfloat16: float32 values rounded to nearest even"; else
      fail "export --dtype" "$TMP/ckpt_export_f16.cmp"; fi
  fi

  CK_PRED=(predict "${MRPC[@]}" --label Quality)
  if run ckpt_pred 0 "$BIN" "${CK_PRED[@]}" --model "$CKPT" --output "$TMP/pc.jsonl" &&
     run ckpt_pred_hf 0 "$BIN" "${CK_PRED[@]}" --model "$EXP" --output "$TMP/pe.jsonl"; then
    expect_in "predict --model CKPT: prints metrics" "$TMP/ckpt_pred.err" "eval: eval_accuracy"
    if grep -q WARNING "$TMP/ckpt_pred.err"; then fail "predict --model CKPT: warns" "$TMP/ckpt_pred.err"; else pass "predict --model CKPT: no warning"; fi
    if $PY - "$TMP/pc.jsonl" "$TMP/pe.jsonl" >"$TMP/ckpt_pred.cmp" 2>&1 <<'PYEOF'
import json, sys
a = open(sys.argv[1]).read().splitlines()
b = open(sys.argv[2]).read().splitlines()
assert len(a) == len(b) == 408, (len(a), len(b))
first = [json.loads(l)["logits"][0] for l in a]
assert max(first) - min(first) > 1e-3, "logits do not depend on the input: the comparison would mean nothing"
for i, (x, y) in enumerate(zip(a, b)):
    assert x == y, f"row {i}: checkpoint {x} vs exported folder {y}"
PYEOF
    then pass "predict: checkpoint and its exported folder give identical lines"; else fail "predict CKPT vs export" "$TMP/ckpt_pred.cmp"; fi
    if [ "$(grep -o 'eval: .*' "$TMP/ckpt_pred.err")" = "$(grep -o 'eval: .*' "$TMP/ckpt_pred_hf.err")" ]; then
      pass "predict: same metrics from checkpoint and folder"; else fail "predict: metrics differ" "$TMP/ckpt_pred.err"; fi
  fi
  if [ -n "$MPIEXEC" ] && run ckpt_pred_np2 0 "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" "${CK_PRED[@]}" --model "$CKPT" \
       --output "$TMP/pc2.jsonl"; then
    # Tolerance as for pred_np2 above (other padding in the last global batch).
    if $PY - "$TMP/pc.jsonl" "$TMP/pc2.jsonl" >"$TMP/ckpt_pred_np2.cmp" 2>&1 <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 408, (len(a), len(b))
for x, y in zip(a, b):
    assert x["row"] == y["row"], (x, y)
    assert max(abs(p - q) for p, q in zip(x["logits"], y["logits"])) <= 1e-4, (x, y)
PYEOF
    then pass "predict --model CKPT np 2: same as np 1"; else fail "predict --model CKPT np 2" "$TMP/ckpt_pred_np2.cmp"; fi
  fi

  # Other tools read the file: h5dump lists the datasets with their true shapes.
  if command -v h5dump >/dev/null 2>&1; then
    if run ckpt_h5dump 0 h5dump -H "$CKPT"; then
      H=$TMP/ckpt_h5dump.out
      expect_in "h5dump: /model group" "$H" 'GROUP "model"'
      expect_in "h5dump: word embeddings" "$H" 'DATASET "bert.embeddings.word_embeddings.weight"'
      expect_in "h5dump: true shape" "$H" "DATASPACE  SIMPLE { ( 28996, 16 ) / ( 28996, 16 ) }"
      expect_in "h5dump: optimizer group" "$H" 'GROUP "exp_avg_sq"'
      expect_in "h5dump: kind attribute" "$H" 'ATTRIBUTE "kind"'
    fi
  else
    echo "skip: h5dump not installed (apt-get install hdf5-tools)"
  fi
fi

suite_end
