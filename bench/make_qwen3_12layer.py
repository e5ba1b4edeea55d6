"""Write a real safetensors checkpoint of the Qwen3-30B-A3B architecture cut to its first N layers (12 by
default), random bf16 weights, with the tokenizer files copied in: a model folder that `switchyard serve`
and `transformers serve` both load, for the serving side by side (issue 14; bench/results/serve-sweep-run.sh).

    python3 bench/make_qwen3_12layer.py --out /tmp/qwen3-30b-a3b-12l [--tokenizer ../shared/data/tokenizers/qwen3]

Needs torch and transformers (the GPU machine has both). The weights are drawn by transformers' own
initialisation on --device (the GPU: about 30 s for the 15 GB of 12 layers) and written with
save_pretrained. A folder that already holds a complete checkpoint is left as it is (written once).
"""
import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                   "chat_template.jinja", "generation_config.json")


def complete(out):
    index = os.path.join(out, "model.safetensors.index.json")
    if os.path.exists(os.path.join(out, "model.safetensors")):
        return True
    if not os.path.exists(index):
        return False
    with open(index) as f:
        shards = set(json.load(f)["weight_map"].values())
    return all(os.path.exists(os.path.join(out, s)) for s in shards)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the model folder to write")
    ap.add_argument("--config", default=os.path.join(HERE, "configs", "qwen3-30b-a3b"),
                    help="folder with the full model's config.json")
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "..", "..", "shared", "data", "tokenizers", "qwen3"),
                    help="folder with the tokenizer files to copy in")
    ap.add_argument("--layers", type=int, default=12, help="decoder layers kept (the first ones)")
    ap.add_argument("--device", default="cuda", help="where the random weights are drawn")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if complete(args.out):
        print(f"make_qwen3_12layer.py: {args.out} already holds a checkpoint; left as it is")
        return
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    t0 = time.time()
    cfg = AutoConfig.from_pretrained(args.config)
    if args.layers > cfg.num_hidden_layers:
        sys.exit(f"--layers {args.layers}: the config has only {cfg.num_hidden_layers}")
    cfg.num_hidden_layers = args.layers
    if getattr(cfg, "max_window_layers", None) is not None:
        cfg.max_window_layers = min(cfg.max_window_layers, args.layers)
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[: args.layers]
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    t1 = time.time()
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, max_shard_size="5GB")
    del model
    copied = []
    for name in TOKENIZER_FILES:
        src = os.path.join(args.tokenizer, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, name))
            copied.append(name)
    if "tokenizer.json" not in copied:
        sys.exit(f"--tokenizer {args.tokenizer}: no tokenizer.json there")
    print(f"make_qwen3_12layer.py: {args.out}: {args.layers} layers, {params / 1e9:.2f} B parameters "
          f"({params * 2 / 1e9:.1f} GB bf16), drawn in {t1 - t0:.1f} s, written in {time.time() - t1:.1f} s; "
          f"tokenizer files {', '.join(copied)}")


if __name__ == "__main__":
    main()
