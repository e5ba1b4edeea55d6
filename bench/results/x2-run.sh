# Two H200s: the NCCL communicator, the nccl tier at 2 ranks, bench comm, bench latency --tp 2. Outputs
# are written as they come, so a cut run still returns what finished.
set -o pipefail
D=.devcarry
mkdir -p /tmp/lib && tar -C /tmp/lib -xJf $D/libs.tar.xz
if ! ldconfig -p | grep -q libmpi.so.40; then mkdir -p /tmp/mpilib && tar -C /tmp/mpilib -xJf $D/mpilibs.tar.xz; export LD_LIBRARY_PATH=/tmp/mpilib:$LD_LIBRARY_PATH; fi
export LD_LIBRARY_PATH=/tmp/lib:$LD_LIBRARY_PATH SY_SOURCE_DIR=$PWD OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi -L > $OUT/x2-gpus.txt; env | grep -E "^NCCL" >> $OUT/x2-gpus.txt; nvidia-smi topo -m >> $OUT/x2-gpus.txt 2>&1
timeout 45 mpirun -np 2 -x LD_LIBRARY_PATH -x SY_SOURCE_DIR $D/test_nccl_communicator > $OUT/x2-nccl-communicator.txt 2>&1; echo "nccl communicator np2 rc=$? at ${SECONDS}s"
timeout 70 mpirun -np 2 -x LD_LIBRARY_PATH -x SY_SOURCE_DIR -x SY_TEST_NCCL=1 $D/test_model_mpi > $OUT/x2-nccl-tier.txt 2>&1; echo "nccl tier np2 rc=$? at ${SECONDS}s"
timeout 45 $D/switchyard bench comm --ranks 2 --device cuda --model bench/configs/qwen3-30b-a3b --iters 10 --warmup 3 > $OUT/x2-bench-comm-qwen3.txt 2>&1; echo "bench comm rc=$? at ${SECONDS}s"
timeout 100 $D/switchyard bench latency --device cuda --random-weights --model bench/configs/qwen3-30b-a3b --tp 2 --batch 1,10,64 --input-len 512 --output-len 64 > $OUT/x2-bench-latency-tp2.txt 2>&1; echo "bench latency tp2 rc=$? at ${SECONDS}s"
echo "=== summary"
grep -E "PASSED|FAILED|Failure" $OUT/x2-nccl-communicator.txt $OUT/x2-nccl-tier.txt | head -8
grep -E "max relative|skipped" $OUT/x2-nccl-tier.txt | sort -t: -k2 | tail -3
tail -22 $OUT/x2-bench-comm-qwen3.txt
sed -n '/ batch/,/^$/p' $OUT/x2-bench-latency-tp2.txt; tail -3 $OUT/x2-bench-latency-tp2.txt
