"""Per-tokenizer expected outputs over the corpus: ids, decodes and DecodeStream pieces."""

import base64
import json
from pathlib import Path

import mistral_common
import tiktoken
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream
from transformers import AutoTokenizer, LlamaTokenizerFast

import kimi_vocab

MISTRAL_SP_MODEL = Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1"


def reference_text(value):
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def decode_stream_pieces(decode, ids):
    """tokenizers 0.22.1's step_decode_stream (tokenizer/mod.rs), one id per step, over any decode(ids)."""
    window, prefix, prefix_index = [], "", 0
    pieces = []
    for token in ids:
        if not prefix and window:
            new_prefix = decode(window)
            if not new_prefix.endswith("\ufffd"):
                prefix, prefix_index = new_prefix, len(window)
        window.append(token)
        string = decode(window)
        if len(string.encode()) > len(prefix.encode()) and not string.endswith("\ufffd"):
            if not string.startswith(prefix):
                raise ValueError("DecodeStream: invalid prefix")
            pieces.append(string[len(prefix):])
            new_prefix_index = len(window) - prefix_index
            window = window[prefix_index:]
            prefix = decode(window)
            prefix_index = new_prefix_index
        else:
            pieces.append(None)
    return pieces


def _record(ids, ids_ns, text, dec, dec_skip, pieces):
    rec = {"ids": ids}
    if ids_ns != ids:
        rec["ids_ns"] = ids_ns
    if dec != text:
        rec["dec"] = dec
    if dec_skip != dec:
        rec["dec_skip"] = dec_skip
    rec["pieces"] = [len(p.encode()) if p is not None else 0 for p in pieces]
    pcat = "".join(p for p in pieces if p is not None)
    if pcat != dec:
        rec["pcat"] = pcat
    return rec


def hf_records(folder, values, stats):
    """AutoTokenizer ids (what users get), the backend tokenizer's decodes and DecodeStream pieces.
    stats counts where the raw tokenizer.json, AutoTokenizer.decode and the Python replica differ."""
    auto = AutoTokenizer.from_pretrained(str(folder))
    backend = auto.backend_tokenizer
    raw = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    stats.update(raw_ids_differ=0, raw_ids_ns_differ=0, auto_decode_differs=0, replica_differs=0,
                 decode_stream_errors=0, lines=0, tokens=0)
    out = []
    for value in values:
        text = reference_text(value)
        ids = auto(text)["input_ids"]
        ids_ns = auto(text, add_special_tokens=False)["input_ids"]
        stats["raw_ids_differ"] += raw.encode(text).ids != ids
        stats["raw_ids_ns_differ"] += raw.encode(text, add_special_tokens=False).ids != ids_ns
        dec = backend.decode(ids, skip_special_tokens=False)
        dec_skip = backend.decode(ids, skip_special_tokens=True)
        stats["auto_decode_differs"] += (auto.decode(ids, skip_special_tokens=False) != dec
                                         or auto.decode(ids, skip_special_tokens=True) != dec_skip)
        stream = DecodeStream(skip_special_tokens=False)
        try:
            pieces = [stream.step(backend, i) for i in ids]
        except Exception:  # noqa: BLE001 -- recorded; none are expected
            stats["decode_stream_errors"] += 1
            raise
        replica = decode_stream_pieces(lambda w: backend.decode(w, skip_special_tokens=False), ids)
        stats["replica_differs"] += replica != pieces
        stats["lines"] += 1
        stats["tokens"] += len(ids)
        out.append(_record(ids, ids_ns, text, dec, dec_skip, pieces))
    return out


def tiktoken_encoding(folder):
    ranks = {}
    with open(Path(folder) / "tiktoken.model", encoding="ascii") as f:
        for line in f:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    specials = kimi_vocab.special_tokens(len(ranks))
    return tiktoken.Encoding("kimi_tiktoken_test", pat_str=kimi_vocab.KIMI_PAT_STR, mergeable_ranks=ranks,
                             special_tokens=specials), len(ranks)


def tiktoken_records(folder, values, stats):
    enc, n_base = tiktoken_encoding(folder)
    stats.update(lines=0, tokens=0)
    out = []
    for value in values:
        text = reference_text(value)
        ids = enc.encode(text, allowed_special="all")
        dec = enc.decode(ids, errors="replace")
        dec_skip = enc.decode([i for i in ids if i < n_base], errors="replace")
        pieces = decode_stream_pieces(lambda w: enc.decode(w, errors="replace"), ids)
        stats["lines"] += 1
        stats["tokens"] += len(ids)
        out.append(_record(ids, ids, text, dec, dec_skip, pieces))
    return out


def build_mistral(folder, legacy):
    """tokenizer.json converted from Mixtral's SentencePiece model by transformers' LlamaConverter."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = LlamaTokenizerFast(vocab_file=str(MISTRAL_SP_MODEL), legacy=legacy, from_slow=True, add_bos_token=True,
                             add_eos_token=False, add_prefix_space=True)
    tok.backend_tokenizer.save(str(folder / "tokenizer.json"), pretty=False)
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "clean_up_tokenization_spaces": False, "legacy": legacy,
              "model_max_length": 32768, "tokenizer_class": "LlamaTokenizer"}
    with open(folder / "tokenizer_config.json", "w", encoding="utf-8", newline="\n") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return describe(folder)


def describe(folder):
    t = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    return {"normalizer": str(t.normalizer), "pre_tokenizer": str(t.pre_tokenizer), "decoder": str(t.decoder),
            "post_processor": str(t.post_processor), "vocab": t.get_vocab_size(with_added_tokens=True)}
