#!/usr/bin/env bash
# Block-FP8 products on the FP8 tensor cores (issue 17) on one H200: test_cuda_fp8 (the quantiser and the W8A8
# products against the format's rule and double-precision sums) and test_cuda_backend, bench_kernels --cuda-fp8
# (dense projections and routed experts, FP8 tensor cores against the widened path, Qwen3-30B-A3B shapes), then
# `switchyard bench latency` on Qwen3-30B-A3B-FP8 (batch 1, 8 = the prefill 8 x 512 of the target table, 64, 256)
# and on the BF16 model at 8 and 64 in the same lease (random weights, 512 in / 128 out).
#   run(command="bash bench/results/fp8-tc-h200.sh", carry=[".devcarry/fp8tc"], timeout_s=600)
# Env: TESTS (test binaries), BENCHES (config:batches list), NO_KERNELS=1.
# .devcarry/fp8tc/bin.tar.xz: bin/ (build-cuda: switchyard, test_cuda_fp8, test_cuda_backend, bench_kernels,
# stripped) and lib/ (the CPU machine's shared libraries the binaries need, flat).
set -o pipefail
OUT=${OUT:-/tmp/fp8tc-out}
R=/tmp/fp8tc-res
mkdir -p "$OUT" "$R" /tmp/carry
tar -C /tmp/carry -xJf .devcarry/fp8tc/bin.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin
S="$OUT/summary.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$R/gpu.txt"
for t in ${TESTS:-test_cuda_fp8 test_cuda_backend}; do
  timeout 150 $B/$t > "$R/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$R/$t.txt" | tr '\n' ' ')" | tee -a "$S"
  grep -E '^\[  FAILED|Failure|Expected|Which is|rel_err' "$R/$t.txt" | head -12 | tee -a "$S"
done
if [ -z "$NO_KERNELS" ]; then
  timeout 120 $B/bench_kernels --cuda-fp8 > "$R/bench-kernels-fp8.txt" 2>&1
  echo "bench_kernels --cuda-fp8 rc=$?" | tee -a "$S"
  cat "$R/bench-kernels-fp8.txt" | tee -a "$S"
fi
run_bench() {  # name, config dir, batches
  timeout 200 $B/switchyard bench latency --device cuda --model "$2" --random-weights --batch "$3" \
    --input-len 512 --output-len 128 --json "$R/latency-$1.json" > "$R/latency-$1.txt" 2>&1
  echo "bench latency $1 rc=$?" | tee -a "$S"
  grep -E '^ +[0-9]+ ' "$R/latency-$1.txt" | tee -a "$S"
}
BENCHES=${BENCHES:-"qwen3-30b-a3b-fp8:1,8,64,256 qwen3-30b-a3b:8,64"}
for b in $BENCHES; do run_bench "${b%%:*}" "bench/configs/${b%%:*}" "${b##*:}"; done
tar -C "$R" -czf "$OUT/res.tgz" .
