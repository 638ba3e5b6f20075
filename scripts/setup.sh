#!/usr/bin/env bash
# Installs what is missing on Debian 12 (apt, no recommends), then configures
# and builds shardtrain in ./build. Safe to run again: installed packages are
# skipped and the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ make cmake pkg-config
  libtorch-dev libopenblas0-openmp          # LibTorch; OpenBLAS so matmuls don't use the reference BLAS
  libopenmpi-dev openmpi-bin                # MPI
  libhdf5-openmpi-dev hdf5-tools            # parallel HDF5 (MPI-IO); h5dump for the checkpoint tests
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libutf8proc-dev doctest-dev
  libprotobuf-dev protobuf-compiler         # TensorBoard event files (protobuf lite runtime, protoc)
  librsvg2-dev                              # `shardtrain plot --output X.png` (optional at build time)
  python3 python3-protobuf                  # test helpers; protobuf: the TensorBoard test's own decoder
  librsvg2-bin fonts-dejavu-core            # rsvg-convert and a font: the curves rendering test
  clang libclang-rt-14-dev                  # the brief libFuzzer run in the test suite
)
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

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" ${SHARDTRAIN_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
