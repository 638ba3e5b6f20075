#!/usr/bin/env bash
# Fault injection against the real `shardtrain train` (configs/quickstart.toml,
# small overrides, mpiexec -np 2, run.collective_timeout_s 5):
#   - a rank stopped (SIGSTOP) inside an eval gather and inside a checkpoint
#     write: the job ends within the timeout plus a few seconds, with a message
#     naming the phase and the stopped rank (SHARDTRAIN_FAULT_STOP stops the
#     rank exactly there, comm/watchdog.h);
#   - every rank killed (SIGKILL) at a random moment, then a re-run: the final
#     parameters and optimizer state equal an uninterrupted run's, bit for bit;
#   - a truncated and a bit-flipped newest checkpoint: clear Errors naming the
#     file (and the tensor), inspect --verify, and --resume of an older one;
#   - a full disk (a small tmpfs, when this user may mount one): an Error with
#     ENOSPC and the path, no temporary file left, the previous checkpoint intact;
#     and filled between checkpoints: every rank ends with the ENOSPC of rank 0's
#     progress.csv or TensorBoard write.
#   - a second job on a run folder is refused naming the holder; a killed
#     job's lock is taken over and its temporary files are removed.
#   - a rank stopped at random moments during training steps, and at a step
#     boundary (in rank 0's progress.csv write): the job ends, naming it and
#     the step (the collectives' and the phases' own timeout);
#   - a truncated or bit-flipped newest checkpoint and a plain re-run: resume
#     sets it aside as .damaged and falls back to the previous one, ending as
#     the reference, with a new checkpoint number.
# Usage: test_faults.sh SHARDTRAIN_BINARY SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]
# Needs bash, python3 and hdf5-tools (h5dump, h5diff). Takes about 1.4 minutes
# alone (82 s on 2 idle cores): the stopped-rank cases run beside the others.
set -u
source "$(dirname "$0")/suite_lib.sh"
suite_start "$@"
# SHARDTRAIN_TEST_TIME_SCALE (5 in a sanitized build, tests/CMakeLists.txt)
# stretches every bound of this script (SCALE): the jobs run that much slower there.
TIMEOUT_S=$((5 * SCALE))  # as the soak: the stopped-rank cases wait this long five times
SLACK_S=$((15 * SCALE))  # start of the abort, reading the boards (about 2 s), MPI_Abort tearing the job down
JOB_LIMIT_S=$((120 * SCALE))  # a job that runs longer than this is killed and its case fails
cd "$SRC" || exit 1

MOUNTED=""
cleanup() {
  kill $(jobs -p) 2>/dev/null
  [ -n "$MOUNTED" ] && umount "$MOUNTED" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
# A failed check shows its log without Open MPI's shared-memory complaints
# about the stopped peer, which can run to a thousand lines after the message
# that matters.
log_excerpt() { grep -v "Read -1, expected" "$1" | sed 's/^/    | /' | tail -20 | cut -c1-400; }

# train NAME [flags...]: quickstart at -np 2 into $TMP/runs/NAME, log $TMP/NAME.log,
# bounded by JOB_LIMIT_S (120 s) whatever happens.
train() {
  local name=$1
  shift
  timeout -s KILL "$JOB_LIMIT_S" "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config configs/quickstart.toml \
    --run.storage_path "$TMP/runs" --run.name "$name" --run.collective_timeout_s "$TIMEOUT_S" \
    --train.log_every_steps 1 --checkpoint.num_to_keep 0 "$@" >>"$TMP/$name.log" 2>&1
}

final_checkpoint() { ls "$1"/checkpoint_*.h5 2>/dev/null | tail -n 1; }

no_hdf5_stack() { ! grep -q "HDF5-DIAG\|#000:" "$1"; }

# ---- 1, 2. A rank stopped inside a phase: the job ends, naming it ------------
stop_case() {  # stop_case NAME PATTERN EXPECTED_PHASE [train flags...]; status 1 when it failed
  local name=$1 pattern=$2 expected=$3
  shift 3
  SHARDTRAIN_FAULT_STOP="$pattern@1" train "$name" "$@" &
  local job=$!
  if ! wait_for "$TMP/$name.log" "fault injection (SHARDTRAIN_FAULT_STOP)" 90; then
    fail "$name: rank 1 never reached '$pattern'" "$TMP/$name.log"
    wait $job
    return 1
  fi
  local stopped_at=$SECONDS
  wait $job
  local status=$? elapsed=$((SECONDS - stopped_at))
  if [ $status -ne 0 ] && [ $elapsed -le $((TIMEOUT_S + SLACK_S)) ] &&
    grep -q "phase timeout: $expected" "$TMP/$name.log" &&
    grep -q "world ranks not responding (stopped or frozen): 1 " "$TMP/$name.log"; then
    pass "$name: rank 1 stopped inside '$pattern': the job ended $elapsed s later, a timeout in '$expected' naming rank 1"
  else
    fail "$name: status $status after $elapsed s (limit $((TIMEOUT_S + SLACK_S)) s), or no message naming the phase" \
      "$TMP/$name.log"
    return 1
  fi
}

# The stopped-rank cases (1, 2, 9 and 3) wait for timeouts most of their time:
# they run as one group beside the rest (4 to 8, 5b, 6b), which computes; the
# group's output is printed, and its failures counted, at the end.
stopped_ranks() {
  stop_case stop_eval "eval gather" "eval gather" --train.max_steps 20 --train.eval_every_steps 10
  stop_case stop_checkpoint "checkpoint write*/model/" "checkpoint write [^ ]*checkpoint_000001.h5: /model/" \
    --train.max_steps 20 --checkpoint.every_steps 10
  # Stopped at a step boundary, in rank 0's progress.csv write (rank 1 waits there
  # each logged step): rank 0 times out in the next boundary phase (its 8-byte
  # broadcast of the write's outcome completes without the receiver over shared
  # memory; a transport that waits for it would time out in the write's phase)
  # and names the step the stopped rank was writing.
  stop_case stop_progress "writing progress.csv at step 7" \
    "\(preemption check after step 7\|writing progress.csv at step 7\)" --train.max_steps 20 &&
    ! grep -q "last entered phase #[0-9]* 'writing progress.csv at step 7'" "$TMP/stop_progress.log" &&
    fail "stop_progress: the message does not name the stopped rank's phase" "$TMP/stop_progress.log"

  # ---- 9. Temporary files of dead jobs are removed at the next start ----------------
  ls "$TMP/runs/stop_checkpoint" | grep -q '\.tmp-' || echo "note: stop_checkpoint left no temporary file"
  train stop_checkpoint --train.max_steps 20 --checkpoint.every_steps 10 &&
    ! ls "$TMP/runs/stop_checkpoint" | grep -q '\.tmp' && pass "stale temporary files removed at the next start" ||
    fail "stale temporary files (files: $(ls "$TMP/runs/stop_checkpoint" | tr '\n' ' '))" "$TMP/stop_checkpoint.log"

  # ---- 3. A rank stopped at random moments during training steps ----------------
  for attempt in 1 2 3; do
    name=stop_step_$attempt
    train "$name" --train.max_steps 300 &
    JOB=$!
    wait_for "$TMP/$name.log" "step 5/300" 60
    sleep "$((RANDOM % 2)).$((RANDOM % 10))"
    p=$(rank_pid "$name" 1) && kill -STOP "$p"
    stopped_at=$SECONDS
    wait $JOB
    status=$? elapsed=$((SECONDS - stopped_at))
    if [ $status -ne 0 ] && [ $elapsed -le $((TIMEOUT_S + SLACK_S)) ] && grep -q "timeout" "$TMP/$name.log" &&
      grep -q "not responding (stopped or frozen): 1 \|did not arrive: 1 " "$TMP/$name.log" &&
      # (a rank stopped between phases is named by the phase it last entered: the
      # step, or one of the step boundary's own phases, each with its step number)
      grep -q "during training step [0-9]\|last phase: training step [0-9]\|in 'training step [0-9]\|last entered phase #[0-9]* '\(training step\|writing progress.csv at step\|preemption check after step\|writing the report at step\) [0-9]" "$TMP/$name.log"; then
      pass "$name: rank 1 stopped during training: the job ended $elapsed s later naming rank 1 and the step"
    else
      fail "$name: status $status after $elapsed s" "$TMP/$name.log"
    fi
  done
}
stopped_ranks >"$TMP/stopped_ranks.out" 2>&1 &
STOPPED_RANKS=$!

# ---- 4. Every rank killed at a random moment, then re-run ----------------------
# The uninterrupted reference: 40 steps, a checkpoint every 10, eval every 20.
REF_FLAGS=(--train.max_steps 40 --checkpoint.every_steps 10 --train.eval_every_steps 20)
if train straight "${REF_FLAGS[@]}"; then pass "uninterrupted reference run"; else fail "reference run" "$TMP/straight.log"; fi
REF=$(final_checkpoint "$TMP/runs/straight")
train killed "${REF_FLAGS[@]}" &
JOB=$!
wait_for "$TMP/killed.log" "step 12/40" 60
sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
for r in 0 1; do p=$(rank_pid killed $r) && kill -KILL "$p"; done
wait $JOB
K=$TMP/runs/killed
echo "note: killed at $(tail -n 1 "$K/progress.csv" | cut -d, -f1) steps; files: $(ls "$K" | tr '\n' ' ')"
if train killed "${REF_FLAGS[@]}" && grep -q "resumed from" "$TMP/killed.log" &&
  same_state "$REF" "$(final_checkpoint "$K")" "$TMP/killed.diff"; then
  pass "kill -9 of every rank, then a re-run: final parameters and optimizer state bit-identical to the reference"
else
  fail "killed + re-run differs from the reference or did not resume" "$TMP/killed.log"
fi

# ---- 5. A truncated newest checkpoint -------------------------------------------
cp -r "$TMP/runs/straight" "$TMP/runs/truncated"
T=$TMP/runs/truncated
NEWEST=$(final_checkpoint "$T")
truncate -s 25000000 "$NEWEST"
"$BIN" inspect --verify "$NEWEST" >"$TMP/truncated_verify.log" 2>&1
[ $? -eq 2 ] && grep -q "$NEWEST is damaged: the file is truncated" "$TMP/truncated_verify.log" &&
  no_hdf5_stack "$TMP/truncated_verify.log" && pass "inspect --verify names the truncated file, exit 2, no HDF5 stack" ||
  fail "inspect --verify of a truncated checkpoint" "$TMP/truncated_verify.log"
for cmd in inspect export; do
  if [ $cmd = export ]; then args=(export "$NEWEST" --output "$TMP/exported"); else args=(inspect "$NEWEST"); fi
  "$BIN" "${args[@]}" >"$TMP/truncated_$cmd.log" 2>&1
  [ $? -eq 2 ] && grep -q "$NEWEST is damaged" "$TMP/truncated_$cmd.log" && no_hdf5_stack "$TMP/truncated_$cmd.log" &&
    pass "$cmd of a truncated checkpoint: one clear Error" || fail "$cmd of a truncated checkpoint" "$TMP/truncated_$cmd.log"
done
# --resume of the previous one works whatever the newest looks like.
PREVIOUS=$(ls "$T"/checkpoint_*.h5 | tail -n 2 | head -n 1)
if train truncated "${REF_FLAGS[@]}" --resume "$PREVIOUS" && grep -q "resumed from $PREVIOUS" "$TMP/truncated.log" &&
  no_hdf5_stack "$TMP/truncated.log" && same_state "$REF" "$(final_checkpoint "$T")" "$TMP/truncated.diff"; then
  pass "--resume of the previous checkpoint beside a truncated newest: same end as the reference"
else
  fail "--resume beside a truncated newest checkpoint" "$TMP/truncated.log"
fi

# ---- 6. A bit flipped in the newest checkpoint's data -------------------------------
cp -r "$TMP/runs/straight" "$TMP/runs/flipped"
F=$TMP/runs/flipped
NEWEST=$(final_checkpoint "$F")
OFFSET=$(h5dump -p -H -d /model/bert.embeddings.word_embeddings.weight "$NEWEST" | awk '/OFFSET/ {print $2; exit}')
python3 - "$NEWEST" "$((OFFSET + 4096))" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x10]))
PY
"$BIN" inspect --verify "$NEWEST" >"$TMP/flipped_verify.log" 2>&1
[ $? -eq 2 ] && grep -q "$NEWEST: tensor /model/bert.embeddings.word_embeddings.weight fails its checksum" \
  "$TMP/flipped_verify.log" && pass "inspect --verify names the flipped tensor and the file" ||
  fail "inspect --verify of a bit-flipped checkpoint" "$TMP/flipped_verify.log"
"$BIN" export "$NEWEST" --output "$TMP/exported_flip" >"$TMP/flipped_export.log" 2>&1
[ $? -eq 2 ] && grep -q "fails its checksum" "$TMP/flipped_export.log" && pass "export refuses the flipped tensor" ||
  fail "export of a bit-flipped checkpoint" "$TMP/flipped_export.log"
"$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" predict --model "$NEWEST" --data data/glue/MRPC/dev.tsv --text-a "#1 String" \
  --text-b "#2 String" --output "$TMP/flipped.jsonl" >"$TMP/flipped_predict.log" 2>&1
[ $? -eq 2 ] && grep -q "fails its checksum" "$TMP/flipped_predict.log" && pass "predict --model refuses the flipped tensor" ||
  fail "predict --model of a bit-flipped checkpoint" "$TMP/flipped_predict.log"

# ---- 7. A full disk ---------------------------------------------------------------
mkdir -p "$TMP/small"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=80m tmpfs "$TMP/small" 2>/dev/null; then
  MOUNTED=$TMP/small
  # The first checkpoint (50 MB) fits, the second does not.
  timeout -s KILL "$JOB_LIMIT_S" "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config configs/quickstart.toml \
    --run.storage_path "$TMP/small" --run.name full --train.max_steps 30 --checkpoint.every_steps 10 \
    --checkpoint.num_to_keep 0 >"$TMP/full.log" 2>&1
  status=$?
  D=$TMP/small/full
  if [ $status -eq 2 ] && grep -q "No space left on device (ENOSPC): checkpoint $D/checkpoint_000002.h5 (/[a-z_/]*) needs" \
    "$TMP/full.log" && ! ls "$D" | grep -q '\.tmp' && no_hdf5_stack "$TMP/full.log" &&
    "$BIN" inspect --verify "$D/checkpoint_000001.h5" >"$TMP/full_verify.log" 2>&1; then
    pass "full disk: exit 2 naming ENOSPC and the checkpoint, no temporary file left, checkpoint 1 intact"
  else
    fail "full disk (status $status; files: $(ls "$D" | tr '\n' ' '))" "$TMP/full.log"
  fi
  # The disk fills while no checkpoint is due: rank 0's next progress.csv row
  # or TensorBoard event fails. Every rank ends with that Error (exit 2, ENOSPC
  # and the file), not the collective timeout naming rank 0 (status 1, no word
  # of the disk).
  timeout -s KILL "$JOB_LIMIT_S" "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config configs/quickstart.toml \
    --run.storage_path "$TMP/small" --run.name full_log --run.collective_timeout_s "$((30 * SCALE))" --train.max_steps 100000 \
    --train.log_every_steps 1 --checkpoint.every_epochs 0 --train.eval_every_steps 0 >"$TMP/full_log.log" 2>&1 &
  JOB=$!
  if wait_for "$TMP/full_log.log" "step 3/" 60; then
    dd if=/dev/zero of="$TMP/small/filler" bs=1M >/dev/null 2>&1
    FILLED=$SECONDS
    wait $JOB
    status=$? took=$((SECONDS - FILLED))
    # "shardtrain: error: " with no rank label: every rank failed alike (a
    # rank failing alone is reported as "error [host:rank N]" and aborts).
    if [ $status -eq 2 ] && [ $took -lt $((30 * SCALE)) ] && grep -q \
      "^shardtrain: error: cannot [a-z ]* '\?$TMP/small/full_log/\(progress.csv\|tensorboard/events[^ ]*\)'\?: No space left on device (ENOSPC)" \
      "$TMP/full_log.log"; then
      pass "full disk with no checkpoint due: exit 2 naming ENOSPC and the file, ${took} s after it filled"
    else
      fail "full disk with no checkpoint due (status $status, ${took} s after it filled)" "$TMP/full_log.log"
    fi
  else
    for r in 0 1; do p=$(rank_pid full_log $r) && kill -KILL "$p"; done
    wait $JOB
    fail "full disk with no checkpoint due: no step 3 within $((60 * SCALE)) s" "$TMP/full_log.log"
  fi
  rm -f "$TMP/small/filler"
else
  echo "skip: full disk (mounting a small tmpfs needs root; this is uid $(id -u))"
fi

# ---- 8. Two jobs on one run folder; the lock of a killed one -------------------
train locked --train.max_steps 300 --checkpoint.every_steps 2 &
JOB=$!
wait_for "$TMP/locked.log" "step 5/300" 60
train locked --train.max_steps 300 --checkpoint.every_steps 2
status=$?
grep -q "is in use by another job: host $(hostname), pid $(rank_pid locked 0)" "$TMP/locked.log" && [ $status -eq 2 ] &&
  pass "a second job on the run folder is refused, naming host and pid" ||
  fail "second job on the same run folder (status $status)" "$TMP/locked.log"
for r in 0 1; do p=$(rank_pid locked $r) && kill -KILL "$p"; done
wait $JOB
train locked --train.max_steps 12 --checkpoint.every_steps 2 && grep -q "resumed from" "$TMP/locked.log" &&
  grep -q "took over the run folder's lock from host $(hostname), pid .*: the process is gone" "$TMP/locked.log" &&
  pass "the lock of the killed job is taken over" || fail "taking over a dead job's lock" "$TMP/locked.log"
# ---- 5b / 6b. Resume falls back past a damaged newest checkpoint, sets it aside --
# and never reuses its number.
for case in truncated flipped; do
  rm -rf "$TMP/runs/${case}_fallback"
  cp -r "$TMP/runs/straight" "$TMP/runs/${case}_fallback"
  B=$TMP/runs/${case}_fallback
  NEWEST=$(final_checkpoint "$B")
  if [ $case = truncated ]; then truncate -s 25000000 "$NEWEST"; else
    cp "$F/$(basename "$NEWEST")" "$NEWEST"; fi
  if train "${case}_fallback" "${REF_FLAGS[@]}" && [ -e "$NEWEST.damaged" ] &&
    [ -e "$B/checkpoint_000005.h5" ] && same_state "$REF" "$B/checkpoint_000005.h5" "$TMP/${case}_fallback.diff"; then
    pass "$case newest checkpoint: resume fell back, set it aside, and ended as the reference (checkpoint 5)"
  else
    fail "$case newest checkpoint: no fallback (files: $(ls "$B" | tr '\n' ' '))" "$TMP/${case}_fallback.log"
  fi
done

wait $STOPPED_RANKS
suite_merge "$TMP/stopped_ranks.out"
suite_end
