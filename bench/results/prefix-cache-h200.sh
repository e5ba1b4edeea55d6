#!/usr/bin/env bash
# The prefix cache on one H200 (issue 20): `switchyard serve` on Qwen3-30B-A3B (48 layers, random weights,
# CUDA), then `bench serve` with 2,048-token prefixes shared by 8 groups and 128-token random suffixes at
# concurrency 64, with the cache on and with --no-prefix-cache. Binaries from SY_BIN (default build-cuda),
# the Qwen3 tokenizer from TOK (default ../shared/data/tokenizers/qwen3), results under OUT (default
# bench/results/prefix-cache-h200). Usage: bash bench/results/prefix-cache-h200.sh [PROMPTS] [CONCURRENCY]
set -uo pipefail
cd "$(dirname "$0")/../.."
prompts=${1:-128}
conc=${2:-64}
bin=${SY_BIN:-build-cuda}
tok=${TOK:-../shared/data/tokenizers/qwen3}
out=${OUT:-bench/results/prefix-cache-h200}
mkdir -p "$out"
for mode in on off; do
  flag=""
  [ "$mode" = off ] && flag="--no-prefix-cache"
  port=$((31000 + RANDOM % 1000))
  "$bin/switchyard" serve --model bench/configs/qwen3-30b-a3b --random-weights --device cuda --tokenizer "$tok" \
    --max-model-len 4096 --port "$port" $flag > "$out/serve-$mode.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 180); do grep -q "listening on" "$out/serve-$mode.log" && break; sleep 1; done
  "$bin/switchyard" bench serve --port "$port" --backend completions --dataset random --random-input-len 128 \
    --random-range-ratio 1 --random-output-len 32 --shared-prefix-len 2048 --num-groups 8 --num-prompts "$prompts" \
    --max-concurrency "$conc" --ignore-eos --label "prefix cache $mode" --json "$out/$mode.json" > "$out/$mode.txt" 2>&1
  curl -s "http://127.0.0.1:$port/metrics" | grep -E "^switchyard:prefix_cache" > "$out/metrics-$mode.txt"
  kill "$pid"; wait "$pid"
done
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
on, off = (json.load(open(f"{d}/{m}.json")) for m in ("on", "off"))
print("| cache | mean TTFT ms | median TTFT ms | mean TPOT ms | output tok/s | total tok/s |")
for name, r in (("on", on), ("off", off)):
    print(f"| {name} | {r['mean_ttft_ms']:.1f} | {r['median_ttft_ms']:.1f} | {r['mean_tpot_ms']:.2f} | "
          f"{r['output_throughput']:.1f} | {r['total_throughput']:.1f} |")
print(f"mean TTFT off/on: {off['mean_ttft_ms'] / on['mean_ttft_ms']:.2f}x")
PY
