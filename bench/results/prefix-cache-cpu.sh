#!/usr/bin/env bash
# The prefix cache on CPU (issue 20): `switchyard serve` on one layer of Qwen3-30B-A3B with random weights,
# then `bench serve` with 2,048-token prefixes shared by 4 groups and 128-token random suffixes, with the
# cache on and with --no-prefix-cache. Writes bench/results/prefix-cache-cpu/{on,off}.json and the
# servers' metrics. Usage: bash bench/results/prefix-cache-cpu.sh [PROMPTS] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/../.."
prompts=${1:-32}
conc=${2:-8}
out=bench/results/prefix-cache-cpu
mkdir -p "$out"
for mode in on off; do
  flag=""
  [ "$mode" = off ] && flag="--no-prefix-cache"
  port=$((31000 + RANDOM % 1000))
  build/switchyard serve --model bench/configs/qwen3-30b-a3b --random-weights --layers 1 \
    --tokenizer ../shared/data/tokenizers/qwen3 --max-model-len 4096 --port "$port" $flag \
    > "$out/serve-$mode.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do grep -q "listening on" "$out/serve-$mode.log" && break; sleep 1; done
  build/switchyard bench serve --port "$port" --backend completions --dataset random --random-input-len 128 \
    --random-range-ratio 1 --random-output-len 16 --shared-prefix-len 2048 --num-groups 4 --num-prompts "$prompts" \
    --max-concurrency "$conc" --ignore-eos --label "prefix cache $mode" --json "$out/$mode.json" | tee "$out/$mode.txt"
  curl -s "http://127.0.0.1:$port/metrics" | grep -E "^switchyard:prefix_cache" > "$out/metrics-$mode.txt" || true
  kill "$pid"; wait "$pid" || true
done
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
on, off = (json.load(open(f"{d}/{m}.json")) for m in ("on", "off"))
print(f"| cache | mean TTFT ms | median TTFT ms | output tok/s | total tok/s |")
for name, r in (("on", on), ("off", off)):
    print(f"| {name} | {r['mean_ttft_ms']:.1f} | {r['median_ttft_ms']:.1f} | {r['output_throughput']:.1f} | {r['total_throughput']:.1f} |")
print(f"mean TTFT off/on: {off['mean_ttft_ms'] / on['mean_ttft_ms']:.2f}x")
PY
