#!/usr/bin/env python3
"""Trains switchyard's bundled model: a small Qwen3-MoE on the Python documentation's prose, with its own tokenizer.

Input: the corpus of prepare_text.py (JSON lines). Steps, all seeded:
1. A byte-level BPE tokenizer (Hugging Face `tokenizers`) of --vocab ids, built like Qwen3's (NFC, Qwen's split
   regex, byte-level), with <|endoftext|>, <|im_start|> and <|im_end|>, trained on the training split only.
2. transformers' Qwen3MoeForCausalLM (every layer sparse, top-k routing, Switch Transformer's load-balancing
   loss per layer, averaged over the layers: transformers' own sums the counts of all layers, so one layer's
   dead expert can hide behind another's busy one) trained on random windows of the training tokens with
   AdamW, bf16 autocast, warm-up then cosine decay; the validation loss every --eval-every steps; the weights
   of the best validation loss are kept.
3. A Hugging Face folder: config.json, model.safetensors (bf16), tokenizer.json, tokenizer_config.json (with
   a ChatML chat template), generation_config.json; and training.json (the loss curves, the expert usage
   histogram per layer on the validation text, the validation perplexity, greedy and sampled continuations).

Run on the GPU machine (torch 2.11, transformers 5.17, tokenizers 0.23 there):
  python3 tools/bundled_model/train.py --corpus corpus.jsonl --out models/pydoc-moe
"""

import argparse
import json
import math
import os
import random
import re
import time

import numpy as np
import safetensors.torch
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                 "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                 "{% endif %}")
NOTICE_HEAD = """This model (switchyard's bundled example, made by tools/bundled_model/train.py from random initial weights)
was trained on the English prose of documentation Debian 12 ships, extracted by tools/bundled_model/prepare_text.py
(code blocks, tables and markup dropped):

"""
NOTICE_SETS = {
    "python": """- python3.11-doc 3.11.2 (the Python 3.11 documentation): Copyright (c) 2001-2023 Python Software Foundation; all
  rights reserved. Licensed under the Python Software Foundation License Version 2 (the examples under the
  Zero-Clause BSD licence); see /usr/share/doc/python3.11-doc/copyright and https://docs.python.org/3/license.html.
""",
    "sphinx": """- sphinx-doc 5.3.0 (the Sphinx documentation): Copyright 2007-2022 the Sphinx team; BSD-2-Clause; see
  /usr/share/doc/sphinx-doc/copyright.
""",
    "django": """- python-django-doc 3.2.25 (the Django documentation): Copyright (c) Django Software Foundation and individual
  contributors; BSD-3-Clause; see /usr/share/doc/python-django-doc/copyright.
""",
}
NOTICE_TAIL = """
The model reproduces phrases of that text. It is a demonstration of the engine, not a useful assistant: its
statements about the software documented there are often wrong.
"""
DEVICE = "cuda"  # where the model trains (--device)
PROMPTS = [
    "The Python interpreter",
    "A list is",
    "To open a file,",
    "The following example shows how to",
    "When an exception is raised",
    "This module provides",
    "The return value of this function",
    "Strings are",
    "In the tutorial we",
    "A dictionary maps",
]


def train_tokenizer(texts, vocab):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)

    def plain():  # the special tokens are not text to merge
        for t in texts:
            for s in SPECIAL:
                t = t.replace(s, "\n")
            yield t

    tok.train_from_iterator(plain(), trainer)
    return tok


def encode_all(tok, texts):
    eos = tok.token_to_id("<|endoftext|>")
    ids = []
    for enc in tok.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(eos)
    return np.asarray(ids, dtype=np.int64)


def windows(data, batch, seq, rng, device):
    starts = rng.integers(0, len(data) - seq - 1, size=batch)
    x = np.stack([data[s:s + seq] for s in starts])
    return torch.from_numpy(x).to(device)


@torch.no_grad()
def evaluate(model, val_batches):
    model.eval()
    total, n = 0.0, 0
    for x in val_batches:
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x, output_router_logits=False)
        total += float(out.loss)
        n += 1
    model.train()
    return total / n


@torch.no_grad()
def expert_usage(model, val_batches, n_layers, n_experts, top_k):
    counts = np.zeros((n_layers, n_experts), dtype=np.int64)
    model.eval()
    for x in val_batches:
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            out = model(input_ids=x, output_router_logits=True)
        for layer, logits in enumerate(out.router_logits):
            chosen = torch.topk(logits.float(), top_k, dim=-1).indices.flatten().cpu().numpy()
            counts[layer] += np.bincount(chosen, minlength=n_experts)
    model.train()
    return counts


def published_tensors(model):
    """The weights in bf16 in the published Qwen3-MoE layout (one tensor per expert, as Qwen/Qwen3-30B-A3B),
    not the fused experts.gate_up_proj [E, 2I, H] / experts.down_proj [E, H, I] transformers 5 keeps."""
    out = {}
    for name, t in model.state_dict().items():
        if model.config.tie_word_embeddings and name == "lm_head.weight":
            continue
        t = t.detach().to(torch.bfloat16)
        m = re.fullmatch(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)", name)
        if not m:
            out[name] = t
            continue
        p = f"model.layers.{m.group(1)}.mlp.experts"
        for e in range(t.shape[0]):
            if m.group(2) == "down_proj":
                out[f"{p}.{e}.down_proj.weight"] = t[e]
            else:
                inter = t.shape[1] // 2
                out[f"{p}.{e}.gate_proj.weight"] = t[e, :inter]
                out[f"{p}.{e}.up_proj.weight"] = t[e, inter:]
    return {k: v.contiguous().clone() for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--device", default="cuda", help="cuda (the GPU machine) or cpu (slow: hours)")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--expert-inter", type=int, default=320)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--aux-coef", type=float, default=0.02)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--max-minutes", type=float, default=6.0, help="stop training after this long")
    args = ap.parse_args()

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    global DEVICE
    DEVICE = device = args.device
    docs = [json.loads(line) for line in open(args.corpus, encoding="utf-8")]
    train_texts = [d["text"] for d in docs if d["split"] == "train"]
    val_texts = [d["text"] for d in docs if d["split"] == "val"]
    t0 = time.time()
    tok = train_tokenizer(train_texts, args.vocab)
    train_ids, val_ids = encode_all(tok, train_texts), encode_all(tok, val_texts)
    print(f"tokenizer: {tok.get_vocab_size()} ids in {time.time() - t0:.1f} s; tokens train {len(train_ids)} "
          f"val {len(val_ids)}", flush=True)

    eos, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    config = Qwen3MoeConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=args.hidden, intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads, moe_intermediate_size=args.expert_inter, num_experts=args.experts,
        num_experts_per_tok=args.top_k, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, router_aux_loss_coef=0.0,
        output_router_logits=False, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, attention_dropout=0.0)
    model = Qwen3MoeForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    warmup = max(1, args.steps // 30)

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (args.steps - warmup))))

    val_rng = np.random.default_rng(args.seed + 1)
    val_batches = [windows(val_ids, args.batch, args.seq, val_rng, device) for _ in range(8)]
    curve = []
    best = (float("inf"), None, -1)
    start = time.time()
    step = 0
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x = windows(train_ids, args.batch, args.seq, rng, device)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x, output_router_logits=True)
        aux_t = sum(load_balancing_loss_func((g,), args.experts, args.top_k) for g in out.router_logits)
        aux_t = aux_t / len(out.router_logits)
        loss = out.loss + args.aux_coef * aux_t
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.eval_every == 0 or step == args.steps - 1:
            aux = float(aux_t.detach())
            train_lm = float(out.loss.detach())
            val = evaluate(model, val_batches)
            curve.append({"step": step, "train_loss": train_lm, "aux_loss": aux, "val_loss": val,
                          "seconds": time.time() - start})
            print(f"step {step:5d} train {train_lm:.3f} aux {aux:.3f} val {val:.3f} "
                  f"({time.time() - start:.0f} s)", flush=True)
            if val < best[0]:
                best = (val, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
        if time.time() - start > args.max_minutes * 60:
            print(f"stopping at step {step}: {args.max_minutes} minutes", flush=True)
            break
    model.load_state_dict(best[1])
    usage = expert_usage(model, val_batches, args.layers, args.experts, args.top_k)

    os.makedirs(args.out, exist_ok=True)
    model.config.router_aux_loss_coef = args.aux_coef  # what was used (added here, not by transformers)
    model.config.architectures = ["Qwen3MoeForCausalLM"]
    model.config.dtype = torch.bfloat16  # as stored
    model.config.save_pretrained(args.out)
    safetensors.torch.save_file(published_tensors(model), os.path.join(args.out, "model.safetensors"),
                                metadata={"format": "pt"})
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|endoftext|>",
                   "pad_token": "<|endoftext|>", "unk_token": None, "add_bos_token": False,
                   "model_max_length": config.max_position_embeddings, "chat_template": CHAT_TEMPLATE,
                   "added_tokens_decoder": {str(tok.token_to_id(s)): {"content": s, "special": True, "lstrip": False,
                                                                     "rstrip": False, "normalized": False,
                                                                     "single_word": False} for s in SPECIAL}},
                  f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eos, "eos_token_id": [eos, im_end], "pad_token_id": eos, "do_sample": True,
                   "temperature": 0.8, "top_p": 0.95, "top_k": 40}, f, indent=2)

    with open(os.path.join(args.out, "NOTICE"), "w") as f:
        sets = sorted({d.get("set", "python") for d in docs}, key=list(NOTICE_SETS).index)
        f.write(NOTICE_HEAD + "".join(NOTICE_SETS[name] for name in sets) + NOTICE_TAIL)

    # Continuations from the saved folder, read back as a user would.
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(args.out, "tokenizer.json"))
    reloaded = Qwen3MoeForCausalLM.from_pretrained(args.out, dtype=torch.float32).to(device).eval()
    samples = []
    for i, prompt in enumerate(PROMPTS):
        ids = torch.tensor([hf_tok.encode(prompt)], device=device)
        greedy = reloaded.generate(ids, max_new_tokens=40, do_sample=False, eos_token_id=[eos, im_end])
        torch.manual_seed(args.seed + i)
        sampled = reloaded.generate(ids, max_new_tokens=40, do_sample=True, temperature=0.8, top_p=0.95, top_k=40,
                                    eos_token_id=[eos, im_end])
        samples.append({"prompt": prompt, "greedy": hf_tok.decode(greedy[0, ids.shape[1]:]),
                        "sampled": hf_tok.decode(sampled[0, ids.shape[1]:])})
        print(json.dumps(samples[-1]), flush=True)
    report = {
        "generator": "tools/bundled_model/train.py", "args": vars(args), "torch_version": torch.__version__,
        "transformers_version": transformers.__version__, "tokenizers_version": __import__("tokenizers").__version__,
        "parameters": n_params, "tokens_train": int(len(train_ids)), "tokens_val": int(len(val_ids)),
        "steps_run": step + 1, "best_step": best[2], "val_loss": best[0], "val_perplexity": math.exp(best[0]),
        "curve": curve, "expert_usage": usage.tolist(), "samples": samples,
    }
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"best val loss {best[0]:.3f} (perplexity {math.exp(best[0]):.1f}) at step {best[2]}", flush=True)


if __name__ == "__main__":
    main()
