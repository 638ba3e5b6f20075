#!/usr/bin/env bash
# CI's brief fuzz run of the safetensors header parser: build the libFuzzer
# target with clang (ASan + UBSan), replay the committed corpus, then fuzz for
# a few seconds from it. A crash or sanitizer report fails the test.
# Usage: run_fuzz.sh SOURCE_DIR WORK_DIR [SECONDS]
set -euo pipefail
source_dir=$1 work_dir=$2 seconds=${3:-30}
clang=$(command -v clang++-14 || command -v clang++ || true)
if [[ -z $clang ]]; then
  echo "fuzz: clang++ not found; install clang and libclang-rt-14-dev (scripts/setup.sh does)"
  exit 1
fi
mkdir -p "$work_dir/corpus"
"$clang" -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$source_dir/include" "$source_dir/tests/fuzz/fuzz_safetensors.cpp" "$source_dir/src/model/safetensors_format.cpp" \
  -o "$work_dir/fuzz_safetensors"
cp "$source_dir"/tests/fuzz/corpus/* "$work_dir/corpus/"
# Replay the corpus (every malformed file must be refused without a crash), then fuzz.
"$work_dir/fuzz_safetensors" -runs=0 "$work_dir/corpus"
"$work_dir/fuzz_safetensors" -max_total_time="$seconds" -print_final_stats=1 "$work_dir/corpus" 2>&1 | tail -n 15
echo "fuzz: no crash in ${seconds} s"
