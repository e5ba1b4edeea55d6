#!/usr/bin/env bash
# Builds switchyard with the CUDA backend (sm_90a), MPI and the NCCL communicator into build-cuda/. Needs
# the CUDA toolkit (nvcc) with NCCL (found next to it, or under $NCCL_HOME) and Open MPI (scripts/setup.sh);
# driving nvcc 13 in C++20 needs CMake >= 3.31, taken from PyPI into build-tools/ when the system's
# CMake is older. Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh >/dev/null
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc_bin" ] || { echo "build_cuda: no nvcc found (install the CUDA toolkit)" >&2; exit 2; }

cmake_bin=cmake
if ! cmake --version | head -1 | awk '{split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 31))}'; then
  if [ ! -x build-tools/bin/cmake ]; then
    python3 -m venv build-tools
    build-tools/bin/pip install -q 'cmake>=3.31'
  fi
  cmake_bin=build-tools/bin/cmake
fi
"$cmake_bin" -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DSY_WITH_CUDA=ON -DSY_WITH_MPI=ON -DSY_WITH_NCCL=ON \
  -DCMAKE_CUDA_COMPILER="$nvcc_bin" "$@" >/dev/null
"$cmake_bin" --build build-cuda -j"$(nproc)"
