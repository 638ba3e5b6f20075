#!/usr/bin/env bash
# Installs what is missing on Debian 12 (apt, no recommends), then configures
# ./build and builds what was asked. Safe to run again: installed packages are
# skipped and the build is incremental.
#
#   bash scripts/setup.sh            the packages the job needs; builds `shardtrain` only
#   bash scripts/setup.sh --tests    also the test-only packages; builds every target
#                                    (library, shardtrain, tests, probes, benchmarks)
#
# Build flags go through SHARDTRAIN_CMAKE_ARGS (e.g. "-DSHARDTRAIN_BUILD_BENCHMARKS=OFF").
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=0
[[ ${1:-} == --tests ]] && with_tests=1

# What the `shardtrain` executable is built from.
packages=(
  g++ cmake ninja-build pkg-config ccache
  libtorch-dev libopenblas0-openmp          # LibTorch; OpenBLAS so matmuls don't use the reference BLAS
  libopenmpi-dev openmpi-bin                # MPI
  libhdf5-openmpi-dev                       # parallel HDF5 (MPI-IO)
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libutf8proc-dev
  libsentencepiece-dev                      # SentencePiece tokenizers (DeBERTa-v2/v3, XLM-R)
  libprotobuf-dev protobuf-compiler         # TensorBoard event files (protobuf lite runtime, protoc)
  libonnx-dev                               # `shardtrain export --format onnx`: ONNX's protobuf classes and checker
  librsvg2-dev                              # `shardtrain plot --output X.png`; in this set so that
                                            # --tests does not change the executable (no rebuild)
)
# What only the test suite uses.
test_packages=(
  doctest-dev                               # the unit and multi-rank test executables
  hdf5-tools                                # h5dump: the checkpoint tests read files as a user would
  python3 python3-protobuf                  # test helpers; protobuf: the TensorBoard test's own decoder
  librsvg2-bin fonts-dejavu-core            # rsvg-convert and a font: the curves rendering test
  clang libclang-rt-14-dev                  # libFuzzer and the sanitizer runtimes (fuzz targets)
  sentencepiece python3-sentencepiece       # spm_train and the reference ids: tests/fixtures/make_spm_fixtures.py,
                                            # data/vocab/sib200-xlmr-8k/make_model.sh (offline; their outputs are committed)
)
((with_tests)) && packages+=("${test_packages[@]}")

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

configure=(-DCMAKE_BUILD_TYPE=Release)
# Ninja for a fresh build folder; an existing one keeps the generator it was made with.
[[ -f build/CMakeCache.txt ]] || configure+=(-G Ninja)
command -v ccache >/dev/null && configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# shellcheck disable=SC2086  # SHARDTRAIN_CMAKE_ARGS is a list of flags
cmake -S . -B build "${configure[@]}" ${SHARDTRAIN_CMAKE_ARGS:-}
if ((with_tests)); then
  cmake --build build -j"$(nproc)"
else
  cmake --build build -j"$(nproc)" --target shardtrain
fi

# The ONNX export tests run the real ONNX Runtime (CPU): onnxruntime-node from
# the npm registry, into build/onnxruntime (tests/test_onnx_export.cpp fails,
# it does not skip, without it). ONNXRUNTIME_NODE_INSTALL=skip: no CUDA download.
readonly ort_version=1.30.0
if ((with_tests)) && ! grep -qs "\"version\": \"$ort_version\"" build/onnxruntime/node_modules/onnxruntime-node/package.json; then
  command -v npm >/dev/null || { echo "setup: npm (Node.js) is needed for the ONNX Runtime the tests run" >&2; exit 1; }
  echo "setup: installing onnxruntime-node $ort_version (CPU) into build/onnxruntime"
  mkdir -p build/onnxruntime
  (cd build/onnxruntime && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --loglevel=error \
    "onnxruntime-node@$ort_version" >/dev/null)
fi
