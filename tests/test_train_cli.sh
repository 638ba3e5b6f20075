#!/usr/bin/env bash
# End-to-end checks of `shardtrain train` as users run it: mpiexec -np 2, the
# run folder, a real kill (SIGKILL of every rank at an unpredictable point,
# possibly inside a checkpoint write) followed by a re-run that must end with
# bit-identical parameters and the same metrics as an uninterrupted run, and
# errors that name what to fix.
# Usage: test_train_cli.sh SHARDTRAIN_BINARY SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]
# Needs bash, plain python3 and h5diff (hdf5-tools).
set -u
source "$(dirname "$0")/suite_lib.sh"
suite_start "$@"
# A failed check shows the last 25 lines of its log as they are (h5diff's and
# diff's lines are indented).
log_excerpt() { sed 's/^/    | /' "$1" | tail -25; }

tiny_run_config <<TOML
[train]
num_epochs = 4
lr = 1e-3
warmup_steps = 3
batch_size = 2
eval_batch_size = 8
log_every_steps = 5
[checkpoint]
every_steps = 7
num_to_keep = 2
score_attribute = "eval_f1"
[run]
storage_path = "$TMP/runs"
TOML

train() {  # train RUN_NAME [extra flags...]: stdout/stderr to $TMP/RUN_NAME.log
  local name=$1
  shift
  "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config "$TMP/tiny.toml" --run.name "$name" "$@" \
    >>"$TMP/$name.log" 2>&1
}

# 1. An uninterrupted run and what it leaves behind.
if train straight; then
  pass "train at -np 2"
else
  fail "train at -np 2 exited with $?" "$TMP/straight.log"
fi
D=$TMP/runs/straight
for f in config.toml train.log progress.csv result.jsonl; do
  [ -s "$D/$f" ] && pass "run folder has $f" || fail "run folder lacks $f"
done
grep -q "final metrics" "$TMP/straight.log" && grep -q "newest checkpoint: $D/checkpoint_" "$TMP/straight.log" &&
  pass "train ends with the metrics and the checkpoint path" || fail "train's closing lines" "$TMP/straight.log"
grep -q "first step done [0-9.]* s after the start" "$D/train.log" &&
  grep -q "report [0-9]*: .* | eval_seconds [0-9.]* | checkpoint_seconds [0-9.]*" "$D/train.log" &&
  pass "train.log has the first step's time and each report's eval and checkpoint seconds" ||
  fail "first-step / report timings in train.log" "$D/train.log"
$PY - "$D" <<'PY' && pass "result.jsonl: 4 epoch reports, checkpoints every 7 steps, best 2 + newest kept" || fail "result.jsonl / kept checkpoints"
import json, os, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(d, "result.jsonl"))]
epochs = [r for r in rows if "eval_f1" in r]
assert [r["epoch"] for r in epochs] == [1, 2, 3, 4], rows
assert all(0 <= r["eval_accuracy"] <= 1 and r["eval_loss"] > 0 for r in epochs)
steps = [r["step"] for r in rows]
assert steps == sorted(steps) and steps[-1] == 96, steps  # 48 examples/epoch... 96 rows / (2x2) = 24 steps x 4
assert [r["training_iteration"] for r in rows] == list(range(1, len(rows) + 1))
ckpts = sorted(f for f in os.listdir(d) if f.endswith(".h5"))
assert not [f for f in os.listdir(d) if ".tmp" in f], os.listdir(d)
assert 2 <= len(ckpts) <= 3, ckpts
assert ckpts[-1] == "checkpoint_%06d.h5" % len([r for r in rows if r["checkpoint"]]), ckpts
PY
[ "$(head -1 "$D/progress.csv")" = "step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s,loss_scale,skipped_steps" ] &&
  [ "$(wc -l <"$D/progress.csv")" -ge 19 ] && pass "progress.csv has a row every 5 steps" || fail "progress.csv" "$D/progress.csv"
if command -v h5dump >/dev/null; then
  h5dump -H "$(ls "$D"/checkpoint_*.h5 | tail -1)" >"$TMP/h5dump.txt" 2>&1
  grep -q 'DATASET "bert.encoder.layer.1.output.dense.weight"' "$TMP/h5dump.txt" &&
    grep -q 'ATTRIBUTE "step"' "$TMP/h5dump.txt" && pass "h5dump reads the checkpoint as a state dict" ||
    fail "h5dump -H of the checkpoint" "$TMP/h5dump.txt"
fi

# predict on the newest checkpoint with nothing but --model, --data and
# --output takes the run's settings (columns, max_length 64 that cuts rows,
# eval batch size) and prints the metrics the run reported with it, at -np 2
# and -np 1 (tests/test_predict_run_mpi.cpp compares them to the last bit).
NEWEST=$(ls "$D"/checkpoint_*.h5 | tail -1)
"$BIN" inspect "$NEWEST" --json >"$TMP/newest.json" 2>"$TMP/newest.err" || fail "inspect the newest checkpoint" "$TMP/newest.err"
for np in 2 1; do
  if "$MPIEXEC" "${MPI_FLAGS[@]}" -np $np "$BIN" predict --model "$NEWEST" --data "$TMP/dev.tsv" \
      --output "$TMP/pred_np$np.jsonl" >"$TMP/pred_np$np.log" 2>&1; then
    $PY - "$TMP/newest.json" "$TMP/pred_np$np.log" <<'PY' && pass "predict -np $np with the run's settings: the run's metrics" ||
import json, re, sys
reported = {k: v for k, v in json.load(open(sys.argv[1]))["metrics"].items() if k.startswith("eval_") and k != "eval_seconds"}
log = open(sys.argv[2]).read()
assert "--max-length 64 (run: data.max_length)" in log and "--text-a '#1 String' (run: data.text_a)" in log, log
line = next(l for l in log.splitlines() if "eval: eval_" in l)
printed = dict((k, float(v)) for k, v in re.findall(r"(eval_\w+) (-?[0-9.]+)", line))
assert len(reported) >= 4 and set(reported) == set(printed), (reported, printed)
for k, v in reported.items():
    assert abs(printed[k] - v) <= 5e-5, (k, printed[k], v)
PY
      fail "predict -np $np: metrics differ from the checkpoint's report" "$TMP/pred_np$np.log"
  else
    fail "predict -np $np on the newest checkpoint" "$TMP/pred_np$np.log"
  fi
done
# ... and never writes into the run folder it reads: not over a sibling
# checkpoint, progress.csv, nor a new file there.
cp "$D/progress.csv" "$TMP/progress.before"
for target in "$(ls "$D"/checkpoint_*.h5 | head -1)" "$D/progress.csv" "$D/predictions.jsonl"; do
  if "$BIN" predict --model "$NEWEST" --data "$TMP/dev.tsv" --output "$target" >"$TMP/pred_run_folder.log" 2>&1; then
    fail "predict --output $target in the checkpoint's run folder was written"
  else
    grep -q "is in the run folder '$D' of the checkpoint being read" "$TMP/pred_run_folder.log" &&
      pass "predict --output $(basename "$target") in the run folder refused" ||
      fail "predict --output in the run folder: message" "$TMP/pred_run_folder.log"
  fi
done
[ ! -e "$D/predictions.jsonl" ] && cmp -s "$D/progress.csv" "$TMP/progress.before" &&
  pass "predict left the run folder as it was" || fail "predict changed the run folder"

# 2. Killed at an arbitrary point, then re-run: the same end, bit for bit.
train cli_killed &
JOB=$!
K=$TMP/runs/cli_killed
for _ in $(seq 1 600); do
  [ -e "$K/checkpoint_000002.h5" ] && break
  sleep 0.05
done
pkill -KILL -f -- "--run.name cli_killed" 2>/dev/null
wait $JOB 2>/dev/null
[ -e "$K/checkpoint_000002.h5" ] && pass "killed run left checkpoint 2 ($(ls "$K" | grep -c '\.h5$') complete .h5 files)" ||
  fail "killed run: no checkpoint 2 before the kill" "$TMP/cli_killed.log"
if train cli_killed; then pass "re-run after the kill"; else fail "re-run after the kill" "$TMP/cli_killed.log"; fi
grep -q "resumed from $K/checkpoint_" "$TMP/cli_killed.log" && pass "re-run resumed from a checkpoint" ||
  fail "re-run did not resume" "$TMP/cli_killed.log"
LAST_S=$(ls "$D"/checkpoint_*.h5 | tail -1)
LAST_K=$(ls "$K"/checkpoint_*.h5 | tail -1)
if command -v h5diff >/dev/null; then
  same_state "$LAST_S" "$LAST_K" "$TMP/h5diff.txt" &&
    pass "killed + resumed: final parameters and optimizer state bit-identical" ||
    fail "killed + resumed: final checkpoint differs" "$TMP/h5diff.txt"
fi
$PY - "$D/result.jsonl" "$K/result.jsonl" <<'PY' && pass "killed + resumed: result.jsonl metrics identical" || fail "result.jsonl differs after resume"
import json, os, sys
def load(p):
    out = []
    for l in open(p):
        r = json.loads(l)
        for k in ("time_total_s", "eval_seconds", "checkpoint_seconds"):
            r.pop(k, None)
        if r.get("checkpoint"):
            r["checkpoint"] = os.path.basename(r["checkpoint"])
        out.append(r)
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a == b, (a, b)
PY
# progress.csv rows (step, epoch, loss, lr, grad_norm) as the uninterrupted run's: the
# first row after the resume averages the same steps (issue 37, item 11).
cut -d, -f1-5 "$D/progress.csv" >"$TMP/progress_straight.csv"
cut -d, -f1-5 "$K/progress.csv" >"$TMP/progress_killed.csv"
cmp -s "$TMP/progress_straight.csv" "$TMP/progress_killed.csv" &&
  pass "killed + resumed: progress.csv's loss and grad_norm rows identical" ||
  { diff "$TMP/progress_straight.csv" "$TMP/progress_killed.csv" >"$TMP/progress.diff"; fail "progress.csv differs after resume" "$TMP/progress.diff"; }
ls "$K" | grep -q '\.tmp' && echo "note: the kill left a temporary checkpoint file (killed mid-write)"

# 3. Re-running a finished run changes nothing, train.log included (issue 37, item 10).
cp "$D/result.jsonl" "$TMP/before.jsonl"
cp "$D/train.log" "$TMP/before.log"
train straight && grep -q "training already finished" "$TMP/straight.log" && cmp -s "$D/result.jsonl" "$TMP/before.jsonl" &&
  cmp -s "$D/train.log" "$TMP/before.log" &&
  pass "re-running a finished run does nothing (train.log unchanged)" || fail "re-running a finished run" "$TMP/straight.log"

# 3b. ... with other flags it keeps its config.toml; --resume of its checkpoint
#     into a new run has nothing to do and leaves no run folder behind.
cp "$D/config.toml" "$TMP/before.toml"
train straight --train.lr 5e-4 && cmp -s "$D/config.toml" "$TMP/before.toml" && cmp -s "$D/train.log" "$TMP/before.log" &&
  pass "a finished run re-run with another lr keeps its config.toml and train.log" ||
  fail "config.toml or train.log rewritten" "$TMP/straight.log"
train copy --resume "$LAST_S" && grep -q "nothing to do" "$TMP/copy.log" && [ ! -e "$TMP/runs/copy" ] &&
  pass "--resume of a finished checkpoint into a new run leaves no folder" || fail "--resume into a new run" "$TMP/copy.log"

# 4. zero3 from the command line ends where ddp ends: same tensors in the final
#    checkpoint up to fp32 summation order (reduce-scatter vs all-reduce).
if train sharded --parallel.strategy zero3 --parallel.zero.stage3_param_persistence_threshold 100; then
  Z=$TMP/runs/sharded
  last_ddp=$(ls "$D"/checkpoint_*.h5 | tail -n 1)
  last_z3=$(ls "$Z"/checkpoint_*.h5 | tail -n 1)
  h5diff -d 1e-5 "$last_ddp" "$last_z3" /model /model >"$TMP/h5diff_z3.log" 2>&1 &&
    h5diff -d 1e-6 "$last_ddp" "$last_z3" /optim/exp_avg /optim/exp_avg >>"$TMP/h5diff_z3.log" 2>&1 &&
    pass "zero3 at -np 2: final parameters and AdamW state equal ddp's (h5diff -d 1e-5)" ||
    fail "zero3 checkpoint differs from ddp's" "$TMP/h5diff_z3.log"
  grep -q "strategy zero3" "$TMP/sharded.log" && pass "train logs the strategy" || fail "strategy log line" "$TMP/sharded.log"
else
  fail "train --parallel.strategy zero3" "$TMP/sharded.log"
fi

# 5. Errors name what to fix (exit status 2, one message).
"$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config "$TMP/tiny.toml" --run.name e1 --train.batch_size 0 >"$TMP/e1.log" 2>&1
[ $? -eq 2 ] && grep -q "train.batch_size" "$TMP/e1.log" && pass "bad batch size names train.batch_size" || fail "bad batch size" "$TMP/e1.log"
"$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config "$TMP/tiny.toml" --run.name straight --train.batch_size 3 >"$TMP/e2.log" 2>&1
[ $? -eq 2 ] && grep -q "global batch" "$TMP/e2.log" && pass "resume with another global batch is refused" || fail "global batch mismatch" "$TMP/e2.log"
# The refusal, and nothing of the refused job's setup, is appended to train.log.
[ "$(($(wc -l <"$D/train.log") - $(wc -l <"$TMP/before.log")))" -eq 1 ] &&
  tail -n 1 "$D/train.log" | grep -q "error: .*was trained with global batch" &&
  pass "a refused resume appends its error to train.log, and nothing else" ||
  fail "train.log after a refused resume: $(($(wc -l <"$D/train.log") - $(wc -l <"$TMP/before.log"))) lines added" "$D/train.log"
"$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config "$TMP/tiny.toml" --run.name e3 --data.label "Qualty" >"$TMP/e3.log" 2>&1
[ $? -eq 2 ] && grep -q "Qualty" "$TMP/e3.log" && pass "a missing label column is named" || fail "missing label column" "$TMP/e3.log"
"$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config "$TMP/tiny.toml" --run.name e5 --parallel.offload_optimizer cpu >"$TMP/e5.log" 2>&1
[ $? -eq 2 ] && grep -q "parallel.offload_optimizer" "$TMP/e5.log" && pass "optimizer offload with ddp is refused, not ignored" || fail "offload_optimizer" "$TMP/e5.log"
"$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 -x SLURM_RESTART_COUNT=2 "$BIN" train --config "$TMP/tiny.toml" --run.name straight --run.max_failures 1 >"$TMP/e4.log" 2>&1
[ $? -eq 2 ] && grep -q "run.max_failures = 1" "$TMP/e4.log" && pass "a job restarted more than run.max_failures times stops" || fail "run.max_failures" "$TMP/e4.log"
# run.storage_path through a loop of symbolic links: named as one.
ln -s "$TMP/loop" "$TMP/loop"
"$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config "$TMP/tiny.toml" --run.name e6 --run.storage_path "$TMP/loop" >"$TMP/e6.log" 2>&1
[ $? -eq 2 ] && grep -qF "run.storage_path / run.name '$TMP/loop/e6': '$TMP/loop' is a loop of symbolic links" "$TMP/e6.log" &&
  pass "a run.storage_path that is a link loop is named" || fail "run.storage_path link loop" "$TMP/e6.log"

suite_end
