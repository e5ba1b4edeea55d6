#!/usr/bin/env bash
# Trains the bundled model and makes its conformance fixture on the GPU machine (torch 2.11, transformers 5.17,
# tokenizers 0.23 installed there, no network): the corpus travels as .devcarry/bundled/corpus.jsonl.xz, made
# here by prepare_text.py from Debian's python3.11-doc. The model folder and the fixture come back in
# $OUT/bundled.tar.* (15 MB pieces: cat them and untar in the repository root).
#   run(command="bash tools/bundled_model/train_on_gpu_machine.sh", carry=[".devcarry/bundled"], timeout_s=600)
set -o pipefail
OUT=${OUT:-/tmp/bundled-out}
NAME=${NAME:-pydoc-moe}
mkdir -p "$OUT" /tmp/bundled
xz -dc .devcarry/bundled/corpus.jsonl.xz > /tmp/bundled/corpus.jsonl
export PYTHONUNBUFFERED=1
rm -rf "models/$NAME" "tests/fixtures/${NAME//-/_}"
python3 tools/bundled_model/train.py --corpus /tmp/bundled/corpus.jsonl --out "models/$NAME" \
  --max-minutes "${MAX_MINUTES:-5}" ${TRAIN_ARGS:-} 2>&1 | tee "$OUT/train.log"
python3 tools/bundled_model/make_reference.py --model "models/$NAME" --out "tests/fixtures/${NAME//-/_}" 2>&1 |
  tee "$OUT/reference.log"
tar -cf - "models/$NAME" "tests/fixtures/${NAME//-/_}" | split -b 15M - "$OUT/bundled.tar."
ls -la "$OUT"
