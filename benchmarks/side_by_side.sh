#!/usr/bin/env bash
# Side by side, in one run: PyTorch eager (an HF-equivalent
# BertForSequenceClassification + AdamW in plain torch,
# benchmarks/side_by_side_reference.py; Debian python3-torch) against shardtrain
# (benchmarks/bench_side_by_side.cpp: the library's model + DDP in the
# Trainer's step sequence) on the SAME MRPC batches from the SAME initial
# weights, for each model and launch layout:
#
#   models   bert-base (bert-base-cased's shape, random init) and quickstart
#            (configs/models/bert_tiny.json)
#   layouts  1x2 = 1 rank x 2 threads (global batch 16), 2x1 = 2 ranks x 1
#            thread (8 per rank, the same global batches); both unbound
#            (scripts/mpirun.sh), PyTorch's 2 ranks over gloo DDP
#   sides    pytorch; shardtrain packed (unpadded batches, forward_packed);
#            shardtrain padded (collate + forward: what `shardtrain train` runs
#            today)
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
# 4. timing: ROUNDS rounds; in round r every side runs WARMUP untimed + STEPS
#    timed steps on the next WARMUP + STEPS global batches of the epoch (the
#    same batches for every side of a round, later ones in later rounds), with
#    dropout 0.1 (the models' default), sides alternating and their order
#    reversed every other round. Per side: the median over rounds of (timed
#    samples / timed seconds), of (timed real tokens / timed seconds) and of
#    the round's real-token ratio to PyTorch, the time from process start to
#    the end of the first step, and (last round) one eval pass over MRPC dev
#    (batch 32 per rank, no grad).
#
#   bash benchmarks/side_by_side.sh                     # everything (~25 min on 2 cores)
#   MODELS=quickstart ROUNDS=2 bash benchmarks/side_by_side.sh
#   env: MODELS LAYOUTS SIDES ROUNDS WARMUP STEPS CHECK_STEPS OUT
# Results: $OUT/results.jsonl (every run), $OUT/summary.json, the table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODELS=${MODELS:-"bert-base quickstart"}
LAYOUTS=${LAYOUTS:-"1x2 2x1"}
SIDES=${SIDES:-"pytorch packed padded"}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-1}
STEPS=${STEPS:-3}
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
TRAIN=data/glue/MRPC/train.tsv
DEV=data/glue/MRPC/dev.tsv
VOCAB=data/vocab/bert-base-cased-vocab.txt
for split in train dev; do
  src=$TRAIN
  [[ $split == dev ]] && src=$DEV
  build/shardtrain tokenize --vocab "$VOCAB" --data "$src" --text-a "#1 String" --text-b "#2 String" \
    --max-length 128 --output "$OUT/${split}_ids.jsonl" 2>/dev/null
done
echo "side_by_side: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"

# run_side SIDE MODEL_DIR RANKS THREADS BATCHES FIRST DROPOUT WARMUP STEPS [EVAL] -> one JSON line (rank 0)
run_side() {
  local side=$1 model_dir=$2 ranks=$3 threads=$4 batches=$5 first=$6 dropout=$7 warmup=$8 steps=$9 eval=${10:-}
  local batch=$((16 / ranks))
  if [[ $side == pytorch ]]; then
    local eval_args=()
    [[ -n $eval ]] && eval_args=(--eval-ids "$OUT/dev_ids.jsonl")
    bash scripts/mpirun.sh -np "$ranks" -x OMP_NUM_THREADS="$threads" "$PY" benchmarks/side_by_side_reference.py \
      --model-dir "$model_dir" --ids "$OUT/train_ids.jsonl" --batches "$batches" --threads "$threads" \
      --first-batch "$first" --dropout "$dropout" --warmup "$warmup" --steps "$steps" --port $((20000 + RANDOM % 20000)) "${eval_args[@]}" \
      2>>"$LOG"
  else
    local eval_args=()
    [[ -n $eval ]] && eval_args=(--eval-data "$DEV")
    bash scripts/mpirun.sh -np "$ranks" -x OMP_NUM_THREADS="$threads" "$BENCH" train --model-dir "$model_dir" \
      --data "$TRAIN" --vocab "$VOCAB" --batches "$batches" --batch-size "$batch" --layout "$side" \
      --first-batch "$first" --dropout "$dropout" --warmup "$warmup" --steps "$steps" "${eval_args[@]}" 2>>"$LOG"
  fi
}

# tag MODEL LAYOUT PHASE ROUND: adds the labels to a side's JSON line.
tag() {
  "$PY" -c 'import json, sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])
d.update(model=sys.argv[1], layout_name=sys.argv[2], phase=sys.argv[3], round=int(sys.argv[4]))
d["side_name"] = "pytorch" if d["side"] == "pytorch" else d["layout"]
print(json.dumps(d))' "$@"
}

for model in $MODELS; do
  model_dir=$OUT/model_$model
  "$BENCH" init --model "$model" --seed 42 --out "$model_dir" 2>/dev/null
  for layout in $LAYOUTS; do
    ranks=${layout%x*}
    threads=${layout#*x}
    batches=$OUT/batches_${ranks}.json
    needed=$((CHECK_STEPS > ROUNDS * (WARMUP + STEPS) ? CHECK_STEPS : ROUNDS * (WARMUP + STEPS)))
    "$BENCH" batches --data "$TRAIN" --batch-size $((16 / ranks)) --world "$ranks" --seed 42 --steps "$needed" \
      --out "$batches" 2>/dev/null

    # ---- 3. check: equal math before timing ----
    for side in $SIDES; do
      run_side "$side" "$model_dir" "$ranks" "$threads" "$batches" 0 0 0 "$CHECK_STEPS" | tag "$model" "$layout" check 0 >>"$RESULTS"
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

    # ---- 4. timing, sides alternating ----
    for round in $(seq 1 "$ROUNDS"); do
      order=($SIDES)
      if ((round % 2 == 0)); then order=($(printf '%s\n' "${order[@]}" | tac)); fi
      eval_flag=""
      [[ $round -eq $ROUNDS ]] && eval_flag=eval
      for side in "${order[@]}"; do
        run_side "$side" "$model_dir" "$ranks" "$threads" "$batches" $(((round - 1) * (WARMUP + STEPS))) 0.1 \
          "$WARMUP" "$STEPS" $eval_flag |
          tag "$model" "$layout" time "$round" >>"$RESULTS"
      done
    done
  done
done

"$PY" - "$RESULTS" "$OUT/summary.json" <<'PYEOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
timed = [r for r in runs if r["phase"] == "time"]
rows = []
for key in sorted({(r["model"], r["layout_name"]) for r in timed}):
    per_side, pytorch_by_round = {}, {}
    for r in (r for r in timed if (r["model"], r["layout_name"]) == key):
        w = r["warmup"]
        seconds = sum(r["step_s"][w:])
        steps = len(r["step_s"]) - w
        entry = per_side.setdefault(r["side_name"], {"samples_s": [], "tokens_s": [], "first": [], "eval": [],
                                                     "by_round": {}})
        entry["samples_s"].append(steps * r["global_batch"] / seconds)
        entry["tokens_s"].append(sum(r["real_tokens"][w:]) / seconds)
        entry["by_round"][r["round"]] = entry["tokens_s"][-1]
        entry["first"].append(r["time_to_first_step_s"])
        if r.get("eval_s") is not None:
            entry["eval"].append(r["eval_s"])
    ref = per_side.get("pytorch", {}).get("by_round", {})
    for side, e in per_side.items():
        tokens = statistics.median(e["tokens_s"])
        ratios = [t / ref[k] for k, t in e["by_round"].items() if k in ref]
        rows.append({"model": key[0], "layout": key[1], "side": side,
                     "samples_per_s": statistics.median(e["samples_s"]), "real_tokens_per_s": tokens,
                     "ratio_to_pytorch": statistics.median(ratios) if ratios else None, "rounds": len(e["tokens_s"]),
                     "tokens_per_s_each_round": e["tokens_s"],
                     "time_to_first_step_s": statistics.median(e["first"]),
                     "eval_pass_s": e["eval"][0] if e["eval"] else None})
json.dump(rows, open(sys.argv[2], "w"), indent=2)
print(f"{'model':10} {'layout':6} {'side':8} {'samples/s':>10} {'real tok/s':>11} {'x pytorch':>10} "
      f"{'first step s':>13} {'eval pass s':>12}   real tok/s per round")
for r in rows:
    ratio = f"{r['ratio_to_pytorch']:.2f}" if r["ratio_to_pytorch"] else "-"
    ev = f"{r['eval_pass_s']:.2f}" if r["eval_pass_s"] is not None else "-"
    rounds = " ".join(f"{x:.0f}" for x in r["tokens_per_s_each_round"])
    print(f"{r['model']:10} {r['layout']:6} {r['side']:8} {r['samples_per_s']:10.2f} {r['real_tokens_per_s']:11.0f} "
          f"{ratio:>10} {r['time_to_first_step_s']:13.2f} {ev:>12}   {rounds}")
PYEOF
echo "side_by_side: load average at the end $(cut -d' ' -f1-3 /proc/loadavg); every run: $RESULTS"
