# One H200, issue 15 item 2 (the runtime executor): the cuda tier on the new binaries, the mpi layout matrix
# with the CUDA backend on the one GPU (2 ranks, MPI through host memory), and `switchyard bench latency` on
# the Qwen3-30B-A3B config at batch 1, 10, 64 and 256 for the commit before the change and after it, on the
# same lease, alternating: before, after, before, after.
#   run(command="bash bench/results/executor-h200.sh tests", carry=[".devcarry"], timeout_s=600)
#   run(command="bash bench/results/executor-h200.sh bench", carry=[".devcarry"], timeout_s=600)
# .devcarry/ holds bin/ (build-cuda of 95dff7b: switchyard, test_cuda_backend, test_cuda_mla, test_cuda_model,
# test_model_mpi), before/switchyard (build-cuda of 7b701c8), libs.tar.xz and mpilibs.tar.xz (the CPU
# machine's OpenBLAS, fmt, PCRE2, utf8proc, simdjson, gfortran, quadmath and Open MPI libraries, flat).
set -o pipefail
D=.devcarry
OUT=${OUT:-/tmp/executor-out}
mkdir -p "$OUT" /tmp/lib
tar -C /tmp/lib -xJf $D/libs.tar.xz
if ! ldconfig -p | grep -q libmpi_cxx.so.40; then
  mkdir -p /tmp/mpilib && tar -C /tmp/mpilib -xJf $D/mpilibs.tar.xz
  export LD_LIBRARY_PATH=/tmp/mpilib:$LD_LIBRARY_PATH
fi
export LD_LIBRARY_PATH=/tmp/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
if [ "$1" = tests ]; then
  for t in test_cuda_backend test_cuda_mla test_cuda_model; do
    timeout 200 $D/bin/$t > "$OUT/$t.txt" 2>&1
    echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.txt" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
  done
  SY_TEST_DEVICE=cuda timeout 240 mpirun --allow-run-as-root --oversubscribe -np 2 -x SY_TEST_DEVICE -x SY_SOURCE_DIR \
    -x LD_LIBRARY_PATH $D/bin/test_model_mpi > "$OUT/mpi-layouts-on-one-gpu.txt" 2>&1
  echo "test_model_mpi (cuda, 2 ranks) rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/mpi-layouts-on-one-gpu.txt" | sort -u | tr '\n' ' ')" |
    tee -a "$OUT/summary.txt"
  exit 0
fi
for run in ${RUNS:-1 2}; do
  for which in before after; do
    bin=$D/bin/switchyard
    [ $which = before ] && bin=$D/before/switchyard
    timeout 240 $bin bench latency --device cuda --model bench/configs/qwen3-30b-a3b --random-weights \
      --batch 1,10,64,256 --input-len 512 --output-len 128 --json "$OUT/latency-$which-$run.json" \
      > "$OUT/latency-$which-$run.txt" 2>&1
    echo "bench latency $which run $run rc=$?" | tee -a "$OUT/summary.txt"
    grep -E '^ +[0-9]+ ' "$OUT/latency-$which-$run.txt" | head -4 | tee -a "$OUT/summary.txt"
  done
done
