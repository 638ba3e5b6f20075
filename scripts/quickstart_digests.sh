#!/usr/bin/env bash
# Digests of what the task quickstarts produce, for a refactor that must not
# change behaviour (docs/testing.md, "Bit-identical before and after"): each of
# configs/quickstart.toml (MRPC), quickstart_ner.toml (WNUT-17),
# quickstart_xcopa.toml (XCOPA) and quickstart_squad.toml (SQuAD) trains at
# -np 2 for STEPS optimizer steps (the schedule planned for the whole run, so
# the steps are the full run's first ones), then prints the sha256 of
#   - the final checkpoint's model, exported as float32 safetensors (export is
#     deterministic: tensor by tensor, in HF order);
#   - predict's JSON lines on the quickstart's eval file, every setting given
#     as a flag (so that versions with other predict defaults compare);
#   - the eval metrics of result.jsonl (timings left out, the checkpoint by
#     its file name).
# Run it with the binaries of both versions and diff the outputs.
#
#   bash scripts/quickstart_digests.sh build/shardtrain /tmp/after [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:?usage: quickstart_digests.sh SHARDTRAIN_BINARY OUT_DIR [STEPS]}")
OUT=${2:?out dir}
STEPS=${3:-40}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1

# name config predict-flags...
run_one() {
  local name=$1 config=$2
  shift 2
  local runs="$OUT/runs"
  rm -rf "$runs/qs_$name"
  bash scripts/mpirun.sh -np 2 "$BIN" train --config "$config" --run.storage_path "$runs" --run.name "qs_$name" \
    --train.max_steps "$STEPS" >"$OUT/$name.train.log" 2>&1
  local ckpt
  ckpt=$(ls "$runs/qs_$name"/checkpoint_*.h5 | tail -1)
  rm -rf "$OUT/${name}_export"
  "$BIN" export "$ckpt" --output "$OUT/${name}_export" >"$OUT/$name.export.log" 2>&1
  bash scripts/mpirun.sh -np 2 "$BIN" predict --model "$ckpt" --output "$OUT/$name.predictions.jsonl" "$@" \
    >"$OUT/$name.predict.log" 2>&1
  python3 - "$runs/qs_$name/result.jsonl" >"$OUT/$name.metrics.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
drop = ("time", "seconds", "timestamp", "date", "hostname", "_per_s")
# The checkpoint's path names OUT_DIR: its file name only.
for r in rows:
    if "checkpoint" in r: r["checkpoint"] = str(r["checkpoint"]).rsplit("/", 1)[-1]
print(json.dumps([{k: v for k, v in r.items() if not any(d in k for d in drop)} for r in rows], sort_keys=True))
PY
  printf '%s model.safetensors %s\n' "$name" "$(sha256sum <"$OUT/${name}_export/model.safetensors" | cut -c1-64)"
  printf '%s predictions %s\n' "$name" "$(sha256sum <"$OUT/$name.predictions.jsonl" | cut -c1-64)"
  printf '%s metrics %s\n' "$name" "$(sha256sum <"$OUT/$name.metrics.json" | cut -c1-64)"
}

run_one mrpc configs/quickstart.toml --data data/glue/MRPC/dev.tsv --text-a "#1 String" --text-b "#2 String" \
  --label Quality --max-length 128 --batch-size 32
run_one ner configs/quickstart_ner.toml --data data/ner/wnut17/dev.conll --label 1 --max-length 128 --batch-size 32
run_one xcopa configs/quickstart_xcopa.toml --data data/multiple_choice/xcopa/it/val.it.jsonl --preset copa \
  --max-length 64 --batch-size 32
run_one squad configs/quickstart_squad.toml --data data/qa/squad-v1.1/dev-articles-24-29.json --max-length 256 \
  --doc-stride 64 --batch-size 32 --with-answers
