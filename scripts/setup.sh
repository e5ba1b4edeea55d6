#!/usr/bin/env bash
# Installs the Debian packages the CPU build needs (only those missing) and builds switchyard into
# build/ (Release). Extra arguments are passed to CMake's configure step. libomp-16-dev is clang's omp.h, which
# clang-tidy-16 (scripts/check_tidy.sh) needs for the sources built with -fopenmp.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/install_packages.sh
install_packages cmake g++ make ccache pkg-config libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev libfmt-dev \
  libgtest-dev libpcre2-dev libutf8proc-dev libsimdjson-dev zlib1g-dev libboost-dev libopenmpi-dev openmpi-bin \
  python3 python3-venv clang-format clang-tidy-16 libomp-16-dev

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
