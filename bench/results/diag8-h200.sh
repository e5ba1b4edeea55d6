#!/usr/bin/env bash
# Issue 19, sixteenth session, one call: where the ranks of the medium CPU config wait at batch 64 (r11: rank 0's
# experts as planned, 10-23 ms a step more waiting at the exchanges than planned) and what the 8-rank LM head costs
# at batch 1 (r11: pp8 and dp8+ep8 +31%). Every run with `--comm-trace`: bench/comm_trace.py prints each rank's
# waiting and, beside it, that rank's own eager steps by phase (the trace files now carry them).
#   run(command="bash bench/results/diag8-h200.sh", carry=[".devcarry/pa"])
set -o pipefail
OUT=${OUT:-/tmp/d8out}
LIMIT=${LIMIT:-570}
mkdir -p /tmp/carry /tmp/d8 "$OUT"
[ -x /tmp/carry/bin/switchyard ] || tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz || exit 2
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
one() {  # one TAG BATCH ARGS...
  local tag=$1 b=$2; shift 2
  [ $((LIMIT - SECONDS)) -ge 70 ] || { echo "$tag: skipped, $((LIMIT - SECONDS)) s left"; return; }
  timeout 120 /tmp/carry/bin/switchyard bench latency --model bench/configs/qwen3-moe-cpu-medium --device cpu \
    --random-weights --batch "$b" --input-len 128 --output-len 64 --routing uniform --json /tmp/d8/$tag.json \
    --comm-trace /tmp/d8/$tag "$@" > /tmp/d8/$tag.txt 2>&1 || echo "$tag: rc=$?"
  python3 -c "
import json
j = json.load(open('/tmp/d8/$tag.json'))
for r in j['results']:
    p = r['decode_phase_ms']
    print(f\"$tag\".ljust(16), f\"step {r['decode_step_ms']:.2f} eager {r['decode_eager_step_ms']:.2f} ms |\",
          ' '.join(f'{k[:5]} {v:.2f}' for k, v in p.items()))
" 2> /dev/null || echo "$tag: no JSON"
  if ls /tmp/d8/$tag.b$b.rank*.json > /dev/null 2>&1; then
    python3 bench/comm_trace.py /tmp/d8/$tag.b$b > /tmp/d8/trace-$tag.txt 2>&1
  fi
  echo "at ${SECONDS}s"
}
one dp4+ep4-b64 64 --dp 4 --ep 4
one ep2-b64 64 --tp 2 --ep 2
one tp4-b64 64 --tp 4
one dp8+ep8-b1 1 --dp 8 --ep 8
one pp8-b1 1 --pp 8
one ep4-b64 64 --tp 4 --ep 4
one base-b64 64
one dp4+ep4-b64-again 64 --dp 4 --ep 4
nproc > /tmp/d8/cpu.txt; lscpu >> /tmp/d8/cpu.txt
tar -C /tmp/d8 -cJf "$OUT/diag8.tar.xz" .
for t in /tmp/d8/trace-*.txt; do
  echo "== $t"; sed -n '/^per rank, ms a step/,/^$/p;/^per rank, its eager/,/^$/p' "$t" | cut -c1-170
done
echo "done at ${SECONDS}s"
