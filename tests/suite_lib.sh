# What the shell suites share (test_cli.sh, test_train_cli.sh, test_faults.sh,
# test_preemption.sh, test_sweep_cli.sh, test_lora_train.sh, test_onnx_export.sh,
# test_onnx_tasks.sh): their arguments, a scratch folder,
# the pass / fail bookkeeping and the summary that decides the exit status, the
# tiny run config they train, and the helpers that find and compare the ranks
# and checkpoints of a job. Sourced, not run:
#
#   source "$(dirname "$0")/suite_lib.sh"
#   suite_start "$@"          # BIN SRC MPIEXEC MPI_FLAGS TMP SCALE PY
#   pass "what held"; fail "what did not" "$TMP/its.log"
#   suite_end                 # "<suite>: N passed, M failed"; exit 1 if any failed
#
# Every check prints "ok:   <what>" or "FAIL: <what>" (test_faults and
# test_preemption fail on a "FAIL: " line too: tests/CMakeLists.txt).
# shellcheck shell=bash disable=SC2034  # BIN, PY, ...: set here, used by the suites

SUITE=$(basename "$0" .sh)
PY=python3
PASSED=0
FAILURES=0

# suite_start [--mpiexec-optional] SHARDTRAIN_BINARY SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]:
# the suite's arguments, as tests/CMakeLists.txt passes them, into BIN, SRC,
# MPIEXEC (may be empty with --mpiexec-optional) and the array MPI_FLAGS; a
# fresh $TMP, removed at exit (a suite that needs more at exit sets its own
# EXIT trap, which removes $TMP too); SCALE, the factor for every time bound
# (SHARDTRAIN_TEST_TIME_SCALE: 5 in a sanitized build); one OpenMP thread per
# process: the jobs' ranks share the machine's cores.
suite_start() {
  local mpiexec_optional=0 usage
  if [ "${1:-}" = --mpiexec-optional ]; then
    mpiexec_optional=1
    shift
  fi
  if [ $mpiexec_optional = 1 ]; then
    usage="usage: $SUITE.sh SHARDTRAIN_BINARY SOURCE_DIR [MPIEXEC [MPIEXEC_FLAGS...]]"
  else
    usage="usage: $SUITE.sh SHARDTRAIN_BINARY SOURCE_DIR MPIEXEC [MPIEXEC_FLAGS...]"
  fi
  BIN=${1:?$usage}
  SRC=${2:?$usage}
  if [ $mpiexec_optional = 1 ]; then MPIEXEC=${3:-}; else MPIEXEC=${3:?$usage}; fi
  shift 3 2>/dev/null || shift $#
  MPI_FLAGS=("$@")
  SCALE=${SHARDTRAIN_TEST_TIME_SCALE:-1}
  export OMP_NUM_THREADS=1
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardtrain_$SUITE.XXXXXX") || exit 1
  trap 'rm -rf "$TMP"' EXIT
}

# pass WHAT: a check that held.
pass() {
  PASSED=$((PASSED + 1))
  echo "ok:   $1"
}

# fail WHAT [LOG]: a check that failed, with the part of LOG that shows why
# (log_excerpt).
fail() {
  FAILURES=$((FAILURES + 1))
  echo "FAIL: $1"
  if [ -n "${2:-}" ] && [ -f "$2" ]; then log_excerpt "$2"; fi
}

# log_excerpt LOG: what fail prints of LOG, indented: its last 15 lines
# without the indented, blank and '#' lines (a printed config, a table).
# A suite whose logs read differently defines its own after sourcing this.
log_excerpt() { grep -v '^  \|^$\|^#' "$1" | tail -15 | cut -c1-300 | sed 's/^/    | /'; }

# suite_merge OUTPUT: prints the output of checks run in a background
# subshell and counts its "ok:" and "FAIL:" lines here.
suite_merge() {
  cat "$1"
  PASSED=$((PASSED + $(grep -c '^ok:   ' "$1")))
  FAILURES=$((FAILURES + $(grep -c '^FAIL: ' "$1")))
}

# suite_end: the summary line; the suite's exit status, 1 if any check failed.
suite_end() {
  echo "$SUITE: $PASSED passed, $FAILURES failed"
  [ "$FAILURES" -eq 0 ] || exit 1
  exit 0
}

# tiny_run_config: MRPC's first 96 training and 40 dev pairs ($TMP/train.tsv,
# $TMP/dev.tsv) and $TMP/tiny.toml training a random BERT of hidden size 32
# (tests/data/bert_h32.json, the bert-base-cased vocabulary) on them at
# max_length 64; stdin has the rest of tiny.toml (the suite's [train],
# [checkpoint] and [run]).
tiny_run_config() {
  head -n 97 "$SRC/data/glue/MRPC/train.tsv" >"$TMP/train.tsv"
  head -n 41 "$SRC/data/glue/MRPC/dev.tsv" >"$TMP/dev.tsv"
  {
    cat <<TOML
[model]
init = "random"
config = "$SRC/tests/data/bert_h32.json"
vocab = "$SRC/data/vocab/bert-base-cased-vocab.txt"
[data]
train_file = "$TMP/train.tsv"
eval_file = "$TMP/dev.tsv"
max_length = 64
TOML
    cat
  } >"$TMP/tiny.toml"
}

# rank_pid RUN_NAME RANK: the pid of world rank RANK of the job started with
# --run.name RUN_NAME (found by its command line, told apart by its
# environment); status 1 if there is none.
rank_pid() {
  local pid
  for pid in $(pgrep -f -- "--run.name $1( |$)" 2>/dev/null); do
    [ -r "/proc/$pid/environ" ] || continue
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$pid" && return 0
  done
  return 1
}

# wait_for FILE PATTERN SECONDS: until PATTERN (grep's) is in FILE, at most
# SECONDS x SCALE; status 1 if it never is.
wait_for() {
  local i
  for ((i = 0; i < $3 * 20 * SCALE; i++)); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# same_state CHECKPOINT_A CHECKPOINT_B DIFF_LOG: /model and /optim bit-identical
# (h5diff, hdf5-tools).
same_state() {
  h5diff "$1" "$2" /model /model >"$3" 2>&1 && h5diff "$1" "$2" /optim /optim >>"$3" 2>&1
}
