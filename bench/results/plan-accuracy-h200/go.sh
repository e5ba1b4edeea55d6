set -o pipefail
mkdir -p /tmp/carry $OUT/t && tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz
export LD_LIBRARY_PATH=/tmp/carry/lib:$LD_LIBRARY_PATH SY_SOURCE_DIR=$PWD
timeout 150 /tmp/carry/bin/test_cuda_model > $OUT/t/test_cuda_model.txt 2>&1
echo "test_cuda_model rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t/test_cuda_model.txt | tr '\n' ' ')"
grep -E "nvfp4_g16 \]" $OUT/t/test_cuda_model.txt
MODELS=${MODELS:-qwen3-30b-a3b,kimi-k2-4layers} LENS=${LENS:-512} LIMIT=${LIMIT:-560} bash bench/results/plan-accuracy-h200.sh gpu
