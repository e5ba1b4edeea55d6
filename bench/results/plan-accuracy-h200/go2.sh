mkdir -p /tmp/carry && tar -C /tmp/carry -xJf .devcarry/pa/bin.tar.xz
MODELS=mixtral-8x7b LENS=512,8192 LIMIT=290 OUT=$OUT/a bash bench/results/plan-accuracy-h200.sh gpu
MODELS=qwen3-30b-a3b,kimi-k2-4layers LENS=8192 LIMIT=270 OUT=$OUT/b bash bench/results/plan-accuracy-h200.sh gpu
