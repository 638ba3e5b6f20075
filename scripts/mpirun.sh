#!/usr/bin/env bash
# mpirun with what a workstation or CI box needs: root allowed when running as
# root, more ranks than cores allowed, one compute thread per rank when the
# ranks outnumber the cores. Usage: scripts/mpirun.sh -np N program [args...]
set -euo pipefail
flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
exec mpirun "${flags[@]}" "$@"
