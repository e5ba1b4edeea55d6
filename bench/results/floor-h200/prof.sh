#!/usr/bin/env bash
# Kernel times of the last decode steps (Nsight Compute gpu__time_duration, launch order kept) of
# kimi-k2-4layers (BF16) and the GLM-5-like NVFP4 config at batch 1, 512 in, 4 out, random weights.
#   run(command="bash bench/results/floor-h200/prof.sh", carry=[".devcarry/gpu"], timeout_s=600)
set -o pipefail
OUT=${OUT:-/tmp/prof-out}
R=/tmp/prof-res
mkdir -p "$OUT" "$R" /tmp/carry
tar -C /tmp/carry -xJf .devcarry/gpu/q4.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin
for m in ${MODELS:-kimi-k2-4layers glm5-nvfp4-6layers}; do
  timeout 280 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \
    $B/switchyard bench latency --device cuda --model bench/configs/$m --random-weights --batch 1 --input-len 512 \
    --output-len 4 > "$R/ncu-$m.csv" 2> "$R/ncu-$m.err"
  echo "ncu $m rc=$? rows $(wc -l < "$R/ncu-$m.csv")" | tee -a "$OUT/summary.txt"
done
tar -C "$R" -czf "$OUT/prof.tgz" .
