#!/usr/bin/env python3
"""Writes the seed corpus of the libFuzzer harnesses (tests/fuzz/corpus/<harness>/): small valid inputs of
each parser, made here from the repository's fixtures and by hand, so that fuzzing starts from inputs that
reach deep into the code. Standard library only. Run from anywhere: python3 tests/fuzz/make_seeds.py"""
import json
import pathlib
import shutil
import struct

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fuzz" / "corpus"


def put(harness, name, data):
    d = OUT / harness
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    header, blob = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob


def npy(shape, values, descr="<f4", version=1):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join(f"{n}, " for n in shape) if len(shape) != 1 else f"{shape[0]},")
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    lenfmt = "<H" if version == 1 else "<I"
    fmt = {"<f4": "f", "<f8": "d", "<i4": "i"}[descr]
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack(lenfmt, len(header)) + header.encode() + \
        struct.pack("<" + fmt * len(values), *values)


def byte_level_tokenizer():
    # GPT-2's bytes_to_unicode alphabet, every byte a token, and a few merges.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): i for i, c in enumerate(cs)}
    merges = ["H e", "l l", "He ll", "Ġ w", "o r"]
    for m in merges:
        vocab["".join(m.split())] = len(vocab)
    return {
        "version": "1.0",
        "added_tokens": [{"id": len(vocab), "content": "<|im_start|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def metaspace_tokenizer():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "▁": 3, "H": 4, "e": 5, "l": 6, "o": 7, "▁H": 8, "ll": 9}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    return {
        "version": "1.0",
        "added_tokens": [{"id": 1, "content": "<s>", "special": True, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {
                           "<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                    {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1,
                                                                 "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": ["▁ H", "l l"]},
    }


def http_requests():
    """What a client of the HTTP transport sends (fuzz_http_server: body limit 4096, /stream streams)."""
    def req(method, target, headers=(), body=b"", version="1.1"):
        head = f"{method} {target} HTTP/{version}\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n"
        return head.encode() + body

    def chunked(*parts):
        return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"

    body = json.dumps({"model": "m", "prompt": "Hello", "max_tokens": 4}).encode()
    post = req("POST", "/v1/completions", ["Host: fuzz", "Content-Type: application/json",
                                           f"Content-Length: {len(body)}"], body)
    get = req("GET", "/health", ["Host: fuzz"])
    stream = req("GET", "/stream", ["Host: fuzz", "Accept: text/event-stream"])
    te = "Transfer-Encoding: chunked"
    # Beast holds the request line and the fields each to the header limit (64 KiB), so within a 64 KiB input
    # only an unterminated request line of that size reaches it (431).
    line_at_limit = b"GET /" + b"a" * (65536 - 5)
    return {
        "post_content_length": post,
        "get": get,
        "pipelined_pair": get + post,
        "pipelined_stream_get": stream + get + req("POST", "/stream", ["Content-Length: 2"], b"{}"),
        "chunked_body": req("POST", "/v1/chat/completions", ["Host: fuzz", te], chunked(b"{\"a\":", b"1}")),
        "chunked_ext_trailer": req("POST", "/x", [te, "Trailer: X-Sum"],
                                   b"5;name=v\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n"),
        "expect_continue": req("POST", "/x", ["Host: fuzz", "Expect: 100-continue", "Content-Length: 5"], b"hello"),
        "expect_continue_chunked": req("POST", "/x", ["Expect: 100-continue", te], chunked(b"abc")),
        "expect_continue_too_large": req("POST", "/x", ["Expect: 100-continue", "Content-Length: 5000"]),
        "expect_continue_no_body": req("POST", "/x", ["Expect: 100-continue", "Content-Length: 4"]),
        "get_stream": stream,
        "post_stream_close": req("POST", "/stream?x=1", ["Connection: close", "Content-Length: 2"], b"{}"),
        "body_over_limit": req("POST", "/x", ["Content-Length: 5000"], b"x" * 5000),
        "chunked_over_limit": req("POST", "/x", [te], chunked(b"y" * 3000, b"z" * 1500)),
        "content_length_huge": req("POST", "/x", ["Content-Length: 99999999999999999999"]),
        "body_cut_short": req("POST", "/x", ["Content-Length: 10"], b"abc"),
        "header_cut_short": b"GET /health HTTP/1.1\r\nHost: fu",
        "header_8k": req("GET", "/h", ["Host: fuzz", "X-Pad: " + "p" * 8192]),
        "request_line_at_limit": line_at_limit,
        "bad_request_line": b"GARBAGE\r\n\r\n",
        "bad_version": b"GET / HTTP/9.Z\r\n\r\n",
        "bad_header": req("GET", "/", ["Host: fuzz", "No colon here"]),
        "bad_line_ending": b"GET / HTTP/1.1\nHost: fuzz\n\n",
        "bad_chunk_size": req("POST", "/x", [te], b"zz\r\nhello\r\n0\r\n\r\n"),
        "length_and_chunked": req("POST", "/x", ["Content-Length: 3", te], chunked(b"abc")),
        "two_lengths": req("POST", "/x", ["Content-Length: 3", "Content-Length: 4"], b"abcd"),
        "obs_fold": req("GET", "/", ["X-Folded: a", " b"]),
        "http10": req("GET", "/old", version="1.0"),
        "http10_keep_alive": req("GET", "/a", ["Connection: keep-alive"], version="1.0") +
        req("GET", "/b", version="1.0"),
        "connection_close_then_more": req("GET", "/a", ["Connection: close"]) + get,
        "keep_alive_pair": req("GET", "/a", ["Connection: keep-alive"]) + req("POST", "/b", ["Connection: keep-alive",
                                                                                          "Content-Length: 1"], b"x"),
        "head_options": req("HEAD", "/", ["Host: fuzz"]) + req("OPTIONS", "*"),
        "authorization_query": req("GET", "/v1/models?limit=2", ["Authorization: Bearer sk-1"]),
        "error_then_more": b"BAD\x01 / HTTP/1.1\r\n\r\n" + get,
        "empty_lines": b"\r\n\r\n" + get,
    }


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    put("fuzz_safetensors", "f32", safetensors([("x.weight", "F32", [2, 2], f32)]))
    put("fuzz_safetensors", "mixed", safetensors(
        [("a", "BF16", [3], b"\x80\x3f" * 3), ("b", "F16", [1, 2], b"\x00\x3c" * 2), ("c", "I64", [1], b"\x07" + b"\0" * 7),
         ("d", "BOOL", [2], b"\x01\x00"), ("e", "F8_E4M3", [2, 2], b"\x38" * 4), ("empty", "F32", [0, 5], b"")],
        metadata={"format": "pt"}))
    fixture = (ROOT / "tests" / "fixtures" / "qwen3_moe_base" / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", fixture[:8])[0]
    header = json.loads(fixture[8:8 + n])
    small = {k: v for k, v in header.items() if k == "__metadata__" or v["data_offsets"][1] <= 4096}
    h = json.dumps(small).encode()
    put("fuzz_safetensors", "fixture_header", struct.pack("<Q", len(h)) + h + fixture[8 + n:8 + n + 4096])

    put("fuzz_index", "index", json.dumps({"metadata": {"total_size": 24}, "weight_map": {
        "x.weight": "model-00001-of-00002.safetensors", "y.weight": "model-00002-of-00002.safetensors"}}))
    put("fuzz_index", "index_no_metadata", json.dumps({"weight_map": {
        "x.weight": "model-00001-of-00002.safetensors", "y.weight": "model-00002-of-00002.safetensors"}}))

    configs = sorted((ROOT / "tests" / "fixtures").glob("*/config.json")) + \
        sorted((ROOT / "tests" / "planner" / "configs").glob("*/config.json")) + \
        sorted((ROOT / "tests" / "fixtures" / "text").glob("*/config.json"))
    for c in configs:
        put("fuzz_config", c.parent.name, c.read_bytes())

    put("fuzz_npy", "f32_2d", npy([2, 3], [0.5, 1, 2, 3, 4, 5]))
    put("fuzz_npy", "f32_1d_v2", npy([4], [1, 2, 3, 4], version=2))
    put("fuzz_npy", "f64", npy([2], [1.5, 2.5], descr="<f8"))
    put("fuzz_npy", "fixture", (ROOT / "tests" / "fixtures" / "mixtral_base" / "logits_prompt0.npy").read_bytes()[:4096])

    put("fuzz_tokenizer", "byte_level", json.dumps(byte_level_tokenizer(), ensure_ascii=False))
    put("fuzz_tokenizer", "metaspace", json.dumps(metaspace_tokenizer(), ensure_ascii=False))

    for t in sorted((ROOT / "tests" / "fixtures" / "text" / "templates").glob("*.jinja")):
        put("fuzz_chat_template", t.stem, t.read_bytes())
    put("fuzz_chat_template", "chatml", "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    # The 2026-12-07 finding: a recursive macro (99 calls) whose body nests 30 statements; the render must
    # refuse it before the stack runs out (interpreter.h kMaxNesting).
    nested = "{{ m(k-1) }}"
    for _ in range(30):
        nested = "{% if k > -1 %}" + nested + "{% endif %}"
    put("fuzz_chat_template", "recursive_macro_nesting",
        "{% macro m(k) %}{% if k > 0 %}" + nested + "{% endif %}{% endmacro %}{{ m(99)|length }}")

    route = {"completions": b"\x00", "chat": b"\x01", "tokenize": b"\x02", "detokenize": b"\x03"}
    bodies = {
        "completions": {"model": "m", "prompt": "Hello", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 5,
                        "stop": ["\n"], "stream": True, "stream_options": {"include_usage": True}, "n": 2,
                        "logprobs": 2, "seed": 3, "ignore_eos": True, "stop_token_ids": [2]},
        "chat": {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
                 "max_completion_tokens": 4, "tools": [{"type": "function", "function": {"name": "f"}}],
                 "chat_template_kwargs": {"enable_thinking": False}, "top_logprobs": 1, "logprobs": True},
        "tokenize": {"prompt": "a b c", "add_special_tokens": True},
        "detokenize": {"tokens": [1, 2, 3]},
    }
    for name, body in bodies.items():
        put("fuzz_openai_request", name, route[name] + json.dumps(body).encode())
    put("fuzz_openai_request", "completions_ids", route["completions"] + json.dumps(
        {"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 2}).encode())

    for name, data in http_requests().items():
        put("fuzz_http_server", name, data)


if __name__ == "__main__":
    main()
