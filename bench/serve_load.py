"""Concurrent streaming load on an OpenAI-compatible /v1/completions endpoint: N requests of random token-id
prompts, at most C in flight, each streamed with usage; counts the requests that end with a usage chunk and
[DONE] and the expected number of tokens, and prints one summary line (JSON). A load check for `switchyard
serve`; the full serving benchmark is `switchyard bench serve`.

    python3 bench/serve_load.py --base-url http://127.0.0.1:30000 --num-requests 1024 --concurrency 1024 \
        --input-len 512 --output-len 128 --vocab 151936
"""
import argparse
import asyncio
import json
import random
import time

import aiohttp


async def one(session, url, model, prompt, output_len, sem, results):
    async with sem:
        t0 = time.perf_counter()
        body = {"model": model, "prompt": prompt, "max_tokens": output_len, "ignore_eos": True, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        first = None
        usage = None
        done = False
        try:
            async with session.post(url, json=body) as resp:
                if resp.status != 200:
                    results.append({"ok": False, "why": f"status {resp.status}: {(await resp.text())[:200]}"})
                    return
                async for raw in resp.content:
                    line = raw.decode().strip()
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    if data == "[DONE]":
                        done = True
                        break
                    chunk = json.loads(data)
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    if first is None and chunk.get("choices") and chunk["choices"][0].get("text"):
                        first = time.perf_counter()
        except Exception as e:  # noqa: BLE001 - every failure is counted, none stops the run
            results.append({"ok": False, "why": repr(e)})
            return
        end = time.perf_counter()
        got = usage["completion_tokens"] if usage else -1
        ok = done and got == output_len
        results.append({"ok": ok, "why": "" if ok else f"done={done} completion_tokens={got}",
                        "ttft": (first or end) - t0, "latency": end - t0, "tokens": got})


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:30000")
    ap.add_argument("--num-requests", type=int, default=1024)
    ap.add_argument("--concurrency", type=int, default=1024)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    prompts = [[rng.randrange(a.vocab) for _ in range(a.input_len)] for _ in range(a.num_requests)]
    sem = asyncio.Semaphore(a.concurrency)
    results = []
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    connector = aiohttp.TCPConnector(limit=a.concurrency)
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        async with session.get(a.base_url + "/v1/models") as resp:
            model = (await resp.json())["data"][0]["id"]
        await asyncio.gather(*[one(session, a.base_url + "/v1/completions", model, p, a.output_len, sem, results)
                               for p in prompts])
    duration = time.perf_counter() - t0
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    out_tokens = sum(r["tokens"] for r in ok)
    summary = {"requests": a.num_requests, "concurrency": a.concurrency, "completed": len(ok), "failed": len(failed),
               "duration_s": round(duration, 2), "output_tokens": out_tokens,
               "output_tok_per_s": round(out_tokens / duration, 1),
               "mean_ttft_s": round(sum(r["ttft"] for r in ok) / max(len(ok), 1), 3),
               "mean_latency_s": round(sum(r["latency"] for r in ok) / max(len(ok), 1), 3),
               "first_failures": [r["why"] for r in failed[:5]]}
    print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
