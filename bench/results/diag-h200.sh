#!/usr/bin/env bash
# Issue 19, tenth session: three small experiments in one device call (results under $OUT/diag/, one line each).
# 1. Mixtral-8x7B 512 B=256 decode with 2, 8 and 32 layers: is the time a layer constant as the model grows (the
#    calibrated kernels run each op's operands over and over; a step of 32 layers streams 93 GB)?
# 2. Qwen3-30B-A3B 512 B=1 with uniform routing (its kernel now a programmatic dependent) and the model's routing.
# 3. The medium CPU config's batch-1 ep8 and pp4 steps with OpenMP's default wait policy, active and passive: do
#    idle ranks' thread pools falling asleep between collectives cost the batch-1 steps their missing time?
#   run(command="bash bench/results/diag-h200.sh", carry=[".devcarry/pa"])
set -o pipefail
OUT=${OUT:-/tmp/diag-out}
mkdir -p "$OUT/diag" /tmp/carry
[ -x /tmp/carry/bin/switchyard ] || tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz || exit 2
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
B=/tmp/carry/bin/switchyard
one() {  # one TAG ARGS...: a bench latency run, its JSON and its step times
  local tag=$1; shift
  timeout 150 $B bench latency --random-weights --output-len 64 --json "$OUT/diag/$tag.json" "$@" > "$OUT/diag/$tag.txt" 2>&1
  local rc=$?
  python3 - "$OUT/diag/$tag.json" "$tag" "$rc" << 'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception:
    print(f"{sys.argv[2]:28} rc={sys.argv[3]} no JSON"); sys.exit()
for r in j["results"]:
    ph = r["decode_phase_ms"]
    print(f"{sys.argv[2]:28} b{r['batch']:<4} step {r['decode_step_ms']:8.3f} eager {r['decode_eager_step_ms']:8.3f} ms | "
          + " ".join(f"{k[:5]} {v:.3f}" for k, v in ph.items() if v > 0.01))
PY
}
if [ "${PART:-gpu cpu}" != cpu ]; then
  for L in 2 8 32; do
    one "mixtral-b256-L$L" --model bench/configs/mixtral-8x7b --device cuda --layers $L --batch 256 --input-len 512 --routing uniform
  done
  one qwen3-b1-uniform --model bench/configs/qwen3-30b-a3b --device cuda --batch 1 --input-len 512 --routing uniform
  one qwen3-b1-model --model bench/configs/qwen3-30b-a3b --device cuda --batch 1 --input-len 512 --routing model
fi
if [ "${PART:-gpu cpu}" != gpu ]; then
  M="--model bench/configs/qwen3-moe-cpu-medium --device cpu --batch 1 --input-len 128 --routing uniform"
  for policy in default active passive; do
    for lay in "ep8:--tp 8 --ep 8" "pp4:--pp 4"; do
      unset OMP_WAIT_POLICY
      [ $policy = default ] || export OMP_WAIT_POLICY=$policy
      # shellcheck disable=SC2086  # M and the layout flags: several words
      one "medium-${lay%%:*}-b1-$policy" $M ${lay#*:}
    done
  done
fi
echo "done at ${SECONDS}s"
