#!/usr/bin/env python3
"""The bundled model's training text: the English prose of three documentation sets Debian 12 ships.

Sources (SOURCE_SETS; `apt-get install python3.11-doc sphinx-doc python-django-doc`): the reStructuredText
sources of the Python 3.11 documentation (PSF License Version 2, examples Zero-Clause BSD) and of the Sphinx
documentation (BSD-2-Clause), and the HTML pages of the Django documentation (BSD-3-Clause); the model's
NOTICE says so.

What is kept: prose paragraphs (markup roles reduced to their text, list markers dropped). What is dropped:
code and literal blocks, doctest sessions, tables, directives that hold no prose (index, toctree, code-block,
...), comments, link targets, section adornments, paragraphs of fewer than six words, and the changelog
(issue numbers, not prose). Each section title with its first paragraph also becomes one chat exchange
(ChatML: a user asks about the title, the assistant answers with the paragraph), so that the chat template
leads somewhere.

Writes one JSON document per line: {"kind": "prose" | "chat", "split": "train" | "val", "set": ..., "text": ...}; a
document's split comes from a stable hash of its source file, so that validation text is never trained on.

Usage: python3 tools/bundled_model/prepare_text.py --out corpus.jsonl [--sets python,sphinx,django]
"""

import argparse
import hashlib
import html.parser
import json
import os
import re
import sys

# Directives whose indented body is prose worth keeping (the directive line itself, a signature or a version,
# is dropped). Every other directive's body is dropped with it.
PROSE_DIRECTIVES = {
    "note", "warning", "versionadded", "versionchanged", "deprecated", "deprecated-removed", "function", "method",
    "class", "attribute", "data", "exception", "decorator", "decoratormethod", "classmethod", "staticmethod",
    "abstractmethod", "coroutinefunction", "coroutinemethod", "describe", "seealso", "impl-detail", "tip",
    "important", "attention", "caution", "hint", "admonition", "topic", "sidebar", "glossary", "envvar", "option",
    "cmdoption", "c:function", "c:macro", "c:type", "c:member", "c:var", "c:struct", "pdbcommand", "opcode",
}
ADORNMENT = re.compile(r"^([=\-~^\"'`#*+_.:<>])\1{2,}\s*$")
DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::(.*)$")
EXPLICIT = re.compile(r"^(\s*)\.\.(\s|$)")  # comments, targets, substitutions, footnotes
BULLET = re.compile(r"^(\s*)([*+\-]|#\.|\d+\.|\(\w\)|\w\))\s+(.*)$")
FIELD = re.compile(r"^\s*:[^:]+:\s*(.*)$")


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def clean_inline(text):
    """reStructuredText inline markup reduced to its text."""
    text = re.sub(r":[\w:.+-]+:`([^`]*)`", lambda m: role_text(m.group(1)), text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"`([^`<]+?)\s*<[^>]*>`_{1,2}", r"\1", text)
    text = re.sub(r"`([^`]+)`_{1,2}", r"\1", text)
    text = re.sub(r"`([^`]+)`", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\1", text)
    text = re.sub(r"\|[\w -]+\|_?", "", text)
    text = re.sub(r"\[#?\w*\]_", "", text)
    text = re.sub(r"\\(.)", r"\1", text)
    return re.sub(r"\s+", " ", text).strip()


def role_text(inner):
    """The text a role such as :func:`~os.path.join` or :ref:`the tutorial <tut-intro>` shows."""
    m = re.match(r"^(.*?)\s*<[^>]*>$", inner)
    if m and m.group(1):
        return m.group(1)
    inner = inner.lstrip("!")
    if inner.startswith("~"):
        return inner[1:].split(".")[-1]
    return inner


def is_prose(paragraph):
    words = paragraph.split()
    if len(words) < 6 or "http" in paragraph or "::" in paragraph:
        return False
    letters = sum(c.isalpha() or c.isspace() for c in paragraph)
    return letters >= 0.85 * len(paragraph) and paragraph[0].isalnum()


def parse(text):
    """The file's prose paragraphs, and (title, first paragraph) per section."""
    lines = text.split("\n")
    paragraphs, sections = [], []
    current, current_indent = [], 0
    skip_deeper_than = None  # drop lines indented deeper than this (a dropped block's body)
    literal_after = None  # the paragraph before ends in '::': the next deeper block is literal
    title, title_open = None, False

    def flush():
        nonlocal current, title_open
        if current:
            p = clean_inline(" ".join(current))
            if is_prose(p):
                paragraphs.append(p)
                if title is not None and title_open:
                    sections.append((title, p))
                    title_open = False
        current = []

    for i, line in enumerate(lines):
        stripped = line.strip()
        ind = indent_of(line)
        if skip_deeper_than is not None:
            if not stripped or ind > skip_deeper_than:
                continue
            skip_deeper_than = None
        if literal_after is not None:
            if not stripped:
                continue
            if ind > literal_after:
                skip_deeper_than = literal_after
                literal_after = None
                continue
            literal_after = None
        if not stripped:
            flush()
            continue
        if ADORNMENT.match(stripped):
            flush()
            continue
        # A section title: a line whose next line is an adornment at least as long.
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if ADORNMENT.match(nxt) and len(nxt) >= len(stripped) and ind == 0:
            flush()
            title = clean_inline(stripped.replace(" --- ", ": "))
            title_open = True
            continue
        m = DIRECTIVE.match(line)
        if m:
            flush()
            name = m.group(2)
            if name not in PROSE_DIRECTIVES:
                skip_deeper_than = ind
            continue
        if EXPLICIT.match(line):
            flush()
            skip_deeper_than = ind
            continue
        if stripped.startswith((">>>", "...")) or stripped.startswith(("+-", "+=", "|")):
            flush()
            continue
        f = FIELD.match(line)
        if f and not current:
            stripped = f.group(1).strip()
            if not stripped:
                continue
        b = BULLET.match(line)
        if b:
            flush()
            stripped = b.group(3)
            ind = len(b.group(1))
        if current and ind != current_indent and not b:
            flush()
        if not current:
            current_indent = ind
        if stripped.endswith("::"):
            stripped = stripped[:-2].rstrip() + (":" if not stripped[:-2].endswith(" ") else "")
            current.append(stripped)
            flush()
            literal_after = ind
            continue
        current.append(stripped)
    flush()
    return paragraphs, sections


QUESTIONS = ["What is {t}?", "Tell me about {t}.", "Explain {t}.", "What should I know about {t}?"]


def chat(title, answer, pick):
    if title.endswith("?"):
        q = title
    else:
        lowered = title[0].lower() + title[1:] if title[:2] != title[:2].upper() else title
        q = QUESTIONS[pick % len(QUESTIONS)].format(t=lowered)
    return f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n"


class HtmlProse(html.parser.HTMLParser):
    """Paragraphs (<p>, <li>, <dd> text outside code) and section titles (<h1>-<h3>) of a Sphinx HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs, self.sections = [], []
        self.stack, self.text, self.title, self.title_open, self.code = [], None, None, False, 0

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        if tag == "pre" or "highlight" in cls or tag in ("script", "style", "table"):
            self.code += 1
            self.stack.append(("code", tag))
            return
        self.stack.append(("tag", tag))
        if tag in ("p", "h1", "h2", "h3") and self.code == 0:
            self.text = []
        if tag == "a" and "headerlink" in cls:
            self.code += 1
            self.stack[-1] = ("code", tag)

    def handle_endtag(self, tag):
        while self.stack:
            kind, t = self.stack.pop()
            if kind == "code":
                self.code -= 1
            if t == tag:
                break
        if self.text is None or tag not in ("p", "h1", "h2", "h3"):
            return
        text = re.sub(r"\s+", " ", "".join(self.text)).strip().replace("\u00b6", "")
        self.text = None
        if tag == "p":
            if is_prose(text):
                self.paragraphs.append(text)
                if self.title and self.title_open:
                    self.sections.append((self.title, text))
                    self.title_open = False
        elif text:
            self.title, self.title_open = text, True

    def handle_data(self, data):
        if self.text is not None and self.code == 0:
            self.text.append(data)


def parse_html(text):
    p = HtmlProse()
    p.feed(text)
    return p.paragraphs, p.sections


# (folder, file suffix, parser): the prose of three documentation sets Debian 12 ships, each under a
# permissive licence (see models/<name>/NOTICE).
SOURCE_SETS = {
    "python": ("/usr/share/doc/python3.11/html/_sources", ".rst.txt", parse),  # python3.11-doc: PSF License 2
    "sphinx": ("/usr/share/doc/sphinx-doc/html/_sources", ".rst.txt", parse),  # sphinx-doc: BSD-2-Clause
    "django": ("/usr/share/doc/python-django-doc/html", ".html", parse_html),  # python-django-doc: BSD-3-Clause
}
SKIP = ("whatsnew/changelog", "genindex", "py-modindex", "search", "_modules", "releases/", "changes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--val-every", type=int, default=25, help="one source file in this many is validation text")
    ap.add_argument("--sets", default="python,sphinx,django", help="which documentation sets, comma-separated")
    args = ap.parse_args()
    files = []
    for name in args.sets.split(","):
        if name not in SOURCE_SETS:
            sys.exit(f"unknown set {name!r}; the sets are {', '.join(SOURCE_SETS)}")
        root_dir, suffix, parser = SOURCE_SETS[name]
        if not os.path.isdir(root_dir):
            sys.exit(f"{root_dir} does not exist: apt-get install python3.11-doc sphinx-doc python-django-doc")
        for root, _, names in os.walk(root_dir):
            for n in names:
                if n.endswith(suffix):
                    files.append((name, root_dir, os.path.join(root, n), parser))
    files.sort(key=lambda f: f[2])
    counts = {"train": 0, "val": 0}
    chars = {"train": 0, "val": 0}
    with open(args.out, "w", encoding="utf-8") as out:
        for set_name, root_dir, path, parser in files:
            rel = os.path.relpath(path, os.path.dirname(root_dir.rstrip("/")))
            if any(s in rel for s in SKIP):
                continue
            digest = int(hashlib.sha256(rel.encode()).hexdigest(), 16)
            split = "val" if digest % args.val_every == 0 else "train"
            with open(path, encoding="utf-8") as f:
                paragraphs, sections = parser(f.read())
            if paragraphs:
                text = "\n\n".join(paragraphs)
                out.write(json.dumps({"kind": "prose", "split": split, "set": set_name, "source": rel, "text": text}) + "\n")
                counts[split] += 1
                chars[split] += len(text)
            for j, (t, p) in enumerate(sections):
                text = chat(t, p, digest + j)
                out.write(json.dumps({"kind": "chat", "split": split, "set": set_name, "source": rel, "text": text}) + "\n")
                chars[split] += len(text)
    print(f"{len(files)} source files; documents train {counts['train']} val {counts['val']}; "
          f"characters train {chars['train']} val {chars['val']}")


if __name__ == "__main__":
    main()
