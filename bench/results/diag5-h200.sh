#!/usr/bin/env bash
# Issue 19, twelfth session: do CPU ranks bound to their own cores run closer to one another and to the profile?
# switchyard starts its ranks with `--bind-to none` (each rank's OpenMP pool left to the OS to place); here each
# batch-1 case runs alternately unbound and bound (Open MPI maps each rank onto 16 / W cores of its own, OpenMP
# threads pinned to those cores), RUNS times each, and the decode step of every run is printed.
#   run(command="bash bench/results/diag5-h200.sh", carry=[".devcarry/pa"])
set -o pipefail
OUT=${OUT:-/tmp/d5out}
RUNS=${RUNS:-3}
mkdir -p /tmp/carry /tmp/d5 "$OUT"
[ -x /tmp/carry/bin/switchyard ] || tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz || exit 2
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
CORES=$(nproc)
MED=bench/configs/qwen3-moe-cpu-medium
BUN=models/pydoc-moe
# case: TAG MODEL BATCH RANKS FLAGS...
CASES=(
  "med-base-b1 $MED 1 1"
  "med-ep8-b1 $MED 1 8 --tp 8 --ep 8"
  "med-dp8ep8-b1 $MED 1 8 --dp 8 --ep 8"
  "med-pp4-b1 $MED 1 4 --pp 4"
  "med-tp4-b1 $MED 1 4 --tp 4"
  "bun-dp8ep8-b1 $BUN 1 8 --dp 8 --ep 8"
  "bun-pp4-b1 $BUN 1 4 --pp 4"
  "bun-pp4-b64 $BUN 64 4 --pp 4"
)
one() {  # one MODE TAG MODEL BATCH RANKS FLAGS...: prints the step and phases
  local mode=$1 tag=$2 model=$3 batch=$4 ranks=$5; shift 5
  local f=/tmp/d5/$tag-$mode-$RANDOM
  (
    if [ "$mode" = bound ]; then
      export OMP_PROC_BIND=close OMP_PLACES=cores
      if [ "$ranks" -gt 1 ]; then
        export OMPI_MCA_hwloc_base_binding_policy=core OMPI_MCA_rmaps_base_mapping_policy="slot:PE=$((CORES / ranks))"
        export OMPI_MCA_hwloc_base_report_bindings=1
      fi
    fi
    timeout 120 /tmp/carry/bin/switchyard bench latency --model "$model" --device cpu --random-weights --batch "$batch" \
      --input-len 128 --output-len 64 --routing uniform --json "$f.json" "$@" > "$f.txt" 2>&1
  )
  python3 -c "
import json
r = json.load(open('$f.json'))['results'][0]; p = r['decode_phase_ms']
print('$tag $mode'.ljust(24), f\"step {r['decode_step_ms']:7.3f}\", ' '.join(f'{k[:6]}={v:.2f}' for k, v in p.items()))
" 2> /dev/null || { echo "$tag $mode: no JSON"; tail -5 "$f.txt"; }
}
# Round by round over the cases (a cut-off loses the last round, not the last cases); nothing starts after LIMIT s.
for i in $(seq 1 "$RUNS"); do
  for c in "${CASES[@]}"; do
    [ "$SECONDS" -lt "${LIMIT:-540}" ] || break 2
    # shellcheck disable=SC2086  # c: the case's words
    { one none $c; one bound $c; }
  done
done
grep -h "bound to\|binding" /tmp/d5/*bound*.txt 2> /dev/null | head -12
tar -C /tmp/d5 -cJf "$OUT/diag5.tar.xz" .
echo "done at ${SECONDS}s"
