set -o pipefail
D=/tmp/p; mkdir -p $D /tmp/carry /tmp/cfg/kimi-bf16
tar -C /tmp/carry -xJf .devcarry/gpu/q4.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin
timeout 110 compute-sanitizer --tool memcheck $B/test_cuda_q4 --gtest_filter='CudaQ4.MoeExperts*:CudaQ4.Linear*' > $D/memcheck.txt 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $D/memcheck.txt | tr '\n' ' ')" | tee -a $D/summary.txt
python3 -c "import json; c = json.load(open('bench/configs/kimi-k2-thinking-int4-4layers/config.json')); c.pop('quantization_config'); json.dump(c, open('/tmp/cfg/kimi-bf16/config.json', 'w'))"
for m in bench/configs/kimi-k2-thinking-int4-4layers /tmp/cfg/kimi-bf16; do
  n=$(basename $m)
  timeout 80 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum -k 'regex:moe_gate_up|moe_down' -c 24 \
    $B/switchyard bench latency --device cuda --random-weights --model $m --batch 1 --input-len 64 --output-len 4 > $D/ncu-$n.txt 2>&1
  echo "ncu $n rc=$?" | tee -a $D/summary.txt
  grep -E "moe_gate_up|moe_down|gpu__time_duration" $D/ncu-$n.txt | paste - - | awk '{print $1, $NF}' | sort | uniq -c | head -8 | tee -a $D/summary.txt
done
tar -C $D -czf $OUT/prof.tgz .
