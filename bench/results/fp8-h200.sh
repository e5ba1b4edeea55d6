#!/usr/bin/env bash
# Block-FP8 weights kept as stored on one H200 (issue 17): the cuda tier (test_cuda_fp8 with the FP8
# kernels against the CPU on host-dequantised weights, test_cuda_backend, test_cuda_model), then
# `switchyard bench latency` on Qwen3-30B-A3B-FP8 and on the BF16 model, random weights, 512 in / 128 out,
# batch 1, 8, 64 and 256 (8 is the prefill 8 x 512 of the target table).
#   run(command="bash bench/results/fp8-h200.sh", carry=[".devcarry/gpu"], timeout_s=600)
# .devcarry/gpu/fp8.tar.xz holds bin/ (build-cuda: switchyard, test_cuda_fp8, test_cuda_backend,
# test_cuda_model) and lib/ (the CPU machine's OpenBLAS, fmt, PCRE2, utf8proc, simdjson, gfortran, quadmath,
# gomp and mpi_cxx libraries, flat).
set -o pipefail
OUT=${OUT:-/tmp/fp8-out}
mkdir -p "$OUT" /tmp/carry
tar -C /tmp/carry -xJf .devcarry/gpu/fp8.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for t in ${TESTS:-test_cuda_fp8 test_cuda_backend test_cuda_model}; do
  timeout 150 $B/$t > "$OUT/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.txt" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
done
for m in ${MODELS:-qwen3-30b-a3b-fp8 qwen3-30b-a3b}; do
  timeout 150 $B/switchyard bench latency --device cuda --model bench/configs/$m --random-weights \
    --batch 1,8,64,256 --input-len 512 --output-len 128 --json "$OUT/latency-$m.json" > "$OUT/latency-$m.txt" 2>&1
  echo "bench latency $m rc=$?" | tee -a "$OUT/summary.txt"
  grep -E '^ +[0-9]+ ' "$OUT/latency-$m.txt" | head -8 | tee -a "$OUT/summary.txt"
done
