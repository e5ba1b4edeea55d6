#!/usr/bin/env bash
# MLA attention on tensor cores (mla_flash.cu) and the staged activations of the FP8 / 4-bit down kernel, on
# one H200: the cuda tier's tests (test_cuda_mla's FlashAttentionDecodeAndPrefill against the CPU, the expert
# tests, the whole-model conformance), compute-sanitizer memcheck on the new kernel's test, then
# `switchyard bench latency` (random weights, 512 in / 128 out) on the MLA configs (kimi-k2-4layers in BF16,
# the Kimi-K2-Thinking-like INT4 and GLM-5-like NVFP4 configs) at batch 1 and 64, and Qwen3-30B-A3B-FP8 at
# 1, 8 and 64 for the down kernel.
#   run(command="bash bench/results/mla-h200.sh", carry=[".devcarry/gpu"], timeout_s=600)
# .devcarry/gpu/q4.tar.xz holds bin/ (build-cuda: switchyard and the test_cuda_* binaries) and lib/ (the CPU
# machine's OpenBLAS, fmt, PCRE2, utf8proc, simdjson, gfortran, quadmath, gomp and mpi_cxx libraries, flat).
set -o pipefail
OUT=${OUT:-/tmp/mla-out}
mkdir -p "$OUT" /tmp/carry
tar -C /tmp/carry -xJf .devcarry/gpu/q4.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for t in ${TESTS:-test_cuda_mla test_cuda_q4 test_cuda_fp8 test_cuda_backend test_cuda_model}; do
  timeout 150 $B/$t > "$OUT/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.txt" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
  grep -E '^\[  FAILED|Failure|rel_err|Expected' "$OUT/$t.txt" | head -8 | tee -a "$OUT/summary.txt"
done
if [ -z "$NO_SANITIZER" ]; then
  timeout 200 compute-sanitizer --tool memcheck $B/test_cuda_mla --gtest_filter='*Flash*' > "$OUT/memcheck-mla.txt" 2>&1
  echo "memcheck test_cuda_mla Flash rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-mla.txt")" | tee -a "$OUT/summary.txt"
fi
run_bench() {  # name, config dir, batches
  timeout 200 $B/switchyard bench latency --device cuda --model "$2" --random-weights --batch "$3" \
    --input-len 512 --output-len 128 --json "$OUT/latency-$1.json" > "$OUT/latency-$1.txt" 2>&1
  echo "bench latency $1 rc=$?" | tee -a "$OUT/summary.txt"
  grep -E '^ +[0-9]+ ' "$OUT/latency-$1.txt" | tee -a "$OUT/summary.txt"
}
for m in ${MODELS:-kimi-k2-4layers kimi-k2-thinking-int4-4layers glm5-nvfp4-6layers}; do
  run_bench "$m" "bench/configs/$m" "${BATCHES:-1,64}"
done
for m in ${FP8_MODELS:-qwen3-30b-a3b-fp8}; do
  run_bench "$m" "bench/configs/$m" "${FP8_BATCHES:-1,8,64}"
done
