"""Seeded chat conversations for the chat-template fixtures: roles, tool calls and results, reasoning,
tool definitions, unicode and Jinja-looking content, generation-prompt and enable_thinking variants."""

import json
import random

from faker import Faker

JINJA_LOOKING = ["{{ x }}", "{% if %}", "{%- endif -%}", "{# comment #}", "{{ messages[0] }}", "{% raw %}", "}}{{",
                 "{%", "{{- '<|im_end|>' -}}", "{{ 7*7 }}"]
UNICODE_BITS = ["你好，世界！", "こんにちは", "안녕하세요", "مرحبا بالعالم", "नमस्ते", "สวัสดี", "Привет", "café ☕",
                "👨\u200d👩\u200d👧 family", "🇯🇵🇫🇷", "e\u0301", "\u200b", "\t", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "'quotes' and \"double\"",
                "back\\slash", "<|im_end|>", "<｜end▁of▁sentence｜>", "</think>", "<tool_call>", "[EOS]"]
ROLES_EXTRA = ["developer", "function"]

TOOL_NAMES = ["get_weather", "search_docs", "run_sql", "send_email", "calc", "translate", "list_files", "book_flight"]


def _text(rng, fake, lo=1, hi=3):
    k = rng.random()
    if k < 0.08:
        return ""
    if k < 0.5:
        return fake.sentence(nb_words=rng.randint(3, 14))
    if k < 0.7:
        return " ".join(fake.sentence() for _ in range(rng.randint(lo, hi))) + rng.choice(["", "\n", "\n\n", "  "])
    parts = [fake.sentence(nb_words=rng.randint(2, 6))]
    for _ in range(rng.randint(1, 3)):
        parts.append(rng.choice(JINJA_LOOKING + UNICODE_BITS))
    rng.shuffle(parts)
    return rng.choice([" ", "\n", ""]).join(parts)


def _schema(rng, depth=0):
    t = rng.choice(["string", "integer", "number", "boolean", "array", "object"] if depth < 2 else ["string", "integer"])
    prop = {"type": t}
    if rng.random() < 0.7:
        prop["description"] = rng.choice(["The city name, e.g. Zürich", "Höhe in Metern", "检索的关键词", "単位",
                                          "Limit (1-100)", "Path like \"/tmp/x\"", "Emoji allowed 🙂", "A value"])
    if t == "string" and rng.random() < 0.4:
        prop["enum"] = rng.sample(["celsius", "fahrenheit", "kelvin", "ascending", "descending", "ja", "nein"], rng.randint(2, 3))
    if t in ("integer", "number") and rng.random() < 0.4:
        prop["minimum"] = rng.choice([0, 1, -1.5])
        prop["maximum"] = rng.choice([100, 1e3, 2.5])
    if t == "array":
        prop["items"] = _schema(rng, depth + 1)
    if t == "object":
        props = {f"field_{i}": _schema(rng, depth + 1) for i in range(rng.randint(1, 3))}
        prop["properties"] = props
        prop["required"] = sorted(rng.sample(list(props), rng.randint(0, len(props))))
    if rng.random() < 0.15:
        prop["default"] = rng.choice([None, True, 0, "x", [1, 2]])
    return prop


def _tool(rng, name):
    props = {p: _schema(rng) for p in rng.sample(["location", "query", "limit", "unit", "options", "tags", "when", "dry_run"], rng.randint(0, 4))}
    params = {"type": "object", "properties": props, "required": sorted(rng.sample(list(props), rng.randint(0, len(props))))}
    function = {"name": name, "description": rng.choice(["Get the current weather in a given location.", "Sucht in der Dokumentation.",
                                                          "执行 SQL 查询并返回结果。", "Send an email 📧 to someone.", "", "Evaluate {{ expr }}."]),
                "parameters": params}
    if rng.random() < 0.2:
        del function["description"]
    return {"type": "function", "function": function}


def _arguments(rng, fake):
    args = {}
    for key in rng.sample(["location", "query", "limit", "unit", "options", "flag", "ratio", "tags"], rng.randint(0, 4)):
        args[key] = rng.choice([fake.city(), fake.word(), rng.randint(-5, 500), rng.choice([0.5, 3.14, 1e-05, 100.0, -2.25]),
                                rng.random() < 0.5, None, [fake.word(), rng.randint(0, 9)], {"nested": {"deep": [1, "二", None]}},
                                "Zürich ☀️", "quote\"and\\back", "line1\nline2"])
    return args


def _tool_call(rng, fake, tools, i):
    names = [t["function"]["name"] for t in tools] if tools else TOOL_NAMES
    args = _arguments(rng, fake)
    as_string = rng.random() < 0.35
    function = {"name": rng.choice(names), "arguments": json.dumps(args, ensure_ascii=rng.random() < 0.5) if as_string else args}
    call = {}
    if rng.random() < 0.7:
        call["id"] = f"call_{rng.randrange(16**8):08x}_{i}"
    call["type"] = "function"
    call["function"] = function
    return call


def _assistant(rng, fake, tools, with_calls):
    msg = {"role": "assistant"}
    content = _text(rng, fake)
    if rng.random() < 0.15:
        content = f"<think>\n{fake.sentence()}\n</think>\n\n{content}"
    if with_calls and rng.random() < 0.3:
        content = rng.choice(["", None])
    msg["content"] = content
    if rng.random() < 0.3:
        msg["reasoning_content"] = rng.choice([fake.paragraph(nb_sentences=2), "", "\n思考中…\n", None])
    calls = []
    if with_calls:
        calls = [_tool_call(rng, fake, tools, i) for i in range(rng.choice([1, 1, 1, 2, 3]))]
        msg["tool_calls"] = calls
    return msg, calls


def _tool_results(rng, fake, calls):
    out = []
    for call in calls:
        msg = {"role": "tool"}
        if rng.random() < 0.3:
            msg["name"] = call["function"]["name"]
        msg["content"] = rng.choice([json.dumps({"result": fake.word(), "ok": True}), fake.sentence(), "", "42", "温度: 23℃ 🌤️",
                                     "<tool_response>nested</tool_response>"])
        if "id" in call:
            msg["tool_call_id"] = call["id"]
        out.append(msg)
    return out


def conversation(rng, fake):
    tools = [_tool(rng, n) for n in rng.sample(TOOL_NAMES, rng.randint(1, 4))] if rng.random() < 0.35 else None
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": _text(rng, fake)})
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        if rng.random() < 0.97:
            messages.append({"role": "user", "content": _text(rng, fake)})
        if rng.random() < 0.15:  # a second user or system turn in a row
            messages.append({"role": rng.choice(["user", "system"]), "content": _text(rng, fake)})
        with_calls = rng.random() < (0.6 if tools else 0.15)
        msg, calls = _assistant(rng, fake, tools, with_calls)
        messages.append(msg)
        if calls:
            messages.extend(_tool_results(rng, fake, calls))
            if rng.random() < 0.6:
                messages.append(_assistant(rng, fake, tools, False)[0])
    if rng.random() < 0.5 and messages[-1]["role"] == "assistant":
        messages.pop()
    if rng.random() < 0.04:
        messages.append({"role": rng.choice(ROLES_EXTRA), "content": _text(rng, fake)})
    if rng.random() < 0.03:
        messages.append({"role": "user", "content": [{"type": "text", "text": fake.sentence()}]})
    if rng.random() < 0.03:
        messages = [m for m in messages if m["role"] != "user"] or [{"role": "assistant", "content": "only me"}]
    add_gen = rng.random() < (0.8 if messages[-1]["role"] != "assistant" else 0.2)
    kwargs = {}
    k = rng.random()
    if k < 0.35:
        kwargs["enable_thinking"] = True
    elif k < 0.7:
        kwargs["enable_thinking"] = False
    if rng.random() < 0.2:
        kwargs["user_name"] = rng.choice([fake.first_name(), "Zoë", "李雷"])
    if rng.random() < 0.2:
        kwargs["max_items"] = rng.randint(0, 5)
    return {"messages": messages, "tools": tools, "add_generation_prompt": add_gen, "kwargs": kwargs}


def build(seed, n):
    rng = random.Random(seed)
    fake = Faker(["en_US"])
    fake.seed_instance(seed)
    convs = [conversation(rng, fake) for _ in range(n)]
    # Fixed edge cases, appended so that the seeded stream above stays stable.
    convs.append({"messages": [{"role": "user", "content": ""}], "tools": None, "add_generation_prompt": False, "kwargs": {}})
    convs.append({"messages": [{"role": "user", "content": "hi"}], "tools": [], "add_generation_prompt": True, "kwargs": {"enable_thinking": False}})
    return convs
