"""Expected outputs of `switchyard tokenize` / `generate --chat` on the shared tokenizers, made by Hugging Face
transformers (versions pinned in requirements.txt beside this script, transformers 4.57.x: 5.x loads DeepSeek-V3's
tokenizer as Metaspace and drops its spaces, see README.md; the versions are written into the output).

    python tools/text_fixtures/make_cli_cases.py   # writes tests/fixtures/text/cli_cases.json
"""
import json
import pathlib

import tokenizers
import transformers
from transformers import AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "tokenizers"

TEXTS = ["Hello, world!", "  two leading spaces and a tab\there", "数字 12345678 и кириллица 🙂",
         "<|im_end|> typed as text", "line one\nline two\r\n"]
CHATS = [("", "What is the capital of France?"), ("You are terse.", "Name three primes.\nOnly digits."),
         ("", "emoji 👩🏽‍💻 and {{ braces }}")]


def main():
    cases = {"versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
             "tokenizers": {}}
    for name in ["qwen3", "deepseek_v3"]:
        folder = SHARED / name
        tok = AutoTokenizer.from_pretrained(str(folder))
        entry = {"folder": f"../shared/data/tokenizers/{name}", "encode": [], "chat": [], "decode": []}
        for t in TEXTS:
            entry["encode"].append({"text": t, "ids": tok(t)["input_ids"],
                                    "ids_no_special": tok(t, add_special_tokens=False)["input_ids"]})
        for system, user in CHATS:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
            rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            entry["chat"].append({"system": system, "user": user, "rendered": rendered, "ids": list(ids)})
        for t in TEXTS[:3]:
            ids = tok(t)["input_ids"] + [tok.eos_token_id]
            entry["decode"].append({"ids": ids, "text": tok.decode(ids), "text_skip": tok.decode(ids, skip_special_tokens=True)})
        cases["tokenizers"][name] = entry
    out = ROOT / "tests" / "fixtures" / "text" / "cli_cases.json"
    out.write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
