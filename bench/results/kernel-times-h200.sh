#!/usr/bin/env bash
# Issue 19: where a decode step's time goes kernel by kernel, in the engine's own steps, against the calibrated
# kernels the planner adds up. Runs `switchyard bench latency` under Nsight Compute (one metric: each kernel's
# duration, clocks and caches left alone) and summarises the decode steps with bench/kernel_times.py.
#   run(command="CASES='mixtral-8x7b:32:256:16 mixtral-8x7b:32:256:512' bash bench/results/kernel-times-h200.sh",
#       carry=[".devcarry/pa"])
# CASES: MODEL:LAYERS:BATCH:INPUT_LEN words (bench/configs/MODEL); a case of INPUT_LEN >= 256 times only the decode
# attention kernel (its prefill passes would take ncu minutes), a shorter one every kernel. LIMIT (s, default 200)
# bounds each ncu run. Binaries: .devcarry/$NAME/bin.tar.xz as bench/results/plan-accuracy-h200.sh takes them.
set -o pipefail
OUT=${OUT:-/tmp/kt-out}
NAME=${NAME:-pa}
LIMIT=${LIMIT:-200}
mkdir -p "$OUT" /tmp/carry
[ -x /tmp/carry/bin/switchyard ] || tar -C /tmp/carry -xJf ".devcarry/$NAME/bin.tar.xz" || exit 2
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 2; }
for c in ${CASES:-mixtral-8x7b:32:256:16}; do
  IFS=: read -r model layers batch len <<< "$c"
  tag="$model-b$batch-in$len"
  filter=()
  [ "$len" -ge 256 ] && filter=(-k regex:gqa_decode --launch-count $((3 * layers)))
  timeout "$LIMIT" "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --print-units base --print-kernel-base function "${filter[@]}" \
    /tmp/carry/bin/switchyard bench latency --model "bench/configs/$model" --random-weights --routing uniform \
    --batch "$batch" --input-len "$len" --output-len 4 > "$OUT/$tag.csv" 2> "$OUT/$tag.err"
  echo "$tag: ncu rc=$? at ${SECONDS}s"
  if [ "$len" -ge 256 ]; then
    python3 - "$OUT/$tag.csv" "$layers" << 'EOF'
import sys
sys.path.insert(0, "bench")
from kernel_times import read_launches
launches = read_launches(open(sys.argv[1]).read())
layers = int(sys.argv[2])
us = [l[3] for l in launches]
print(f"  {len(us)} decode attention launches: mean {sum(us) / max(1, len(us)):.1f} us, "
      f"{sum(us) / max(1, len(us)) * layers / 1e3:.3f} ms a step of {layers} layers")
EOF
  else
    python3 bench/kernel_times.py "$OUT/$tag.csv" --layers "$layers" --json "$OUT/$tag.json" | head -30
  fi
  tail -2 "$OUT/$tag.err"
done
