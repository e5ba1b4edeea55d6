#!/usr/bin/env bash
# Issue 19, twelfth session: the skew's rounds (bench calibrate, bench_calibrate_comm.cpp time_skew). Each size is
# measured in five rounds and the median kept; a short calibration at 8 and 4 ranks prints every round's fraction,
# so the spread a single round (the estimator before) would have had shows on one machine.
#   run(command="bash bench/results/diag6-h200.sh", carry=[".devcarry/pa"], timeout_s=150)
set -o pipefail
OUT=${OUT:-/tmp/d6out}
mkdir -p /tmp/carry "$OUT"
[ -x /tmp/carry/bin/switchyard ] || tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz || exit 2
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
for w in ${RANKS:-8 4}; do
  timeout "${CAL_TIMEOUT:-55}" /tmp/carry/bin/switchyard bench calibrate --device cpu --ranks "$w" --max-seconds 3 \
    --out "$OUT/cpu-r$w.json" > "$OUT/calibrate-r$w.txt" 2>&1
  echo "ranks $w rc=$? at ${SECONDS}s: $(grep 'calibrate: skew' "$OUT/calibrate-r$w.txt")"
done
