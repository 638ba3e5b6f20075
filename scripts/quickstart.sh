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
# 2 ranks, unbound (scripts/mpirun.sh): each rank runs nproc / 2 compute
# threads (comm/world.h); an OMP_NUM_THREADS you export overrides that.
bash scripts/mpirun.sh -np 2 build/shardtrain train --config configs/quickstart.toml "$@"
