#!/usr/bin/env bash
# The soak record of issue 16 (item 5): `switchyard serve` on the bundled tiny model (CPU, random weights)
# under 1,024 streaming clients for 300 s, 10% of requests cut by the client, 10% malformed; memory compared
# between the first and the last minute. Run from the repository root after scripts/setup.sh:
#   bash bench/results/serve-soak-cpu/run.sh
set -euo pipefail
out=bench/results/serve-soak-cpu
port=${PORT:-30123}
build/switchyard serve --model tests/fixtures/text/qwen3_tiny_random --random-weights \
  --tokenizer ../shared/data/tokenizers/qwen3 --port "$port" --max-running-requests 256 > /tmp/soak-server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "listening on" /tmp/soak-server.log && break; sleep 0.2; done
build/switchyard bench soak --port "$port" --clients 1024 --duration 300 --window 60 \
  --disconnect-fraction 0.1 --malformed-fraction 0.1 --random-input-len 8 --random-output-len 6 \
  --random-vocab-size 150000 --json "$out/soak.json" 2>&1 | tee "$out/soak.txt"
kill -TERM $server
wait $server || true
# The server logs a line per request (about 30,000): its start and its end are kept.
{ head -40 /tmp/soak-server.log; echo "[... $(wc -l < /tmp/soak-server.log) lines in all ...]"; tail -20 /tmp/soak-server.log; } \
  > "$out/server-log-excerpt.txt"
