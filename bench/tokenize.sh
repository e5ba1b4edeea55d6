#!/usr/bin/env bash
# Encoding throughput on one core, switchyard next to the Python reference (tokenizers / tiktoken, pinned
# in tools/text_fixtures/requirements.txt) on the conformance corpus, in one run; load time of each
# tokenizer. Usage: PYTHON=/path/to/venv/bin/python bench/tokenize.sh [build/switchyard] > bench/results/tokenize.txt
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/switchyard}
python=${PYTHON:-python3}
corpus=tests/fixtures/text/corpus.jsonl.gz
echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) cores; $("$python" -c 'import tokenizers, tiktoken; print("tokenizers", tokenizers.__version__, "tiktoken", tiktoken.__version__)')"
for t in ../shared/data/tokenizers/qwen3 ../shared/data/tokenizers/deepseek_v3 tests/fixtures/text/tokenizers/mistral_legacy \
         tests/fixtures/text/tokenizers/mistral_metaspace tests/fixtures/text/tokenizers/kimi_tiktoken; do
  # One core for both: the peer's thread pool is pinned to one thread, and both run under taskset.
  RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false taskset -c 0 "$python" bench/tokenize_peer.py --tokenizer "$t" \
    --corpus "$corpus" --reps 5 --mode one 2>/dev/null
  taskset -c 0 "$bin" bench tokenize --model "$t" --corpus "$corpus" --repeat 5
done
