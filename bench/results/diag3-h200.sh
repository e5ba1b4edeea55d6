#!/usr/bin/env bash
# Issue 19, eleventh session, one call (results: one line a run and the trace tables, printed; logs in $OUT).
# 1. The uniform draw by a multiply of the hash's high bits (kernels/uniform_route.h): the CUDA-vs-host tests of
#    uniform routing, and Qwen3-30B-A3B B=1 at 512 and 8,192 (uniform and the model's routing).
# 2. The medium CPU config's batch-1 cases with `--comm-trace`: rank 0's communication split, collective by
#    collective, into waiting for the last rank and the transfer after it (bench/comm_trace.py).
#   run(command="bash bench/results/diag3-h200.sh", carry=[".devcarry/pa"])
set -o pipefail
OUT=${OUT:-/tmp/d3out}
mkdir -p /tmp/carry /tmp/d3 "$OUT"
[ -x /tmp/carry/bin/switchyard ] || tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz || exit 2
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
if [ -x /tmp/carry/bin/test_cuda_backend ]; then
  timeout 200 /tmp/carry/bin/test_cuda_backend --gtest_filter='*Uniform*' > /tmp/d3/cudatest.txt 2>&1
  echo "cuda uniform tests: rc=$? $(grep -c '^\[       OK' /tmp/d3/cudatest.txt) ok, $(grep -c '^\[  FAILED' /tmp/d3/cudatest.txt) failed lines"
fi
one() {  # one TAG ARGS...
  local tag=$1; shift
  timeout 150 /tmp/carry/bin/switchyard bench latency --random-weights --output-len 64 --json /tmp/d3/$tag.json "$@" \
    > /tmp/d3/$tag.txt 2>&1 || echo "$tag: rc=$?"
  python3 -c "
import json, sys
j = json.load(open('/tmp/d3/$tag.json'))
for r in j['results']:
    print(f\"$tag\".ljust(26), f\"b{r['batch']}\", f\"step {r['decode_step_ms']:.3f} ms\", f\"eager {r['decode_eager_step_ms']:.3f}\",
          f\"experts {r['decode_phase_ms']['experts']:.3f} comm {r['decode_phase_ms']['communication']:.3f}\")
" 2> /dev/null || echo "$tag: no JSON"
}
for len in 512 8192; do
  for routing in uniform model; do
    one "qwen3-$len-$routing" --model bench/configs/qwen3-30b-a3b --device cuda --batch 1 --input-len $len \
      --routing $routing
  done
done
M="--model bench/configs/qwen3-moe-cpu-medium --device cpu --batch 1 --input-len 128 --routing uniform"
# shellcheck disable=SC2086  # M: several words
one medium-base-b1 $M
for layout in "ep8:--tp 8 --ep 8" "dp4+ep4:--dp 4 --ep 4" "pp4:--pp 4" "dp8+ep8:--dp 8 --ep 8" "ep8-again:--tp 8 --ep 8"; do
  tag=medium-${layout%%:*}-b1
  # shellcheck disable=SC2086
  one "$tag" $M ${layout#*:} --comm-trace /tmp/d3/$tag
done
for layout in ep8 dp4+ep4 pp4 dp8+ep8 ep8-again; do
  python3 bench/comm_trace.py /tmp/d3/medium-$layout-b1.b1 > /tmp/d3/trace-$layout.txt 2>&1
done
tar -C /tmp/d3 -cJf "$OUT/diag3.tar.xz" .
for layout in ep8 dp4+ep4 pp4 dp8+ep8 ep8-again; do head -40 /tmp/d3/trace-$layout.txt | cut -c1-140; done
echo "done at ${SECONDS}s"
