#!/usr/bin/env bash
# LoRA end to end through the real `shardtrain train`, `export` and `predict`
# (docs/DESIGN.md, "LoRA"), on a random BERT of hidden size 32 (suite_lib.sh's
# tiny run), r 4 on query and value:
#   - every strategy (zero1, zero2, zero3, fsdp; hybrid at -np 4 with 2 ranks
#     per node) gives ddp's loss at every step and its eval metrics, at -np 2
#     and -np 4; zero3 with activation checkpointing too; bf16 under zero3
#     gives bf16 ddp's;
#   - the frozen base has no optimizer state: the checkpoint's /model and
#     /optim hold the adapters and the classifier only; inspect (--verify)
#     reads it as such;
#   - resume is exact: 3 steps, then 3 more from the checkpoint, at -np 2
#     gives the straight 6-step run's checkpoint bit for bit; at -np 4 zero3
#     (half the batch per rank, dropout off) its losses;
#   - a base whose weights differ (another train.seed) is refused at resume,
#     naming the sha256;
#   - export writes a PEFT folder (keys, adapter_config.json), export --merge a
#     HF folder; predict gives the same logits on the checkpoint, on the
#     merged folder, and on the base folder with --adapter; a base that moved
#     is found with --base;
#   - lora.adapter starts a run from a PEFT folder (its eval is predict's);
#   - DistilBERT without lora.target_modules is refused naming the key.
#
#   bash tests/test_lora_train.sh BIN SRC MPIEXEC [MPIEXEC_FLAGS...]
# shellcheck source=tests/suite_lib.sh
source "$(dirname "$0")/suite_lib.sh"
suite_start "$@"

tiny_run_config <<TOML
[train]
num_epochs = 1
max_steps = 6
batch_size = 8
lr = 5e-3
log_every_steps = 1
[checkpoint]
every_epochs = 0
every_steps = 3
[run]
storage_path = "$TMP/runs"
[lora]
r = 4
alpha = 8
TOML

# run NAME NP [flags...]: a job, its log in $TMP/NAME.log; status of the job.
run() {
  local name=$1 np=$2
  shift 2
  "$MPIEXEC" "${MPI_FLAGS[@]}" -np "$np" "$BIN" train -c "$TMP/tiny.toml" --run.name "$name" "$@" \
    >"$TMP/$name.log" 2>&1
}

# same_losses A B TOL: every step's loss of runs A and B, and their final
# eval metrics, within TOL (relative); prints the worst difference.
same_losses() {
  $PY - "$TMP/runs/$1" "$TMP/runs/$2" "$3" <<'PY'
import csv, json, sys
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
def losses(run):
    with open(run + "/progress.csv") as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]
def metrics(run):
    with open(run + "/result.jsonl") as f:
        last = [json.loads(line) for line in f if line.strip()][-1]
    return {k: v for k, v in last.items() if k.startswith("eval_") and k != "eval_seconds"}
la, lb = losses(a), losses(b)
ma, mb = metrics(a), metrics(b)
if len(la) != len(lb) or not la or sorted(ma) != sorted(mb):
    print(f"    | steps {len(la)} vs {len(lb)}, metrics {sorted(ma)} vs {sorted(mb)}"); sys.exit(1)
worst = max([abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la, lb)] +
            [abs(ma[k] - mb[k]) / max(abs(ma[k]), 1e-12) for k in ma])
print(f"    | worst relative difference {worst:.3g} over {len(la)} losses and {len(ma)} metrics")
sys.exit(0 if worst <= tol else 1)
PY
}

# Every strategy against ddp.
for np in 2 4; do
  batch=$((16 / np))
  if run "ddp$np" "$np" --train.batch_size "$batch" --parallel.strategy ddp; then
    pass "-np $np ddp trains the adapter"
  else
    fail "-np $np ddp trains the adapter" "$TMP/ddp$np.log"
  fi
  strategies=(zero1 zero2 zero3 fsdp)
  [ "$np" = 4 ] && strategies+=(hybrid)
  for s in "${strategies[@]}"; do
    extra=()
    [ "$s" = hybrid ] && extra=(--parallel.ranks_per_node 2)
    if run "$s$np" "$np" --train.batch_size "$batch" --parallel.strategy "$s" "${extra[@]}" &&
      same_losses "ddp$np" "$s$np" 1e-5; then
      pass "-np $np $s: ddp's loss at every step and its eval metrics"
    else
      fail "-np $np $s: ddp's loss at every step and its eval metrics" "$TMP/$s$np.log"
    fi
  done
done
if grep -q "frozen base sharded over 4 ranks" "$TMP/zero34.log" && grep -q "frozen base replicated" "$TMP/zero24.log"; then
  pass "zero3 shards the frozen base over the ranks, zero2 replicates it"
else
  fail "zero3 shards the frozen base over the ranks, zero2 replicates it" "$TMP/zero34.log"
fi
if run ckpt2 2 --parallel.strategy zero3 --model.gradient_checkpointing true && same_losses ddp2 ckpt2 1e-5; then
  pass "zero3 with activation checkpointing: ddp's losses"
else
  fail "zero3 with activation checkpointing: ddp's losses" "$TMP/ckpt2.log"
fi
if run bf16ddp 2 --train.mixed_precision bf16 && run bf16zero3 2 --train.mixed_precision bf16 --parallel.strategy zero3 &&
  same_losses bf16ddp bf16zero3 2e-3; then
  pass "bf16: zero3's losses are bf16 ddp's"
else
  fail "bf16: zero3's losses are bf16 ddp's" "$TMP/bf16zero3.log"
fi

# What a checkpoint holds: the adapters and the classifier, with their AdamW state.
ckpt="$TMP/runs/ddp2/checkpoint_000002.h5"
h5ls -r "$ckpt" >"$TMP/h5ls.txt" 2>&1
model_sets=$(grep -c '^/model/[^ ]* *Dataset' "$TMP/h5ls.txt")
optim_sets=$(grep -c '^/optim/exp_avg/[^ ]* *Dataset' "$TMP/h5ls.txt")
lora_sets=$(grep -c '^/model/.*lora_[AB]\.weight *Dataset' "$TMP/h5ls.txt")
if [ "$model_sets" = 10 ] && [ "$optim_sets" = 10 ] && [ "$lora_sets" = 8 ] &&
  ! grep -q '^/model/.*word_embeddings' "$TMP/h5ls.txt"; then
  pass "the checkpoint holds 8 adapter tensors and the classifier's 2, with AdamW state for those only"
else
  fail "the checkpoint holds 8 adapter tensors and the classifier's 2 (/model $model_sets, /optim/exp_avg $optim_sets, lora $lora_sets)" "$TMP/h5ls.txt"
fi

# ZeRO-3 and FSDP save the adapter they trained (PEFT under Trainer saved an
# empty one under ZeRO-3: peft#2892): exported, each tensor within 1e-6 of ddp's.
same_adapter() {  # CHECKPOINT_A CHECKPOINT_B NAME
  "$BIN" export "$1" --output "$TMP/$3_a" >"$TMP/$3.log" 2>&1 && "$BIN" export "$2" --output "$TMP/$3_b" >>"$TMP/$3.log" 2>&1 &&
    $PY - "$TMP/$3_a/adapter_model.safetensors" "$TMP/$3_b/adapter_model.safetensors" >>"$TMP/$3.log" 2>&1 <<'PY'
import json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__": continue
        b, end = e["data_offsets"]
        raw = data[8 + n + b:8 + n + end]
        out[name] = struct.unpack("<%df" % (len(raw) // 4), raw)
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
worst = max(abs(x - y) for k in a for x, y in zip(a[k], b[k]))
b_max = max(abs(x) for k in a if ".lora_B." in k for x in a[k])
print("worst difference", worst, "largest |B|", b_max)
assert worst <= 1e-6 and b_max > 1e-4
PY
}
if same_adapter "$ckpt" "$TMP/runs/zero32/checkpoint_000002.h5" zero3_adapter &&
  same_adapter "$TMP/runs/ddp4/checkpoint_000002.h5" "$TMP/runs/fsdp4/checkpoint_000002.h5" fsdp_adapter; then
  pass "zero3's (-np 2) and fsdp's (-np 4) checkpoints export ddp's adapter, not zeros"
else
  fail "zero3's (-np 2) and fsdp's (-np 4) checkpoints export ddp's adapter, not zeros" "$TMP/zero3_adapter.log"
  log_excerpt "$TMP/fsdp_adapter.log"
fi
if "$BIN" inspect --verify "$ckpt" >"$TMP/inspect.log" 2>&1 && "$BIN" inspect "$ckpt" >>"$TMP/inspect.log" 2>&1 &&
  grep -q '^LoRA: *r 4, alpha 8, targets \["query","value"\]' "$TMP/inspect.log"; then
  pass "inspect --verify checks a LoRA checkpoint against its adapter; inspect shows the adapter and the base"
else
  fail "inspect --verify checks a LoRA checkpoint against its adapter; inspect shows the adapter and the base" "$TMP/inspect.log"
fi

# Resume: 3 steps, then the rest from the checkpoint (a constant learning
# rate: the first part's schedule would otherwise end at its own last step).
const=(--train.lr_scheduler_type constant)
if run const2 2 "${const[@]}" && run part2 2 "${const[@]}" --train.max_steps 3 && run part2 2 "${const[@]}" &&
  same_state "$TMP/runs/const2/checkpoint_000002.h5" "$TMP/runs/part2/checkpoint_000002.h5" "$TMP/part2.diff"; then
  pass "-np 2: 3 steps, then 3 more from the checkpoint: the straight run's state bit for bit"
else
  fail "-np 2: 3 steps, then 3 more from the checkpoint: the straight run's state bit for bit" "$TMP/part2.diff"
fi
# Across rank counts the dropout masks differ (each rank draws its own):
# without dropout the trajectory is the same function of the same batches.
nodrop=("${const[@]}" --model.hidden_dropout_prob 0 --model.attention_probs_dropout_prob 0)
if run nodrop2 2 "${nodrop[@]}" && run re4 2 "${nodrop[@]}" --train.max_steps 3 &&
  run re4 4 "${nodrop[@]}" --train.batch_size 4 --parallel.strategy zero3 && same_losses nodrop2 re4 1e-5; then
  pass "3 steps at -np 2 ddp, resumed at -np 4 zero3: the straight run's losses"
else
  fail "3 steps at -np 2 ddp, resumed at -np 4 zero3: the straight run's losses" "$TMP/re4.log"
fi
run re4 2 "${nodrop[@]}" --train.max_steps 9 --train.seed 7 && result=ok || result=bad
if [ "$result" = bad ] && grep -q "LoRA adapter of another base model: its frozen base weights had sha256" "$TMP/re4.log"; then
  pass "resume over another base (train.seed 7's random init) is refused naming the sha256"
else
  fail "resume over another base (train.seed 7's random init) is refused naming the sha256" "$TMP/re4.log"
fi

# A base folder: a full fine-tuning checkpoint exported. LoRA over it, exported both ways.
if "$MPIEXEC" "${MPI_FLAGS[@]}" -np 1 "$BIN" train -c "$TMP/tiny.toml" --run.name full --lora.r 0 --train.max_steps 1 \
  >"$TMP/full.log" 2>&1 && "$BIN" export "$TMP/runs/full/checkpoint_000001.h5" --output "$TMP/base" >>"$TMP/full.log" 2>&1 &&
  run onbase 2 --model.init pretrained --model.path "$TMP/base" --train.max_steps 3 &&
  "$BIN" export "$TMP/runs/onbase/checkpoint_000001.h5" --output "$TMP/adapter" >"$TMP/export.log" 2>&1 &&
  "$BIN" export "$TMP/runs/onbase/checkpoint_000001.h5" --output "$TMP/merged" --merge >>"$TMP/export.log" 2>&1; then
  pass "a LoRA run over a HF base folder, exported as a PEFT folder and merged"
else
  fail "a LoRA run over a HF base folder, exported as a PEFT folder and merged" "$TMP/export.log"
fi
if [ -f "$TMP/adapter/adapter_config.json" ] && [ -f "$TMP/adapter/adapter_model.safetensors" ] &&
  grep -q '"task_type": "SEQ_CLS"' "$TMP/adapter/adapter_config.json" &&
  grep -q "\"base_model_name_or_path\": \"$(realpath "$TMP/base")\"" "$TMP/adapter/adapter_config.json" &&
  [ -f "$TMP/merged/model.safetensors" ] && [ -f "$TMP/merged/config.json" ]; then
  pass "export: adapter_config.json (SEQ_CLS, the base's path) and adapter_model.safetensors; --merge: a HF folder"
else
  fail "export: adapter_config.json (SEQ_CLS, the base's path) and adapter_model.safetensors; --merge: a HF folder" "$TMP/export.log"
fi
# --force over the other layout: no adapter_config.json left beside merged weights.
cp -r "$TMP/adapter" "$TMP/relayout"
if "$BIN" export "$TMP/runs/onbase/checkpoint_000001.h5" --output "$TMP/relayout" --merge --force >"$TMP/relayout.log" 2>&1 &&
  [ ! -e "$TMP/relayout/adapter_config.json" ] && [ ! -e "$TMP/relayout/adapter_model.safetensors" ] &&
  [ -f "$TMP/relayout/model.safetensors" ]; then
  pass "export --merge --force over an adapter folder removes the adapter's files"
else
  fail "export --merge --force over an adapter folder removes the adapter's files" "$TMP/relayout.log"
fi
cols=(--text-a '#1 String' --text-b '#2 String' --max-length 64)
"$BIN" predict --model "$TMP/runs/onbase/checkpoint_000001.h5" --data "$TMP/dev.tsv" --output "$TMP/p_ckpt.jsonl" >"$TMP/predict.log" 2>&1
"$BIN" predict --model "$TMP/merged" "${cols[@]}" --data "$TMP/dev.tsv" --output "$TMP/p_merged.jsonl" >>"$TMP/predict.log" 2>&1
"$BIN" predict --model "$TMP/base" --adapter "$TMP/adapter" "${cols[@]}" --data "$TMP/dev.tsv" --output "$TMP/p_adapter.jsonl" >>"$TMP/predict.log" 2>&1
if $PY - "$TMP/p_ckpt.jsonl" "$TMP/p_merged.jsonl" "$TMP/p_adapter.jsonl" >>"$TMP/predict.log" 2>&1 <<'PY'
import json, sys
rows = [[json.loads(l)["logits"] for l in open(p) if l.strip()] for p in sys.argv[1:]]
assert len(rows[0]) == 40 and all(len(r) == 40 for r in rows), [len(r) for r in rows]
# The base with --adapter computes what the checkpoint's model does: bit for
# bit; the merged weights round W + scaling B A once: fp32 rounding.
assert rows[2] == rows[0], "the base with --adapter differs from the checkpoint"
worst = max(abs(a - b) for x, y in zip(rows[0], rows[1]) for a, b in zip(x, y))
print("worst logit difference, merged", worst)
assert worst < 1e-5, worst
PY
then
  pass "predict: the checkpoint, the merged folder and the base with --adapter give the same logits"
else
  fail "predict: the checkpoint, the merged folder and the base with --adapter give the same logits" "$TMP/predict.log"
fi
# lora.adapter: a run that starts from the exported adapter (lr 1e-30: it stays
# what it was) evaluates as predict --adapter does.
if run fromadapter 2 --model.init pretrained --model.path "$TMP/base" --lora.r 0 --lora.adapter "$TMP/adapter" \
  --train.lr 1e-30 --train.max_steps 1 --train.eval_every_steps 1 &&
  grep -q "LoRA: starting from the adapter in $TMP/adapter" "$TMP/fromadapter.log" &&
  run_loss=$($PY -c 'import json,sys; print("%.4f" % [json.loads(l) for l in open(sys.argv[1])][-1]["eval_loss"])' \
    "$TMP/runs/fromadapter/result.jsonl") &&
  "$BIN" predict --model "$TMP/base" --adapter "$TMP/adapter" "${cols[@]}" --label Quality --data "$TMP/dev.tsv" \
    --output "$TMP/p_labels.jsonl" >"$TMP/p_labels.log" 2>&1 && grep -q "eval_loss $run_loss" "$TMP/p_labels.log"; then
  pass "lora.adapter: a run from the exported adapter evaluates to predict --adapter's eval_loss ($run_loss)"
else
  fail "lora.adapter: a run from the exported adapter evaluates to predict --adapter's eval_loss" "$TMP/fromadapter.log"
fi
mv "$TMP/base" "$TMP/moved_base"
if ! "$BIN" predict --model "$TMP/runs/onbase/checkpoint_000001.h5" --data "$TMP/dev.tsv" --output "$TMP/p_moved.jsonl" \
  >"$TMP/moved.log" 2>&1 && grep -q "pass the base's folder with --base" "$TMP/moved.log" &&
  "$BIN" predict --model "$TMP/runs/onbase/checkpoint_000001.h5" --base "$TMP/moved_base" --data "$TMP/dev.tsv" \
    --output "$TMP/p_moved.jsonl" >>"$TMP/moved.log" 2>&1 && cmp -s "$TMP/p_moved.jsonl" "$TMP/p_ckpt.jsonl"; then
  pass "a base that moved: predict says to pass --base, and with --base gives the same predictions"
else
  fail "a base that moved: predict says to pass --base, and with --base gives the same predictions" "$TMP/moved.log"
fi

# DistilBERT has no PEFT default targets.
if ! "$BIN" train -c "$TMP/tiny.toml" --run.name distil --model.config "$SRC/tests/fixtures/family_golden/distilbert_l2/config.json" \
  >"$TMP/distil.log" 2>&1 && grep -q 'lora.target_modules: PEFT has no default target modules for model_type "distilbert"' "$TMP/distil.log"; then
  pass "DistilBERT without lora.target_modules is refused naming the key"
else
  fail "DistilBERT without lora.target_modules is refused naming the key" "$TMP/distil.log"
fi

suite_end
