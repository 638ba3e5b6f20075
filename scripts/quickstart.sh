#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install what is missing, build, run
# the main job on the shipped defaults.
#
# Until `shardtrain train` lands, the main job is a smoke run of the
# collectives: every collective on 2 ranks, each result checked, 1 KiB..1 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build/shardtrain config --config configs/quickstart.toml
bash scripts/mpirun.sh -np 2 -x OMP_NUM_THREADS=1 build/benchmarks/bench_collectives --max-bytes 1M
