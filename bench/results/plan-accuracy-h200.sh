#!/usr/bin/env bash
# Issue 19: how well `switchyard plan` predicts `switchyard bench latency`, on one H200 (default, or `gpu`) and on
# the machine's CPU cores under 1 to 8 MPI ranks (`cpu`). Each call first measures the machine profile with
# `bench calibrate` (skipped when this warm machine already holds it, unless RECAL=1), then runs
# bench/plan_accuracy.py over the case set with the profile(s) and prints its short table last.
#   run(command="bash bench/results/plan-accuracy-h200.sh", carry=[".devcarry/pa"], timeout_s=600)
#   run(command="PHASES=calibrate bash bench/results/plan-accuracy-h200.sh cpu", carry=[".devcarry/pa"], timeout_s=600)
#   run(command="MODELS=pydoc-moe LAYOUTS=base,tp2,ep2,pp2,dp2+ep2 bash bench/results/plan-accuracy-h200.sh cpu", ...)
# One call has 600 s, so run the sets in parts: one-gpu by MODELS (qwen3-30b-a3b, mixtral-8x7b, kimi-k2-4layers)
# and LENS (512, 8192); cpu-ranks by MODELS (pydoc-moe, qwen3-moe-cpu-medium) and LAYOUTS (base,tp2,ep2,pp2,dp2+ep2 /
# tp4,ep4,pp2+tp2,pp4,dp4+ep4 / tp8,ep8,pp8,dp8+ep8,pp2+tp4). Every part ends before LIMIT seconds (default 570):
# plan_accuracy.py starts no bench run it cannot finish by then and writes what finished. While the machine stays
# warm each part's results.json is kept in /tmp/pa-state-$NAME and the parts so far are merged into $OUT/merged-<set>/;
# locally, `python3 bench/plan_accuracy.py --merge A/results.json B/results.json --out DIR` does the same.
# Env: MODELS, LENS (input lengths), LAYOUTS, BATCHES (comma lists, default the set's), OUTPUT_LEN (64), PHASES
# ("calibrate accuracy"), RANKS (cpu calibrations, "1 2 4 8"), RECAL=1, WARMUP (cpu: seconds of a calibration
# thrown away before the first, 0), CAL_TIMEOUT (s per calibration, 300),
# CAL_SECONDS (calibrate's own --max-seconds bound; a CPU grid is timed in 3 passes, docs/perf-notes.md item 36:
# 50 s times 6-8% fewer points than one pass did; at 8 ranks in 45 s the first pass cut the linear series to 1-4
# rows, item 41), CAL_PASSES (calibrate's --passes; default its own, 3 on a CPU; CAL_PASSES_R8=1 sets it for the
# 8-rank calibration alone, likewise any W), CAL_MODELS (cpu: calibrate's --model arguments, default the set's two
# models; empty: the built-in grid), REPEATS (bench runs a case: one full run, then rounds of runs over every
# case that time the decode and batch 1's prefill, plan_accuracy.py --repeat-prefill-max-batch; the medians kept),
# COMM_TRACE=1 (the first run of each layout of several ranks traces its collectives: <set>/trace/*.md, the
# waiting and each rank's phases by bench/comm_trace.py), LIMIT (570), NAME (carry folder, pa; the warm machine
# keeps profiles and parts per NAME, so that a second binary's calibrations, an A/B of calibrate replanned offline
# over one round's bench runs, leave the first's alone), PACK=1 (pack $OUT for the device tool's 8 files),
# BUSY_RETRY (1: a profile that looks timed on a busy host, see busy() below, is calibrated again this many times
# at most, the busy one kept as NAME-busyN.json), BUSY_LEFT (30), BUSY_SKEW (0.5). A profile from an earlier call
# can come back in .devcarry/$NAME/profiles/.
# .devcarry/$NAME/bin.tar.xz: bin/ (build-cuda, stripped: switchyard) and lib/ (the shared libraries it needs, flat),
# made by bench/pack_device.sh (a CPU-ranks round needs only a build with MPI: scripts/setup.sh -DSY_WITH_MPI=ON).
# Results in $OUT: h200.json or cpu-rW.json (profiles), calibrate-*.txt, <set>/ (results.json, table.md, logs/,
# bench/), <set>.txt (the script's output), merged-<set>/.
set -o pipefail
OUT=${OUT:-/tmp/pa-out}
NAME=${NAME:-pa}
LIMIT=${LIMIT:-570}
CAL_TIMEOUT=${CAL_TIMEOUT:-300}
PHASES=${PHASES:-calibrate accuracy}
MODE=${1:-gpu}
ST=/tmp/pa-state-$NAME
mkdir -p "$OUT" "$ST/results" /tmp/carry
tar -C /tmp/carry -xJf ".devcarry/$NAME/bin.tar.xz" || { echo "no .devcarry/$NAME/bin.tar.xz"; exit 2; }
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin/switchyard
command -v python3 > /dev/null || { echo "no python3 on this machine"; exit 2; }
left() { echo $((LIMIT - SECONDS)); }

# calibrate NAME ARGS...: the profile $OUT/NAME.json, reused from this warm machine or the carry when present.
calibrate() {
  local name=$1; shift
  if [ "${RECAL:-0}" != 1 ]; then
    for have in "$ST/$name.json" ".devcarry/$NAME/profiles/$name.json"; do
      if [ -s "$have" ]; then cp "$have" "$OUT/$name.json"; echo "calibrate $name: reused $have"; return 0; fi
    done
  fi
  [[ " $PHASES " == *" calibrate "* ]] || { echo "calibrate $name: no profile and calibrate not in PHASES"; return 1; }
  local try=0 rc=1 why kept=""
  while :; do
    [ "$(left)" -ge 60 ] || { echo "calibrate $name: skipped, $(left) s left"; break; }
    local t=$(( $(left) - 30 < CAL_TIMEOUT ? $(left) - 30 : CAL_TIMEOUT ))
    timeout "$t" $B bench calibrate "$@" ${CAL_SECONDS:+--max-seconds "$CAL_SECONDS"} \
      ${CAL_PASSES:+--passes "$CAL_PASSES"} --out "$OUT/$name.json" > "$OUT/calibrate-$name.txt" 2>&1
    rc=$?
    echo "calibrate $name rc=$rc at ${SECONDS}s: $(tail -1 "$OUT/calibrate-$name.txt")"
    grep -E '^calibrate: recheck' "$OUT/calibrate-$name.txt" | sed "s/^/  $name: /"
    { [ $rc = 0 ] && [ -s "$OUT/$name.json" ]; } || break
    why=$(busy "$OUT/$name.json")
    { [ -n "$why" ] && [ "$try" -lt "${BUSY_RETRY:-1}" ]; } || break
    # A busy host's profile (r18: docs/perf-notes.md, twenty-fourth session) is kept beside the next one, which
    # replaces it whatever it says: the host's noise fell the longer the machine was up.
    echo "  $name: the host was busy ($why); calibrating again (BUSY_RETRY=${BUSY_RETRY:-1})"
    kept="$OUT/$name-busy$try.json"
    mv "$OUT/$name.json" "$kept"
    mv "$OUT/calibrate-$name.txt" "$OUT/calibrate-$name-busy$try.txt"
    try=$((try + 1))
  done
  # The retry failed or had no time: the busy profile is better than none.
  if { [ $rc != 0 ] || [ ! -s "$OUT/$name.json" ]; } && [ -n "$kept" ]; then
    cp "$kept" "$OUT/$name.json" && rc=0 && echo "  $name: kept $kept"
  fi
  [ $rc = 0 ] && [ -s "$OUT/$name.json" ] && cp "$OUT/$name.json" "$ST/$name.json"
}

# busy PROFILE: why the profile looks timed on a busy host, or nothing. More than BUSY_LEFT (30) points still over
# twice a larger point's time after the recheck (r18's part a: 196 before it at 1 rank, the H200 host's profiles
# 2-19), or a skew fraction over BUSY_SKEW (0.5) at its shortest segment (r18's 4 ranks: 1.94; r14-r16's: 0.02-0.08).
busy() {
  python3 - "$1" "${BUSY_LEFT:-30}" "${BUSY_SKEW:-0.5}" << 'PY'
import json, sys
p = json.load(open(sys.argv[1]))
def dominated(table):  # bench calibrate's dominated_points, for profiles written before the recheck
    n = len(table["dims"])
    pts = [(q[:n], q[n]) for q in table["points"] if min(q[:n]) > 0]
    return sum(any(d != e and all(x <= y for x, y in zip(d, e)) and t > 2 * u and t - u > 20 for e, u in pts)
               for d, t in pts)
rc = p["machine"].get("recheck")
left = rc["left"] if rc else sum(dominated(t) for t in p["ops"].values())
skew = p["step"].get("skew") or []
why = []
if left > int(sys.argv[2]):
    why.append(f"{left} points still over twice a larger one's time")
if skew and skew[0][1] > float(sys.argv[3]):
    why.append(f"skew +{100 * skew[0][1]:.0f}% at {skew[0][0]:.0f} us")
print("; ".join(why))
PY
}

# accuracy SET PROFILE...: plan_accuracy.py over SET within the time left; merges the parts run so far.
accuracy() {
  local set=$1; shift
  [[ " $PHASES " == *" accuracy "* ]] || return 0
  local prof=() p
  for p in "$@"; do [ -s "$OUT/$p.json" ] && prof+=(--profile "$OUT/$p.json"); done
  [ ${#prof[@]} -gt 0 ] || echo "no profile: plan's preset efficiencies"
  local budget=$(( $(left) - 15 )) merged=""
  python3 bench/plan_accuracy.py --switchyard $B --set "$set" "${prof[@]}" --out "$OUT/$set" --budget "$budget" \
    --explain ${MODELS:+--models "$MODELS"} ${LENS:+--input-len "$LENS"} ${LAYOUTS:+--layouts "$LAYOUTS"} \
    ${BATCHES:+--batches "$BATCHES"} ${OUTPUT_LEN:+--output-len "$OUTPUT_LEN"} ${REPEATS:+--repeats "$REPEATS"} \
    ${COMM_TRACE:+--comm-trace} > "$OUT/$set.txt" 2>&1
  echo "plan_accuracy $set rc=$? at ${SECONDS}s"
  if [ -s "$OUT/$set/results.json" ]; then
    cp "$OUT/$set/results.json" "$ST/results/$set-$(date +%H%M%S).json"
    local parts=("$ST"/results/"$set"-*.json)
    if [ ${#parts[@]} -gt 1 ]; then
      python3 bench/plan_accuracy.py --merge "${parts[@]}" --out "$OUT/merged-$set" > "$OUT/merged-$set.txt" 2>&1
      merged="${#parts[@]} parts"
    fi
  fi
  grep -E '^\[' "$OUT/$set.txt" | tail -30
  echo "=== $set: this call"
  sed -n '/^== plan accuracy/,$p' "$OUT/$set.txt" | head -40
  if [ -n "$merged" ]; then
    echo "=== $set: $merged so far on this machine ($OUT/merged-$set)"
    sed -n '/^== plan accuracy/,$p' "$OUT/merged-$set.txt" | head -60
  fi
}

if [ "$MODE" = gpu ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
  calibrate h200 --device cuda
  accuracy one-gpu h200
elif [ "$MODE" = cpu ]; then
  command -v mpirun > /dev/null || echo "no mpirun on PATH: layouts of several CPU ranks will fail"
  { nproc; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node\('; lscpu -C; } > "$OUT/cpu.txt" 2>&1
  CPU_MODELS="--model models/pydoc-moe --model bench/configs/qwen3-moe-cpu-medium"
  # WARMUP=S: S seconds of a calibration thrown away first (r15's first 1-rank calibration after the machine's
  # start timed its products up to 3.7x the second's, minutes later: docs/perf-notes.md, twentieth session).
  if [ "${WARMUP:-0}" -gt 0 ] && [[ " $PHASES " == *" calibrate "* ]]; then
    # shellcheck disable=SC2086  # CAL_MODELS: several --model DIR words
    timeout $((WARMUP + 60)) $B bench calibrate --device cpu ${CAL_MODELS-$CPU_MODELS} --max-seconds "$WARMUP" \
      --out /tmp/pa-warmup.json > "$OUT/calibrate-warmup.txt" 2>&1
    echo "warm-up calibration rc=$? at ${SECONDS}s (thrown away)"
  fi
  names=()
  for w in ${RANKS:-1 2 4 8}; do
    pv="CAL_PASSES_R$w"
    # shellcheck disable=SC2086  # CAL_MODELS: several --model DIR words
    CAL_PASSES=${!pv:-$CAL_PASSES} calibrate "cpu-r$w" --device cpu --ranks "$w" ${CAL_MODELS-$CPU_MODELS}
    names+=("cpu-r$w")
  done
  accuracy cpu-ranks "${names[@]}"
else
  echo "usage: bash $0 [gpu|cpu]"; exit 2
fi

# PACK=1 (device calls: the tool returns at most 8 files): everything under $OUT in one archive, with the set's
# results and the profiles beside it.
if [ "${PACK:-0}" = 1 ]; then
  tar -C "$OUT" -cJf /tmp/pa-all.tar.xz . && find "$OUT" -mindepth 1 -delete && mv /tmp/pa-all.tar.xz "$OUT/all.tar.xz"
  tar -C "$OUT" -xJf "$OUT/all.tar.xz" --wildcards './*.json' './*/results.json' 2> /dev/null
  for r in "$OUT"/*/results.json; do [ -f "$r" ] && mv "$r" "$OUT/results-$(basename "$(dirname "$r")").json"; done
  find "$OUT" -mindepth 1 -type d -empty -delete
  ls "$OUT"
fi
