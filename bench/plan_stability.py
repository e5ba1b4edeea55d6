#!/usr/bin/env python3
"""How far a plan moves between two calibrations of one machine (issue 19).

Runs `switchyard plan --json` for one rank over models x batches x contexts with profile A and with profile B
(two `bench calibrate` runs of the same machine and rank count) and prints, for the decode step at batch 1, the
decode step at the batch, and the prefill, the distribution of the ratio A / B: a cost model that reads a
profile's noise as the machine gives a plan that moves as much as the noise.

    python3 bench/plan_stability.py --switchyard build/switchyard \\
        --profile-a bench/results/plan-accuracy-cpu/2026-12-05-r15/cpu-r1-first.json \\
        --profile-b bench/results/plan-accuracy-cpu/2026-12-05-r15/cpu-r1.json
"""
import argparse
import itertools
import json
import statistics
import subprocess
import sys


def plan(args, profile, model, batch, context):
    cmd = [args.switchyard, "plan", "--model", model, "--machine", "h200", "--gpus", "1", "--tp", "1",
           "--batch", str(batch), "--context", str(context), "--prefill-len", str(min(context, 512)),
           "--max-batch-tokens", "8192", "--min-kv-tokens", str(batch * context + 64), "--json",
           "--kv-dtype", "fp32", "--profile", profile]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"plan failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-800:]}")
    j = json.loads(r.stdout)
    lay = j.get("layout") or j["layouts"][0]
    pred = lay["predicted"]
    return {"decode b1": pred["decode"][0]["ms"], "decode batch": pred["decode"][-1]["ms"],
            "prefill": pred["prefill"]["ms"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--switchyard", default="build/switchyard")
    ap.add_argument("--profile-a", required=True)
    ap.add_argument("--profile-b", required=True)
    ap.add_argument("--models", default="bench/configs/qwen3-moe-cpu-medium,models/pydoc-moe")
    ap.add_argument("--batches", default="1,4,10,16,64,256")
    ap.add_argument("--contexts", default="160,1024,4096")
    args = ap.parse_args()
    ratios = {}
    for model, batch, context in itertools.product(args.models.split(","),
                                                   [int(b) for b in args.batches.split(",")],
                                                   [int(c) for c in args.contexts.split(",")]):
        a = plan(args, args.profile_a, model, batch, context)
        b = plan(args, args.profile_b, model, batch, context)
        for k in a:
            ratios.setdefault(k, []).append(a[k] / b[k])
    print("| prediction | cases | median A/B | p10 | p90 | min | max | outside 0.9-1.1 |")
    print("|---|---|---|---|---|---|---|---|")
    for k, rs in ratios.items():
        rs.sort()
        n = len(rs)
        print(f"| {k} | {n} | {statistics.median(rs):.2f} | {rs[n // 10]:.2f} | {rs[9 * n // 10]:.2f} | "
              f"{rs[0]:.2f} | {rs[-1]:.2f} | {sum(r < 0.9 or r > 1.1 for r in rs)} |")


if __name__ == "__main__":
    main()
