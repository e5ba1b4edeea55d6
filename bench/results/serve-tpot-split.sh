# One H200, issue 14 item 5: where the time per output token of `switchyard serve` goes at concurrency 10, 64
# and 256 (same checkpoint and traffic as serve-sweep-run.sh: Qwen3-30B-A3B cut to 12 layers, chat, random
# 512 in / 128 out, ignore_eos), at the default step budget (2,048 tokens) and at 8,192. Around each level the
# server's /metrics is read, and the difference of its per-kind step counters (steps_total, step_tokens_total,
# step_seconds_total, kind = decode or mixed) splits the loop's time into decode-only steps and steps that
# carried prefill tokens. `bench latency` at the same batches gives the engine's own decode step.
#   run(command="bash bench/results/serve-tpot-split.sh", carry=[".devcarry"], timeout_s=600)
# .devcarry/ as serve-sweep-run.sh describes (switchyard CUDA build, switchyard-cpu, libs, qwen3-tok/).
set -o pipefail
D=.devcarry
B=$D/switchyard-cpu
OUT=${OUT:-/tmp/serve-split-out}
mkdir -p "$OUT"
MODEL=/tmp/qwen3-30b-a3b-12l
SY_PORT=30123
TOK_PORT=30125
log() { echo "[$(printf '%4d' $SECONDS) s] $*" | tee -a "$OUT/summary.txt"; }
pack() {
  tar -C "$OUT" -czf /tmp/split.tar.gz --exclude split.tar.gz . && find "$OUT" -mindepth 1 ! -name summary.txt -delete &&
    mv /tmp/split.tar.gz "$OUT/"
}
trap pack EXIT

mkdir -p /tmp/lib && tar -C /tmp/lib -xJf $D/libs.tar.xz
if ! ldconfig -p | grep -q libmpi_cxx.so.40; then
  mkdir -p /tmp/mpilib && tar -C /tmp/mpilib -xJf $D/mpilibs.tar.xz
  export LD_LIBRARY_PATH=/tmp/mpilib:$LD_LIBRARY_PATH
fi
export LD_LIBRARY_PATH=/tmp/lib:$LD_LIBRARY_PATH
wait_up() {
  for _ in $(seq 1 "$2"); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}
stop() { kill -TERM "$1" 2>/dev/null; for _ in $(seq 1 30); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done; kill -KILL "$1"; }

[ -f $MODEL/config.json ] || python3 bench/make_qwen3_12layer.py --out $MODEL --tokenizer $D/qwen3-tok > "$OUT/make-model.txt" 2>&1 \
  || { cat "$OUT/make-model.txt"; exit 1; }
$B serve --model tests/fixtures/text/qwen3_tiny_random --random-weights --tokenizer $D/qwen3-tok \
  --port $TOK_PORT > "$OUT/tokenizer-server-log.txt" 2>&1 &
tok_pid=$!
wait_up http://127.0.0.1:$TOK_PORT/health 60 $tok_pid || { log "tokenizer server did not start"; exit 1; }

timeout 150 $D/switchyard bench latency --device cuda --model $MODEL --batch 10,64,256 --input-len 512 \
  --output-len 128 --json "$OUT/latency.json" > "$OUT/latency.txt" 2>&1
log "bench latency rc=$?"

for budget in 2048 8192; do
  $D/switchyard serve --model $MODEL --device cuda --port $SY_PORT --max-model-len 1024 \
    --max-running-requests 1024 --max-batch-tokens $budget > "$OUT/serve-b$budget-log.txt" 2>&1 &
  sy_pid=$!
  wait_up http://127.0.0.1:$SY_PORT/health 180 $sy_pid || { log "serve (budget $budget) did not start"; tail -5 "$OUT/serve-b$budget-log.txt"; continue; }
  for level in 10 64 256; do
    curl -s http://127.0.0.1:$SY_PORT/metrics > "$OUT/metrics-b$budget-c$level-before.txt"
    timeout 120 $B bench serve --base-url http://127.0.0.1:$SY_PORT --backend chat --dataset random \
      --random-input-len 512 --random-output-len 128 --random-range-ratio 1 --max-concurrency $level \
      --num-prompts $((level * 6)) --seed 1 --warmup-requests 0 --tokenizer-url http://127.0.0.1:$TOK_PORT \
      --ignore-eos --label "switchyard-b$budget" --json "$OUT/serve-b$budget-c$level.json" > "$OUT/serve-b$budget-c$level.txt" 2>&1
    log "budget $budget concurrency $level rc=$?"
    curl -s http://127.0.0.1:$SY_PORT/metrics > "$OUT/metrics-b$budget-c$level-after.txt"
  done
  stop $sy_pid
done
stop $tok_pid

python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, os, re, sys
out = sys.argv[1]
def counters(path):
    vals = {}
    for line in open(path):
        m = re.match(r'switchyard:(steps_total|step_tokens_total|step_seconds_total)\{.*kind="(\w+)"\} (\S+)', line)
        if m:
            vals[(m.group(1), m.group(2))] = float(m.group(3))
    return vals
steps = {}
try:
    for run in json.load(open(os.path.join(out, "latency.json")))["results"]:
        steps[run["batch"]] = run["decode_step_ms"]
except Exception as e:
    print("bench latency:", repr(e))
print("budget conc | latency step ms | TPOT med ms  (vs step) | ITL med ms | decode steps  mean ms  batch | mixed steps  mean ms  tokens | share of loop time in mixed")
for budget in (2048, 8192):
    for c in (10, 64, 256):
        try:
            r = json.load(open(os.path.join(out, f"serve-b{budget}-c{c}.json")))
            a = counters(os.path.join(out, f"metrics-b{budget}-c{c}-before.txt"))
            b = counters(os.path.join(out, f"metrics-b{budget}-c{c}-after.txt"))
        except Exception as e:
            print(budget, c, repr(e))
            continue
        d = {k: b[k] - a.get(k, 0.0) for k in b}
        ds, ms = d[("steps_total", "decode")], d[("steps_total", "mixed")]
        dsec, msec = d[("step_seconds_total", "decode")], d[("step_seconds_total", "mixed")]
        dtok, mtok = d[("step_tokens_total", "decode")], d[("step_tokens_total", "mixed")]
        step = steps.get(c, float("nan"))
        print(f"{budget:>6} {c:>4} | {step:>15.3f} | {r['median_tpot_ms']:>11.2f} ({100 * (r['median_tpot_ms'] / step - 1):+6.1f}%) | "
              f"{r['median_itl_ms']:>10.2f} | {ds:>12.0f} {1e3 * dsec / max(ds, 1):>8.3f} {dtok / max(ds, 1):>6.1f} | "
              f"{ms:>11.0f} {1e3 * msec / max(ms, 1):>8.3f} {mtok / max(ms, 1):>7.0f} | {100 * msec / max(dsec + msec, 1e-9):>5.1f}% "
              f"(done {r['completed']}, failed {r['failed']}, out tok/s {r['output_throughput']:.0f})")
PY
log "done"
