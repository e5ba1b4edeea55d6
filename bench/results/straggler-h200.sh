#!/usr/bin/env bash
# Issue 19, twenty-ninth session (docs/perf-notes.md): why one of 8 CPU ranks computes 1.4-1.8x the median rank
# for a whole batch (r22's traces). Runs the medium config's tp8 bench latency RUNS times (default 3) with
# --comm-trace while sampling, every 0.5 s, each thread's vCPU and state (ps -eLo) and each vCPU's steal time
# (/proc/stat); then bench/straggler_samples.py says, per run and batch, which rank was slow and whether its
# threads shared a vCPU with another running thread, and the steal time per vCPU.
#   run(command="bash bench/results/straggler-h200.sh", carry=[".devcarry/pa"], timeout_s=300)
# With PIN=1 the runs alternate: the odd ones as a round runs them, the even ones with SY_CPU_PIN=1 (each rank
# on cores of its own, src/apps/cpu_pin.h), RUNS of each.
# About 50 s a run. Env: RUNS (3), PIN (0), LAYOUT (--tp 8), MODEL (bench/configs/qwen3-moe-cpu-medium),
# BATCHES (1,64).
# .devcarry/pa/bin.tar.xz as for plan-accuracy-h200.sh (bash bench/pack_device.sh build-mpi/switchyard).
set -o pipefail
OUT=${OUT:-/tmp/straggler-out}
RUNS=${RUNS:-3}
LAYOUT=${LAYOUT:---tp 8}
MODEL=${MODEL:-bench/configs/qwen3-moe-cpu-medium}
BATCHES=${BATCHES:-1,64}
mkdir -p "$OUT" /tmp/carry
tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz || { echo "no .devcarry/pa/bin.tar.xz"; exit 2; }
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin/switchyard

sample() {  # sample FILE: until killed, a block a 0.5 s of "T <seconds>", /proc/stat's cpuN lines, ps's threads
  while :; do
    echo "T $(date +%s.%N)"
    grep '^cpu[0-9]' /proc/stat
    ps -eLo pid=,tid=,psr=,stat=,comm= | awk '$4 ~ /^R/'
    sleep 0.5
  done > "$1"
}

total=$RUNS
[ "${PIN:-0}" = 1 ] && total=$((2 * RUNS))
for i in $(seq 1 "$total"); do
  pin=""
  [ "${PIN:-0}" = 1 ] && [ $((i % 2)) = 0 ] && pin=1
  sample "$OUT/samples.$i.txt" &
  sp=$!
  # shellcheck disable=SC2086
  SY_CPU_PIN=$pin $B bench latency --model "$MODEL" --device cpu --random-weights --batch "$BATCHES" --input-len 128 \
    --output-len 64 --max-batch-tokens 8192 --routing uniform $LAYOUT --json "$OUT/bench.$i.json" \
    --comm-trace "$OUT/trace.$i" > "$OUT/bench.$i.out" 2> "$OUT/bench.$i.err"
  echo "run $i${pin:+ (SY_CPU_PIN=1)} rc=$? at ${SECONDS}s"
  kill "$sp"; wait "$sp" 2> /dev/null
  for b in ${BATCHES//,/ }; do
    python3 bench/comm_trace.py "$OUT/trace.$i.b$b" > "$OUT/trace.$i.b$b.md" && rm -f "$OUT/trace.$i.b$b".rank*.json
  done
done
nproc > "$OUT/cpu.txt"; lscpu >> "$OUT/cpu.txt"
python3 bench/straggler_samples.py "$OUT" | tee "$OUT/summary.md"
