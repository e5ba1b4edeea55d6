#!/usr/bin/env bash
# Sets up, builds, checks the sources' format (scripts/check_format.sh) and the changed sources with
# clang-tidy (scripts/check_tidy.sh), and runs every CPU test: the
# Release build (with the MPI communicator) and its cpu and mpi tiers (the mpi tier runs under mpirun on
# 2 to 8 ranks: collectives, the layout matrix, the launch and kill tests), the libFuzzer harnesses
# (scripts/fuzz.sh: seed corpus replayed, 15 s of fuzzing each), then the cpu tests under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/). Where the CUDA toolkit is installed it
# also compiles and links the CUDA backend and its tests (they run only on a GPU machine: label cuda).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh -DSY_WITH_MPI=ON
scripts/check_format.sh
# clang-tidy on what the last commit changed (SY_TIDY_BASE=<commit> for a longer range).
scripts/check_tidy.sh
ctest --test-dir build -L cpu --output-on-failure -j"$(nproc)"
ctest --test-dir build -L robust --output-on-failure -j"$(nproc)"
# One mpirun at a time: each oversubscribes the cores already.
ctest --test-dir build -L mpi --output-on-failure

# The libFuzzer harnesses (clang 16, ASan + UBSan): each replays its seed corpus, then fuzzes for 15 s.
SY_FUZZ_SECONDS=${SY_FUZZ_SECONDS:-15} scripts/fuzz.sh

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSY_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$(nproc)"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L cpu --output-on-failure -j"$(nproc)"

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  scripts/build_cuda.sh
  echo "CUDA build compiled and linked; its tests (ctest --test-dir build-cuda -L cuda) need a GPU"
fi
