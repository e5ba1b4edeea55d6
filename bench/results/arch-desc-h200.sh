# One H200, issue 15 item 1 (the model description in src/arch/, one builder in model/bind.cpp): the cuda
# tier (kernels against the CPU backend, every fixture's logits on the GPU against transformers) and
# `switchyard bench latency` on the Qwen3-30B-A3B config at batch 1, 10, 64 and 256, to set against the
# numbers recorded before the change (docs/perf-notes.md).
#   run(command="bash bench/results/arch-desc-h200.sh", carry=[".devcarry"], timeout_s=600)
# .devcarry/ holds bin/ (build-cuda's switchyard, test_cuda_backend, test_cuda_mla, test_cuda_model), libs.tar.xz
# and mpilibs.tar.xz (the CPU machine's OpenBLAS, fmt, gfortran, quadmath and Open MPI libraries).
set -o pipefail
D=.devcarry
OUT=${OUT:-/tmp/arch-desc-out}
mkdir -p "$OUT"
mkdir -p /tmp/lib && tar -C /tmp/lib -xJf $D/libs.tar.xz
if ! ldconfig -p | grep -q libmpi_cxx.so.40; then
  mkdir -p /tmp/mpilib && tar -C /tmp/mpilib -xJf $D/mpilibs.tar.xz
  export LD_LIBRARY_PATH=/tmp/mpilib:$LD_LIBRARY_PATH
fi
export LD_LIBRARY_PATH=/tmp/lib:$LD_LIBRARY_PATH
export SY_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for t in test_cuda_backend test_cuda_mla test_cuda_model; do
  timeout 200 $D/bin/$t > "$OUT/$t.txt" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.txt" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
done
timeout 240 $D/bin/switchyard bench latency --device cuda --model bench/configs/qwen3-30b-a3b --random-weights \
  --batch 1,10,64,256 --input-len 512 --output-len 128 --json "$OUT/latency.json" > "$OUT/latency.txt" 2>&1
echo "bench latency rc=$?" | tee -a "$OUT/summary.txt"
grep -E '^ +[0-9]+ ' "$OUT/latency.txt" | head -4 | tee -a "$OUT/summary.txt"
# Non-finite logits on the GPU (issue 16 item 2): poisoned copies of the qwen3 fixture (.devcarry/nan_*, bf16
# NaN in the embedding row of token 77 / in layer 2's router): a prompt with token 77 and any prompt through
# the NaN router must exit 2 with the engine's line (no crash, no token), a clean prompt must still run.
for c in "nan_embedding 17,77,3" "nan_router 17,254,3" "nan_embedding 17,254,3"; do
  set -- $c
  timeout 60 $D/bin/switchyard generate --device cuda --model $D/$1 --prompt-ids $2 --max-tokens 4 --check-finite \
    > "$OUT/gen-$1-$2.txt" 2>&1
  echo "generate cuda $1 prompt $2: rc=$? $(grep -E '^switchyard: |^[0-9,]+$' "$OUT/gen-$1-$2.txt" | cut -c1-220)" |
    tee -a "$OUT/summary.txt"
done
