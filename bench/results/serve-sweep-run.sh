# One H200, issue 14 item 5: switchyard serve next to `transformers serve --continuous-batching` on the same
# checkpoint (Qwen3-30B-A3B cut to 12 layers, random bf16 weights, bench/make_qwen3_12layer.py), the same
# `switchyard bench serve` sweep against each (chat, random 512 in / 128 out, ignore_eos, concurrency 1, 10,
# 64, 256, 1024), and `switchyard bench latency` on the same checkpoint at the same batch sizes.
# Fits one 10-minute device call:
#   run(command="bash bench/results/serve-sweep-run.sh", carry=[".devcarry"], timeout_s=600)
# It needs in .devcarry/: switchyard (CUDA build: serve, bench latency), switchyard-cpu (a CPU build of this
# tree, `cp build/switchyard .devcarry/switchyard-cpu`: bench serve and the tokenizer server, so the client
# needs no CUDA rebuild), libs.tar.xz, mpilibs.tar.xz, qwen3-tok/ (tokenizer.json + tokenizer_config.json
# with the chat template) and wheels/ (transformers serve's missing packages:
#   python3 -m pip download --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 \
#     --platform manylinux_2_28_x86_64 --dest .devcarry/wheels fastapi uvicorn pydantic starlette openai rich psutil
#   python3 -m pip download --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 \
#     --no-deps --dest .devcarry/wheels accelerate        # its torch is the machine's own
# ). PEER=0 skips transformers serve and reuses its files already recorded in bench/results/serve-sweep-h200/
# (same checkpoint, traffic and client), for a re-run of switchyard's side alone.
# Everything lands in $OUT: serve-<engine>-c<level>.json, serve-<engine>.txt (tables), the servers' logs,
# latency-switchyard.{json,txt}, serve-h200-sweep.svg and summary.txt.
set -o pipefail
D=.devcarry
B=$D/switchyard-cpu  # the client (and the CPU tokenizer server)
[ -x $B ] || B=$D/switchyard
OUT=${OUT:-/tmp/serve-sweep-out}
mkdir -p "$OUT"
MODEL=/tmp/qwen3-30b-a3b-12l  # the GPU machine's disk: written once, reused while the machine is held
SY_PORT=30123
HF_PORT=30124
TOK_PORT=30125
LEVELS=1,10,64,256,1024
PROMPTS=4,20,128,512,1024  # per level: at least two rounds of the level below 1024
SWEEP="--backend chat --dataset random --random-input-len 512 --random-output-len 128 --random-range-ratio 1
       --max-concurrency $LEVELS --num-prompts $PROMPTS --seed 1 --warmup-requests 4 --tokenizer-url http://127.0.0.1:$TOK_PORT"
log() { echo "[$(printf '%4d' $SECONDS) s] $*" | tee -a "$OUT/summary.txt"; }
# The device tool brings back at most 8 files: everything is packed into sweep.tar.gz beside summary.txt.
pack() {
  tar -C "$OUT" -czf /tmp/sweep.tar.gz --exclude sweep.tar.gz . && find "$OUT" -mindepth 1 ! -name summary.txt -delete &&
    mv /tmp/sweep.tar.gz "$OUT/"
}
trap pack EXIT

mkdir -p /tmp/lib && tar -C /tmp/lib -xJf $D/libs.tar.xz
if ! ldconfig -p | grep -q libmpi_cxx.so.40; then
  mkdir -p /tmp/mpilib && tar -C /tmp/mpilib -xJf $D/mpilibs.tar.xz
  export LD_LIBRARY_PATH=/tmp/mpilib:$LD_LIBRARY_PATH
fi
export LD_LIBRARY_PATH=/tmp/lib:$LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' \
  >> "$OUT/gpu.txt" 2>&1

# Waits up to $2 seconds for $1 (a URL) to answer 200 while process $3 lives.
wait_up() {
  for _ in $(seq 1 "$2"); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}
stop() { kill -TERM "$1" 2>/dev/null; for _ in $(seq 1 30); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done; kill -KILL "$1"; }

# 1. The checkpoint, and a CPU server whose /tokenize and /detokenize build the same text prompts for both
#    engines (the bundled tiny model with Qwen3's tokenizer: no GPU memory).
python3 bench/make_qwen3_12layer.py --out $MODEL --tokenizer $D/qwen3-tok > "$OUT/make-model.txt" 2>&1 \
  || { cat "$OUT/make-model.txt"; exit 1; }
log "$(tail -1 "$OUT/make-model.txt")"
$B serve --model tests/fixtures/text/qwen3_tiny_random --random-weights --tokenizer $D/qwen3-tok \
  --port $TOK_PORT > "$OUT/tokenizer-server-log.txt" 2>&1 &
tok_pid=$!
wait_up http://127.0.0.1:$TOK_PORT/health 60 $tok_pid || { log "tokenizer server did not start"; tail "$OUT/tokenizer-server-log.txt"; exit 1; }

# 2. switchyard serve and its sweep (256 running requests if 1024 does not start).
for running in 1024 256; do
  $D/switchyard serve --model $MODEL --device cuda --port $SY_PORT --max-model-len 1024 \
    --max-running-requests $running > "$OUT/switchyard-serve-log.txt" 2>&1 &
  sy_pid=$!
  wait_up http://127.0.0.1:$SY_PORT/health 180 $sy_pid && break
  log "switchyard serve --max-running-requests $running did not start:"; tail -5 "$OUT/switchyard-serve-log.txt"
  stop $sy_pid
  sy_pid=
done
[ -n "$sy_pid" ] || { log "switchyard serve did not start"; stop $tok_pid; exit 1; }
log "switchyard serve up (--max-running-requests $running)"
timeout 200 $B bench serve --base-url http://127.0.0.1:$SY_PORT $SWEEP --ignore-eos --label switchyard \
  --json "$OUT/serve-switchyard.json" > "$OUT/serve-switchyard.txt" 2>&1
log "switchyard sweep rc=$?"
curl -s http://127.0.0.1:$SY_PORT/metrics | grep -v _bucket > "$OUT/switchyard-metrics.txt"
stop $sy_pid
log "switchyard serve stopped"

# 3. The engine alone at the same batch sizes (the server's overhead is TPOT over the decode step).
timeout 120 $D/switchyard bench latency --device cuda --model $MODEL --batch $LEVELS --input-len 512 \
  --output-len 128 --json "$OUT/latency-switchyard.json" > "$OUT/latency-switchyard.txt" 2>&1
log "bench latency rc=$?"

# 4. transformers serve with continuous batching, the same sweep in the time left.
if [ "${PEER:-1}" = 0 ]; then
  cp bench/results/serve-sweep-h200/serve-transformers-c*.json bench/results/serve-sweep-h200/serve-transformers.txt "$OUT/"
  log "transformers serve not run (PEER=0): its recorded sweep is reused"
else
python3 -m pip install -q --no-index --find-links $D/wheels fastapi uvicorn pydantic starlette openai rich accelerate \
  psutil > "$OUT/pip-install.txt" 2>&1
log "wheels installed rc=$?"
mkdir -p /root/.cache/huggingface/hub  # its /v1/models scans the Hub cache and fails when the folder is missing
transformers serve $MODEL --continuous-batching --device cuda:0 --dtype bfloat16 --host 127.0.0.1 \
  --port $HF_PORT > "$OUT/transformers-serve-log.txt" 2>&1 &
hf_pid=$!
if wait_up http://127.0.0.1:$HF_PORT/v1/models 120 $hf_pid; then
  log "transformers serve up"
  left=$((570 - SECONDS))
  # ignore_eos and stream_options first; fewer fields if its warmup is refused.
  for extra in "--ignore-eos" "--ignore-eos --no-stream-usage" "--no-stream-usage"; do
    timeout $left $B bench serve --base-url http://127.0.0.1:$HF_PORT --model $MODEL $SWEEP $extra \
      --label transformers --json "$OUT/serve-transformers.json" > "$OUT/serve-transformers.txt" 2>&1
    rc=$?
    log "transformers sweep ($extra) rc=$rc"
    grep -q "warmup requests failed" "$OUT/serve-transformers.txt" || break
    left=$((570 - SECONDS))
  done
else
  log "transformers serve did not start"; tail -20 "$OUT/transformers-serve-log.txt"
fi
stop $hf_pid
fi
stop $tok_pid

# 5. The table, the plot, and TPOT against the decode step.
python3 bench/plot_serve.py --out "$OUT/serve-h200-sweep.svg" --title "Qwen3-30B-A3B 12 layers, one H200, chat 512/128" \
  "$OUT"/serve-*-c*.json | tee -a "$OUT/summary.txt"
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, os, sys
out = sys.argv[1]
rows = {}
for f in glob.glob(os.path.join(out, "serve-*-c*.json")):
    r = json.load(open(f))
    rows[(r["label"], r["max_concurrency"])] = r
print(f"{'engine':>13} {'conc':>5} {'done':>5} {'fail':>4} {'out tok/s':>10} {'TTFT med ms':>12} {'TPOT med ms':>12}")
for (label, c), r in sorted(rows.items()):
    print(f"{label:>13} {c:>5} {r['completed']:>5} {r['failed']:>4} {r['output_throughput']:>10.1f} "
          f"{r['median_ttft_ms']:>12.2f} {r['median_tpot_ms']:>12.2f}")
try:
    lat = json.load(open(os.path.join(out, "latency-switchyard.json")))
    for run in lat["results"]:
        b = run["batch"]
        r = rows.get(("switchyard", b))
        step = run["decode_step_ms"]
        if r:
            print(f"batch {b:>5}: bench latency step {step:.2f} ms, serve median TPOT {r['median_tpot_ms']:.2f} ms "
                  f"({100 * (r['median_tpot_ms'] / step - 1):+.1f}%)")
except Exception as e:  # the latency file's layout is printed instead
    print("latency comparison:", repr(e))
PY
log "done"
