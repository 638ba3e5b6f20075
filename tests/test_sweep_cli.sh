#!/usr/bin/env bash
# `shardtrain sweep` end to end on a tiny random BERT (docs/sweeps.md):
#   - a 2 x 2 grid at -np 4, 2 ranks per trial: four trials finish, the table,
#     results.csv and best.json agree with the recorded evaluations, and the
#     best trial rerun alone with `train` and its recorded config.toml ends with
#     the same /model bit for bit;
#   - re-running the finished sweep changes nothing in its folder;
#   - the same sweep with one rank frozen in a checkpoint write and killed with
#     SIGKILL, then run again: trials finished before the kill are not rerun,
#     the interrupted one resumes from its checkpoint, no temporary file is
#     left, and results.csv's metrics equal the uninterrupted sweep's bit for bit;
#   - SIGTERM to the process group of scripts/mpirun.sh running the sweep:
#     exit 143 after emergency checkpoints; run again, the same metrics;
#   - ASHA with 9 trials, grace_period 1, reduction_factor 3: every recorded
#     decision follows the rule, replayed here in the recorded order;
#   - `plot` of the sweep folder draws the pruned trials dashed;
#   - the same sweep from a changed base config: refused, naming the keys;
#   - bad sweep files refused before any training, naming the key (a metric
#     the task never reports, a base that is a folder);
#   - a sweep whose every trial fails exits non-zero after its table;
#   - the sweep folder moved: best.json's paths still exist; a trial folder or
#     checkpoint deleted and a trial taken out of the state by hand: --status
#     shows them missing, a re-run trains exactly those, to the same metrics.
# Usage: test_sweep_cli.sh SHARDTRAIN_BINARY SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]
# Needs bash, python3 and h5diff (hdf5-tools).
set -u
source "$(dirname "$0")/suite_lib.sh"
suite_start "$@"

tiny_run_config <<TOML
[train]
num_epochs = 10
max_steps = 12
lr = 1e-3
warmup_steps = 2
batch_size = 4
eval_batch_size = 20
eval_every_steps = 4
log_every_steps = 4
[checkpoint]
every_steps = 8
every_epochs = 0
[run]
storage_path = "$TMP/runs"
collective_timeout_s = 60
TOML
grid_file() {  # grid_file NAME: the 2 x 2 grid, 2 ranks per trial
  cat >"$TMP/$1.sweep.toml" <<TOML
[sweep]
base = "tiny.toml"
name = "$1"
metric = "eval_loss"
mode = "min"
ranks_per_trial = 2
[sweep.space]
"train.lr" = { grid = [1e-3, 3e-3] }
"train.warmup_steps" = { grid = [0, 4] }
TOML
}
sweep() {  # sweep NP NAME [env...]: the sweep file NAME, log $TMP/NAME.log (appended)
  local np=$1 name=$2
  shift 2
  timeout -s KILL $((240 * SCALE)) env "$@" "$MPIEXEC" "${MPI_FLAGS[@]}" -np "$np" "$BIN" sweep \
    --config "$TMP/$name.sweep.toml" >>"$TMP/$name.log" 2>&1
}
metrics_of() {  # the metric columns of results.csv (no paths, no reasons)
  python3 - "$1" <<'PY'
import csv, sys
for row in csv.DictReader(open(sys.argv[1])):
    print(row["trial"], row["status"], row["evaluations"], row["last"], row["best"], row["best_evaluation"], row["steps"])
PY
}
snapshot() {  # every file with its size, mtime and sha256
  (cd "$1" && find . -type f -printf '%p %s %T@\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}

# ---- a 2 x 2 grid at -np 4, 2 ranks per trial ----------------------------------------
grid_file grid
D=$TMP/runs/grid
if sweep 4 grid && python3 - "$D" <<'PY'; then
import csv, json, math, sys
d = sys.argv[1]
state = json.load(open(d + "/sweep_state.json"))
assert [t["status"] for t in state["trials"]] == ["finished"] * 4, state["trials"]
assert sorted({t["group"] for t in state["trials"]}) == [0, 1], "both groups ran trials"
values = {}
for e in state["events"]:
    values.setdefault(e["trial"], []).append(e["value"])
assert all(len(v) == 3 for v in values.values()), values          # evaluations at steps 4, 8, 12
rows = list(csv.DictReader(open(d + "/results.csv")))
best = [min(values[r["trial"]]) for r in rows]
assert [float(r["best"]) for r in rows] == best, "results.csv holds each trial's best eval_loss"
assert best == sorted(best), "sorted best first (mode min)"
params = {t["id"]: dict(t["params"]) for t in state["trials"]}
assert {(p["train.lr"], p["train.warmup_steps"]) for p in params.values()} == {("0.001", "0"), ("0.001", "4"), ("0.003", "0"), ("0.003", "4")}
b = json.load(open(d + "/best.json"))
assert b["trial"] == rows[0]["trial"] and b["value"] == best[0] and b["params"] == params[b["trial"]], b
assert b["checkpoint"].endswith(b["trial"] + "/checkpoint_000002.h5"), b
PY
  pass "2 x 2 grid at -np 4, 2 ranks per trial: four trials finished, results.csv and best.json right"
else
  fail "2 x 2 grid" "$TMP/grid.log"
fi
grep -q "^1  trial_" "$TMP/grid.log" && grep -q "^best: trial_" "$TMP/grid.log" &&
  pass "the table printed, best first" || fail "the table" "$TMP/grid.log"

BEST=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["trial"])' "$D/best.json" 2>/dev/null)
if timeout -s KILL $((120 * SCALE)) "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config "$D/$BEST/config.toml" \
  --run.storage_path "$TMP/rerun" --run.name best >"$TMP/rerun.log" 2>&1 &&
  h5diff "$D/$BEST/checkpoint_000002.h5" "$TMP/rerun/best/checkpoint_000002.h5" /model /model >"$TMP/h5diff.log" 2>&1; then
  pass "the best trial ($BEST) rerun alone with train and its config.toml: /model bit-identical"
else
  fail "the best trial rerun alone ($(cat "$TMP/h5diff.log" 2>/dev/null | head -3))" "$TMP/rerun.log"
fi

# ---- a finished sweep, run again: nothing changes -------------------------------------
snapshot "$D" >"$TMP/before.txt"  # mtimes to the nanosecond: any rewrite shows
if sweep 4 grid && grep -q "^nothing to do: every trial of" "$TMP/grid.log" && snapshot "$D" >"$TMP/after.txt" &&
  cmp -s "$TMP/before.txt" "$TMP/after.txt"; then
  pass "the finished sweep run again: nothing to do, its folder unchanged (names, sizes, mtimes, sha256)"
else
  diff "$TMP/before.txt" "$TMP/after.txt" | head -5
  fail "the finished sweep run again" "$TMP/grid.log"
fi
"$BIN" sweep --status "$D" >"$TMP/status.txt" 2>&1 && grep -q "^1  $BEST  finished" "$TMP/status.txt" &&
  snapshot "$D" >"$TMP/after.txt" && cmp -s "$TMP/before.txt" "$TMP/after.txt" &&
  pass "sweep --status: the table, best first; the folder unchanged" || fail "sweep --status" "$TMP/status.txt"

# ---- the same sweep from a changed base config: refused, naming the keys -----------------
# max_length, max_steps and weight_decay change; train.lr too, but the space sets it.
sed -e 's/^max_length = 64$/max_length = 32/' -e 's/^max_steps = 12$/max_steps = 20/' -e 's/^lr = 1e-3$/lr = 5e-4/' \
  -e 's/^\[train\]$/[train]\nweight_decay = 0.05/' "$TMP/tiny.toml" >"$TMP/tiny_changed.toml"
sed 's/^base = "tiny.toml"$/base = "tiny_changed.toml"/' "$TMP/grid.sweep.toml" >"$TMP/grid_changed.sweep.toml"
out=$(timeout -s KILL $((60 * SCALE)) "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" sweep --config "$TMP/grid_changed.sweep.toml" 2>&1)
status=$?
expected="was made from another base config: data.max_length: 64 -> 32, train.max_steps: 12 -> 20, train.weight_decay: 0.01 -> 0.05 ("
if [ $status -eq 2 ] && grep -qF -- "$expected" <<<"$out" && snapshot "$D" >"$TMP/after.txt" &&
  cmp -s "$TMP/before.txt" "$TMP/after.txt"; then
  pass "the sweep rerun from a changed base config: refused naming the keys, the folder unchanged"
else
  fail "a changed base config (status $status): $(tail -3 <<<"$out")"
fi

# ---- kill -9 one rank mid-sweep, then run again -----------------------------------------
# World rank 1 freezes in its first final checkpoint write (a temporary file is
# open) and is killed; the other group goes on until mpirun ends the job.
grid_file killed
K=$TMP/runs/killed
sweep 4 killed SHARDTRAIN_FAULT_STOP="checkpoint write*checkpoint_000002.h5*/model/@1" &
JOB=$!
for ((i = 0; i < 1200 * SCALE; i++)); do
  grep -q "fault injection (SHARDTRAIN_FAULT_STOP): world rank 1 stops itself" "$TMP/killed.log" 2>/dev/null && break
  sleep 0.05
done
victim=""
for pid in $(pgrep -f -- "killed.sweep.toml" 2>/dev/null); do
  [ -r "/proc/$pid/environ" ] || continue
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$pid
done
# The other group goes on meanwhile: kill once it has finished a trial.
for ((i = 0; i < 600 * SCALE; i++)); do
  grep -q '"status": "finished"' "$K/sweep_state.json" 2>/dev/null && break
  sleep 0.05
done
[ -n "$victim" ] && kill -9 "$victim"
wait $JOB
status=$?
python3 - "$K" >"$TMP/killed_state.txt" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1] + "/sweep_state.json"))["trials"]:
    print(t["id"], t["status"])
PY
finished_before=$(awk '$2 == "finished" {print $1}' "$TMP/killed_state.txt")
running_before=$(awk '$2 == "running" {print $1}' "$TMP/killed_state.txt")
resumable=""  # running trials with a complete checkpoint: they resume from it (the others start again)
for t in $running_before; do [ -f "$K/$t/checkpoint_000001.h5" ] && resumable="$resumable $t"; done
for t in $finished_before; do snapshot "$K/$t"; done >"$TMP/finished_before.txt"
if [ -n "$victim" ] && [ $status -ne 0 ] && [ -n "$resumable" ] && [ -n "$finished_before" ] && ls "$K"/*/checkpoint_*.h5.tmp* >/dev/null 2>&1; then
  pass "rank 1 killed mid-sweep (status $status): finished [$(echo $finished_before)], running [$(echo $running_before)], a temporary checkpoint left"
else
  fail "the kill mid-sweep (victim '$victim', status $status, state: $(tr '\n' ' ' <"$TMP/killed_state.txt"))" "$TMP/killed.log"
fi
: >"$TMP/killed.log.2"
if timeout -s KILL $((240 * SCALE)) "$MPIEXEC" "${MPI_FLAGS[@]}" -np 4 "$BIN" sweep --config "$TMP/killed.sweep.toml" \
  >"$TMP/killed.log.2" 2>&1; then
  ok=1
  for t in $finished_before; do snapshot "$K/$t"; done >"$TMP/finished_after.txt"
  cmp -s "$TMP/finished_before.txt" "$TMP/finished_after.txt" || { ok=0; echo "  a finished trial's folder changed"; }
  for t in $resumable; do
    grep -q "resumed from $K/$t/checkpoint_000001.h5" "$TMP/killed.log.2" || { ok=0; echo "  $t did not resume from its checkpoint"; }
  done
  ls "$K"/*/*.tmp* >/dev/null 2>&1 && { ok=0; echo "  temporary files left: $(ls "$K"/*/*.tmp*)"; }
  metrics_of "$D/results.csv" >"$TMP/grid_metrics.txt"
  metrics_of "$K/results.csv" >"$TMP/killed_metrics.txt"
  cmp -s "$TMP/grid_metrics.txt" "$TMP/killed_metrics.txt" || { ok=0; diff "$TMP/grid_metrics.txt" "$TMP/killed_metrics.txt"; }
  [ $ok = 1 ] && pass "run again after the kill: finished trials untouched, the interrupted ones resumed, temporary files gone, results.csv's metrics bit-identical to the uninterrupted sweep" ||
    fail "run again after the kill" "$TMP/killed.log.2"
else
  fail "run again after the kill (status $?)" "$TMP/killed.log.2"
fi

# ---- SIGTERM to the process group of scripts/mpirun.sh running the sweep ----------------------
# Both groups stop at their next step boundary with an emergency checkpoint;
# the same command again finishes the sweep with the uninterrupted metrics.
grid_file stopped
S=$TMP/runs/stopped
setsid bash "$SRC/scripts/mpirun.sh" -np 4 "$BIN" sweep --config "$TMP/stopped.sweep.toml" >"$TMP/stopped.log" 2>&1 &
JOB=$!
# Its output to /dev/null: a sleep left holding the test's stdout keeps CTest waiting 200 s.
(sleep $((200 * SCALE)) && kill -KILL -- -$JOB) >/dev/null 2>&1 &
GUARD=$!
for ((i = 0; i < 1200 * SCALE; i++)); do
  grep -q "evaluation 1 at step 4" "$TMP/stopped.log" 2>/dev/null && break
  sleep 0.05
done
kill -TERM -- -$JOB
wait $JOB
status=$?
kill $GUARD 2>/dev/null
emergency=$(grep -c "^\(\[trial_[0-9]*\] \)\?emergency checkpoint of step" "$TMP/stopped.log")
if [ $status -eq 143 ] && [ "$emergency" -ge 1 ] && ! ls "$S"/*/*.tmp* >/dev/null 2>&1 &&
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert "running" not in [t["status"] for t in s["trials"]]' \
    "$S/sweep_state.json"; then
  pass "SIGTERM to the launcher's process group mid-sweep: exit 143, $emergency emergency checkpoint(s), no trial left running"
else
  fail "SIGTERM mid-sweep (status $status, $emergency emergency checkpoints)" "$TMP/stopped.log"
fi
if timeout -s KILL $((240 * SCALE)) bash "$SRC/scripts/mpirun.sh" -np 4 "$BIN" sweep --config "$TMP/stopped.sweep.toml" \
  >"$TMP/stopped.log.2" 2>&1 && grep -q "^\[trial_[0-9]*\] resumed from $S/trial_" "$TMP/stopped.log.2" &&
  metrics_of "$S/results.csv" >"$TMP/stopped_metrics.txt" && cmp -s "$TMP/grid_metrics.txt" "$TMP/stopped_metrics.txt"; then
  pass "the sweep run again after SIGTERM: resumed, results.csv's metrics bit-identical to the uninterrupted sweep"
else
  fail "the sweep run again after SIGTERM" "$TMP/stopped.log.2"
fi

# ---- ASHA: 9 trials, grace_period 1, reduction_factor 3 -------------------------------------
sed 's/^eval_every_steps = 4$/eval_every_steps = 3/' "$TMP/tiny.toml" >"$TMP/tiny_eval3.toml"  # 4 evaluations
cat >"$TMP/asha.sweep.toml" <<TOML
[sweep]
base = "tiny_eval3.toml"
name = "asha"
metric = "eval_loss"
mode = "min"
num_samples = 9
seed = 5
scheduler = "asha"
grace_period = 1
reduction_factor = 3
max_t = 9
[sweep.space]
"train.lr" = { loguniform = [1e-4, 3e-2] }
TOML
A=$TMP/runs/asha
if sweep 2 asha && python3 - "$A" <<'PY'; then
import json, sys
state = json.load(open(sys.argv[1] + "/sweep_state.json"))
assert len(state["trials"]) == 9 and state["rungs"] == [1, 3], state["rungs"]
rungs = {1: [], 3: []}
seen = {1: set(), 3: set()}
def percentile(values, q):  # numpy.percentile, linear
    v = sorted(values)
    pos = q / 100 * (len(v) - 1)
    lo = int(pos); hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)
pruned = 0
for e in state["events"]:
    x = -e["value"]  # mode min
    stop = False
    for m in (3, 1):
        if e["evaluation"] < m:
            continue
        if e["trial"] in seen[m]:
            break
        if rungs[m] and x < percentile(rungs[m], (1 - 1 / 3) * 100):
            stop = True
        rungs[m].append(x); seen[m].add(e["trial"])
        break
    assert stop == e["stop"], (e, "the rule says", stop)
    pruned += stop
status = {t["id"]: t["status"] for t in state["trials"]}
counts = {}
for e in state["events"]:
    counts[e["trial"]] = counts.get(e["trial"], 0) + 1
for t, s in status.items():
    stopped = [e for e in state["events"] if e["trial"] == t and e["stop"]]
    if s == "pruned":
        assert stopped and counts[t] == stopped[0]["evaluation"] < 4, (t, counts[t])
    else:
        assert s == "finished" and counts[t] == 4 and not stopped, (t, s, counts.get(t))
assert pruned >= 2, "some trials pruned"
print("asha:", pruned, "pruned of 9")
PY
  pass "ASHA, 9 trials, grace_period 1, reduction_factor 3: every recorded decision follows the rule in recorded order"
else
  fail "ASHA end to end" "$TMP/asha.log"
fi
grep -q "pruned at rung [13]: eval_loss .* is not in the top 1/3 of" "$A/results.csv" &&
  pass "a pruned trial's reason recorded in results.csv" || fail "the pruning reason" "$A/results.csv"

# plot takes the sweep folder: every trial a run, the pruned ones dashed (legend and curves).
if "$BIN" plot "$A" --output "$TMP/asha.svg" >"$TMP/plot.log" 2>&1 && python3 - "$A" "$TMP/asha.svg" <<'PY'; then
import json, re, sys
state = json.load(open(sys.argv[1] + "/sweep_state.json"))
svg = open(sys.argv[2]).read()
legend = dict(re.findall(r'<line [^>]*?( stroke-dasharray="7 4")?/>\n<text [^>]*class="legend">(trial_\d+)</text>', svg)[i][::-1]
              for i in range(len(state["trials"])))
for t in state["trials"]:
    assert (legend[t["id"]] != "") == (t["status"] == "pruned"), (t["id"], t["status"], legend[t["id"]])
PY
  pass "plot of the sweep folder: one run per trial, exactly the pruned ones dashed"
else
  fail "plot of the sweep folder" "$TMP/plot.log"
fi

# ---- bad sweep files: refused before any training, naming the key ------------------------------
expect_refused() {  # expect_refused NAME EXPECTED [np]: $TMP/NAME.sweep.toml exits 2 naming EXPECTED, makes nothing
  local np=${3:-1} out
  out=$(timeout -s KILL $((60 * SCALE)) "$MPIEXEC" "${MPI_FLAGS[@]}" -np "$np" "$BIN" sweep --config "$TMP/$1.sweep.toml" 2>&1)
  local status=$?
  if [ $status -eq 2 ] && grep -qF -- "$2" <<<"$out" && [ ! -e "$TMP/runs/$1" ]; then
    pass "refused ($1): $(grep -F -- "$2" <<<"$out" | head -1 | cut -c1-150)"
  else
    fail "$1 (status $status): $(tail -3 <<<"$out")"
  fi
}
refused_sweep() {  # refused_sweep NAME EXPECTED [np]: the whole sweep file on stdin
  cat >"$TMP/$1.sweep.toml"
  expect_refused "$@"
}
bad() {  # bad NAME EXPECTED [np]: the [sweep.space] body on stdin, after a [sweep] on tiny.toml
  { printf '[sweep]\nbase = "tiny.toml"\nname = "%s"\nmetric = "eval_loss"\nmode = "min"\n' "$1"; cat; } >"$TMP/$1.sweep.toml"
  expect_refused "$@"
}
bad unknown_key "sweep.space.train.lrr: unknown run-config key 'train.lrr'" <<'TOML'
[sweep.space]
"train.lrr" = { grid = [1e-3] }
TOML
bad empty_space "sweep.space is empty" <<'TOML'
[sweep.space]
TOML
bad not_dividing "sweep.ranks_per_trial = 2 does not divide the job's 3 ranks" 3 <<'TOML'
ranks_per_trial = 2
[sweep.space]
"train.lr" = { grid = [1e-3] }
TOML
bad loguniform_zero "sweep.space.train.lr: loguniform needs 0 < a < b, got a = 0" <<'TOML'
[sweep.space]
"train.lr" = { loguniform = [0, 1e-3] }
TOML
bad bad_value "trial_001 (train.batch_size = -4) of" <<'TOML'
[sweep.space]
"train.batch_size" = { grid = [4, -4] }
TOML

refused_sweep bad_metric "sweep.metric = 'eval_nonsense' ($TMP/bad_metric.sweep.toml) is never reported by model.task = \"sequence_classification\" (the base config $TMP/./tiny.toml); its evaluations report train_loss, eval_loss, eval_accuracy, eval_f1, eval_mcc" <<'TOML'
[sweep]
base = "./tiny.toml"
name = "bad_metric"
metric = "eval_nonsense"
mode = "max"
[sweep.space]
"train.lr" = { grid = [1e-3] }
TOML
refused_sweep base_is_folder "sweep.base = $TMP/. ($TMP/base_is_folder.sweep.toml) is a directory: name the run config file (TOML) every trial starts from; that folder holds " <<'TOML'
[sweep]
base = "."
name = "base_is_folder"
metric = "eval_loss"
mode = "min"
[sweep.space]
"train.lr" = { grid = [1e-3] }
TOML

# ---- every trial fails at run time: the table, then a non-zero exit ----------------------
cat >"$TMP/all_fail.sweep.toml" <<TOML
[sweep]
base = "tiny.toml"
name = "all_fail"
metric = "eval_loss"
mode = "min"
[sweep.space]
"data.label" = { grid = ["no_such_column", "nor_this_one"] }
TOML
sweep 1 all_fail
status=$?
if [ $status -ne 0 ] && grep -qF "no trial of the sweep in $TMP/runs/all_fail finished: 2 of 2 failed" "$TMP/all_fail.log" &&
  grep -q "^trial_001 failed: " "$TMP/all_fail.log"; then
  pass "every trial failed: the table with their errors, exit $status"
else
  fail "every trial failed (status $status)" "$TMP/all_fail.log"
fi

# ---- the sweep folder moved; a trial's folder, another's checkpoint deleted; a trial taken
# ---- out of the state by hand: --status tells them apart, a re-run trains exactly those ----
M=$TMP/moved/grid
mkdir -p "$TMP/moved" && mv "$D" "$M"
if "$BIN" sweep --status "$M" >"$TMP/moved_status.txt" 2>&1 && python3 - "$M" <<'PY'; then
import json, os, sys
d = sys.argv[1]
b = json.load(open(d + "/best.json"))
for key in ("checkpoint", "run_dir", "config"):
    assert not os.path.isabs(b[key]) and os.path.exists(os.path.join(d, b[key])), (key, b[key])
for row in open(d + "/results.csv").readlines()[1:]:
    assert ",finished," in row and "/moved/" not in row and "/runs/" not in row, row
PY
  pass "the sweep folder moved: --status and best.json name its files relative to it (they exist)"
else
  fail "the moved sweep folder" "$TMP/moved_status.txt"
fi
snapshot "$M/trial_003" >"$TMP/kept_before.txt"
rm -rf "$M/trial_000"
rm -f "$M/trial_001"/checkpoint_000002.h5
python3 - "$M/sweep_state.json" <<'PY'
import json, sys
state = json.load(open(sys.argv[1]))
state["trials"] = [t for t in state["trials"] if t["id"] != "trial_002"]
state["events"] = [e for e in state["events"] if e["trial"] != "trial_002"]
json.dump(state, open(sys.argv[1], "w"), indent=1)
PY
rm -rf "$M/trial_002"
if "$BIN" sweep --status "$M" >"$TMP/deleted_status.txt" 2>&1 &&
  grep -qE "^[0-9]+  trial_000  missing" "$TMP/deleted_status.txt" && grep -qE "^[0-9]+  trial_001  missing" "$TMP/deleted_status.txt" &&
  grep -qF "trial_001 finished, but its checkpoint trial_001/checkpoint_000002.h5 is gone" "$TMP/deleted_status.txt" &&
  ! grep -qE "^[0-9]+  trial_00[01]  finished" "$TMP/deleted_status.txt"; then
  pass "--status: a finished trial whose folder or checkpoint is gone shows as missing"
else
  fail "--status with deleted files" "$TMP/deleted_status.txt"
fi
mv "$M" "$D"
: >"$TMP/grid.log"
if sweep 4 grid && metrics_of "$D/results.csv" >"$TMP/rerun_metrics.txt" &&
  cmp -s "$TMP/grid_metrics.txt" "$TMP/rerun_metrics.txt" && snapshot "$D/trial_003" >"$TMP/kept_after.txt" &&
  cmp -s "$TMP/kept_before.txt" "$TMP/kept_after.txt" &&
  [ -f "$D/trial_000/checkpoint_000002.h5" ] && [ -f "$D/trial_001/checkpoint_000002.h5" ] &&
  [ -f "$D/trial_002/checkpoint_000002.h5" ] && grep -q "holds no trial_002" "$TMP/grid.log" &&
  [ "$(grep -c "^\[trial_00[0-2]\] done: 12 steps" "$TMP/grid.log")" = 3 ] && ! grep -q "^\[trial_003\]" "$TMP/grid.log"; then
  pass "re-run: the three trials trained again (results.csv's metrics bit-identical), trial_003 untouched"
else
  diff "$TMP/grid_metrics.txt" "$TMP/rerun_metrics.txt" | head -5
  fail "re-run after deleting files" "$TMP/grid.log"
fi

suite_end
