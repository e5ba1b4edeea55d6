#!/usr/bin/env bash
# The decode floor from the experts the routing touched (bench latency counts them on the device) and the
# MLA kernel, on one H200: test_cuda_backend (the counting against std::set) and test_cuda_mla, then
# `switchyard bench latency` (random weights, 512 in / 128 out) over issue 18's table (Qwen3-30B-A3B at
# 1 / 10 / 64 / 256, Mixtral-8x7B and kimi-k2-4layers at 1 / 64) and issue 17's quantised configs, then
# Nsight Compute's kernel times (gpu__time_duration, summed by kernel name) of a GLM-5-like NVFP4 run at
# batch 1 and a Kimi-like INT4 run at batch 64 (512 in, 2 out).
#   run(command="bash bench/results/floor-h200.sh", carry=[".devcarry/gpu"], timeout_s=600)
# Env: TESTS (the test binaries to run), BENCHES (config:batches list), NO_BENCH=1, NO_PROF=1.
# .devcarry/gpu/q4.tar.xz: bin/ (build-cuda: switchyard, test_cuda_*) and lib/ (the CPU machine's shared
# libraries the binaries need, flat). Everything lands in $OUT/res.tgz; $OUT/summary.txt is the short form.
set -o pipefail
OUT=${OUT:-/tmp/floor-out}
R=/tmp/floor-res
mkdir -p "$OUT" "$R" /tmp/carry
tar -C /tmp/carry -xJf .devcarry/gpu/q4.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin
S="$OUT/summary.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$R/gpu.txt"
for t in ${TESTS:-test_cuda_backend test_cuda_mla}; do
  timeout 150 $B/$t > "$R/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$R/$t.txt" | tr '\n' ' ')" | tee -a "$S"
  grep -E '^\[  FAILED' "$R/$t.txt" | head -5 | tee -a "$S"
done
run_bench() {  # name, config dir, batches
  timeout 200 $B/switchyard bench latency --device cuda --model "$2" --random-weights --batch "$3" \
    --input-len 512 --output-len 128 --json "$R/latency-$1.json" > "$R/latency-$1.txt" 2>&1
  echo "bench latency $1 rc=$?" | tee -a "$S"
  grep -E '^ +[0-9]+ ' "$R/latency-$1.txt" | tee -a "$S"
}
# BENCHES: config:batches pairs (default: all of the above).
BENCHES=${BENCHES:-"qwen3-30b-a3b:1,10,64,256 mixtral-8x7b:1,64 kimi-k2-4layers:1,64 kimi-k2-thinking-int4-4layers:1,64 \
glm5-nvfp4-6layers:1,64 qwen3-30b-a3b-fp8:1,64,256"}
if [ -z "$NO_BENCH" ]; then
  for b in $BENCHES; do run_bench "${b%%:*}" "bench/configs/${b%%:*}" "${b##*:}"; done
fi
prof() {  # name, config, batch
  timeout 170 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    $B/switchyard bench latency --device cuda --model "$2" --random-weights --batch "$3" --input-len 512 \
    --output-len 2 > "$R/ncu-$1.csv" 2> "$R/ncu-$1.err"
  echo "ncu $1 rc=$?" | tee -a "$S"
  python3 bench/results/ncu_summary.py "$R/ncu-$1.csv" | tee -a "$S"
}
if [ -z "$NO_PROF" ]; then
  prof glm5-b1 bench/configs/glm5-nvfp4-6layers 1
  prof kimi-int4-b64 bench/configs/kimi-k2-thinking-int4-4layers 64
fi
tar -C "$R" -czf "$OUT/res.tgz" .
