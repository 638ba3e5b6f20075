#!/usr/bin/env bash
# The whole unit and MPI suite (np 2 and 4, the CLI and fault tests) under
# AddressSanitizer + UndefinedBehaviorSanitizer, in its own build folder
# (build-sanitize; GCC, or CC/CXX=clang). Runtime options and suppressions:
# tests/sanitizers/ (docs/testing.md). Any sanitizer report fails.
#   bash scripts/sanitize.sh                    # all of it (the fuzz label is clang's own: excluded)
#   bash scripts/sanitize.sh -R test_tokenizer  # extra arguments go to ctest
#   SANITIZE=thread bash scripts/sanitize.sh    # ThreadSanitizer (build-tsan): the threaded parts' tests
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${SANITIZE:-address,undefined}
build=build-sanitize
extra=()
if [[ $kind == thread ]]; then
  build=build-tsan
  # The threaded parts: the collective and phase watchdogs (comm/watchdog*,
  # their heartbeat and arrival board), the run lock's heartbeat thread, the
  # dataset's tokenizing threads, the offload copies (parallel/offload.cpp,
  # zero3 with offload_optimizer) and the fault probes that stop a rank.
  # OpenMP (libgomp, in LibTorch and OpenBLAS) is not instrumented: one thread
  # keeps its invisible barriers out of the run (tests/sanitizers/tsan.supp).
  export OMP_NUM_THREADS=1
  [[ $# -eq 0 ]] && extra=(-R '^(test_watchdog_mpi|test_comm_mpi|test_run_lock|test_dataset_mpi|test_zero_mpi|fault_)')
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# One CTest entry per test file (SHARDTRAIN_TEST_GROUPS=OFF): a sanitized
# process start costs seconds, not the fraction that grouping saves, and -R
# picks single files.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDTRAIN_BUILD_BENCHMARKS=OFF \
  -DSHARDTRAIN_TEST_GROUPS=OFF -DSHARDTRAIN_SANITIZE="$kind" "${launcher[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
source tests/sanitizers/env.sh
cd "$build"
start=$SECONDS
ctest --output-on-failure --timeout 1800 -j"$(nproc)" -LE fuzz "${extra[@]}" "$@"
echo "sanitize ($kind): suite passed in $((SECONDS - start)) s"
