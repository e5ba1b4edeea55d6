"""Chat-template renderings of the seeded conversations, by transformers' apply_chat_template (or, for the
tiktoken folder that AutoTokenizer cannot load, by the same render_jinja_template with the same context)."""

import collections
import gzip
import json
from pathlib import Path

from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import render_jinja_template

import conversations

N_CONVERSATIONS = 240
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


def _rel(path, repo):
    """Paths into ../shared are written as ../shared/..., others relative to the repo root."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(repo))
    except ValueError:
        return str(Path("..") / path.relative_to(repo.parent))


def _token_string(value):
    return value["content"] if isinstance(value, dict) else value


def tiktoken_renderer(config_path):
    """apply_chat_template's context for a folder AutoTokenizer cannot load: the config's special tokens
    (non-null ones, as special_tokens_map gives them), additional_special_tokens, then the kwargs."""
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    context = {k: _token_string(config[k]) for k in SPECIAL_TOKEN_KEYS if config.get(k)}
    context["additional_special_tokens"] = [_token_string(t) for t in config.get("additional_special_tokens", [])]

    def render(conv):
        rendered, _ = render_jinja_template(conversations=[conv["messages"]], tools=conv["tools"],
                                            chat_template=config["chat_template"],
                                            add_generation_prompt=conv["add_generation_prompt"],
                                            **{**context, **conv["kwargs"]})
        return rendered[0]
    return render


def auto_renderer(folder, chat_template=None):
    tok = AutoTokenizer.from_pretrained(str(folder))

    def render(conv):
        return tok.apply_chat_template(conv["messages"], tools=conv["tools"], chat_template=chat_template,
                                       add_generation_prompt=conv["add_generation_prompt"], tokenize=False,
                                       **conv["kwargs"])
    return render


def write_fixture(chat_dir, name, convs, render, meta):
    records, errors = [], collections.Counter()
    for conv in convs:
        rec = dict(conv)
        try:
            rec["rendered"] = render(conv)
        except Exception as e:  # noqa: BLE001 -- the template's error is the expected output
            rec["error"] = str(e)
            errors[f"{type(e).__name__}: {str(e)[:80]}"] += 1
        records.append(rec)
    data = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records).encode("utf-8")
    for stale in (chat_dir / f"{name}.jsonl", chat_dir / f"{name}.jsonl.gz"):
        stale.unlink(missing_ok=True)
    if len(data) > 1_000_000:
        with open(chat_dir / f"{name}.jsonl.gz", "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
            f.write(data)
    else:
        (chat_dir / f"{name}.jsonl").write_bytes(data)
    (chat_dir / f"{name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    summary = {"conversations": len(records), "rendered": sum("rendered" in r for r in records),
               "errors": dict(sorted(errors.items())), "bytes": len(data)}
    print(name, json.dumps(summary, ensure_ascii=False), flush=True)
    return summary


def make_all(repo, out, shared, seed):
    chat_dir = out / "chat"
    chat_dir.mkdir(parents=True, exist_ok=True)
    convs = conversations.build(seed, N_CONVERSATIONS)
    qwen3_config = shared / "qwen3" / "tokenizer_config.json"
    kimi_config = out / "tokenizers" / "kimi_tiktoken" / "tokenizer_config.json"
    summary = {}
    for name in ("qwen3", "deepseek_v3"):
        config = shared / name / "tokenizer_config.json"
        meta = {"template_file": _rel(config, repo), "tokenizer_config": _rel(config, repo)}
        summary[name] = write_fixture(chat_dir, name, convs, auto_renderer(shared / name), meta)
    meta = {"template_file": _rel(kimi_config, repo), "tokenizer_config": _rel(kimi_config, repo)}
    summary["kimi_tiktoken"] = write_fixture(chat_dir, "kimi_tiktoken", convs, tiktoken_renderer(kimi_config), meta)
    for template in sorted((out / "templates").glob("*.jinja")):
        meta = {"template_file": _rel(template, repo), "tokenizer_config": _rel(qwen3_config, repo)}
        render = auto_renderer(shared / "qwen3", chat_template=template.read_text(encoding="utf-8"))
        summary[template.stem] = write_fixture(chat_dir, template.stem, convs, render, meta)
    return summary
