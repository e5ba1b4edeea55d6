#!/usr/bin/env python3
"""Plots of the bundled model's training: the loss curves and the expert usage histogram per layer.

Reads models/<name>/training.json (train.py's report) and writes one SVG (matplotlib 3.9, Agg backend):
  python3 tools/bundled_model/plot.py --report models/pydoc-moe/training.json --out docs/bundled-model-training.svg
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    r = json.load(open(args.report))
    curve = r["curve"]
    usage = r["expert_usage"]
    fig, (ax_loss, ax_use) = plt.subplots(1, 2, figsize=(12, 4.2))
    steps = [c["step"] for c in curve]
    ax_loss.plot(steps, [c["train_loss"] for c in curve], label="training (batch, LM loss)")
    ax_loss.plot(steps, [c["val_loss"] for c in curve], label="validation")
    ax_loss.axvline(r["best_step"], color="gray", linestyle=":", label=f"kept: step {r['best_step']}")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("cross-entropy (nats per token)")
    ax_loss.set_title(f"loss; validation perplexity {r['val_perplexity']:.1f}")
    ax_loss.legend()
    n_experts = len(usage[0])
    width = 0.8 / len(usage)
    for layer, counts in enumerate(usage):
        total = sum(counts)
        xs = [e + (layer - (len(usage) - 1) / 2) * width for e in range(n_experts)]
        ax_use.bar(xs, [c / total for c in counts], width=width, label=f"layer {layer}")
    ax_use.axhline(1 / n_experts, color="gray", linestyle=":", label="uniform")
    ax_use.set_xlabel("expert")
    ax_use.set_ylabel("share of routed (token, slot) pairs")
    ax_use.set_title("expert usage on the validation text")
    ax_use.set_xticks(range(n_experts))
    ax_use.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, metadata={"Date": None})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
