# One H200: `switchyard serve` with random weights on the Qwen3-30B-A3B config answers 1,024 concurrent
# streaming requests (512 random prompt tokens, 128 output tokens, ignore_eos) sent by bench/serve_load.py.
# Binary and libraries built on the CPU machine and carried in .devcarry/ (see the closing notes).
set -o pipefail
D=.devcarry
mkdir -p /tmp/lib && tar -C /tmp/lib -xJf $D/libs.tar.xz
if ! ldconfig -p | grep -q libmpi_cxx.so.40; then mkdir -p /tmp/mpilib && tar -C /tmp/mpilib -xJf $D/mpilibs.tar.xz; export LD_LIBRARY_PATH=/tmp/mpilib:$LD_LIBRARY_PATH; fi
export LD_LIBRARY_PATH=/tmp/lib:$LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/serve-gpu.txt
$D/switchyard serve --model bench/configs/qwen3-30b-a3b --random-weights --device cuda --tokenizer $D/qwen3-tok \
  --port 30123 --max-model-len 1024 --max-running-requests 256 > $OUT/serve-h200-log.txt 2>&1 &
pid=$!
for i in $(seq 1 240); do grep -q "listening on" $OUT/serve-h200-log.txt && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
echo "server up after ${SECONDS}s"
grep -q "listening on" $OUT/serve-h200-log.txt || { tail -20 $OUT/serve-h200-log.txt; exit 1; }
timeout 300 python3 bench/serve_load.py --base-url http://127.0.0.1:30123 --num-requests 1024 --concurrency 1024 \
  --input-len 512 --output-len 128 --vocab 151643 > $OUT/serve-h200-load.json 2>&1; echo "load rc=$? at ${SECONDS}s"
curl -s http://127.0.0.1:30123/metrics > $OUT/serve-h200-metrics.txt
kill -TERM $pid; wait $pid; echo "server exit $? at ${SECONDS}s"
echo "=== summary"; cat $OUT/serve-h200-load.json
grep -E "KV|largest|layout|listening|loaded" $OUT/serve-h200-log.txt | head -8
grep -E "^switchyard:(request_success_total|num_preemptions_total|generation_tokens_total|prompt_tokens_total)" $OUT/serve-h200-metrics.txt
grep -c "request cmpl" $OUT/serve-h200-log.txt; tail -3 $OUT/serve-h200-log.txt
