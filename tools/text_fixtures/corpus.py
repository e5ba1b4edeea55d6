"""The tokenizer test corpus: seeded strings from the pinned Python's stdlib and Faker, by category.

Each entry is (category, value) where value is a str, or bytes for invalid UTF-8 (the reference input
for those is bytes.decode("utf-8", "replace")).
"""

import ast
import json
import random
import sysconfig
import unicodedata
from pathlib import Path

from faker import Faker

STDLIB = Path(sysconfig.get_paths()["stdlib"])
C_INCLUDE = Path(sysconfig.get_paths()["include"])

# Disjoint from kimi_vocab.TRAIN_MODULES: the Kimi test vocabulary is never trained on these.
PROSE_MODULES = [
    "argparse", "asyncio", "calendar", "collections", "concurrent", "configparser", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools", "heapq", "http",
    "inspect", "ipaddress", "json", "logging", "mailbox", "pathlib", "pickle", "pprint", "random",
    "shutil", "statistics", "string", "subprocess", "tarfile", "textwrap", "threading", "typing",
    "unittest", "urllib", "uuid", "zipfile",
]
C_HEADERS = ["object.h", "unicodeobject.h", "abstract.h", "listobject.h", "dictobject.h", "pyerrors.h",
             "longobject.h", "ceval.h", "import.h", "modsupport.h"]

SPECIAL_STRINGS = [
    "<|im_end|>", "<|im_start|>", "<|im_start|>user", "<|im_start|>assistant\n", "<|endoftext|>",
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁call▁begin｜>",
    "<s>", "</s>", "<unk>", "[BOS]", "[EOS]", "[EOT]", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>",
    "<|im_system|>", "<|start_header_id|>", "<|end_header_id|>", "<think>", "</think>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|vision_pad|>", "<|im_end", "im_end|>", "<|IM_END|>", "< s>",
    "<s >", "<|reserved_token_3|>", "[INST]", "[/INST]",
]

EMOJI_ZWJ = ["👨\u200d👩\u200d👧\u200d👦", "👩\u200d💻", "🏳️\u200d🌈", "🏴\u200d☠️", "👨\u200d🍳", "🧑\u200d🤝\u200d🧑",
             "❤️\u200d🔥", "👁️\u200d🗨️", "🐕\u200d🦺", "👩🏽\u200d🚀", "🧔🏿\u200d♂️", "👨🏻\u200d❤️\u200d💋\u200d👨🏼"]
EMOJI_BASE = ["😀", "😂", "🥲", "🤖", "🎉", "🔥", "✨", "🚀", "🍣", "🐍", "☕", "⚡", "🌍", "🧠", "💡", "📦", "✅",
              "❌", "⭐", "🙏", "👍", "👋", "💪", "🤝", "🫶", "🪐", "🦀", "☃️", "♻️", "©️", "™️", "↔️"]
SKIN_TONES = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
TONABLE = ["👍", "👋", "💪", "🙏", "👏", "🤞", "✌️", "🧑", "👶", "🏃"]
FLAG_CODES = ["US", "GB", "FR", "DE", "JP", "CN", "KR", "IN", "BR", "EG", "TH", "UA", "ZA", "MX", "SA", "IL"]
KEYCAPS = ["#️⃣", "1️⃣", "7️⃣", "*️⃣", "🔟"]

ACCENTED_WORDS = ["café", "naïve", "résumé", "Ångström", "Zürich", "São Paulo", "Dvořák", "Łódź", "Øresund",
                  "Tiếng Việt", "Ελληνικά", "français", "Müller", "mañana", "Åland", "crème brûlée",
                  "Nguyễn", "İstanbul", "Þórsmörk", "piñata", "façade", "coöperate", "Pokémon", "Ǆemal"]
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0302", "\u0303", "\u030a", "\u0327", "\u0323", "\u0306", "\u20dd",
             "\u0338", "\u0361", "\u093c", "\u05b7"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", "\u2009", "\u200b", "\u202f", "\x0b",
          "\x0c", "\u2028", "\r", "    ", "\t\t"]


def _docstrings(module_dir_or_file):
    paths = sorted(module_dir_or_file.rglob("*.py")) if module_dir_or_file.is_dir() else [module_dir_or_file]
    for path in paths:
        if "test" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    yield doc


def _module_path(name):
    d = STDLIB / name
    return d if d.is_dir() else STDLIB / (name + ".py")


def prose(rng, n):
    """English paragraphs and sentences from stdlib docstrings, 10-300 bytes mostly."""
    pieces = []
    for mod in PROSE_MODULES:
        for doc in _docstrings(_module_path(mod)):
            for para in doc.split("\n\n"):
                para = para.strip()
                if 10 <= len(para.encode()) <= 240 and not para.startswith(">>>"):
                    pieces.append(para)
    rng.shuffle(pieces)
    return pieces[:n]


def python_code(rng, n):
    out = []
    files = sorted(p for m in PROSE_MODULES for p in ([_module_path(m)] if _module_path(m).is_file()
                                                        else sorted(_module_path(m).rglob("*.py"))))
    while len(out) < n:
        path = rng.choice(files)
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        if len(lines) < 5:
            continue
        start = rng.randrange(len(lines))
        chunk = "".join(lines[start:start + rng.randint(1, 4)])
        if chunk.strip():
            out.append(chunk[:240])
    return out


def c_code(rng, n):
    out = []
    headers = [C_INCLUDE / h for h in C_HEADERS if (C_INCLUDE / h).exists()]
    while len(out) < n:
        lines = rng.choice(headers).read_text(encoding="utf-8").splitlines(keepends=True)
        start = rng.randrange(len(lines))
        chunk = "".join(lines[start:start + rng.randint(1, 4)])
        if chunk.strip():
            out.append(chunk[:240])
    return out


def json_text(rng, fakers, n):
    out = []
    en = fakers["en_US"]
    for _ in range(n):
        obj = {"id": rng.randint(0, 10**9), "name": en.name(), "ok": rng.random() < 0.5, "score": round(rng.uniform(-1e3, 1e3), rng.randint(0, 6)),
               "tags": [en.word() for _ in range(rng.randint(0, 4))], "nested": {"city": rng.choice(list(fakers.values())).city(), "n": None}}
        keys = list(obj)
        rng.shuffle(keys)
        obj = {k: obj[k] for k in keys[:rng.randint(1, len(keys))]}
        indent = rng.choice([None, None, 2, 4, "\t"])
        out.append(json.dumps(obj, ensure_ascii=rng.random() < 0.3, indent=indent))
    return out


def localized(fake, rng, n, lorem=True):
    out = []
    gens = [fake.name, fake.address, fake.city]
    if lorem:
        gens += [lambda: fake.sentence(nb_words=rng.randint(3, 12)), lambda: fake.text(max_nb_chars=rng.randint(20, 120)),
                 lambda: fake.paragraph(nb_sentences=rng.randint(1, 2))]
    if hasattr(fake, "company"):
        gens.append(fake.company)
    for _ in range(n):
        out.append(rng.choice(gens)())
    return out


def korean(fake, rng, n):
    out = []
    for _ in range(n):
        parts = [rng.choice([fake.name, fake.address, fake.city, fake.company])() for _ in range(rng.randint(1, 4))]
        out.append(rng.choice([" ", ", ", "\n", "은 ", "에서 "]).join(parts) + rng.choice(["", ".", "입니다.", "?", "!"]))
    return out


def devanagari(fakers, rng, n):
    out = []
    locs = [fakers["hi_IN"], fakers["mr_IN"], fakers["ne_NP"]]
    for _ in range(n):
        fake = rng.choice(locs)
        parts = [rng.choice([fake.name, fake.address, fake.city])() for _ in range(rng.randint(1, 4))]
        out.append(rng.choice([" ", ", ", "। ", "\n"]).join(parts) + rng.choice(["", "।", " १२३", "?"]))
    return out


def emoji(rng, fakers, n):
    out = []
    en = fakers["en_US"]
    for _ in range(n):
        k = rng.random()
        if k < 0.25:
            s = "".join(rng.choice(EMOJI_ZWJ + EMOJI_BASE) for _ in range(rng.randint(1, 6)))
        elif k < 0.45:
            s = "".join(rng.choice(TONABLE) + rng.choice(SKIN_TONES) for _ in range(rng.randint(1, 4)))
        elif k < 0.6:
            s = "".join(chr(0x1F1E6 + ord(a) - 65) + chr(0x1F1E6 + ord(b) - 65) for a, b in rng.sample(FLAG_CODES, rng.randint(1, 4)))
            if rng.random() < 0.3:
                s = s[:-1]  # a lone regional indicator
        elif k < 0.7:
            s = rng.choice(KEYCAPS) + " " + rng.choice(["🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F", "☺", "☺️", "\ufe0f", "\u200d"])
        else:
            words = en.sentence(nb_words=rng.randint(3, 10)).split()
            for _ in range(rng.randint(1, 3)):
                words.insert(rng.randrange(len(words) + 1), rng.choice(EMOJI_ZWJ + EMOJI_BASE + TONABLE))
            s = rng.choice([" ", ""]).join(words)
        out.append(s)
    return out


def combining(rng, n):
    out = []
    for _ in range(n):
        k = rng.random()
        words = rng.sample(ACCENTED_WORDS, rng.randint(1, 4))
        s = " ".join(words)
        if k < 0.3:
            s = unicodedata.normalize("NFD", s)
        elif k < 0.45:
            s = unicodedata.normalize("NFC", s) + " / " + unicodedata.normalize("NFD", s)
        elif k < 0.6:
            s = unicodedata.normalize(rng.choice(["NFKC", "NFKD"]), s + " ﬁ ① ²")
        elif k < 0.75:  # stacked / unusual combining marks, some on spaces or at the start
            base = rng.choice(["a", "e", "Z", " ", "", "ı", "\u0915", "ﾟ", "ア"])
            s = base + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 8))) + rng.choice(["", " x", "!"])
        elif k < 0.85:  # Hangul: precomposed syllables vs conjoining jamo
            h = "".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(rng.randint(1, 6)))
            s = rng.choice([h, unicodedata.normalize("NFD", h), h + " " + unicodedata.normalize("NFD", h)])
        else:  # Japanese dakuten composed/decomposed
            s = rng.choice(["が", "パ", "ヴ"]) * rng.randint(1, 3)
            s = unicodedata.normalize(rng.choice(["NFC", "NFD"]), s + "ガギグ")
        out.append(s)
    return out


def whitespace(rng, fakers, n):
    out = []
    en = fakers["en_US"]
    for _ in range(n):
        k = rng.random()
        if k < 0.2:
            s = "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 12)))
        elif k < 0.5:
            words = en.sentence(nb_words=rng.randint(2, 10)).split()
            s = "".join(w + rng.choice(SPACES) for w in words)
        elif k < 0.7:
            s = rng.choice(SPACES) * rng.randint(1, 40) + en.word() + rng.choice(SPACES) * rng.randint(0, 40)
        elif k < 0.85:
            s = "def f(x):\r\n" + rng.choice(["\t", "    ", "  \t"]) + "return x  \r\n\r\n" + "\n" * rng.randint(0, 5)
        else:
            s = " " * rng.randint(1, 3) + en.sentence() + " " * rng.randint(1, 3)
        out.append(s)
    return out


def digits(rng, n):
    out = []
    for _ in range(n):
        k = rng.random()
        if k < 0.3:
            s = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 80)))
        elif k < 0.5:
            s = f"{rng.randint(-10**12, 10**12):,}" + rng.choice(["", " USD", "€", "%"])
        elif k < 0.65:
            s = repr(rng.uniform(-1e6, 1e6)) + " " + f"{rng.random():.3e}"
        elif k < 0.8:
            s = "".join(chr(rng.choice([0x660, 0x6F0, 0x966, 0xE50, 0xFF10, 0x1D7CE])+rng.randint(0, 9)) for _ in range(rng.randint(1, 12)))
        else:
            s = f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23)}:{rng.randint(0, 59):02d} v{rng.randint(0, 9)}.{rng.randint(0, 99)}.{rng.randint(0, 999)}"
        out.append(s)
    return out


def special_text(rng, fakers, n):
    out = []
    en = fakers["en_US"]
    for _ in range(n):
        toks = [rng.choice(SPECIAL_STRINGS) for _ in range(rng.randint(1, 3))]
        parts = []
        for t in toks:
            sep_l, sep_r = rng.choice(["", " ", "\n", "  "]), rng.choice(["", " ", "\n", "  "])
            parts.append(sep_l + t + sep_r + (en.word() if rng.random() < 0.6 else ""))
        s = "".join(parts)
        if rng.random() < 0.3:
            s = en.sentence() + s
        out.append(s)
    return out


def single_chars(rng, n):
    out = [""] * 3 + [chr(c) for c in range(0x20, 0x7F)] + [chr(c) for c in range(0, 0x20)] + ["\x7f", "\x80", "\xa0", "\xad", "\ufeff", "\ufffd", "\U0010FFFF", "\ue000", "\ufdd0"]
    while len(out) < n:
        out.append(chr(rng.choice([rng.randint(0xA0, 0x2FFF), rng.randint(0x3000, 0x9FFF), rng.randint(0xAC00, 0xD7A3),
                                   rng.randint(0xE000, 0xFFFD), rng.randint(0x10000, 0x1FAFF), rng.randint(0x20000, 0x2A6DF)])))
    return out[:n]


def mixed(rng, pools, n):
    names = sorted(pools)
    out = []
    for _ in range(n):
        parts = [rng.choice(pools[rng.choice(names)]) for _ in range(rng.randint(2, 4))]
        parts = [p[:rng.randint(5, 40)] for p in parts]
        out.append(rng.choice(["", " ", "\n", " - "]).join(parts))
    return out


def long_strings(rng, pools, n):
    names = sorted(pools)
    out = []
    for _ in range(n):
        target = rng.randint(2000, 5000)
        buf, size = [], 0
        while size < target:
            p = rng.choice(pools[rng.choice(names)])
            buf.append(p)
            size += len(p.encode())
        out.append(rng.choice(["\n", " ", "\n\n"]).join(buf))
    return out


INVALID = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xed\xa0\xbd\xed\xb8\x80", b"\x80", b"\xbf", b"\x80\x80\x80", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc3",
           b"\xf4\x90\x80\x80", b"\xf5\x80", b"\xf8\x88\x80\x80\x80", b"\xc1\xbf", b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc"]


def invalid_utf8(rng, pools, n):
    names = sorted(pools)
    out = []
    while len(out) < n:
        base = rng.choice(pools[rng.choice(names)])[:100].encode()
        for _ in range(rng.randint(1, 3)):
            k = rng.random()
            if k < 0.6:
                at = rng.randint(0, len(base))
                base = base[:at] + rng.choice(INVALID) + base[at:]
            elif k < 0.85 and len(base) > 1:  # cut in the middle of a multi-byte sequence
                base = base[:rng.randint(1, len(base) - 1)] + base[rng.randint(0, len(base) - 1):]
            else:
                base = base + rng.choice(INVALID)
        try:
            base.decode("utf-8")
        except UnicodeDecodeError:
            out.append(base)
    return out


def make_fakers(seed):
    fakers = {}
    for loc in ["en_US", "zh_CN", "zh_TW", "ja_JP", "ko_KR", "ar_AA", "hi_IN", "mr_IN", "ne_NP", "th_TH",
                "ru_RU", "el_GR", "he_IL", "vi_VN", "de_DE", "fr_FR", "fa_IR", "hy_AM", "bn_BD", "uk_UA"]:
        f = Faker(loc)
        f.seed_instance(seed)
        fakers[loc] = f
    return fakers


def build(seed=20240611):
    """Returns [(category, str | bytes)], in a fixed order."""
    rng = random.Random(seed)
    fk = make_fakers(seed)
    cats = {}
    cats["prose_en"] = prose(rng, 3300)
    cats["code_python"] = python_code(rng, 1500)
    cats["code_c"] = c_code(rng, 600)
    cats["code_json"] = json_text(rng, fk, 700)
    cats["chinese"] = localized(fk["zh_CN"], rng, 900) + localized(fk["zh_TW"], rng, 300)
    cats["japanese"] = localized(fk["ja_JP"], rng, 1000)
    cats["korean"] = korean(fk["ko_KR"], rng, 900)
    cats["arabic"] = localized(fk["ar_AA"], rng, 800, lorem=True) + localized(fk["fa_IR"], rng, 200)
    cats["devanagari"] = devanagari(fk, rng, 800)
    cats["thai"] = localized(fk["th_TH"], rng, 800)
    cats["other_scripts"] = [s for loc in ["ru_RU", "el_GR", "he_IL", "vi_VN", "de_DE", "fr_FR", "hy_AM", "bn_BD", "uk_UA"]
                             for s in localized(fk[loc], rng, 120, lorem=hasattr(fk[loc], "paragraph"))]
    cats["emoji"] = emoji(rng, fk, 1200)
    cats["combining"] = combining(rng, 900)
    cats["whitespace"] = whitespace(rng, fk, 1000)
    cats["digits"] = digits(rng, 700)
    cats["special_token_text"] = special_text(rng, fk, 900)
    cats["single_chars"] = single_chars(rng, 600)
    pools = {k: v for k, v in cats.items() if k != "single_chars"}
    cats["mixed_script"] = mixed(rng, pools, 1600)
    cats["long"] = long_strings(rng, pools, 12)
    cats["invalid_utf8"] = invalid_utf8(rng, pools, 430)
    entries = [(c, s) for c, items in cats.items() for s in items]
    return entries
