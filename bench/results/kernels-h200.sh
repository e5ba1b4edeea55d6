#!/usr/bin/env bash
# Nsight Compute's kernel times (gpu__time_duration, summed by kernel name with its template arguments) of
# `switchyard bench latency` on the first LAYERS layers of a config: prefill of BATCH x 512 tokens, then
# DECODE decode steps; the table separates the kernels by how often they ran. Env: CONFIG (bench/configs
# folder), BATCHES (list), LAYERS (default 4), DECODE (decode steps, default 2), TAR (the binaries' archive, default
# .devcarry/gpu/q4.tar.xz).
#   run(command="CONFIG=qwen3-30b-a3b BATCHES='1 10 64' bash bench/results/kernels-h200.sh", carry=[".devcarry/gpu"])
set -o pipefail
OUT=${OUT:-/tmp/kernels-out}
R=/tmp/kernels-res
mkdir -p "$OUT" "$R" /tmp/carry
tar -C /tmp/carry -xJf "${TAR:-.devcarry/gpu/q4.tar.xz}"
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
B=/tmp/carry/bin
S="$OUT/summary.txt"
for batch in ${BATCHES:-1 10 64}; do
  name="${CONFIG:-qwen3-30b-a3b}-b$batch"
  timeout 170 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    $B/switchyard bench latency --device cuda --model "bench/configs/${CONFIG:-qwen3-30b-a3b}" --random-weights \
    --layers "${LAYERS:-4}" --batch "$batch" --input-len 512 --output-len $((${DECODE:-2} + 1)) \
    > "$R/ncu-$name.csv" 2> "$R/ncu-$name.err"
  echo "ncu $name rc=$?" | tee -a "$S"
  python3 bench/results/ncu_summary.py "$R/ncu-$name.csv" | tee -a "$S"
done
tar -C "$R" -czf "$OUT/res.tgz" .
