#!/usr/bin/env python3
"""Encoding throughput of the Python reference tokenizers on one core, the peer of
`switchyard bench tokenize`: every valid-UTF-8 line of the corpus, encoded one by one (mode "one") and
as one batch on one thread (mode "batch"); one warm-up pass, then the median of --reps passes.
A folder with tokenizer.json is timed with Hugging Face `tokenizers` (Tokenizer.encode /
encode_batch, special tokens added as the post-processor says); a folder with tiktoken.model with
`tiktoken` and Kimi K2's split pattern. Prints one JSON line per mode.

  python3 bench/tokenize_peer.py --tokenizer ../shared/data/tokenizers/qwen3 \
      --corpus tests/fixtures/text/corpus.jsonl.gz --reps 5
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers is imported: its thread pool reads these once
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import base64  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

# tokenization_kimi.py (moonshotai/Kimi-K2-Instruct), as in tools/text_fixtures/kimi_vocab.py.
KIMI_PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])


def read_valid_lines(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [rec["t"] for rec in map(json.loads, f) if "t" in rec]


def load_encoders(folder):
    """Returns (one(texts), batch(texts)) for the folder's tokenizer."""
    folder = Path(folder)
    if (folder / "tokenizer.json").exists():
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        return (lambda texts: [tok.encode(t) for t in texts]), (lambda texts: tok.encode_batch(texts))
    if (folder / "tiktoken.model").exists():
        import tiktoken
        ranks = {}
        for line in (folder / "tiktoken.model").read_text(encoding="ascii").splitlines():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        specials = {v["content"]: int(k) for k, v in config.get("added_tokens_decoder", {}).items()}
        enc = tiktoken.Encoding(folder.name, pat_str=KIMI_PAT_STR, mergeable_ranks=ranks, special_tokens=specials)
        return ((lambda texts: [enc.encode(t, allowed_special="all") for t in texts]),
                (lambda texts: enc.encode_batch(texts, num_threads=1, allowed_special="all")))
    raise SystemExit(f"{folder}: no tokenizer.json or tiktoken.model; pass a Hugging Face tokenizer folder")


def time_median(fn, texts, reps):
    fn(texts)  # warm-up: page in the vocabulary, fill caches
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn(texts)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="folder with tokenizer.json or tiktoken.model")
    parser.add_argument("--corpus", default="tests/fixtures/text/corpus.jsonl.gz")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--mode", choices=["one", "batch", "both"], default="both")
    args = parser.parse_args()
    texts = read_valid_lines(args.corpus)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    one, batch = load_encoders(args.tokenizer)
    for mode, fn in (("one", one), ("batch", batch)):
        if args.mode not in (mode, "both"):
            continue
        seconds = time_median(fn, texts, args.reps)
        print(json.dumps({"tokenizer": str(args.tokenizer), "bytes": n_bytes, "seconds": round(seconds, 6),
                          "mb_per_s": round(n_bytes / 1e6 / seconds, 3), "mode": mode, "lines": len(texts),
                          "reps": args.reps, "threads": 1}), flush=True)


if __name__ == "__main__":
    main()
