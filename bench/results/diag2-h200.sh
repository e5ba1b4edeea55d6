#!/usr/bin/env bash
# Issue 19, tenth session, second diagnostic call (results: one line a run, printed).
# 1. Qwen3-30B-A3B 512 B=1 with 4 and 48 layers, uniform and the model's routing: does the ≈ 5 µs a layer that
#    uniform routing costs at batch 1 grow with the weights a step spreads over (4.8 against 58 GB)?
# 2. The medium CPU config's batch-1 base and ep8 steps three times each on one machine: the run-to-run spread.
#   run(command="bash bench/results/diag2-h200.sh", carry=[".devcarry/pa"])
set -o pipefail
mkdir -p /tmp/carry /tmp/d2
[ -x /tmp/carry/bin/switchyard ] || tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz || exit 2
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
one() {  # one TAG ARGS...
  local tag=$1; shift
  timeout 120 /tmp/carry/bin/switchyard bench latency --random-weights --output-len 64 --json /tmp/d2/$tag.json "$@" \
    > /tmp/d2/$tag.txt 2>&1 || echo "$tag: rc=$?"
  python3 -c "
import json, sys
j = json.load(open('/tmp/d2/$tag.json'))
for r in j['results']:
    print(f\"$tag\".ljust(26), f\"b{r['batch']}\", f\"step {r['decode_step_ms']:.3f} ms\", f\"eager {r['decode_eager_step_ms']:.3f}\",
          f\"experts {r['decode_phase_ms']['experts']:.3f} comm {r['decode_phase_ms']['communication']:.3f}\")
" 2> /dev/null || echo "$tag: no JSON"
}
for L in 4 48; do
  for routing in uniform model; do
    one "qwen3-L$L-$routing" --model bench/configs/qwen3-30b-a3b --device cuda --layers $L --batch 1 --input-len 512 \
      --routing $routing
  done
done
M="--model bench/configs/qwen3-moe-cpu-medium --device cpu --batch 1 --input-len 128 --routing uniform"
for i in 1 2 3; do
  # shellcheck disable=SC2086  # M: several words
  one "medium-base-b1-run$i" $M
  # shellcheck disable=SC2086
  one "medium-ep8-b1-run$i" $M --tp 8 --ep 8
done
echo "done at ${SECONDS}s"
