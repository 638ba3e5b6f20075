#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install what is missing, build,
# run the whole test suite (unit tests, and multi-rank tests under mpiexec
# -np 2 and -np 4).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
cd build
status=0
ctest --output-on-failure --timeout 900 -j"$(nproc)" "$@" || status=$?
if ((status != 0)); then
  # A CI log may keep only its tail: the failed assertions again, last.
  echo "---- failed assertions and errors (build/Testing/Temporary/LastTest.log) ----"
  grep -a -A4 -E "ERROR:|test case THREW|FAILED:|^FAIL|Error: " Testing/Temporary/LastTest.log | tail -n 80 || true
fi
exit "$status"
