"""Feature cases of the chat-template Jinja interpreter: small templates with their contexts, rendered by
Jinja2 configured exactly as transformers' apply_chat_template configures it, written to
tests/fixtures/text/jinja_cases.json for tests/text/test_jinja.cpp.

Pinned versions: tools/text_fixtures/jinja-requirements.txt (kept apart from requirements.txt, which belongs
to the tokenizer/chat fixture generator).

    /work/venv-text/bin/python tools/text_fixtures/make_jinja_cases.py

Each case: {"name", "template", "context", then "output", or "error": "syntax" | "render" | "raised" with
"message" (raise_exception's message for "raised") and "line" (for "syntax")}.
"""

import json
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from jinja_cases import CASES


class GenerationTag(Extension):
    """transformers' AssistantTracker as the renderer sees it: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    """transformers.utils.chat_template_utils._cached_compile_jinja_template's environment."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def transformers_render(template, context):
    """The same case through transformers itself, when it is installed, to check make_environment."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        return None
    return _compile_jinja_template(template).render(**context)


def run_case(env, name, template, context):
    case = {"name": name, "template": template, "context": context}
    try:
        compiled = env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as e:
        case.update(error="syntax", message=e.message, line=e.lineno)
        return case
    except SyntaxError as e:  # Python refused the compiled code ('break' outside loop): no template line
        case.update(error="syntax", message=str(e))
        return case
    try:
        case["output"] = compiled.render(**context)
    except jinja2.exceptions.TemplateSyntaxError as e:
        case.update(error="syntax", message=e.message, line=e.lineno)
    except Exception as e:  # noqa: BLE001 -- the template's error is the expected outcome
        raised = type(e) is jinja2.exceptions.TemplateError
        case.update(error="raised" if raised else "render", message=str(e))
    else:
        reference = transformers_render(template, context)
        assert reference is None or reference == case["output"], (name, reference, case["output"])
    return case


def main():
    env = make_environment()
    names = set()
    cases = []
    for name, template, context in CASES:
        assert name not in names, f"duplicate case name {name}"
        names.add(name)
        cases.append(run_case(env, name, template, context))
    out = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "text" / "jinja_cases.json"
    out.write_text(json.dumps({"jinja2": jinja2.__version__, "cases": cases}, ensure_ascii=False, indent=1) + "\n",
                   encoding="utf-8")
    errors = sum("error" in c for c in cases)
    print(f"{len(cases)} cases ({errors} errors) -> {out}")


if __name__ == "__main__":
    main()
