#!/usr/bin/env bash
# Issue 17 on one H200 at the merged code: `tests` runs the cuda tier that covers the quantised paths (the FP8 KV
# cache, block-FP8 on the FP8 tensor cores, 4-bit, MLA, the backend, and every fixture end to end, bf16 and FP8 KV,
# the group-16 NVFP4 fixture included); `bench` runs `switchyard bench latency` (random weights) on the quantised
# configs and on Qwen3-30B-A3B with the bf16 and the FP8 KV cache at 512 and 8,192 tokens in.
#   run(command="bash bench/results/issue17-h200.sh tests", carry=[".devcarry/i17"], timeout_s=600)
#   run(command="bash bench/results/issue17-h200.sh bench", carry=[".devcarry/i17"], timeout_s=600)
# .devcarry/i17/bin.tar.xz: bin/ (build-cuda, stripped: switchyard and the test binaries below) and lib/ (the CPU
# machine's shared libraries the binaries need, flat). Results in $OUT/res.tgz, the short form in $OUT/summary.txt.
set -o pipefail
OUT=${OUT:-/tmp/i17-out}
R=/tmp/i17-res
mkdir -p "$OUT" "$R" /tmp/carry
tar -C /tmp/carry -xJf .devcarry/i17/bin.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin
S="$OUT/summary.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$R/gpu.txt"
if [ "$1" = tests ]; then
  for t in ${TESTS:-test_cuda_kv_fp8 test_cuda_fp8 test_cuda_q4 test_cuda_mla test_cuda_backend test_cuda_model}; do
    timeout 240 $B/$t > "$R/$t.txt" 2>&1
    echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$R/$t.txt" | tr '\n' ' ')" | tee -a "$S"
    grep -E '^\[  FAILED|Failure$|Expected|Which is|actual' "$R/$t.txt" | head -10 | tee -a "$S"
  done
fi
run_bench() {  # name, config, batches, input length, extra flags
  timeout 240 $B/switchyard bench latency --device cuda --model "bench/configs/$2" --random-weights --batch "$3" \
    --input-len "$4" --output-len 128 $5 --json "$R/latency-$1.json" > "$R/latency-$1.txt" 2>&1
  echo "bench latency $1 rc=$?" | tee -a "$S"
  grep -E '^ +[0-9]+ ' "$R/latency-$1.txt" | head -4 | tee -a "$S"
}
if [ "$1" = bench ]; then
  for b in ${BENCHES:-"qwen3fp8-kvfp8:qwen3-30b-a3b-fp8:1,64,256:512:--kv-dtype=fp8" \
      "qwen3-8k-bf16kv:qwen3-30b-a3b:1,32:8192:" "qwen3-8k-fp8kv:qwen3-30b-a3b:1,32:8192:--kv-dtype=fp8" \
      "kimi-int4:kimi-k2-thinking-int4-4layers:1,64:512:" "glm5-nvfp4:glm5-nvfp4-6layers:1,64:512:"}; do
    IFS=: read -r name cfg batches len flags <<< "$b"
    run_bench "$name" "$cfg" "$batches" "$len" "${flags/=/ }"
  done
fi
tar -C "$R" -czf "$OUT/res.tgz" .
