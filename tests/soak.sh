#!/usr/bin/env bash
# Chaos soak of `shardtrain train` (docs/DESIGN.md, "Preemption" and "Errors
# and hangs"): one training run per (ranks, strategy) is hit again and again,
# at a random moment (a random number of steps into each job, then a random
# fraction of a second), by a fault drawn at random, and relaunched after each
# with the same command, as a Slurm requeue would:
#   kill9_one   kill -9 of one rank          kill9_all  kill -9 of every rank
#   stop_one    SIGSTOP of one rank          sigterm    SIGTERM to every rank, or to one (preemption)
#   disk_full   the run's file system filled while training: the next checkpoint write meets ENOSPC
#   damage      kill -9 of every rank, then the newest checkpoint truncated or a bit flipped in it;
#               when it was the run's only one, the relaunch must refuse to start over the
#               run's records (status 2, nothing changed), and the one after passes --restart
# It passes only if
#   - the final /model and /optim are bit-identical (h5diff) to an uninterrupted run's;
#   - every fault ended its job within run.collective_timeout_s + 10 s (the
#     10 s times SHARDTRAIN_TEST_TIME_SCALE);
#   - no complete checkpoint was ever lost or changed by the program: the soak
#     records the sha256 of every complete checkpoint after each job, and one
#     may only go missing when the keep policy prunes it (checkpoint.num_to_keep
#     K without score_attribute: only checkpoints with K newer ones beside them);
#     a checkpoint the soak damaged must come back as <name>.damaged;
#   - progress.csv, result.jsonl and the TensorBoard events have no step twice;
#   - a SIGTERM ends its job with status 143 and, when steps were trained since
#     the newest checkpoint, an emergency checkpoint of the step it stopped at
#     (checkpoint.preemption_grace_s is the timeout + 5 s: when it runs out
#     first, the job exits 143 at once and the soak says so);
#     a full disk ends its job with status 2 naming ENOSPC.
# Usage: soak.sh SHARDTRAIN_BINARY SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]
# Environment: SOAK_FAULTS (faults in all, default 6), SOAK_SEED (default: from
# the clock; printed), SOAK_RUNS ("NP:STRATEGY ...", default "2:ddp"),
# SOAK_TIMEOUT_S (run.collective_timeout_s, default 5 x the scale below), SOAK_KINDS (the kinds
# to draw from, default all), SOAK_KEEP (a folder: the jobs' logs are copied
# there at the end). The long version:
#   SOAK_FAULTS=32 SOAK_RUNS="2:ddp 2:zero3 4:ddp 4:zero3" SOAK_TIMEOUT_S=10 tests/soak.sh ...
# disk_full needs root (a small tmpfs); without it that kind is left out.
set -u
BIN=${1:?usage: soak.sh SHARDTRAIN_BINARY SOURCE_DIR MPIEXEC [FLAGS...]}
SRC=${2:?source dir}
MPIEXEC=${3:?mpiexec}
shift 3
MPI_FLAGS=("$@")
NUM_FAULTS=${SOAK_FAULTS:-6}
SEED=${SOAK_SEED:-$(($(date +%s) % 100000))}
RUNS=(${SOAK_RUNS:-2:ddp})
# SHARDTRAIN_TEST_TIME_SCALE (5 in a sanitized build, tests/CMakeLists.txt):
# the default timeout, the slack of the bound on ending a job and the waits
# stretch by it; the jobs run that much slower there.
SCALE=${SHARDTRAIN_TEST_TIME_SCALE:-1}
TIMEOUT_S=${SOAK_TIMEOUT_S:-$((5 * SCALE))}
LIMIT_S=$((TIMEOUT_S + 10 * SCALE))
KEEP=3
RANDOM=$SEED
# A job's log says the run is complete: it trained to the end, or found it done already.
finished() { grep -qE '^done: |training already finished' "$1"; }
export OMP_NUM_THREADS=1
echo "soak: seed $SEED (SOAK_SEED=$SEED repeats the draws), $NUM_FAULTS faults over ${RUNS[*]}, run.collective_timeout_s $TIMEOUT_S"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardtrain_soak.XXXXXX")
MOUNTED=""
cleanup() {
  local pid
  for pid in $(pgrep -f -- "--run.storage_path $TMP/" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  if [ -n "${SOAK_KEEP:-}" ]; then cp -r "$TMP/logs" "$SOAK_KEEP/" && echo "soak: logs kept in $SOAK_KEEP/logs"; fi
  [ -n "$MOUNTED" ] && umount "$MOUNTED" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
FAILURES=0
fail() {
  FAILURES=$((FAILURES + 1))
  echo "FAIL: $1"
  if [ -n "${2:-}" ] && [ -f "$2" ]; then grep -v '^  \|^$\|^#' "$2" | tail -12 | cut -c1-300 | sed 's/^/    | /'; fi
}

KINDS=(kill9_one kill9_all stop_one sigterm disk_full damage)
STORE=$TMP/store
mkdir -p "$STORE" "$TMP/logs"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=160m tmpfs "$STORE" 2>/dev/null; then
  MOUNTED=$STORE
else
  echo "soak: disk_full left out (a small tmpfs needs root; this is uid $(id -u))"
  KINDS=(kill9_one kill9_all stop_one sigterm damage)
fi
if [ -n "${SOAK_KINDS:-}" ]; then
  for kind in $SOAK_KINDS; do
    [[ " ${KINDS[*]} " == *" $kind "* ]] || { echo "soak: SOAK_KINDS: '$kind' is not one of ${KINDS[*]} here"; exit 2; }
  done
  KINDS=($SOAK_KINDS)
fi

head -n 97 "$SRC/data/glue/MRPC/train.tsv" >"$TMP/train.tsv"
head -n 41 "$SRC/data/glue/MRPC/dev.tsv" >"$TMP/dev.tsv"
cat >"$TMP/soak.toml" <<TOML
[model]
init = "random"
config = "$SRC/tests/data/bert_h32.json"
vocab = "$SRC/data/vocab/bert-base-cased-vocab.txt"
[data]
train_file = "$TMP/train.tsv"
eval_file = "$TMP/dev.tsv"
max_length = 64
[train]
num_epochs = 100
lr = 1e-3
warmup_steps = 3
batch_size = 2
eval_batch_size = 8
log_every_steps = 1
[checkpoint]
every_steps = 10
every_epochs = 0
num_to_keep = $KEEP
TOML

# launch NAME STORAGE NP STRATEGY MAX_STEPS LOG: one job in the background (its pid in JOB).
launch() {
  timeout -s KILL $((900 * SCALE)) "$MPIEXEC" "${MPI_FLAGS[@]}" -np "$3" "$BIN" train --config "$TMP/soak.toml" \
    --run.storage_path "$2" --run.name "$1" --run.collective_timeout_s "$TIMEOUT_S" \
    --checkpoint.preemption_grace_s "$((TIMEOUT_S + 5))" \
    --parallel.strategy "$4" --train.max_steps "$5" "${EXTRA_FLAGS[@]}" >"$6" 2>&1 &
  JOB=$!
}
EXTRA_FLAGS=()
# After the soak damaged the run's only checkpoint, a relaunch has nothing to
# resume from and must refuse to start over the run's records, changing
# nothing; the operator's answer is --restart (the damaged one set aside).
# before_relaunch NAME NP STRATEGY MAX_STEPS LOG: EXTRA_FLAGS for the next job;
# after the only checkpoint was damaged, first a relaunch that must refuse (its log LOG).
before_relaunch() {
  EXTRA_FLAGS=()
  [ "$ONLY_CHECKPOINT_DAMAGED" = 1 ] || return 0
  ONLY_CHECKPOINT_DAMAGED=0
  launch "$1" "$STORE" "$2" "$3" "$4" "$5"
  wait $JOB
  local status=$?
  if [ $status -ne 2 ] || ! grep -q "holds the records of an earlier run" "$5" || ! grep -q "Nothing was changed" "$5"; then
    fail "-np $2 $3: with its only checkpoint damaged, a relaunch did not refuse (status $status, want 2)" "$5"
  else
    echo "    the relaunch refused to start over the run's records (status 2); the next one passes --restart"
  fi
  audit_checkpoints "$RUN" "the refused relaunch"
  for name in "${DAMAGED_BY_SOAK[@]}"; do
    [ -f "$RUN/$name" ] || [ -f "$RUN/$name.damaged" ] || fail "the refused relaunch removed $name"
  done
  EXTRA_FLAGS=(--restart)
}

rank_pid() {  # rank_pid NAME RANK
  local pid
  for pid in $(pgrep -f -- "--run.name $1 " 2>/dev/null); do
    [ -r "/proc/$pid/environ" ] || continue
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$pid" && return 0
  done
  return 1
}
all_rank_pids() {  # all_rank_pids NAME NP
  local r
  for ((r = 0; r < $2; r++)); do rank_pid "$1" "$r"; done
}

fill_up() {  # fill_up FILLER N: a file FILLER.N taking all but 2 MiB of the file system's free space
  local free_kb
  free_kb=$(df -k --output=avail "$STORE" | tail -n 1)
  [ "$free_kb" -gt 2048 ] || return 0
  fallocate -l $(((free_kb - 2048) * 1024)) "$1.$2" 2>/dev/null || head -c $(((free_kb - 2048) * 1024)) /dev/zero >"$1.$2" 2>/dev/null
}

newest_checkpoint() { ls "$1"/checkpoint_[0-9]*.h5 2>/dev/null | grep -v '\.h5\.' | sort | tail -n 1; }
checkpoint_step() { "$BIN" inspect "$1" 2>/dev/null | sed -n 's/^progress: *step \([0-9]*\),.*/\1/p'; }

# ---- checkpoint bookkeeping: name -> sha256 of every complete checkpoint seen --------
declare -A SHA SIZE
LOST_BYTES=0
DAMAGED_BY_SOAK=()
damaged_by_soak() {  # damaged_by_soak NAME: did damage_newest damage it?
  local name
  for name in "${DAMAGED_BY_SOAK[@]}"; do [ "$name" = "$1" ] && return 0; done
  return 1
}
audit_checkpoints() {  # audit_checkpoints RUN_DIR WHEN
  local dir=$1 when=$2 f name index newer sum
  for name in "${!SHA[@]}"; do
    f=$dir/$name
    if [ -f "$f" ]; then
      sum=$(sha256sum "$f" | cut -d' ' -f1)
      if [ "$sum" != "${SHA[$name]}" ]; then
        fail "$when: complete checkpoint $name changed by the program"
        LOST_BYTES=$((LOST_BYTES + SIZE[$name]))
        unset "SHA[$name]"
      fi
    else
      index=$((10#$(basename "$name" .h5 | tr -dc 0-9)))
      newer=0
      for f in "$dir"/checkpoint_[0-9]*.h5; do
        [ -f "$f" ] || continue
        [ $((10#$(basename "$f" .h5 | tr -dc 0-9))) -gt "$index" ] && newer=$((newer + 1))
      done
      if [ "$newer" -lt "$KEEP" ]; then
        fail "$when: complete checkpoint $name is gone with only $newer newer ones beside it (num_to_keep $KEEP)"
        LOST_BYTES=$((LOST_BYTES + SIZE[$name]))
      fi
      unset "SHA[$name]"
    fi
  done
  for f in "$dir"/checkpoint_[0-9]*.h5; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    [ -n "${SHA[$name]:-}" ] && continue
    # One the soak damaged is not complete: the refused relaunch leaves it in
    # place, and the --restart after it sets it aside (the 2026-12-04 long run
    # counted it as complete there, then as lost).
    damaged_by_soak "$name" && continue
    SHA[$name]=$(sha256sum "$f" | cut -d' ' -f1)
    SIZE[$name]=$(stat -c %s "$f")
  done
  for name in "${DAMAGED_BY_SOAK[@]}"; do
    [ -f "$dir/$name.damaged" ] || [ -f "$dir/$name" ] || fail "$when: $name (damaged by the soak) was deleted, not set aside"
  done
}

damage_newest() {  # damage_newest RUN_DIR: truncate or flip a bit in the newest complete checkpoint
  local f offset
  f=$(newest_checkpoint "$1")
  [ -n "$f" ] || { echo "    (no checkpoint to damage yet)"; return; }
  unset "SHA[$(basename "$f")]"
  DAMAGED_BY_SOAK+=("$(basename "$f")")
  if ((RANDOM % 2)); then
    truncate -s $(($(stat -c %s "$f") / 2)) "$f"
    echo "    truncated $(basename "$f") to half"
  else
    offset=$(h5dump -p -H -d /model/bert.embeddings.word_embeddings.weight "$f" | awk '/OFFSET/ {print $2; exit}')
    python3 - "$f" "$((offset + 4096 + RANDOM))" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x10]))
PY
    echo "    flipped a bit in $(basename "$f")"
  fi
  local complete=0 g
  for g in "$1"/checkpoint_[0-9]*.h5; do [ -f "$g" ] && complete=$((complete + 1)); done
  [ "$complete" -eq 1 ] && ONLY_CHECKPOINT_DAMAGED=1
}
ONLY_CHECKPOINT_DAMAGED=0

# No step twice: progress.csv (every step, in order), result.jsonl, TensorBoard (per tag).
check_steps() {  # check_steps RUN_DIR MAX_STEPS WHAT
  python3 - "$1" "$2" <<'PY' || fail "$3: a step twice or missing (above)"
import glob, json, os, struct, sys
run, max_steps = sys.argv[1], int(sys.argv[2])
bad = []
steps = [int(l.split(",")[0]) for l in open(os.path.join(run, "progress.csv")).read().splitlines()[1:] if l]
if steps != list(range(1, max_steps + 1)):
    dup = sorted({s for s in steps if steps.count(s) > 1})
    bad.append("progress.csv: %d rows for steps 1..%d, repeated %s" % (len(steps), max_steps, dup[:10]))
rsteps = [json.loads(l)["step"] for l in open(os.path.join(run, "result.jsonl")) if l.strip()]
if len(rsteps) != len(set(rsteps)) or rsteps != sorted(rsteps):
    bad.append("result.jsonl steps %s" % rsteps)

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7F) << s; s += 7
        if c < 0x80: return v, i

def fields(b):  # (field number, wire type, value) of a protobuf message
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: v = b[i:i + 8]; i += 8
        elif w == 5: v = b[i:i + 4]; i += 4
        elif w == 2: n, i = varint(b, i); v = b[i:i + n]; i += n
        else: raise ValueError("wire type %d" % w)
        yield f, w, v

seen = {}
for path in sorted(glob.glob(os.path.join(run, "tensorboard", "events.out.tfevents.*"))):
    data = open(path, "rb").read()
    i = 0
    while i + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, i)
        event = data[i + 12:i + 12 + n]
        i += 12 + n + 4
        step, tags = 0, []
        for f, w, v in fields(event):
            if f == 2: step = v
            if f == 5:
                for vf, _, value in fields(v):
                    if vf == 1: tags += [t.decode() for tf, _, t in fields(value) if tf == 1]
        for t in tags: seen.setdefault(t, []).append(step)
for tag, s in seen.items():
    if len(s) != len(set(s)): bad.append("TensorBoard %s: steps %s" % (tag, sorted(x for x in set(s) if s.count(x) > 1)[:10]))
if not seen: bad.append("TensorBoard: no events")
for b in bad: print("    " + b)
sys.exit(1 if bad else 0)
PY
}

# ---- the soak ---------------------------------------------------------------------------
declare -A SURVIVED
LONGEST_S=0
LONGEST_KIND=""
TOTAL=0
PER_RUN=$(((NUM_FAULTS + ${#RUNS[@]} - 1) / ${#RUNS[@]}))
for spec in "${RUNS[@]}"; do
  NP=${spec%%:*}
  STRATEGY=${spec#*:}
  MAX_STEPS=$((PER_RUN * 40 + 40))  # enough that a fast machine meets every fault before the end
  NAME=soak_${NP}_$STRATEGY
  RUN=$STORE/$NAME
  SHA=()
  SIZE=()
  DAMAGED_BY_SOAK=()
  ONLY_CHECKPOINT_DAMAGED=0
  EXTRA_FLAGS=()
  echo "== -np $NP $STRATEGY: $MAX_STEPS steps, $PER_RUN faults"
  # The reference on the same (fast) file system; it is done before the first fault.
  launch "ref_${NP}_$STRATEGY" "$STORE/ref" "$NP" "$STRATEGY" "$MAX_STEPS" "$TMP/logs/ref_${NP}_$STRATEGY.log"
  wait $JOB || { fail "-np $NP $STRATEGY: the uninterrupted reference run failed" "$TMP/logs/ref_${NP}_$STRATEGY.log"; continue; }
  REF=$(newest_checkpoint "$STORE/ref/ref_${NP}_$STRATEGY")
  order=()
  for ((n = 1; n <= PER_RUN && TOTAL < NUM_FAULTS; n++)); do
    if [ ${#order[@]} -eq 0 ]; then  # the next block: every kind once, in a random order
      order=("${KINDS[@]}")
      for ((i = ${#order[@]} - 1; i > 0; i--)); do
        j=$((RANDOM % (i + 1))); t=${order[i]}; order[i]=${order[j]}; order[j]=$t
      done
    fi
    kind=${order[0]}
    order=("${order[@]:1}")
    LOG=$TMP/logs/${NAME}_$n.log
    before_relaunch "$NAME" "$NP" "$STRATEGY" "$MAX_STEPS" "$TMP/logs/${NAME}_${n}_refused.log"
    launch "$NAME" "$STORE" "$NP" "$STRATEGY" "$MAX_STEPS" "$LOG"
    # The moment: 2-9 training steps into this job, then up to half a second.
    wait_steps=$((2 + RANDOM % 8))
    for ((i = 0; i < 1200 * SCALE; i++)); do
      count=$(grep -c '^step [0-9]*/' "$LOG" 2>/dev/null)
      [ "${count:-0}" -ge "$wait_steps" ] && break
      kill -0 $JOB 2>/dev/null || break
      sleep 0.05
    done
    if ! kill -0 $JOB 2>/dev/null; then
      wait $JOB
      status=$?
      finished "$LOG" && { echo "  the run finished before fault $n"; break; }
      fail "-np $NP $STRATEGY job $n ended by itself (status $status) before its fault" "$LOG"
      audit_checkpoints "$RUN" "job $n"
      continue
    fi
    sleep "0.$((RANDOM % 5))$((RANDOM % 10))"
    pids=($(all_rank_pids "$NAME" "$NP"))
    if [ ${#pids[@]} -eq 0 ]; then  # the job ended in the moment before the fault
      wait $JOB
      finished "$LOG" && { echo "  the run finished before fault $n"; break; }
      fail "-np $NP $STRATEGY job $n ended by itself before its fault" "$LOG"
      audit_checkpoints "$RUN" "job $n"
      continue
    fi
    victim=${pids[RANDOM % ${#pids[@]}]}
    detail=""
    FILLER=""
    case $kind in
      kill9_one) kill -KILL "$victim" ;;
      kill9_all | damage) kill -KILL "${pids[@]}" ;;
      stop_one) kill -STOP "$victim" ;;
      sigterm)
        if ((RANDOM % 3)); then kill -TERM "${pids[@]}"; detail="every rank"; else kill -TERM "$victim"; detail="one rank"; fi ;;
      disk_full)  # and kept full: pruning frees old checkpoints, the filler takes that space too
        FILLER=$STORE/filler
        fill_up "$FILLER" 0
        (for ((i = 1; i < 3000; i++)); do fill_up "$FILLER" "$i"; sleep 0.05; done) &
        FILLER_LOOP=$!
        detail="$(df -k --output=avail "$STORE" | tail -n 1) KiB left" ;;
    esac
    start=$EPOCHREALTIME
    at_step=$(grep '^step [0-9]*/' "$LOG" | tail -n 1 | sed 's#^step \([0-9]*\)/.*#\1#')
    if [ "$kind" = stop_one ]; then
      # A stopped rank can do nothing, and mpiexec waits for it until the
      # others fail: when the job had already finished (the stop landed in the
      # victim's exit, after the last step), nothing ever fails. Past the limit
      # the victim is killed, as an operator or Slurm would, and the checks
      # below judge the job.
      while kill -0 $JOB 2>/dev/null &&
        python3 -c "import sys; sys.exit(0 if $EPOCHREALTIME - $start < $LIMIT_S + 5 else 1)"; do
        sleep 0.2
      done
      kill -0 $JOB 2>/dev/null && kill -KILL "$victim" 2>/dev/null
    fi
    wait $JOB
    status=$?
    took=$(python3 -c "print('%.1f' % ($EPOCHREALTIME - $start))")
    [ -n "$FILLER" ] && { kill "$FILLER_LOOP"; wait "$FILLER_LOOP" 2>/dev/null; rm -f "$FILLER".*; }
    # On a fast machine the last steps can outrun the fault: a stop landing in
    # the victim's exit, a disk filled after the last checkpoint.
    if { [ "$kind" = stop_one ] || { [ "$kind" = disk_full ] && [ $status -eq 0 ]; }; } && finished "$LOG"; then
      echo "  the run finished before the $kind fault reached it"; break
    fi
    TOTAL=$((TOTAL + 1))
    echo "  fault $TOTAL: $kind${detail:+ ($detail)} near step $at_step: job ended in $took s, status $status"
    ok=1
    python3 -c "import sys; sys.exit(0 if $took <= $LIMIT_S else 1)" ||
      { fail "fault $TOTAL ($kind): the job took $took s to end (limit $LIMIT_S s)" "$LOG"; ok=0; }
    if [ "$kind" = sigterm ]; then
      stop_step=$(sed -n 's/^SIGTERM .* stopping at step \([0-9]*\) of.*/\1/p' "$LOG" | tail -n 1)
      if [ $status -eq 0 ] && finished "$LOG"; then
        echo "  the run finished before the SIGTERM reached it"; break
      elif [ $status -ne 143 ] || [ -z "$stop_step" ]; then
        fail "fault $TOTAL (sigterm): status $status (want 143) or no 'stopping at step'" "$LOG"; ok=0
      elif grep -q "^emergency checkpoint of step $stop_step" "$LOG" &&
        [ "$(checkpoint_step "$(newest_checkpoint "$RUN")")" != "$stop_step" ]; then
        fail "fault $TOTAL (sigterm): the newest checkpoint is not of step $stop_step" "$LOG"; ok=0
      elif grep -q "preemption_grace_s ran out after SIGTERM" "$LOG"; then
        echo "    checkpoint.preemption_grace_s ran out first: the job exited 143 at once"
      elif ! grep -q "^emergency checkpoint of step $stop_step\|no emergency checkpoint: " "$LOG"; then
        fail "fault $TOTAL (sigterm): stopped at step $stop_step without a checkpoint of it" "$LOG"; ok=0
      fi
    fi
    if [ "$kind" = disk_full ] && { [ $status -ne 2 ] || ! grep -q "No space left on device (ENOSPC)" "$LOG"; }; then
      fail "fault $TOTAL (disk_full): status $status (want 2) or no ENOSPC message" "$LOG"; ok=0
    fi
    if [ "$kind" = stop_one ]; then
      kill -KILL "$victim" 2>/dev/null  # a stopped rank that mpiexec left behind
    fi
    if python3 -c "import sys; sys.exit(0 if $took > $LONGEST_S else 1)"; then LONGEST_S=$took; LONGEST_KIND=$kind; fi
    audit_checkpoints "$RUN" "after fault $TOTAL ($kind)"
    [ "$kind" = damage ] && damage_newest "$RUN"
    [ $ok = 1 ] && SURVIVED[$kind]=$((${SURVIVED[$kind]:-0} + 1))
  done
  # The relaunch that finishes the run.
  LOG=$TMP/logs/${NAME}_final.log
  before_relaunch "$NAME" "$NP" "$STRATEGY" "$MAX_STEPS" "$TMP/logs/${NAME}_final_refused.log"
  launch "$NAME" "$STORE" "$NP" "$STRATEGY" "$MAX_STEPS" "$LOG"
  wait $JOB
  status=$?
  audit_checkpoints "$RUN" "-np $NP $STRATEGY, the final job"
  if [ $status -ne 0 ] || ! finished "$LOG"; then
    fail "-np $NP $STRATEGY: the final relaunch did not finish (status $status)" "$LOG"
    continue
  fi
  FINAL=$(newest_checkpoint "$RUN")
  if h5diff "$REF" "$FINAL" /model /model >"$TMP/diff.log" 2>&1 && h5diff "$REF" "$FINAL" /optim /optim >>"$TMP/diff.log" 2>&1; then
    echo "  -np $NP $STRATEGY: final /model and /optim bit-identical to the uninterrupted run ($(basename "$FINAL") vs $(basename "$REF"))"
  else
    fail "-np $NP $STRATEGY: final parameters or optimizer state differ from the uninterrupted run" "$TMP/diff.log"
  fi
  check_steps "$RUN" "$MAX_STEPS" "-np $NP $STRATEGY"
  ! ls "$RUN" | grep -q '\.tmp' || fail "-np $NP $STRATEGY: temporary files left after the final job: $(ls "$RUN" | grep '\.tmp')"
  rm -rf "$RUN" "$STORE/ref/ref_${NP}_$STRATEGY"
done

summary=""
for kind in "${KINDS[@]}"; do summary+=" $kind ${SURVIVED[$kind]:-0}"; done
echo "soak: seed $SEED: $TOTAL faults, survived by kind:$summary; longest time to end a job $LONGEST_S s ($LONGEST_KIND, limit $LIMIT_S s); bytes of complete checkpoints lost $LOST_BYTES"
echo "soak: $FAILURES failure(s)"
[ "$FAILURES" -eq 0 ]
