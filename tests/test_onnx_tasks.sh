#!/usr/bin/env bash
# `export --format onnx` for token classification, multiple choice and
# question answering against `predict` (docs/export.md): each task's
# quickstart config (configs/quickstart_{ner,xcopa,squad}.toml, the tiny BERT)
# trained a few steps, its checkpoint exported, ONNX Runtime (onnxruntime-node
# under build/onnxruntime, tests/onnx/run.js) fed exactly predict's batches of
# the quickstart's eval file, and its outputs post-processed by the tasks' own
# functions (tests/onnx_task_probe.cpp); compared with `predict --model CKPT`'s
# output: word tags and entities, choices and their logits (1e-5), answers,
# their spans and predictions.json; the raw logits with the LibTorch model's on
# the same batches (1e-5). Each comparison is shown to fail on a wrong input:
# the first example's logits negated, QA's start and end outputs swapped.
#
#   bash tests/test_onnx_tasks.sh BIN SRC RUNTIME_DIR PROBE MPIEXEC [MPIEXEC_FLAGS...]
# shellcheck source=tests/suite_lib.sh
source "$(dirname "$0")/suite_lib.sh"
usage="usage: test_onnx_tasks.sh BIN SRC RUNTIME_DIR PROBE MPIEXEC [MPIEXEC_FLAGS...]"
RUNTIME=${3:?$usage}
PROBE=${4:?$usage}
set -- "$1" "$2" "${@:5}"
suite_start "$@"

# compare TASK PREDICT.jsonl ONNX.jsonl: predict's output and the one made from
# ONNX Runtime's logits, row by row (a logit or score within 2e-5: the sum
# of two logits each within 1e-5); prints what held, or the first row that
# differs and how; status 1 on any difference.
compare() {
  $PY - "$@" <<'PY'
import json, os, sys
task, ours, theirs = sys.argv[1:4]
a = [json.loads(l) for l in open(ours) if l.strip()]
b = [json.loads(l) for l in open(theirs) if l.strip()]
assert len(a) == len(b) > 0, f"{len(a)} rows from predict, {len(b)} from ONNX Runtime"
worst = 0.0
def close(i, key, x, y):
    global worst
    worst = max(worst, abs(x - y))
    assert abs(x - y) < 2e-5, f"row {i}: {key} predict {x}, onnx {y}"
for i, (p, o) in enumerate(zip(a, b)):
    if task == "ner":
        assert p == o, f"row {i}: tags predict {p['tags']}, onnx {o['tags']}"
    elif task == "mc":
        assert p["choice"] == o["choice"], f"row {i}: predict chose {p['choice']}, onnx {o['choice']}"
        for x, y in zip(p["logits"], o["logits"]): close(i, "logit", x, y)
    else:
        for key in ("id", "answer", "start", "end"):
            assert p[key] == o[key], f"row {i}: {key} predict {p[key]!r}, onnx {o[key]!r}"
        for key in ("score", "probability"): close(i, key, p[key], o[key])
if task == "ner":
    tags = [t for p in a for t in p["tags"]]
    print(f"tags and entities of {len(a)} sentences equal: {len(tags)} words, {sum(t not in ('O', None) for t in tags)} "
          f"not O, {sum(len(p['entities']) for p in a)} entities")
elif task == "mc":
    print(f"choices of {len(a)} rows equal ({sum(p['choice'] for p in a)} of them 1), logits within {worst:.2g}")
else:
    side = lambda path: open(os.path.join(os.path.dirname(path), "predictions.json")).read()
    assert side(ours) == side(theirs), "predictions.json differs"
    print(f"answers and spans of {len(a)} questions and predictions.json equal, scores within {worst:.2g}")
PY
}

# check_task TASK CONFIG DATA NUM_STEPS [TRAIN_FLAGS...]: train, export,
# predict, feed ONNX Runtime, post-process, compare.
check_task() {
  local task=$1 config=$2 data=$3 steps=$4 dir=$TMP/$1
  shift 4
  local ckpt=$dir/runs/$task/checkpoint_000001.h5
  mkdir -p "$dir"
  if (cd "$SRC" && "$MPIEXEC" "${MPI_FLAGS[@]}" -np 1 "$BIN" train -c "$config" --run.name "$task" \
    --run.storage_path "$dir/runs" --train.num_epochs 1 --train.max_steps "$steps" --train.warmup_ratio 0 \
    --data.eval_file "" --checkpoint.score_attribute "" "$@" >"$dir/train.log" 2>&1) &&
    "$BIN" export "$ckpt" --format onnx --output "$dir/onnx" >"$dir/export.log" 2>&1 &&
    "$BIN" predict --model "$ckpt" --data "$data" --output "$dir/predict/out.jsonl" >"$dir/predict.log" 2>&1 &&
    "$PROBE" feeds "$ckpt" "$data" "$dir/feeds.jsonl" >"$dir/probe.log" 2>&1 &&
    node "$SRC/tests/onnx/run.js" "$dir/onnx/model.onnx" "$dir/feeds.jsonl" "$RUNTIME" >"$dir/ort.jsonl" 2>"$dir/ort.err" &&
    "$PROBE" predict "$ckpt" "$data" "$dir/ort.jsonl" "$dir/onnx_out/out.jsonl" --libtorch >>"$dir/probe.log" 2>&1; then
    pass "$task: trained $steps steps, exported, predicted, and run by ONNX Runtime on predict's batches ($(grep -m1 '^onnx_task_probe: .* batches' "$dir/probe.log" | cut -d: -f2- | sed 's/ ->.*//'))"
  else
    cat "$dir"/*.log "$dir/ort.err" >"$dir/all.log" 2>/dev/null
    fail "$task: trained, exported, predicted, and run by ONNX Runtime on predict's batches" "$dir/all.log"
    return
  fi
  local worst
  worst=$(grep -o 'worst |onnx - libtorch| [^ ]*' "$dir/probe.log" | awk '{print $NF}')
  if [ -n "$worst" ] && $PY -c "import sys; sys.exit(not float('$worst') < 1e-5)"; then
    pass "$task: ONNX Runtime's logits are LibTorch's on predict's batches within 1e-5 ($(tail -1 "$dir/probe.log" | cut -d: -f2-))"
  else
    fail "$task: ONNX Runtime's logits are LibTorch's on predict's batches within 1e-5" "$dir/probe.log"
  fi
  if compare "$task" "$dir/predict/out.jsonl" "$dir/onnx_out/out.jsonl" >"$dir/compare.log" 2>&1; then
    pass "$task: the ONNX outputs are predict's ($(cat "$dir/compare.log"))"
  else
    fail "$task: the ONNX outputs are predict's" "$dir/compare.log"
  fi
  # The comparison can fail: the first example's logits negated.
  if "$PROBE" predict "$ckpt" "$data" "$dir/ort.jsonl" "$dir/negated/out.jsonl" --negate-first >"$dir/negated.log" 2>&1 &&
    ! compare "$task" "$dir/predict/out.jsonl" "$dir/negated/out.jsonl" >"$dir/compare_negated.log" 2>&1 &&
    grep -q 'row 0' "$dir/compare_negated.log"; then
    pass "$task: with the first example's logits negated the comparison fails at row 0 ($(tail -1 "$dir/compare_negated.log" | cut -c1-160))"
  else
    cat "$dir/negated.log" "$dir/compare_negated.log" >"$dir/negated_all.log" 2>/dev/null
    fail "$task: with the first example's logits negated the comparison fails at row 0" "$dir/negated_all.log"
  fi
}

mkdir -p "$TMP"/{ner,mc,qa}/{predict,onnx_out,negated}
# NER at a fifth of the quickstart's learning rate: at 2e-3 the tiny model
# tags every word O within two steps, and equal tags would say little; at
# 4e-4 a sixth of the words get other tags, and the smallest gap between a
# tag's two highest logits is still 60 times the runtimes' worst difference.
check_task ner configs/quickstart_ner.toml "$SRC/data/ner/wnut17/dev.conll" 4 --train.lr 4e-4
check_task mc configs/quickstart_xcopa.toml "$SRC/data/multiple_choice/xcopa/it/val.it.jsonl" 8
check_task qa configs/quickstart_squad.toml "$SRC/data/qa/squad-v1.1/dev-articles-24-29.json" 8

# QA's outputs read by name: start_logits and end_logits swapped change the answers.
sed 's/"start_logits"/"swap_logits"/; s/"end_logits"/"start_logits"/; s/"swap_logits"/"end_logits"/' \
  "$TMP/qa/ort.jsonl" >"$TMP/qa/ort_swapped.jsonl"
mkdir -p "$TMP/qa/swapped"
if "$PROBE" predict "$TMP/qa/runs/qa/checkpoint_000001.h5" "$SRC/data/qa/squad-v1.1/dev-articles-24-29.json" \
  "$TMP/qa/ort_swapped.jsonl" "$TMP/qa/swapped/out.jsonl" >"$TMP/qa/swapped.log" 2>&1 &&
  ! compare qa "$TMP/qa/predict/out.jsonl" "$TMP/qa/swapped/out.jsonl" >"$TMP/qa/compare_swapped.log" 2>&1; then
  pass "qa: with start_logits and end_logits swapped the comparison fails ($(tail -1 "$TMP/qa/compare_swapped.log" | cut -c1-160))"
else
  cat "$TMP/qa/swapped.log" "$TMP/qa/compare_swapped.log" >"$TMP/qa/swapped_all.log" 2>/dev/null
  fail "qa: with start_logits and end_logits swapped the comparison fails" "$TMP/qa/swapped_all.log"
fi

suite_end
