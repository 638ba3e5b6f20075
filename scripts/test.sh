#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install what is missing, build,
# run the whole test suite (unit tests, and multi-rank tests under mpiexec
# -np 2 and -np 4).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
cd build
ctest --output-on-failure --timeout 900 -j"$(nproc)" "$@"
