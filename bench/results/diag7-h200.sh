#!/usr/bin/env bash
# Issue 19, thirteenth session: does a rank that runs alone (a pipeline stage at batch 1, the one dp replica with a
# sequence) run slower than the profile's single-rank ("alone") tables say, on one machine? In every CPU round since
# the third, rank 0's own compute in ppN b1 came to 1.1-1.8 times the planner's per-stage figure (perf-notes,
# thirteenth session). Three comparisons of the medium config at batch 1, W ranks of T = 16 / W threads:
#   (a) the W-rank profile's alone tables against a one-process profile of T threads (same shapes, nothing else
#       running): is the alone timing itself fast?
#   (b) one process of T threads running base b1 against `plan` with that one-process profile: do the tables
#       price a T-thread process's step?
#   (c) ppW b1 against (b)'s process: does a stage that waits between its turns run slower than the same layers in
#       one process?
#   run(command="W=8 bash bench/results/diag7-h200.sh", carry=[".devcarry/pa"], timeout_s=400)
set -o pipefail
OUT=${OUT:-/tmp/d7out}
W=${W:-8}
T=$((16 / W))
mkdir -p /tmp/carry /tmp/d7 "$OUT"
[ -x /tmp/carry/bin/switchyard ] || tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz || exit 2
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
B=/tmp/carry/bin/switchyard
MD=bench/configs/qwen3-moe-cpu-medium
timeout 150 $B bench calibrate --device cpu --ranks "$W" --model $MD --max-seconds 45 --out "$OUT/r$W.json" \
  > "$OUT/cal-r$W.txt" 2>&1
echo "calibrate r$W rc=$? at ${SECONDS}s"
OMP_NUM_THREADS=$T timeout 100 $B bench calibrate --device cpu --model $MD --max-seconds 30 --out "$OUT/one$T.json" \
  > "$OUT/cal-one$T.txt" 2>&1
echo "calibrate one process of $T threads rc=$? at ${SECONDS}s"
PA="python3 bench/plan_accuracy.py --switchyard $B --set cpu-ranks --models qwen3-moe-cpu-medium --batches 1 --repeats 2"
$PA --layouts "pp$W" --profile "$OUT/r$W.json" --out /tmp/d7/pp > "$OUT/pp$W.txt" 2>&1
echo "pp$W rc=$? at ${SECONDS}s"
OMP_NUM_THREADS=$T $PA --layouts base --profile "$OUT/one$T.json" --out /tmp/d7/base > "$OUT/base-t$T.txt" 2>&1
echo "base, one process of $T threads, rc=$? at ${SECONDS}s"
cp /tmp/d7/pp/results.json "$OUT/results-pp$W.json" 2> /dev/null
cp /tmp/d7/base/results.json "$OUT/results-base-t$T.json" 2> /dev/null
python3 - "$OUT" "$W" "$T" << 'EOF'
import json, statistics, sys
out, w, t = sys.argv[1], sys.argv[2], sys.argv[3]
ranks = json.load(open(f"{out}/r{w}.json"))
one = json.load(open(f"{out}/one{t}.json"))
print(f"(a) the {w}-rank profile's alone tables over a one-process profile of {t} threads, same points")
for op, table in sorted(one["ops"].items()):
    alone = {tuple(p[:-1]): p[-1] for p in ranks.get("ops_alone", {}).get(op, {}).get("points", [])}
    r = [alone[tuple(p[:-1])] / p[-1] for p in table["points"] if tuple(p[:-1]) in alone and p[-1] > 0]
    if r:
        print(f"  {op:24s} {len(r):4d} points  median {statistics.median(r):.2f}  range {min(r):.2f}-{max(r):.2f}")
for name in (f"results-pp{w}", f"results-base-t{t}"):
    try:
        c = json.load(open(f"{out}/{name}.json"))["cases"][0]
    except (OSError, ValueError, IndexError, KeyError):
        print(f"{name}: no result")
        continue
    p, m = c["predicted"]["decode"], c["measured"]
    own = sum(v for k, v in m["decode_phase_ms"].items() if k not in ("communication",))
    print(f"{name}: decode predicted {p['ms']:.3f} ms, measured {m['decode_step_ms']:.3f} "
          f"(runs {m.get('decode_step_ms_runs')}); rank 0 outside communication {own:.3f}")
    for k, v in p["phase_ms"].items():
        print(f"    {k:14s} predicted {v:8.3f}  rank 0 {m['decode_phase_ms'].get(k, 0):8.3f}")
EOF
echo "done at ${SECONDS}s"
