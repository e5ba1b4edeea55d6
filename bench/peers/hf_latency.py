#!/usr/bin/env python3
"""Times Hugging Face transformers on a config.json with random bf16 weights, the same workload as
`switchyard bench latency`: prefill of B prompts of --input-len tokens, then greedy decode steps with
the KV cache, median step time. Prints the same columns (prefill tok/s, decode step ms, decode tok/s,
memory floor and % of limit, with the floor computed from design.md's formula and the measured copy
bandwidth).

  python3 bench/peers/hf_latency.py --config bench/configs/qwen3-30b-a3b --batch 1,10,64 \
      --input-len 512 --output-len 128 --experts grouped_mm --json out.json
"""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def copy_bandwidth():
    a = torch.randn(1 << 28, device="cuda", dtype=torch.float32)  # 1 GiB
    b = torch.empty_like(a)
    times = []
    for i in range(12):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(s.elapsed_time(e))
    return 2 * a.numel() * 4 / (statistics.median(times) * 1e-3)


def floor_bytes(cfg, batch, context_tokens):
    """Bytes one decode step must read (bf16 weights and KV), design.md's formula."""
    h, v, layers = cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or h // heads
    e = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts")
    k = cfg.num_experts_per_tok
    inter = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
    attn = h * (heads * hd + 2 * kv_heads * hd) + heads * hd * h
    touched = e * (1 - (1 - k / e) ** batch)
    per_layer = 2 * attn + touched * 2 * 3 * h * inter + 4 * e * h
    kv = 2 * 2 * kv_heads * hd * layers
    return layers * per_layer + 2 * v * h + context_tokens * kv


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--batch", default="1,10,64")
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--experts", default="grouped_mm")
    p.add_argument("--json")
    a = p.parse_args()

    cfg = AutoConfig.from_pretrained(a.config)
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa",
                                                 experts_implementation=a.experts)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02)
    model.eval()
    torch.cuda.synchronize()
    load_s = time.time() - t0
    bw = copy_bandwidth()
    print(f"transformers {transformers.__version__} torch {torch.__version__}, experts={a.experts}, "
          f"random bf16 weights in {load_s:.1f} s, copy {bw / 1e9:.0f} GB/s")
    print(f"{'batch':>6} {'prefill tok/s':>13} | {'step ms':>9} {'decode tok/s':>12} {'floor ms':>9} {'% limit':>8}")
    results = []
    for batch in [int(x) for x in a.batch.split(",")]:
        ids = torch.randint(1, cfg.vocab_size, (batch, a.input_len), device="cuda")
        with torch.no_grad():
            torch.cuda.synchronize()
            t = time.time()
            out = model(input_ids=ids, use_cache=True)
            torch.cuda.synchronize()
            prefill_s = time.time() - t
            cache = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            steps = []
            for _ in range(a.output_len - 1):
                torch.cuda.synchronize()
                t = time.time()
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                torch.cuda.synchronize()
                steps.append(time.time() - t)
        step = statistics.median(steps)
        fl = floor_bytes(cfg, batch, batch * (a.input_len + a.output_len / 2)) / bw
        r = {"batch": batch, "prefill_tok_s": batch * a.input_len / prefill_s, "decode_step_ms": step * 1e3,
             "decode_tok_s": batch / step, "decode_floor_ms": fl * 1e3, "decode_pct_of_limit": 100 * fl / step}
        results.append(r)
        print(f"{batch:>6} {r['prefill_tok_s']:>13.0f} | {r['decode_step_ms']:>9.3f} {r['decode_tok_s']:>12.0f} "
              f"{r['decode_floor_ms']:>9.3f} {r['decode_pct_of_limit']:>7.1f}%", flush=True)
        del cache, out
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"peer": "transformers", "version": transformers.__version__, "experts": a.experts,
                       "copy_bandwidth_gb_s": bw / 1e9, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
