#!/usr/bin/env bash
# Prefix-aware dp placement (issue 20): `switchyard serve --dp 2` (two CPU ranks under mpirun, each its own KV
# pool and prefix cache) on one layer of Qwen3-30B-A3B with random weights, `bench serve` with 2,048-token
# prefixes shared by 4 groups, with --dp-placement prefix and least-loaded; the hit rate each placement gets.
# Writes bench/results/prefix-placement-cpu-dp2/. Usage: bash bench/results/prefix-placement-cpu-dp2.sh [PROMPTS] [CONC]
set -euo pipefail
cd "$(dirname "$0")/../.."
prompts=${1:-32}
conc=${2:-4}
out=bench/results/prefix-placement-cpu-dp2
mkdir -p "$out"
for mode in prefix least-loaded; do
  port=$((32000 + RANDOM % 1000))
  build/switchyard serve --model bench/configs/qwen3-30b-a3b --random-weights --layers 1 --dp 2 \
    --tokenizer ../shared/data/tokenizers/qwen3 --max-model-len 4096 --max-running-requests 16 --port "$port" \
    --dp-placement "$mode" > "$out/serve-$mode.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do grep -q "listening on" "$out/serve-$mode.log" && break; sleep 1; done
  build/switchyard bench serve --port "$port" --backend completions --dataset random --random-input-len 128 \
    --random-range-ratio 1 --random-output-len 8 --shared-prefix-len 2048 --num-groups 4 --num-prompts "$prompts" \
    --max-concurrency "$conc" --ignore-eos --label "dp 2, $mode" --json "$out/$mode.json" > "$out/$mode.txt"
  curl -s "http://127.0.0.1:$port/metrics" | grep -E "^switchyard:prefix_cache" > "$out/metrics-$mode.txt"
  kill "$pid"; wait "$pid" || true
done
for mode in prefix least-loaded; do
  python3 - "$out" "$mode" <<'PY'
import json, sys
d, mode = sys.argv[1], sys.argv[2]
r = json.load(open(f"{d}/{mode}.json"))
m = {l.split("{")[0].split(":")[1]: float(l.split()[-1]) for l in open(f"{d}/metrics-{mode}.txt")}
print(f"| {mode} | {m['prefix_cache_hit_rate']:.3f} | {r['mean_ttft_ms']:.0f} | {r['median_ttft_ms']:.0f} | {r['total_throughput']:.0f} |")
PY
done
