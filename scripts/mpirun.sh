#!/usr/bin/env bash
# mpirun with what a workstation or CI box needs: root allowed when running as
# root, more ranks than cores allowed, and no binding unless you ask for one.
# Open MPI binds each rank to ONE core when it starts 2 ranks or fewer, so
# `mpirun -np 1 -x OMP_NUM_THREADS=2` runs both threads on one core (half
# speed). Unbound, each rank runs OMP_NUM_THREADS threads, or without it the
# cores divided by the ranks (comm/world.h). To pin ranks yourself pass a
# binding, which replaces the default: `--map-by slot:PE=2` (2 cores per rank)
# or `--bind-to core`.  Check with --report-bindings.
#
# Stopping (docs/preemption.md): a SIGTERM that reaches Open MPI's mpirun makes
# it kill the ranks about a second later, before their emergency checkpoint is
# written. So mpirun runs here in a session of its own, out of this script's
# process group, and a TERM or INT that this script receives (a `kill` of the
# job's process group, Ctrl-C, PBS / LSF / Kubernetes / systemd stopping it)
# is forwarded to mpirun as SIGUSR1, which mpirun passes on to every rank:
# shardtrain stops at the next step boundary with an emergency checkpoint and
# exits 143. The script then waits for mpirun and exits with its status.
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
# setsid: a session (and process group) of its own, so that a signal to this
# script's process group does not reach mpirun directly. stdin stays ours.
setsid mpirun "${flags[@]}" "${binding[@]}" "$@" <&0 &
launcher=$!
forward() { kill -USR1 "$launcher" 2>/dev/null || true; }
trap forward TERM INT
# `wait` returns early (status > 128) when a trapped signal arrives; wait
# again until mpirun itself has ended.
set +e
while :; do
  wait "$launcher"
  status=$?
  kill -0 "$launcher" 2>/dev/null || break
done
exit "$status"
