"""Sanity checks of tests/fixtures/text against the reference libraries: line counts match the corpus,
decode(ids) is dec, pieces add up to pcat, chat fixtures are well formed. Exits 1 on any failure."""

import gzip
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import tokenizer_fixtures as tf  # noqa: E402
from make_text_fixtures import OUT, REPO, SHARED_TOKENIZERS, read_corpus  # noqa: E402

HF = {"qwen3": SHARED_TOKENIZERS / "qwen3", "deepseek_v3": SHARED_TOKENIZERS / "deepseek_v3",
      "mistral_legacy": OUT / "tokenizers" / "mistral_legacy", "mistral_metaspace": OUT / "tokenizers" / "mistral_metaspace"}


def check_records(name, values, records, decode, problems):
    if len(records) != len(values):
        problems.append(f"{name}: {len(records)} lines for {len(values)} corpus lines")
    for n, (value, rec) in enumerate(zip(values, records)):
        text = tf.reference_text(value)
        dec = rec.get("dec", text)
        if decode(rec["ids"]) != dec:
            problems.append(f"{name}:{n + 1}: decode(ids) != dec")
        if len(rec["pieces"]) != len(rec["ids"]):
            problems.append(f"{name}:{n + 1}: {len(rec['pieces'])} pieces for {len(rec['ids'])} ids")
        if sum(rec["pieces"]) != len(rec.get("pcat", dec).encode()):
            problems.append(f"{name}:{n + 1}: pieces add up to {sum(rec['pieces'])} bytes")
        if "ids_ns" in rec and rec["ids_ns"] == rec["ids"]:
            problems.append(f"{name}:{n + 1}: ids_ns present but equal to ids")


def main():
    values = read_corpus()
    problems = []
    for name, folder in HF.items():
        records = [json.loads(line) for line in gzip.open(OUT / f"{name}.jsonl.gz", "rt", encoding="utf-8")]
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        check_records(name, values, records, lambda ids: tok.decode(ids, skip_special_tokens=False), problems)
        auto = AutoTokenizer.from_pretrained(str(folder))
        for n in range(0, len(values), 97):  # a sample: the full comparison runs in make_text_fixtures
            if auto(tf.reference_text(values[n]))["input_ids"] != records[n]["ids"]:
                problems.append(f"{name}:{n + 1}: AutoTokenizer ids differ")
    enc, _ = tf.tiktoken_encoding(OUT / "tokenizers" / "kimi_tiktoken")
    records = [json.loads(line) for line in gzip.open(OUT / "kimi_tiktoken.jsonl.gz", "rt", encoding="utf-8")]
    check_records("kimi_tiktoken", values, records, lambda ids: enc.decode(ids, errors="replace"), problems)
    for meta_path in sorted((OUT / "chat").glob("*.meta.json")):
        name = meta_path.name[: -len(".meta.json")]
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        for key in ("template_file", "tokenizer_config"):
            if not (REPO / meta[key]).exists():
                problems.append(f"chat/{name}: {key} {meta[key]} does not exist")
        path = OUT / "chat" / f"{name}.jsonl"
        lines = (gzip.open(path.with_suffix(".jsonl.gz"), "rt", encoding="utf-8") if not path.exists()
                 else open(path, encoding="utf-8"))
        records = [json.loads(line) for line in lines]
        if len(records) < 200:
            problems.append(f"chat/{name}: only {len(records)} conversations")
        if any(("rendered" in r) == ("error" in r) for r in records):
            problems.append(f"chat/{name}: a line without exactly one of rendered/error")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"{len(values)} corpus lines; tests/fixtures/text holds {total / 1e6:.2f} MB")
    for p in problems[:50]:
        print("FAIL", p)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
