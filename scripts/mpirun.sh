#!/usr/bin/env bash
# mpirun with what a workstation or CI box needs: root allowed when running as
# root, more ranks than cores allowed, and no binding unless you ask for one.
# Open MPI binds each rank to ONE core when it starts 2 ranks or fewer, so
# `mpirun -np 1 -x OMP_NUM_THREADS=2` runs both threads on one core (half
# speed). Unbound, each rank runs OMP_NUM_THREADS threads, or without it the
# cores divided by the ranks (comm/world.h). To pin ranks yourself pass a
# binding, which replaces the default: `--map-by slot:PE=2` (2 cores per rank)
# or `--bind-to core`.  Check with --report-bindings.
# Usage: scripts/mpirun.sh -np N [mpirun flags] program [args...]
set -euo pipefail
flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
binding=(--bind-to none)
for arg in "$@"; do
  case $arg in
    --bind-to | --bind-to=* | -bind-to | --map-by | --map-by=* | -map-by | --cpus-per-proc | --cpus-per-rank) binding=() ;;
  esac
done
exec mpirun "${flags[@]}" "${binding[@]}" "$@"
