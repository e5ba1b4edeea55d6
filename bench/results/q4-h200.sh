#!/usr/bin/env bash
# 4-bit weights kept as stored on one H200 (issue 17): the cuda tier's 4-bit kernels (test_cuda_q4 against
# the CPU on host-dequantised weights) with test_cuda_fp8 and test_cuda_backend beside them, then
# `switchyard bench latency` on the Kimi-K2-Thinking-like INT4 config (4 layers, routed experts INT4 group
# 32) and the GLM-5-like NVFP4 config (6 layers), random weights, 512 in / 128 out, batch 1 and 64, and
# each config without its quantisation (the same shapes in BF16: config.json without quantization_config,
# no hf_quant_config.json) as the baseline.
#   run(command="bash bench/results/q4-h200.sh", carry=[".devcarry/gpu"], timeout_s=600)
# .devcarry/gpu/q4.tar.xz holds bin/ (build-cuda: switchyard, test_cuda_q4, test_cuda_fp8, test_cuda_backend,
# test_cuda_model) and lib/ (the CPU machine's OpenBLAS, fmt, PCRE2, utf8proc, simdjson, gfortran, quadmath,
# gomp and mpi_cxx libraries, flat).
set -o pipefail
OUT=${OUT:-/tmp/q4-out}
mkdir -p "$OUT" /tmp/carry
tar -C /tmp/carry -xJf .devcarry/gpu/q4.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for t in ${TESTS:-test_cuda_q4 test_cuda_fp8 test_cuda_backend test_cuda_model}; do
  timeout 150 $B/$t > "$OUT/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.txt" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
  grep -E '^\[  FAILED' "$OUT/$t.txt" | head -5 | tee -a "$OUT/summary.txt"
done
for m in ${MODELS:-kimi-k2-thinking-int4-4layers glm5-nvfp4-6layers}; do
  mkdir -p "/tmp/configs/$m-bf16"
  python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c.pop('quantization_config', None); \
json.dump(c, open(sys.argv[2], 'w'), indent=1)" "bench/configs/$m/config.json" "/tmp/configs/$m-bf16/config.json"
done
for m in ${MODELS:-kimi-k2-thinking-int4-4layers glm5-nvfp4-6layers}; do
  for dir in "bench/configs/$m" "/tmp/configs/$m-bf16"; do
    c=$(basename "$dir")
    timeout 200 $B/switchyard bench latency --device cuda --model "$dir" --random-weights \
      --batch ${BATCHES:-1,64} --input-len 512 --output-len 128 --json "$OUT/latency-$c.json" > "$OUT/latency-$c.txt" 2>&1
    echo "bench latency $c rc=$?" | tee -a "$OUT/summary.txt"
    grep -iE 'weights|held' "$OUT/latency-$c.txt" | head -3 | tee -a "$OUT/summary.txt"
    grep -E '^ +[0-9]+ ' "$OUT/latency-$c.txt" | head -8 | tee -a "$OUT/summary.txt"
  done
done
