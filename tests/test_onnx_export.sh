#!/usr/bin/env bash
# `shardtrain export --format onnx` end to end (docs/export.md): a tiny BERT
# trained on MRPC (suite_lib.sh's tiny run) exported from its checkpoint and
# from the HF folder `export` writes; the real ONNX Runtime (onnxruntime-node
# under build/onnxruntime, tests/onnx/run.js) on the dev rows tokenized by
# `shardtrain tokenize`, padded in batches of 1 and 8 rows, gives predict's
# logits (within 1e-5) and labels, and both exports the same; the export's
# folder holds model.onnx, config.json and the tokenizer's files; a model
# whose activation has no ONNX form, an unknown opset and an output over the input are refused, and a
# non-empty folder without --force. --dtype float16: the file about half,
# float32 logits near predict's and its labels; --dtype bfloat16 refused.
#
#   bash tests/test_onnx_export.sh BIN SRC RUNTIME_DIR MPIEXEC [MPIEXEC_FLAGS...]
# shellcheck source=tests/suite_lib.sh
source "$(dirname "$0")/suite_lib.sh"
RUNTIME=${3:?usage: test_onnx_export.sh BIN SRC RUNTIME_DIR MPIEXEC [MPIEXEC_FLAGS...]}
set -- "$1" "$2" "${@:4}"
suite_start "$@"

tiny_run_config <<TOML
[train]
num_epochs = 1
max_steps = 6
batch_size = 16
lr = 1e-3
[checkpoint]
every_epochs = 1
[run]
storage_path = "$TMP/runs"
TOML

ckpt="$TMP/runs/tiny/checkpoint_000001.h5"
if "$MPIEXEC" "${MPI_FLAGS[@]}" -np 1 "$BIN" train -c "$TMP/tiny.toml" --run.name tiny >"$TMP/train.log" 2>&1 &&
  "$BIN" export "$ckpt" --format onnx --output "$TMP/onnx_ckpt" >"$TMP/export.log" 2>&1 &&
  "$BIN" export "$ckpt" --output "$TMP/hf" >>"$TMP/export.log" 2>&1 &&
  "$BIN" export "$TMP/hf" --format onnx --output "$TMP/onnx_hf" >>"$TMP/export.log" 2>&1; then
  pass "export --format onnx from a checkpoint and from a HF folder"
else
  fail "export --format onnx from a checkpoint and from a HF folder" "$TMP/export.log"
fi
if [ -s "$TMP/onnx_ckpt/model.onnx" ] && [ -s "$TMP/onnx_ckpt/config.json" ] && [ -s "$TMP/onnx_ckpt/vocab.txt" ] &&
  [ -s "$TMP/onnx_ckpt/tokenizer_config.json" ] && [ -s "$TMP/onnx_hf/model.onnx" ] && [ -s "$TMP/onnx_hf/vocab.txt" ]; then
  pass "the folder holds model.onnx, config.json and the tokenizer's files"
else
  fail "the folder holds model.onnx, config.json and the tokenizer's files" "$TMP/export.log"
fi

# The dev rows as the tokenizer gives them, padded into batches of 1 and of 8.
"$BIN" tokenize --vocab "$TMP/onnx_ckpt" --data "$TMP/dev.tsv" --text-a '#1 String' --text-b '#2 String' \
  --max-length 64 --output "$TMP/ids.jsonl" >"$TMP/tokenize.log" 2>&1
$PY - "$TMP/ids.jsonl" "$TMP/inputs.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = open(sys.argv[2], "w")
def batch(group):
    L = max(len(r["input_ids"]) for r in group)
    pad = lambda v: v + [0] * (L - len(v))
    out.write(json.dumps({"input_ids": [pad(r["input_ids"]) for r in group],
                          "token_type_ids": [pad(r["token_type_ids"]) for r in group],
                          "attention_mask": [pad([1] * len(r["input_ids"])) for r in group]}) + "\n")
batch(rows[:1])
for i in range(1, len(rows), 8): batch(rows[i:i + 8])
PY
ok=1
for which in ckpt hf; do
  node "$SRC/tests/onnx/run.js" "$TMP/onnx_$which/model.onnx" "$TMP/inputs.jsonl" "$RUNTIME" >"$TMP/ort_$which.jsonl" 2>"$TMP/ort_$which.err" || ok=0
done
if [ $ok = 1 ]; then
  pass "ONNX Runtime ($(tail -1 "$TMP/ort_ckpt.jsonl")) runs both exports"
else
  fail "ONNX Runtime runs both exports" "$TMP/ort_ckpt.err"
fi
"$BIN" predict --model "$ckpt" --data "$TMP/dev.tsv" --output "$TMP/predict.jsonl" >"$TMP/predict.log" 2>&1
if $PY - "$TMP/predict.jsonl" "$TMP/ort_ckpt.jsonl" "$TMP/ort_hf.jsonl" >"$TMP/compare.log" 2>&1 <<'PY'
import json, sys
predicted = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def logits(path):
    out = []
    for line in open(path):
        o = json.loads(line)
        if "logits" not in o: continue
        n, c = o["logits"]["dims"]
        out += [o["logits"]["data"][i * c:(i + 1) * c] for i in range(n)]
    return out
a, b = logits(sys.argv[2]), logits(sys.argv[3])
assert len(a) == len(predicted) == len(b) == 40, (len(a), len(predicted), len(b))
worst = max(abs(x - y) for p, r in zip(predicted, a) for x, y in zip(p["logits"], r))
same = max(abs(x - y) for r, s in zip(a, b) for x, y in zip(r, s))
labels = sum(p["label"] == max(range(len(r)), key=r.__getitem__) for p, r in zip(predicted, a))
print(f"worst |onnx - predict| {worst:.3g}; checkpoint export vs HF folder export {same:.3g}; labels equal {labels}/40")
assert worst < 1e-5 and same == 0 and labels == 40
PY
then
  pass "ONNX Runtime's logits are predict's within 1e-5 and its labels predict's; both exports agree ($(cat "$TMP/compare.log"))"
else
  fail "ONNX Runtime's logits are predict's within 1e-5 and its labels predict's; both exports agree" "$TMP/compare.log"
fi

# --dtype float16: FLOAT16 weights (the file about half the float32 one),
# float32 logits within 3e-3 x the largest |logit| of predict's (the
# tolerance of tests/test_onnx_export.cpp) and the same labels.
if "$BIN" export "$ckpt" --format onnx --dtype float16 --output "$TMP/onnx_fp16" >"$TMP/export16.log" 2>&1 &&
  node "$SRC/tests/onnx/run.js" "$TMP/onnx_fp16/model.onnx" "$TMP/inputs.jsonl" "$RUNTIME" >"$TMP/ort_fp16.jsonl" 2>>"$TMP/export16.log" &&
  $PY - "$TMP/predict.jsonl" "$TMP/ort_fp16.jsonl" "$TMP/onnx_ckpt/model.onnx" "$TMP/onnx_fp16/model.onnx" >"$TMP/compare16.log" 2>&1 <<'PY'
import json, os, sys
predicted = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = []
for line in open(sys.argv[2]):
    o = json.loads(line)
    if "logits" not in o: continue
    assert o["logits"]["type"] == "float32", o["logits"]["type"]
    n, c = o["logits"]["dims"]
    rows += [o["logits"]["data"][i * c:(i + 1) * c] for i in range(n)]
assert len(rows) == len(predicted) == 40, (len(rows), len(predicted))
worst = max(abs(x - y) for p, r in zip(predicted, rows) for x, y in zip(p["logits"], r))
scale = max(abs(x) for p in predicted for x in p["logits"])
labels = sum(p["label"] == max(range(len(r)), key=r.__getitem__) for p, r in zip(predicted, rows))
ratio = os.path.getsize(sys.argv[4]) / os.path.getsize(sys.argv[3])
print(f"worst |fp16 onnx - predict| {worst:.3g} (max |logit| {scale:.3g}); labels equal {labels}/40; file {ratio:.3f} of float32's")
assert worst <= 3e-3 * scale and labels == 40 and 0.45 < ratio < 0.55
PY
then
  pass "--dtype float16: float32 logits near predict's, its labels, half the file ($(cat "$TMP/compare16.log"))"
else
  cat "$TMP/export16.log" >>"$TMP/compare16.log"
  fail "--dtype float16: float32 logits near predict's, its labels, half the file" "$TMP/compare16.log"
fi

# Refusals.
expect_error() {  # WHAT MESSAGE COMMAND...
  local what=$1 message=$2
  shift 2
  if ! "$@" >"$TMP/refused.log" 2>&1 && grep -qF -- "$message" "$TMP/refused.log"; then
    pass "$what"
  else
    fail "$what" "$TMP/refused.log"
  fi
}
sed 's/"hidden_act": "gelu"/"hidden_act": "mish"/' "$TMP/hf/config.json" >"$TMP/mish.json"
mkdir -p "$TMP/mish" && cp "$TMP/hf/"* "$TMP/mish/" && mv "$TMP/mish.json" "$TMP/mish/config.json"
expect_error "a model whose activation has no ONNX form is refused by name" 'activation "mish"' \
  "$BIN" export "$TMP/mish" --format onnx --output "$TMP/mish_onnx"
[ ! -e "$TMP/mish_onnx/model.onnx" ] && pass "nothing written for the refused model" || fail "nothing written for the refused model"
expect_error "--opset 13 is refused" "opsets 14 to 17" "$BIN" export "$ckpt" --format onnx --opset 13 --output "$TMP/o13"
expect_error "an output folder that is the model folder is refused" "which this command reads" \
  "$BIN" export "$TMP/hf" --format onnx --output "$TMP/hf"
expect_error "a non-empty output folder needs --force" "is not empty" "$BIN" export "$ckpt" --format onnx --output "$TMP/onnx_ckpt"
expect_error "--merge with --format onnx is refused (the graph always merges)" "always merges" \
  "$BIN" export "$ckpt" --format onnx --merge --output "$TMP/m"
expect_error "--dtype bfloat16 is refused for ONNX" "float32 or float16 graphs" \
  "$BIN" export "$ckpt" --format onnx --dtype bfloat16 --output "$TMP/bf16"
expect_error "an unknown --format is refused" "expected hf or onnx" "$BIN" export "$ckpt" --format tflite --output "$TMP/t"

suite_end
