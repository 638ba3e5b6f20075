#!/usr/bin/env bash
# ONNX Runtime (CPU) against `shardtrain predict` on the same 408 MRPC dev rows,
# rows/s, for a bert-base-shaped model (random weights: the speed does not
# depend on them) exported with `export --format onnx` (docs/export.md).
#
#   bash benchmarks/onnx/onnx_vs_predict.sh [BUILD_DIR]
#
# predict: 1 rank x 2 threads (bound to no core) and 2 ranks x 1 thread, batch
# 32 per rank, packed (its default); ONNX Runtime: 2 intra-op threads, batch 32,
# each batch padded to its longest row. Both run on the rows tokenized at
# max_length 128. Prints the CPU's features first.
set -euo pipefail
BUILD=${1:-build}
BIN=$BUILD/shardtrain
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d /tmp/onnx_bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
grep -m1 -o 'model name.*' /proc/cpuinfo
echo "cpu features: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
cat >"$TMP/bert_base.json" <<JSON
{"model_type": "bert", "vocab_size": 28996, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
 "intermediate_size": 3072, "max_position_embeddings": 512, "type_vocab_size": 2}
JSON
cat >"$TMP/run.toml" <<TOML
[model]
init = "random"
config = "$TMP/bert_base.json"
vocab = "$SRC/data/vocab/bert-base-cased-vocab.txt"
[data]
train_file = "$SRC/data/glue/MRPC/dev.tsv"
max_length = 128
[train]
max_steps = 1
batch_size = 2
[checkpoint]
every_epochs = 0
every_steps = 1
[run]
storage_path = "$TMP/runs"
name = "base"
TOML
"$BIN" train -c "$TMP/run.toml" >"$TMP/train.log" 2>&1
ckpt=$TMP/runs/base/checkpoint_000001.h5
"$BIN" export "$ckpt" --format onnx --output "$TMP/onnx" >"$TMP/export.log" 2>&1
"$BIN" tokenize --vocab "$TMP/onnx" --data "$SRC/data/glue/MRPC/dev.tsv" --text-a '#1 String' --text-b '#2 String' \
  --max-length 128 --output "$TMP/ids.jsonl" >/dev/null 2>&1
for setting in "1 2" "2 1"; do
  read -r ranks threads <<<"$setting"
  start=$(date +%s.%N)
  "$SRC/scripts/mpirun.sh" -np "$ranks" --bind-to none -x OMP_NUM_THREADS="$threads" "$BIN" predict --model "$ckpt" \
    --data "$SRC/data/glue/MRPC/dev.tsv" --batch-size 32 --output "$TMP/p.jsonl" >"$TMP/predict.log" 2>&1
  rate=$(grep -o '([0-9.]* rows/s' "$TMP/predict.log" | tr -d '(')
  echo "predict: $ranks rank(s) x $threads thread(s): $rate (its own timing of the forward passes); whole command $(echo "$(date +%s.%N) - $start" | bc) s"
done
node "$SRC/benchmarks/onnx/rows_per_s.js" "$TMP/onnx/model.onnx" "$TMP/ids.jsonl" 32 2 "$BUILD/onnxruntime"
