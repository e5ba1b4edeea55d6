#!/usr/bin/env bash
# Issue 19, eleventh session: where rank 0's batch-1 kernels lose time against the calibration (dp8+ep8 b1:
# attention 5.06 ms and the LM head 6.95 ms in the step against 3.24 and 5.19 from the profile's rank-0-alone
# timings). The medium config's base b1 as one process of 2 OpenMP threads: (a) alone on the machine, (b) with
# seven more such processes at once, (c) with seven processes spinning (busy loops, no memory traffic).
#   run(command="bash bench/results/diag4-h200.sh", carry=[".devcarry/pa"])
set -o pipefail
OUT=${OUT:-/tmp/d4out}
mkdir -p /tmp/carry /tmp/d4 "$OUT"
[ -x /tmp/carry/bin/switchyard ] || tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz || exit 2
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
uname -r
M="--model bench/configs/qwen3-moe-cpu-medium --device cpu --batch 1 --input-len 128 --routing uniform --random-weights"
one() {  # one TAG [extra args]: prints the step and phases
  local tag=$1; shift
  # shellcheck disable=SC2086  # M: several words
  OMP_NUM_THREADS=2 timeout 120 /tmp/carry/bin/switchyard bench latency $M --output-len 64 --json /tmp/d4/$tag.json "$@" > /tmp/d4/$tag.txt 2>&1
  python3 -c "
import json
r = json.load(open('/tmp/d4/$tag.json'))['results'][0]; p = r['decode_phase_ms']
print('$tag'.ljust(22), f\"step {r['decode_step_ms']:.3f} eager {r['decode_eager_step_ms']:.3f}\", ' '.join(f'{k[:6]}={v:.3f}' for k, v in p.items()))
" 2> /dev/null || echo "$tag: no JSON"
}
for i in 1 2; do one "alone-run$i"; done
bg=()
for k in 1 2 3 4 5 6 7; do
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=2 timeout 100 /tmp/carry/bin/switchyard bench latency $M --output-len 2000 > /dev/null 2>&1 &
  bg+=($!)
done
sleep 3
one "with-7-benches"
kill "${bg[@]}" 2> /dev/null
wait 2> /dev/null
pids=()
for k in $(seq 1 14); do (while :; do :; done) & pids+=($!); done
one "with-14-spinners"
kill "${pids[@]}" 2> /dev/null
wait 2> /dev/null
tar -C /tmp/d4 -cJf "$OUT/diag4.tar.xz" .
echo "done at ${SECONDS}s"
