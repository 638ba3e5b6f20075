#!/usr/bin/env bash
# Side by side, in one run: PyTorch eager (an HF-equivalent
# BertForSequenceClassification or ModernBertForSequenceClassification + AdamW
# in plain torch, benchmarks/side_by_side_reference.py; Debian python3-torch) against shardtrain
# (benchmarks/bench_side_by_side.cpp: the library's model + DDP in the
# Trainer's step sequence) on the SAME MRPC batches from the SAME initial
# weights, for each model and launch layout:
#
#   models   bert-base (bert-base-cased's shape, random init), quickstart
#            (configs/models/bert_tiny.json): MRPC pairs at max length 128,
#            global batch 16, bert-base-cased vocab.txt, timed with dropout 0.1;
#            modernbert-base (configs/models/modernbert_base.json: 22 layers,
#            hidden 768, every third layer global, the others a 128-token
#            window): MRPC at 128, global batch 16, the ModernBERT
#            tokenizer.json, dropout 0 (the released configs' value), layout
#            1x2 only (three sides x 2 ranks of it do not fit in 24 GB);
#            modernbert-base-1024: the same model on 1024-token documents (64
#            rows, each 26 consecutive MRPC pairs joined, truncated to 1024;
#            global batch 2, no eval pass), where the local
#            layers' window matters: HF eager computes the full 1024 x 1024
#            scores and masks them, shardtrain's kernel only the band
#   layouts  1x2 = 1 rank x 2 threads (global batch 16), 2x1 = 2 ranks x 1
#            thread (8 per rank, the same global batches); both unbound
#            (scripts/mpirun.sh), PyTorch's 2 ranks over gloo DDP
#   sides    pytorch; shardtrain packed (unpadded batches, forward_packed:
#            what `shardtrain train` runs by default); shardtrain padded
#            (model.unpadded = false: the padded batch, as HF computes it)
#
# 1. setup: installs python3-torch if missing (this benchmark only; the test
#    suite never needs it), builds shardtrain and bench_side_by_side.
# 2. `bench_side_by_side init` writes random weights (seed 42) as a HF folder
#    both sides load; `bench_side_by_side batches` prints the global batches
#    DistributedSampler gives for seed 42; `shardtrain tokenize` prints the
#    ids the PyTorch side reads.
# 3. check: every side trains CHECK_STEPS steps with dropout 0; each step's
#    loss must equal PyTorch's within 1e-4 relative (the same fp32 math in
#    another op order differs by ~1e-6 after a few AdamW steps; a wrong mask,
#    batch or weight moves the loss by > 1e-3). A mismatch stops the script.
# 4. timing, alternated step by step: all sides start at once, load and wait
#    at a turnstile (each rank blocks reading a FIFO, using no core); then
#    the script gives one step to one side at a time: step k of every side,
#    in an order reversed every step, then step k + 1. So the sides run the
#    same global batches (WARMUP untimed + STEPS timed, dropout 0.1, the
#    models' default) minutes apart at most, and a burst of other work on the
#    machine lands on all of them alike. A last turn times one eval pass over
#    MRPC dev (batch 32 per rank, no grad). Per side: samples/s and real
#    tokens/s over the timed steps, the ratio to PyTorch (its timed seconds /
#    the side's: the same batches, the same tokens) and the range of the
#    per-step ratios, the time from process start to the end of the first
#    step (from the check run, which has the machine to itself), the eval pass.
#    TIMING=sequential (modernbert-base-1024's default) starts one side at a
#    time instead and gives it all its steps before the next side starts: only
#    one side's memory at a time, but drift on the machine is not shared alike.
#
#   bash benchmarks/side_by_side.sh                     # bert-base and quickstart (~9 min on an idle 2-core box)
#   MODELS="modernbert-base modernbert-base-1024" bash benchmarks/side_by_side.sh
#   MODELS=quickstart STEPS=4 bash benchmarks/side_by_side.sh
#   env: MODELS LAYOUTS SIDES WARMUP STEPS CHECK_STEPS OUT
#        TIMING=alternate|sequential (default alternate; modernbert-base-1024:
#        sequential, each side alone with the machine, one after another,
#        because three sides at once run out of memory in 24 GB)
# Results: $OUT/results.jsonl (every run), $OUT/summary.json, the table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODELS=${MODELS:-"bert-base quickstart"}
LAYOUTS_SET=${LAYOUTS:+1}
LAYOUTS=${LAYOUTS:-"1x2 2x1"}
SIDES=${SIDES:-"pytorch packed padded"}
WARMUP=${WARMUP:-1}
STEPS=${STEPS:-6}
CHECK_STEPS=${CHECK_STEPS:-3}
OUT=${OUT:-$ROOT/build/side_by_side}
PY=/usr/bin/python3  # Debian's python, where python3-torch installs

# ---- 1. setup ----
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "side_by_side: installing python3-torch (for the PyTorch side only)"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends python3-torch
fi
if [[ ! -f build/CMakeCache.txt ]]; then bash scripts/setup.sh; fi
cmake --build build -j"$(nproc)" --target shardtrain bench_side_by_side >/dev/null
BENCH=$ROOT/build/benchmarks/bench_side_by_side
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
LOG=$OUT/stderr.log
: >"$RESULTS"
: >"$LOG"
trap 'echo "side_by_side: failed; the runs'"'"' stderr is in $LOG" >&2' ERR
MRPC_TRAIN=data/glue/MRPC/train.tsv
MRPC_DEV=data/glue/MRPC/dev.tsv

# model_settings MODEL: the model's init name, data, tokenizer, length, batch, dropout, layouts.
model_settings() {
  INIT=$1 TRAIN=$MRPC_TRAIN DEV=$MRPC_DEV VOCAB=data/vocab/bert-base-cased-vocab.txt MAXLEN=128 GLOBAL=16
  TIMING_DROPOUT=0.1 MODEL_LAYOUTS=$LAYOUTS MODEL_TIMING=${TIMING:-alternate}
  case $1 in
    bert-base | quickstart) ;;
    modernbert-base)  # 1x2 only: 2 ranks x 3 sides of a 150M-parameter model do not fit in 24 GB at once
      VOCAB=data/vocab/modernbert TIMING_DROPOUT=0
      [[ -n $LAYOUTS_SET ]] || MODEL_LAYOUTS=1x2 ;;
    modernbert-base-1024)
      INIT=modernbert-base VOCAB=data/vocab/modernbert TIMING_DROPOUT=0 MAXLEN=1024 GLOBAL=2 DEV=""
      MODEL_TIMING=${TIMING:-sequential}  # three sides' 1024-token activations at once do not fit in 24 GB
      TRAIN=$OUT/long_train.tsv
      [[ -n $LAYOUTS_SET ]] || MODEL_LAYOUTS=1x2
      # 64 documents: row i joins the sentences of MRPC rows i .. i+25 (label: row i's).
      "$PY" - "$MRPC_TRAIN" "$TRAIN" <<'PYEOF'
import sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1], encoding="utf-8")]
header, rows = rows[0], rows[1:]
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write("\t".join(header) + "\n")
    for i in range(64):
        group = [rows[(i + k) % len(rows)] for k in range(26)]
        out.write("\t".join([group[0][0], group[0][1], group[0][2], " ".join(r[3] for r in group),
                             " ".join(r[4] for r in group)]) + "\n")
PYEOF
      ;;
    *) echo "side_by_side: unknown model $1 (bert-base, quickstart, modernbert-base, modernbert-base-1024)" >&2; exit 2 ;;
  esac
  for split in train dev; do
    local src=$TRAIN
    [[ $split == dev ]] && src=$DEV
    [[ -n $src ]] || continue
    build/shardtrain tokenize --vocab "$VOCAB" --data "$src" --text-a "#1 String" --text-b "#2 String" \
      --max-length "$MAXLEN" --output "$OUT/${1}_${split}_ids.jsonl" 2>/dev/null
  done
  IDS=$OUT/${1}_train_ids.jsonl DEV_IDS=""
  [[ -n $DEV ]] && DEV_IDS=$OUT/${1}_dev_ids.jsonl
  return 0
}
echo "side_by_side: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"

# run_side SIDE MODEL_DIR RANKS THREADS BATCHES DROPOUT WARMUP STEPS [TURNSTILE_DIR] -> one JSON line (rank 0)
# With a turnstile folder: one step per turn, and a last turn for an eval pass.
run_side() {
  local side=$1 model_dir=$2 ranks=$3 threads=$4 batches=$5 dropout=$6 warmup=$7 steps=$8 turns=${9:-}
  local batch=$((GLOBAL / ranks))
  if [[ $side == pytorch ]]; then
    local eval_args=()
    [[ -n $turns ]] && eval_args=(--turnstile "$turns")
    [[ -n $turns && -n $DEV_IDS ]] && eval_args+=(--eval-ids "$DEV_IDS")
    bash scripts/mpirun.sh -np "$ranks" -x OMP_NUM_THREADS="$threads" "$PY" benchmarks/side_by_side_reference.py \
      --model-dir "$model_dir" --ids "$IDS" --batches "$batches" --threads "$threads" \
      --dropout "$dropout" --warmup "$warmup" --steps "$steps" --port $((20000 + RANDOM % 20000)) "${eval_args[@]}" \
      2> >(sed "s/^/[$side] /" >>"$LOG")
  else
    local eval_args=()
    [[ -n $turns ]] && eval_args=(--turnstile "$turns")
    [[ -n $turns && -n $DEV ]] && eval_args+=(--eval-data "$DEV")
    bash scripts/mpirun.sh -np "$ranks" -x OMP_NUM_THREADS="$threads" "$BENCH" train --model-dir "$model_dir" \
      --data "$TRAIN" --vocab "$VOCAB" --max-length "$MAXLEN" --batches "$batches" --batch-size "$batch" --layout "$side" \
      --dropout "$dropout" --warmup "$warmup" --steps "$steps" "${eval_args[@]}" 2> >(sed "s/^/[$side] /" >>"$LOG")
  fi
}

# tag MODEL LAYOUT PHASE: adds the labels to a side's JSON line.
tag() {
  "$PY" -c 'import json, sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])
d.update(model=sys.argv[1], layout_name=sys.argv[2], phase=sys.argv[3])
d["side_name"] = "pytorch" if d["side"] == "pytorch" else d["layout"]
print(json.dumps(d))' "$@"
}

# time_sides DIR SIDE...: starts the sides (each waits at its turnstile under
# DIR), gives them their turns alternating step by step, and waits for them.
# Reads the current model's and layout's settings (ranks, threads, batches, model_dir).
time_sides() {
  local dir=$1
  shift
  local pids=() pid side r turn order=("$@")
  for side in "$@"; do
    mkdir -p "$dir/$side"
    for ((r = 0; r < ranks; ++r)); do mkfifo "$dir/$side/go.$r" "$dir/$side/done.$r"; done
    run_side "$side" "$model_dir" "$ranks" "$threads" "$batches" "$TIMING_DROPOUT" "$WARMUP" "$STEPS" "$dir/$side" \
      >"$dir/$side.json" &
    pids+=($!)
  done
  local turns_total=$((WARMUP + STEPS))
  [[ -n $DEV ]] && turns_total=$((turns_total + 1))  # the last turn: the eval pass
  for ((turn = 0; turn < turns_total; ++turn)); do
    for side in "${order[@]}"; do
      # A side that died leaves its FIFO unopened: give up after 30 minutes instead of hanging.
      for ((r = 0; r < ranks; ++r)); do timeout 1800 bash -c "echo go >'$dir/$side/go.$r'"; done
      for ((r = 0; r < ranks; ++r)); do timeout 1800 bash -c "read -r _ <'$dir/$side/done.$r'"; done
    done
    order=($(printf '%s\n' "${order[@]}" | tac))
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}

initialised=""
for model in $MODELS; do
  model_settings "$model"
  model_dir=$OUT/model_$INIT
  if [[ " $initialised " != *" $INIT "* ]]; then  # once per run: modernbert-base's two rows share their weights
    "$BENCH" init --model "$INIT" --seed 42 --out "$model_dir" 2>/dev/null
    initialised+=" $INIT"
  fi
  for layout in $MODEL_LAYOUTS; do
    ranks=${layout%x*}
    threads=${layout#*x}
    batches=$OUT/batches_${model}_${ranks}.json
    needed=$((CHECK_STEPS > WARMUP + STEPS ? CHECK_STEPS : WARMUP + STEPS))
    "$BENCH" batches --data "$TRAIN" --batch-size $((GLOBAL / ranks)) --world "$ranks" --seed 42 --steps "$needed" \
      --out "$batches" 2>/dev/null

    # ---- 3. check: equal math before timing ----
    for side in $SIDES; do
      run_side "$side" "$model_dir" "$ranks" "$threads" "$batches" 0 0 "$CHECK_STEPS" | tag "$model" "$layout" check >>"$RESULTS"
    done
    "$PY" - "$RESULTS" "$model" "$layout" <<'PYEOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
runs = [r for r in runs if r["model"] == sys.argv[2] and r["layout_name"] == sys.argv[3] and r["phase"] == "check"]
ref = next(r for r in runs if r["side_name"] == "pytorch")
for r in runs:
    worst = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], ref["losses"]))
    print(f"check {sys.argv[2]} {sys.argv[3]} {r['side_name']:8s}: losses {' '.join(f'{x:.6f}' for x in r['losses'])}"
          f"  max rel diff to pytorch {worst:.1e}")
    if worst > 1e-4:
        sys.exit(f"side_by_side: {r['side_name']} does not compute what PyTorch computes (see above); not timing it")
PYEOF

    # ---- 4. timing: the sides alternating step by step, or one after another ----
    turns=$OUT/turns_${model}_${layout}
    rm -rf "$turns"
    if [[ $MODEL_TIMING == alternate ]]; then
      time_sides "$turns" $SIDES
    else
      for side in $SIDES; do time_sides "$turns" "$side"; done
    fi
    for side in $SIDES; do tag "$model" "$layout" time <"$turns/$side.json" >>"$RESULTS"; done
  done
done

"$PY" - "$RESULTS" "$OUT/summary.json" <<'PYEOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
rows = []
for key in sorted({(r["model"], r["layout_name"]) for r in runs if r["phase"] == "time"}):
    timed = {r["side_name"]: r for r in runs if (r["model"], r["layout_name"]) == key and r["phase"] == "time"}
    checks = {r["side_name"]: r for r in runs if (r["model"], r["layout_name"]) == key and r["phase"] == "check"}
    ref = timed.get("pytorch")
    for side, r in timed.items():
        w = r["warmup"]
        seconds, steps = r["step_s"][w:], len(r["step_s"]) - w
        tokens = sum(r["real_tokens"][w:])
        row = {"model": key[0], "layout": key[1], "side": side, "timed_steps": steps,
               "samples_per_s": steps * r["global_batch"] / sum(seconds), "real_tokens_per_s": tokens / sum(seconds),
               "step_s": seconds, "time_to_first_step_s": checks[side]["time_to_first_step_s"],
               "eval_pass_s": r.get("eval_s")}
        if ref:
            ref_seconds = ref["step_s"][ref["warmup"]:]
            assert ref["real_tokens"][ref["warmup"]:] == r["real_tokens"][w:], "the sides ran different batches"
            row["ratio_to_pytorch"] = sum(ref_seconds) / sum(seconds)
            row["per_step_ratios"] = [a / b for a, b in zip(ref_seconds, seconds)]
        rows.append(row)
json.dump(rows, open(sys.argv[2], "w"), indent=2)
print(f"{'model':20} {'layout':6} {'side':8} {'samples/s':>10} {'real tok/s':>11} {'x pytorch':>10} "
      f"{'per-step x':>12} {'first step s':>13} {'eval pass s':>12}")
for r in rows:
    ratio = f"{r['ratio_to_pytorch']:.2f}" if "ratio_to_pytorch" in r else "-"
    spread = (f"{min(r['per_step_ratios']):.2f}-{max(r['per_step_ratios']):.2f}" if "per_step_ratios" in r else "-")
    ev = f"{r['eval_pass_s']:.2f}" if r["eval_pass_s"] is not None else "-"
    print(f"{r['model']:20} {r['layout']:6} {r['side']:8} {r['samples_per_s']:10.2f} {r['real_tokens_per_s']:11.0f} "
          f"{ratio:>10} {spread:>12} {r['time_to_first_step_s']:13.2f} {ev:>12}")
PYEOF
echo "side_by_side: load average at the end $(cut -d' ' -f1-3 /proc/loadavg); every run: $RESULTS"
