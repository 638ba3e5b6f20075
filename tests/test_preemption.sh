#!/usr/bin/env bash
# SIGTERM as Slurm's preemption sends it (docs/DESIGN.md, "Preemption"), against
# the real `shardtrain train` at mpiexec -np 2 (a tiny model):
#   - SIGTERM to every rank (what srun does; twice at once, as scancel under srun
#     may deliver it: one request) mid-run, no checkpoint due: the job
#     exits 143 after an emergency checkpoint of the step it stopped at, the
#     last step in progress.csv; the same command again resumes from it and ends
#     with /model and /optim bit-identical to an uninterrupted run;
#   - SIGTERM to one rank only: both ranks stop at the same step, 143, one
#     emergency checkpoint, and the relaunch ends bit-identical too;
#   - a second SIGTERM 2.5 s after the first, while a rank is frozen inside the
#     emergency checkpoint: exit 143 at once, the newest complete checkpoint
#     unchanged (sha256), and the relaunch ends bit-identical;
#   - SIGTERM to the whole process group of scripts/mpirun.sh -np 2 (a `kill`
#     of the job, PBS, systemd): the launcher forwards it as SIGUSR1, the job
#     exits 143 after an emergency checkpoint, and the relaunch ends bit-identical;
#   - the grace period running out (a rank frozen in the emergency checkpoint's
#     write, checkpoint.preemption_grace_s 3): the job ends within a few seconds
#     of it, well before run.collective_timeout_s, the previous checkpoint
#     unchanged, and the relaunch ends bit-identical.
# Usage: test_preemption.sh SHARDTRAIN_BINARY SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]
# Needs bash, python3 and h5diff (hdf5-tools).
set -u
source "$(dirname "$0")/suite_lib.sh"
# SHARDTRAIN_TEST_TIME_SCALE (5 in a sanitized build, tests/CMakeLists.txt)
# stretches the waits and the bound on a whole job (SCALE), which run that
# much slower there; the bounds under test (an exit at once, the grace) stay.
suite_start "$@"

tiny_run_config <<TOML
[train]
num_epochs = 10
max_steps = 60
lr = 1e-3
warmup_steps = 3
batch_size = 2
eval_batch_size = 8
log_every_steps = 1
[checkpoint]
every_steps = 40
every_epochs = 0
[run]
storage_path = "$TMP/runs"
collective_timeout_s = 60
TOML

train() {  # train NAME [flags...]: in the background, pid in JOB, log $TMP/NAME.log (appended)
  local name=$1
  shift
  timeout -s KILL $((200 * SCALE)) "$MPIEXEC" "${MPI_FLAGS[@]}" -np 2 "$BIN" train --config "$TMP/tiny.toml" --run.name "$name" \
    "$@" >>"$TMP/$name.log" 2>&1 &
  JOB=$!
}
newest() { ls "$1"/checkpoint_[0-9]*.h5 2>/dev/null | sort | tail -n 1; }
ckpt_step() { "$BIN" inspect "$1" 2>/dev/null | sed -n 's/^progress: *step \([0-9]*\),.*/\1/p'; }
last_csv_step() { tail -n 1 "$1/progress.csv" | cut -d, -f1; }

train reference
wait $JOB && REF=$(newest "$TMP/runs/reference") && [ "$(ckpt_step "$REF")" = 60 ] &&
  pass "uninterrupted reference run" || fail "reference run" "$TMP/reference.log"

# ---- SIGTERM to every rank, or to one, between checkpoints ---------------------------
for target in every one; do
  name=term_$target
  train "$name"
  wait_for "$TMP/$name.log" "^step 8/" 120 || fail "$name: never reached step 8" "$TMP/$name.log"
  if [ $target = every ]; then  # twice at once, as scancel under srun may deliver it: one request
    p0=$(rank_pid "$name" 0) p1=$(rank_pid "$name" 1)
    kill -TERM "$p0" "$p1"
    kill -TERM "$p0" "$p1"
  else
    kill -TERM "$(rank_pid "$name" 1)"
  fi
  wait $JOB
  status=$?
  D=$TMP/runs/$name
  CKPT=$(newest "$D")
  stop=$(sed -n 's/^SIGTERM .* stopping at step \([0-9]*\) of.*/\1/p' "$TMP/$name.log")
  if [ $status -eq 143 ] && [ -n "$stop" ] && [ "$stop" -ge 8 ] && [ "$stop" -lt 40 ] &&
    grep -q "^emergency checkpoint of step $stop in .* -> $D/checkpoint_000001.h5" "$TMP/$name.log" &&
    [ "$CKPT" = "$D/checkpoint_000001.h5" ] && [ "$(ckpt_step "$CKPT")" = "$stop" ] &&
    [ "$(last_csv_step "$D")" = "$stop" ] && ! ls "$D" | grep -q '\.tmp'; then
    pass "SIGTERM to $target rank(s) at step $stop: exit 143, emergency checkpoint of step $stop (the last step in progress.csv)"
  else
    fail "SIGTERM to $target rank(s): status $status, stop step '$stop', newest '$CKPT' (step $(ckpt_step "$CKPT"))" \
      "$TMP/$name.log"
  fi
  [ $target = one ] && ! grep -q "^SIGTERM .* ago: stopping at step $stop of 60 with an emergency checkpoint" \
    "$TMP/$name.log" && fail "SIGTERM to one rank: no agreed stop line" "$TMP/$name.log"
  train "$name"
  if wait $JOB && grep -q "resumed from $D/checkpoint_000001.h5: step $stop," "$TMP/$name.log" &&
    same_state "$REF" "$(newest "$D")" "$TMP/$name.diff"; then
    pass "relaunch after SIGTERM to $target rank(s): resumed at step $stop, final state bit-identical to the reference"
  else
    fail "relaunch after SIGTERM to $target rank(s)" "$TMP/$name.log"
  fi
done

# ---- SIGTERM to the whole process group of scripts/mpirun.sh --------------------------------
# What `kill -- -PGID`, PBS, LSF, Kubernetes and systemd do: the launcher script
# turns it into a SIGUSR1 to mpirun (in a session of its own), which forwards it
# to the ranks; mpirun itself never sees the TERM, so it does not kill them.
name=term_group
setsid bash "$SRC/scripts/mpirun.sh" -np 2 "$BIN" train --config "$TMP/tiny.toml" --run.name "$name" \
  >>"$TMP/$name.log" 2>&1 &
JOB=$!  # setsid execs bash: the process group's id
# Its output to /dev/null: a sleep left holding the test's stdout keeps CTest waiting 200 s.
(sleep $((200 * SCALE)) && kill -KILL -- -$JOB) >/dev/null 2>&1 &
GUARD=$!
wait_for "$TMP/$name.log" "^step 8/" 120 || fail "$name: never reached step 8" "$TMP/$name.log"
kill -TERM -- -$JOB
wait $JOB
status=$?
kill $GUARD 2>/dev/null
D=$TMP/runs/$name
CKPT=$(newest "$D")
stop=$(sed -n 's/^SIGTERM .* stopping at step \([0-9]*\) of.*/\1/p' "$TMP/$name.log")
if [ $status -eq 143 ] && [ -n "$stop" ] && [ "$stop" -lt 40 ] &&
  grep -q "^emergency checkpoint of step $stop in .* -> $D/checkpoint_000001.h5" "$TMP/$name.log" &&
  [ "$(ckpt_step "$CKPT")" = "$stop" ] && ! ls "$D" | grep -q '\.tmp'; then
  pass "SIGTERM to scripts/mpirun.sh's process group at step $stop: exit 143, emergency checkpoint of step $stop"
else
  fail "SIGTERM to scripts/mpirun.sh's process group: status $status, stop step '$stop', newest '$CKPT'" "$TMP/$name.log"
fi
train "$name"
if wait $JOB && grep -q "resumed from $D/checkpoint_000001.h5: step $stop," "$TMP/$name.log" &&
  same_state "$REF" "$(newest "$D")" "$TMP/$name.diff"; then
  pass "relaunch after SIGTERM to the launcher's process group: resumed at step $stop, bit-identical to the reference"
else
  fail "relaunch after SIGTERM to the launcher's process group" "$TMP/$name.log"
fi

# ---- a second SIGTERM, later than 2 s: exit at once, the newest checkpoint untouched -------
# Rank 1 freezes inside checkpoint 3 (the emergency one, or the one due at step 15),
# so the job is still running when the second SIGTERM comes.
name=term_twice
SHARDTRAIN_FAULT_STOP="checkpoint write*checkpoint_000003.h5*/model/@1" train "$name" --checkpoint.every_steps 5
wait_for "$TMP/$name.log" "^step 12/" 120
D=$TMP/runs/$name
KEPT=$D/checkpoint_000002.h5
SUM=$(sha256sum "$KEPT" 2>/dev/null | cut -d' ' -f1)
p0=$(rank_pid "$name" 0) p1=$(rank_pid "$name" 1)
kill -TERM "$p0" "$p1"
wait_for "$TMP/$name.log" "fault injection (SHARDTRAIN_FAULT_STOP)" 60
sleep 2.5
kill -TERM "$p0"
start=$SECONDS
wait $JOB
status=$? took=$((SECONDS - start))
if [ $status -eq 143 ] && [ $took -le 5 ] && grep -q "a second SIGTERM: exiting at once" "$TMP/$name.log" &&
  [ "$(newest "$D")" = "$KEPT" ] && [ "$(sha256sum "$KEPT" | cut -d' ' -f1)" = "$SUM" ]; then
  pass "a second SIGTERM 2.5 s after the first: exit 143 $took s later, checkpoint 2 unchanged"
else
  fail "a second SIGTERM (status $status after $took s; files $(ls "$D" | tr '\n' ' '))" "$TMP/$name.log"
fi
train "$name" --checkpoint.every_steps 5
wait $JOB && grep -q "resumed from $KEPT" "$TMP/$name.log" && same_state "$REF" "$(newest "$D")" "$TMP/$name.diff" &&
  pass "relaunch after a second SIGTERM: resumed from checkpoint 2, bit-identical end" ||
  fail "relaunch after a second SIGTERM" "$TMP/$name.log"

# ---- the grace period runs out: a rank frozen inside the emergency checkpoint ---------------
name=term_grace
SHARDTRAIN_FAULT_STOP="checkpoint write*checkpoint_000002.h5*/model/@1" \
  train "$name" --checkpoint.every_steps 5 --checkpoint.preemption_grace_s 3
wait_for "$TMP/$name.log" "^step 7/" 120
D=$TMP/runs/$name
KEPT=$D/checkpoint_000001.h5
SUM=$(sha256sum "$KEPT" 2>/dev/null | cut -d' ' -f1)
kill -TERM "$(rank_pid "$name" 0)" "$(rank_pid "$name" 1)"
start=$SECONDS
wait $JOB
status=$? took=$((SECONDS - start))
if [ $status -ne 0 ] && [ $took -le 15 ] && grep -q "fault injection (SHARDTRAIN_FAULT_STOP)" "$TMP/$name.log" &&
  grep -q "preemption_grace_s ran out after SIGTERM: exiting at once" "$TMP/$name.log" &&
  [ "$(newest "$D")" = "$KEPT" ] && [ "$(sha256sum "$KEPT" | cut -d' ' -f1)" = "$SUM" ]; then
  pass "grace period ran out inside the emergency checkpoint: ended after $took s (grace 3 s, timeout 60 s), checkpoint 1 unchanged"
else
  fail "grace period running out (status $status after $took s; files $(ls "$D" | tr '\n' ' '))" "$TMP/$name.log"
fi
train "$name" --checkpoint.every_steps 5
wait $JOB && grep -q "resumed from $KEPT" "$TMP/$name.log" && same_state "$REF" "$(newest "$D")" "$TMP/$name.diff" &&
  ! ls "$D" | grep -q '\.tmp' && pass "relaunch after the grace ran out: resumed from checkpoint 1, bit-identical end" ||
  fail "relaunch after the grace ran out" "$TMP/$name.log"

suite_end
