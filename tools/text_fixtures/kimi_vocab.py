"""A small Kimi-K2-style tiktoken vocabulary: byte-level BPE trained with `tokenizers`' BpeTrainer on
text that is not the test corpus, written as Kimi's tiktoken.model + tokenizer_config.json."""

import base64
import json
import random

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

import corpus

# Kimi K2's pat_str, verbatim from tokenization_kimi.py (moonshotai/Kimi-K2-Instruct, TikTokenTokenizer).
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
# Only for training: Oniguruma has no class intersection (&&), so Han is taken first and the letter
# classes keep it. The trained merges are then used under KIMI_PAT_STR by tiktoken.
TRAIN_PAT_STR = KIMI_PAT_STR.replace("&&[^\\p{Han}]", "")

# Disjoint from corpus.PROSE_MODULES.
TRAIN_MODULES = ["ast", "base64", "bdb", "cgi", "cmd", "code", "codecs", "contextlib", "copy", "dis", "doctest",
                 "fnmatch", "ftplib", "gettext", "glob", "gzip", "hashlib", "imaplib", "locale", "netrc",
                 "operator", "optparse", "os", "pdb", "platform", "poplib", "queue", "quopri", "sched",
                 "selectors", "shlex", "smtplib", "socket", "socketserver", "ssl", "tempfile", "timeit",
                 "tokenize", "trace", "traceback", "tracemalloc", "turtle", "wave", "weakref", "webbrowser",
                 "xml", "zipapp"]
TRAIN_LOCALES = ["en_US", "zh_CN", "zh_TW", "ja_JP", "ko_KR", "ar_AA", "hi_IN", "th_TH", "ru_RU", "el_GR",
                 "he_IL", "vi_VN", "de_DE", "fr_FR", "bn_BD"]

VOCAB_SIZE = 12000
NAMED_SPECIALS = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                  "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>", "<|tool_calls_section_begin|>",
                  "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                  "<|tool_call_end|>"]
N_RESERVED = 6


def training_text(seed):
    rng = random.Random(seed)
    texts = []
    for mod in TRAIN_MODULES:
        path = corpus.STDLIB / mod
        files = sorted(path.rglob("*.py")) if path.is_dir() else [corpus.STDLIB / (mod + ".py")]
        for f in files:
            if f.exists() and "test" not in f.parts:
                texts.append(f.read_text(encoding="utf-8"))
    fakers = corpus.make_fakers(seed)
    for loc in TRAIN_LOCALES:
        fake = fakers[loc]
        gens = [fake.name, fake.address, fake.city] + ([fake.paragraph] if hasattr(fake, "paragraph") else [])
        texts.append("\n".join(rng.choice(gens)() for _ in range(3000)))
    emoji = corpus.EMOJI_BASE + corpus.EMOJI_ZWJ
    texts.append(" ".join(rng.choice(emoji) for _ in range(3000)))
    return texts


def train(seed):
    """Returns the mergeable ranks {token bytes: rank}: the 256 single bytes first, then merges in order."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(TRAIN_PAT_STR), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(seed), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    byte_of = {ch: b for b, ch in enumerate(_bytes_to_unicode())}

    def raw(token):
        return bytes(byte_of[c] for c in token)

    ranks = {bytes([b]): b for b in range(256)}
    for merge in model["merges"]:
        left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
        merged = raw(left) + raw(right)
        if merged not in ranks:
            ranks[merged] = len(ranks)
    return ranks


def _bytes_to_unicode():
    """GPT-2's byte -> printable char table (the one ByteLevel uses), indexed by byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def special_tokens(n_base):
    names = NAMED_SPECIALS + [f"<|reserved_token_{i}|>" for i in range(N_RESERVED)]
    return {name: n_base + i for i, name in enumerate(names)}


CHAT_TEMPLATE = (
    "{%- macro render_content(msg) -%}"
    "{%- if msg.content is string -%}{{ msg.content }}"
    "{%- elif msg.content is none -%}"
    "{%- else -%}{%- for part in msg.content -%}{%- if part.type == 'text' -%}{{ part.text }}{%- endif -%}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- if tools -%}"
    "<|im_system|>tool_declare<|im_middle|>{{ tools | tojson(separators=(',', ':')) }}<|im_end|>"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first and message.role != 'system' -%}"
    "<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|>"
    "{%- endif -%}"
    "{%- if message.role == 'system' -%}<|im_system|>{{ message.name | default('system') }}<|im_middle|>"
    "{%- elif message.role == 'user' -%}<|im_user|>{{ message.name | default('user') }}<|im_middle|>"
    "{%- elif message.role == 'assistant' -%}<|im_assistant|>{{ message.name | default('assistant') }}<|im_middle|>"
    "{%- elif message.role == 'tool' -%}<|im_system|>tool<|im_middle|>## Return of {{ message.tool_call_id }}\n"
    "{%- else -%}{{ raise_exception('Unknown role: ' ~ message.role) }}"
    "{%- endif -%}"
    "{%- if message.role == 'assistant' and message.reasoning_content -%}<think>{{ message.reasoning_content | trim }}</think>"
    "{%- endif -%}"
    "{{ render_content(message) }}"
    "{%- if message.role == 'assistant' and message.tool_calls -%}"
    "<|tool_calls_section_begin|>"
    "{%- for tc in message.tool_calls -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    "<|tool_call_begin|>functions.{{ f.name }}:{{ loop.index0 }}<|tool_call_argument_begin|>"
    "{%- if f.arguments is string -%}{{ f.arguments }}{%- else -%}{{ f.arguments | tojson }}{%- endif -%}"
    "<|tool_call_end|>"
    "{%- endfor -%}"
    "<|tool_calls_section_end|>"
    "{%- endif -%}"
    "<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)


def write_folder(folder, ranks):
    folder.mkdir(parents=True, exist_ok=True)
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    assert [r for _, r in by_rank] == list(range(len(by_rank)))
    with open(folder / "tiktoken.model", "w", encoding="ascii", newline="\n") as f:
        for token, rank in by_rank:
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    specials = special_tokens(len(ranks))
    config = {
        "added_tokens_decoder": {str(i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for name, i in specials.items()},
        "additional_special_tokens": ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                                      "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>",
                                      "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                                      "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"],
        "bos_token": "[BOS]",
        "eos_token": "[EOS]",
        "pad_token": "<|reserved_token_0|>",
        "unk_token": "<|reserved_token_1|>",
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "tokenizer_class": "TikTokenTokenizer",
        "chat_template": CHAT_TEMPLATE,
    }
    with open(folder / "tokenizer_config.json", "w", encoding="utf-8", newline="\n") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    return specials
