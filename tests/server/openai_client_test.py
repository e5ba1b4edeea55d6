"""The official `openai` Python client against `switchyard serve` on the bundled tokenizer model:
models, completions, chat, streaming with usage, stop strings, errors; streamed text equals the
non-streamed text for the same seed. Run by run_openai_client_test.sh inside its virtual environment."""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import openai


def start_server(binary, source_dir, log):
    model = os.path.join(source_dir, "tests/fixtures/text/qwen3_tiny_random")
    tokenizer = os.path.join(source_dir, "../shared/data/tokenizers/qwen3")
    proc = subprocess.Popen([binary, "serve", "--model", model, "--random-weights", "--tokenizer", tokenizer,
                             "--port", "0", "--api-key", "sk-test", "--served-model-name", "tiny"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        with open(log.name) as f:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    with open(log.name) as f:
        sys.exit("switchyard serve did not start:\n" + f.read())


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def stream_text(chunks, chat):
    text, usage, finish = "", None, None
    for c in chunks:
        if c.usage is not None and not c.choices:
            usage = c.usage
            continue
        choice = c.choices[0]
        text += (choice.delta.content or "") if chat else choice.text
        finish = choice.finish_reason or finish
    return text, usage, finish


def run(client):
    models = client.models.list()
    check([m.id for m in models.data] == ["tiny"], f"models: {models}")

    # Completions: non-streamed and streamed with the same seed give the same text.
    args = dict(model="tiny", prompt="Once upon a time", max_tokens=12, temperature=0.8, seed=11)
    extra = {"ignore_eos": True}  # vLLM's extension, sent as the client sends unknown fields
    full = client.completions.create(**args, extra_body=extra)
    check(full.object == "text_completion" and full.id.startswith("cmpl-"), f"completion: {full}")
    check(full.usage.completion_tokens == 12 and full.choices[0].finish_reason == "length", f"usage: {full.usage}")
    text, usage, finish = stream_text(
        client.completions.create(**args, extra_body=extra, stream=True, stream_options={"include_usage": True}),
        chat=False)
    check(text == full.choices[0].text, f"streamed {text!r} != {full.choices[0].text!r}")
    check(usage is not None and usage.completion_tokens == 12 and usage.prompt_tokens == full.usage.prompt_tokens,
          f"stream usage: {usage}")
    check(finish == "length", f"stream finish: {finish}")

    # Chat, the same both ways.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}]
    chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=10, temperature=0.7, seed=5,
                                          extra_body={"ignore_eos": True,
                                                      "chat_template_kwargs": {"enable_thinking": False}})
    check(chat.object == "chat.completion" and chat.choices[0].message.role == "assistant", f"chat: {chat}")
    text, usage, finish = stream_text(
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=10, temperature=0.7, seed=5,
                                       extra_body={"ignore_eos": True,
                                                   "chat_template_kwargs": {"enable_thinking": False}},
                                       stream=True, stream_options={"include_usage": True}),
        chat=True)
    check(text == chat.choices[0].message.content, f"chat streamed {text!r} != {chat.choices[0].message.content!r}")
    check(usage.total_tokens == chat.usage.total_tokens, f"chat usage {usage} != {chat.usage}")

    # A stop string cuts the text right before it.
    greedy = client.completions.create(model="tiny", prompt="The sea", max_tokens=16, temperature=0,
                                       extra_body=extra).choices[0].text
    words = [w for w in greedy.split(" ") if w]
    check(len(words) >= 3, f"greedy text too short for a stop-string check: {greedy!r}")
    stop = " " + words[2]
    cut = client.completions.create(model="tiny", prompt="The sea", max_tokens=16, temperature=0, stop=[stop],
                                    extra_body=extra)
    check(cut.choices[0].text == greedy[:greedy.find(stop)], f"cut {cut.choices[0].text!r} (stop {stop!r}, {greedy!r})")
    check(cut.choices[0].finish_reason == "stop", f"finish {cut.choices[0].finish_reason}")
    text, _, finish = stream_text(client.completions.create(model="tiny", prompt="The sea", max_tokens=16,
                                                            temperature=0, stop=stop, stream=True, extra_body=extra),
                                  chat=False)
    check(text == greedy[:greedy.find(stop)] and finish == "stop", f"streamed cut {text!r} {finish}")

    # Errors arrive as the client's exceptions.
    for call, error in [
        (lambda: client.completions.create(model="tiny", prompt="x", max_tokens=0), openai.BadRequestError),
        (lambda: client.completions.create(model="nope", prompt="x", max_tokens=1), openai.NotFoundError),
        (lambda: client.chat.completions.create(model="tiny", messages=[], max_tokens=1), openai.BadRequestError),
        (lambda: client.with_options(api_key="wrong").models.list(), openai.AuthenticationError),
    ]:
        try:
            call()
        except error as e:
            check(isinstance(e.body, dict) and "message" in e.body, f"error body: {e.body}")
            continue
        raise AssertionError(f"expected {error.__name__}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--source-dir", required=True)
    a = p.parse_args()
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        proc, port = start_server(a.binary, a.source_dir, log)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", max_retries=0)
            run(client)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        check(code == 0, f"serve exited with {code}")
    print(f"openai {openai.__version__}: models, completions, chat, streaming with usage, stop strings, errors: ok")


if __name__ == "__main__":
    main()
