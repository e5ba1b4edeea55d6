"""Builds tests/fixtures/text/: the tokenizer corpus, per-tokenizer expected outputs and chat-template
renderings, all from the reference Python implementations (tokenizers, transformers, tiktoken, Jinja2).

    RAYON_NUM_THREADS=1 python tools/text_fixtures/make_text_fixtures.py [--only corpus,tokenizers,chat]
"""

import argparse
import base64
import gzip
import io
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # light on a shared machine; results do not depend on it
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # noqa: E402
import kimi_vocab  # noqa: E402
import tokenizer_fixtures as tf  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "text"
SHARED_TOKENIZERS = REPO.parent / "shared" / "data" / "tokenizers"
SEED = 20240611


def write_jsonl(path, records, compress):
    buf = io.BytesIO()
    for rec in records:
        buf.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        buf.write(b"\n")
    data = buf.getvalue()
    if compress:
        with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
            f.write(data)
    else:
        path.write_bytes(data)


def read_corpus():
    with gzip.open(OUT / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        return [rec["t"] if "t" in rec else base64.b64decode(rec["b"]) for rec in map(json.loads, f)]


def make_corpus():
    entries = corpus.build(SEED)
    records = [{"t": v} if isinstance(v, str) else {"b": base64.b64encode(v).decode()} for _, v in entries]
    write_jsonl(OUT / "corpus.jsonl.gz", records, compress=True)
    counts = {}
    for cat, _ in entries:
        counts[cat] = counts.get(cat, 0) + 1
    return {"lines": len(entries), "categories": counts}


def make_tokenizers(only_names):
    values = read_corpus()
    tok_dir = OUT / "tokenizers"
    info = {}
    folders = {"qwen3": SHARED_TOKENIZERS / "qwen3", "deepseek_v3": SHARED_TOKENIZERS / "deepseek_v3"}
    for name, legacy in (("mistral_legacy", True), ("mistral_metaspace", False)):
        folders[name] = tok_dir / name
        if not only_names or name in only_names:
            tf.build_mistral(folders[name], legacy)
    kimi_dir = tok_dir / "kimi_tiktoken"
    if not only_names or "kimi_tiktoken" in only_names:
        kimi_vocab.write_folder(kimi_dir, kimi_vocab.train(SEED))
    for name, folder in folders.items():
        if only_names and name not in only_names:
            continue
        stats = {}
        records = tf.hf_records(folder, values, stats)
        write_jsonl(OUT / f"{name}.jsonl.gz", records, compress=True)
        info[name] = {**tf.describe(folder), **stats}
        print(name, json.dumps(info[name], ensure_ascii=False), flush=True)
    if not only_names or "kimi_tiktoken" in only_names:
        stats = {}
        records = tf.tiktoken_records(kimi_dir, values, stats)
        write_jsonl(OUT / "kimi_tiktoken.jsonl.gz", records, compress=True)
        info["kimi_tiktoken"] = {"pat_str": kimi_vocab.KIMI_PAT_STR, **stats}
        print("kimi_tiktoken", json.dumps(info["kimi_tiktoken"]), flush=True)
    return info


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="corpus,tokenizers,chat", help="comma-separated steps")
    parser.add_argument("--tokenizers", default="", help="comma-separated tokenizer names (default: all)")
    args = parser.parse_args()
    steps = set(args.only.split(","))
    OUT.mkdir(parents=True, exist_ok=True)
    summary_path = OUT / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    if "corpus" in steps:
        summary["corpus"] = make_corpus()
        print("corpus", summary["corpus"], flush=True)
    if "tokenizers" in steps:
        names = set(filter(None, args.tokenizers.split(",")))
        summary.setdefault("tokenizers", {}).update(make_tokenizers(names))
    if "chat" in steps:
        import chat_fixtures
        summary["chat"] = chat_fixtures.make_all(REPO, OUT, SHARED_TOKENIZERS, SEED)
    summary_path.write_text(json.dumps(summary, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
