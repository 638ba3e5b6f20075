#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install what is missing, build, run
# the main job on the shipped defaults: fine-tune a small randomly initialised
# BERT (bert-base-cased vocabulary) on GLUE MRPC with 2 ranks, data parallel.
# Prints the final metrics and where the checkpoints are
# (runs/quickstart/: result.jsonl, progress.csv, train.log, checkpoint_*.h5).
# Re-running resumes from the newest checkpoint (and does nothing once done);
# pass overrides through, e.g. `bash scripts/quickstart.sh --run.name again`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# One compute thread per rank: 2 ranks on a 2-core machine. More cores: raise it.
threads=${OMP_NUM_THREADS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
bash scripts/mpirun.sh -np 2 -x OMP_NUM_THREADS="$threads" build/shardtrain train --config configs/quickstart.toml "$@"
