# One H200, issue 17 item 3 (the FP8 E4M3 KV cache, branch kv-fp8): the new cuda tests and the existing attention,
# MLA and model cuda tests from build-cuda binaries, then `bench latency` with the bf16 and the fp8 KV cache on the
# Qwen3-30B-A3B config (decode reads half the KV bytes with fp8; the floor counts one byte a value).
#   run(command="bash bench/results/kv-fp8-h200.sh tests", carry=[".devcarry"], timeout_s=600)
#   run(command="bash bench/results/kv-fp8-h200.sh bench", carry=[".devcarry"], timeout_s=600)
# .devcarry/ holds bin/ (build-cuda of the kv-fp8 branch: switchyard, test_cuda_kv_fp8, test_cuda_backend,
# test_cuda_mla, test_cuda_model) and libs.tar.xz (the CPU machine's OpenBLAS, fmt, PCRE2, utf8proc, simdjson,
# gfortran, quadmath libraries, flat), as for bench/results/executor-h200.sh. Without .devcarry the binaries are
# taken from build-cuda/ (BIN=build-cuda/tests/... layout, see bin_of below).
set -o pipefail
D=.devcarry
OUT=${OUT:-/tmp/kv-fp8-out}
mkdir -p "$OUT" /tmp/lib
if [ -f $D/libs.tar.xz ]; then
  tar -C /tmp/lib -xJf $D/libs.tar.xz
  export LD_LIBRARY_PATH=/tmp/lib:$LD_LIBRARY_PATH
fi
export SY_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"

bin_of() {  # the binary of test $1: .devcarry/bin/$1, else its place in build-cuda
  if [ -x $D/bin/$1 ]; then echo $D/bin/$1; return; fi
  case $1 in
    switchyard) echo build-cuda/switchyard ;;
    test_cuda_model) echo build-cuda/tests/model/test_cuda_model ;;
    *) echo build-cuda/tests/backend/$1 ;;
  esac
}

run_test() {  # name, gtest filter
  local out="$OUT/$1${3:+-$3}.txt"
  timeout 300 "$(bin_of $1)" --gtest_filter="$2" > "$out" 2>&1
  echo "$1 [$2] rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
}

if [ "$1" = tests ]; then
  # New: the fp8 KV writes, GQA decode / prefill / generic attention and MLA (flash and generic) against cpu-bf16+fp8.
  run_test test_cuda_kv_fp8 '*'
  # Existing bf16 paths, unchanged: KV writes and GQA attention, MLA, every fixture end to end (bf16 and fp8 KV).
  run_test test_cuda_backend 'CudaVsCpu.QkNormRopeKvWrite:Shapes/CudaAttention.*'
  run_test test_cuda_mla '*'
  run_test test_cuda_model '*'
  exit 0
fi

for kv in bf16 fp8 bf16 fp8; do
  timeout 240 "$(bin_of switchyard)" bench latency --device cuda --kv-dtype $kv --model bench/configs/qwen3-30b-a3b \
    --random-weights --batch 1,10,64,256 --input-len 512 --output-len 128 --json "$OUT/latency-$kv-$RANDOM.json" \
    >> "$OUT/latency-$kv.txt" 2>&1
  echo "bench latency --kv-dtype $kv rc=$?" | tee -a "$OUT/summary.txt"
done
