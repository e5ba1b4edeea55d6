set -o pipefail
mkdir -p /tmp/carry $OUT/r && tar -C /tmp/carry -xJf .devcarry/m1/bin.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH SY_SOURCE_DIR=$PWD
B=/tmp/carry/bin
for t in test_cuda_backend test_cuda_mla; do timeout 200 $B/$t > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/$t.txt | tr '\n' ' ')"; done
timeout 200 $B/test_cuda_model > $OUT/r/test_cuda_model.txt 2>&1; echo "test_cuda_model rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/r/test_cuda_model.txt | tr '\n' ' ')"
timeout 120 $B/bench_kernels --cuda-attention > $OUT/r/attention.txt 2>&1; echo "bench attention rc=$?"
timeout 200 $B/switchyard bench latency --device cuda --model bench/configs/qwen3-30b-a3b --random-weights --batch 1 --input-len 8192 --output-len 128 --json $OUT/r/q8k.json > $OUT/r/q8k.txt 2>&1; echo "q8k rc=$?"
timeout 150 $B/switchyard bench latency --device cuda --model bench/configs/kimi-k2-4layers --random-weights --batch 1,64 --input-len 512 --output-len 128 --json $OUT/r/kimi.json > $OUT/r/kimi.txt 2>&1; echo "kimi rc=$?"
cat $OUT/r/attention.txt | grep -E "decode"
grep -E "^ +[0-9]+ " $OUT/r/q8k.txt $OUT/r/kimi.txt | head
