#!/usr/bin/env python3
"""The bundled model's conformance fixture: Hugging Face transformers' float32 logits on the committed folder.

Loads models/<name> with transformers (Qwen3MoeForCausalLM, float32 from the stored bf16, on the CPU) and its
tokenizer, and writes tests/fixtures/<name>/ in the form tools/fixtures/make_fixtures.py gives every fixture
(reference.json with the prompts and greedy tokens, logits_prompt{0,1,2}.npy, logits_greedy.npy), with
"model_dir" naming the model folder relative to tests/fixtures, so the conformance suites load the committed
model itself. The prompts are English text, tokenized by the model's tokenizer; of the candidates below the
first three whose every router choice is clear (k-th minus (k+1)-th router probability above GAP_MINS'
bound in every layer, every token; the first of them also over its greedy continuation, whose 16 steps must
each have a clear argmax, relative gap above the same bound) are kept, as make_fixtures.py asks of its
random fixtures.

Usage (GPU machine or any machine with torch 2.11 / transformers 5.17):
  python3 tools/bundled_model/make_reference.py --model models/pydoc-moe --out tests/fixtures/pydoc_moe
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import PreTrainedTokenizerFast, Qwen3MoeForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from make_fixtures import RouterGapRecorder, argmax_rel_gap, forward_logits  # noqa: E402

CANDIDATES = [
    "The Python interpreter reads a file and",
    "You can use the following command to",
    "The first argument of the method is",
    "Django provides a way to",
    "This document explains how to",
    "A template is a text file that",
    "Each extension module defines a function",
    "The documentation of this package describes",
    "A list is a mutable sequence of",
    "This module provides functions for working with",
    "The return value of this function is",
    "When an exception is raised inside a",
    "Strings are immutable, so",
    "The following example shows how to",
    "A dictionary maps keys to",
]
# The k-th minus (k+1)-th router probability and the greedy argmax's relative gap must exceed this, as
# make_fixtures.py asks (1e-3); a trained model's routing is not chosen by seed, so where no three prompts
# clear 1e-3 the next bound is taken (still 100x the float32 engine's rounding) and recorded.
GAP_MINS = (1e-3, 2e-4)
GREEDY_STEPS = 16


def select(tok, model, gap_min):
    # Each candidate: its logits and whether every router choice over it is clear; the greedy prompt is the first
    # clear one whose 16 greedy steps also route clearly with a clear argmax each.
    clear, rejected = [], []
    greedy = None
    with torch.no_grad():
        for text in CANDIDATES:
            ids = tok.encode(text)
            rec = RouterGapRecorder(model, "qwen3_moe")
            try:
                logits = forward_logits(model, ids)
            finally:
                rec.remove()
            gap = float(rec.all_gaps().min())
            if gap <= gap_min:
                rejected.append((text, f"router gap {gap:.2e}"))
                continue
            if greedy is None:
                seq, rows, tokens, gaps = list(ids), [], [], []
                rec = RouterGapRecorder(model, "qwen3_moe")
                try:
                    for _ in range(GREEDY_STEPS):
                        row = forward_logits(model, seq)[-1]
                        t = int(torch.argmax(row))
                        rows.append(row)
                        tokens.append(t)
                        gaps.append(argmax_rel_gap(row))
                        seq.append(t)
                finally:
                    rec.remove()
                greedy_router_gap = float(rec.all_gaps().min())
                if min(gaps) <= gap_min or greedy_router_gap <= gap_min:
                    rejected.append((text, f"greedy argmax gap {min(gaps):.2e}, router gap {greedy_router_gap:.2e}"))
                    continue
                greedy = (rows, tokens, gaps, greedy_router_gap)
            clear.append((text, ids, logits, gap))
            if len(clear) == 3:
                break
    return (clear, greedy, rejected) if len(clear) == 3 and greedy is not None else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(args.model, "tokenizer.json"))
    model = Qwen3MoeForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    for gap_min in GAP_MINS:
        found = select(tok, model, gap_min)
        if found is not None:
            break
        print(f"no three prompts route clearly at a gap of {gap_min}", flush=True)
    if found is None:
        sys.exit(f"no prompts qualify at gaps {GAP_MINS}")
    chosen, (rows, tokens, gaps, greedy_router_gap), rejected = found
    os.makedirs(args.out, exist_ok=True)
    for i, (_, _, logits, _) in enumerate(chosen):
        np.save(os.path.join(args.out, f"logits_prompt{i}.npy"), logits.numpy().astype(np.float32))
    np.save(os.path.join(args.out, "logits_greedy.npy"), torch.stack(rows).numpy().astype(np.float32))
    model_dir = os.path.relpath(os.path.abspath(args.model), os.path.dirname(os.path.abspath(args.out)))
    ref = {
        "generator": "tools/bundled_model/make_reference.py",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "family": "qwen3_moe",
        "architecture": "Qwen3MoeForCausalLM",
        "reference_implementation": "transformers.Qwen3MoeForCausalLM, float32 on the CPU from the stored bf16",
        "model_dir": model_dir,
        "prompt_texts": [c[0] for c in chosen],
        "prompts": [c[1] for c in chosen],
        "greedy_prompt_index": 0,
        "greedy_tokens": tokens,
        "greedy_text": tok.decode(tokens),
        "checks": {"router_prob_gap_min": min(c[3] for c in chosen), "greedy_router_prob_gap_min": greedy_router_gap,
                   "greedy_argmax_rel_gap_min": min(gaps), "threshold": gap_min,
                   "prompts_rejected": [f"{t}: {why}" for t, why in rejected]},
    }
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=2)
        f.write("\n")
    print(json.dumps({k: ref[k] for k in ("prompt_texts", "greedy_text", "checks")}, indent=1))


if __name__ == "__main__":
    main()
