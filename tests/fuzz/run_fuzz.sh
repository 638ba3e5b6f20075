#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz (README.md there), built with clang
# (ASan + UBSan) as a project of their own.
#   run_fuzz.sh build SOURCE_DIR WORK_DIR           configure + build every target
#   run_fuzz.sh run SOURCE_DIR WORK_DIR NAME [SECONDS]
#       replay tests/fuzz/corpus/NAME (every seed, good or broken, must be
#       handled without a crash), then fuzz from it for SECONDS (20); a crash,
#       sanitizer report or broken property fails, leaving the input in WORK_DIR.
# Extra libFuzzer flags: FUZZ_FLAGS="-jobs=2 -workers=2"; FUZZ_LOG=FILE keeps
# libFuzzer's whole output (its coverage lines) there.
set -euo pipefail
mode=$1 source_dir=$(cd "$2" && pwd) work_dir=$3
mkdir -p "$work_dir"
work_dir=$(cd "$work_dir" && pwd)
case $mode in
  build)
    clang=$(command -v clang++-14 || command -v clang++ || true)
    clang_c=$(command -v clang-14 || command -v clang || true)
    if [[ -z $clang || -z $clang_c ]]; then
      echo "fuzz: clang++ not found; install clang and libclang-rt-14-dev (scripts/setup.sh --tests does)"
      exit 1
    fi
    if [[ ! -f $work_dir/build/build.ninja ]]; then
      cmake -S "$source_dir/tests/fuzz" -B "$work_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_COMPILER="$clang" -DCMAKE_C_COMPILER="$clang_c" \
        $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) >/dev/null
    fi
    cmake --build "$work_dir/build" -j"$(nproc)"
    echo "fuzz: targets built in $work_dir/build"
    ;;
  run)
    name=$4 seconds=${5:-20}
    log=${FUZZ_LOG:-/dev/null}
    [[ $log == /* ]] || log=$PWD/$log  # the fuzzer runs in crashes_NAME
    exe=$work_dir/build/fuzz_$name
    [[ -x $exe ]] || { echo "fuzz: $exe not built (run_fuzz.sh build first)"; exit 1; }
    corpus=$work_dir/corpus_$name
    mkdir -p "$corpus" "$work_dir/crashes_$name"
    cp "$source_dir/tests/fuzz/corpus/$name"/* "$corpus/"
    dict=()
    [[ -f $source_dir/tests/fuzz/$name.dict ]] && dict=(-dict="$source_dir/tests/fuzz/$name.dict")
    cd "$work_dir/crashes_$name"
    "$exe" -runs=0 "${dict[@]}" "$corpus" 2>&1 | tail -n 3
    "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 ${FUZZ_FLAGS:-} "${dict[@]}" "$corpus" 2>&1 | tee "$log" | grep -v '^#[0-9]*.*\(NEW\|REDUCE\|pulse\)\|# Uses: \|recommended dictionary' | tail -n 12
    echo "fuzz $name: no crash in $seconds s"
    ;;
  *) echo "usage: run_fuzz.sh build|run SOURCE_DIR WORK_DIR [NAME [SECONDS]]"; exit 2 ;;
esac
