#!/usr/bin/env python3
"""Per-kernel device times of a `switchyard bench latency` run's decode steps, from Nsight Compute.

Run the bench under ncu with one metric (the kernel's duration) and CSV output, e.g. on the GPU machine:

    ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \\
        --print-kernel-base function switchyard bench latency --model M --random-weights --batch 256 \\
        --input-len 16 --output-len 4 > ncu.csv
    python3 bench/kernel_times.py ncu.csv --layers 32 [--json out.json]

The decode steps are the launches after the last prefill attention kernel (a name holding "prefill"; the
decode sequences' own prefill is the bench's last one); their count is the decode attention launches over
--layers. Prints, per kernel name, the launches a step and the µs a step (sum of durations / steps), worst
first, and the step's kernel total. The durations are each kernel alone on the device (ncu serialises them),
so the total leaves out the gaps between kernels that a captured step has and any overlap.
"""
import argparse
import csv
import io
import json
import sys
from collections import defaultdict


def read_launches(text):
    """[(id, name, grid, µs)] in launch order from ncu's CSV (lines before the header are ncu's own)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise SystemExit("kernel_times: no ncu CSV header (\"ID\",...) in the input")
    launches = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "nsecond")
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
                 "second": 1e6}.get(unit)
        if scale is None:
            raise SystemExit(f"kernel_times: unknown unit {unit!r}")
        launches[int(row["ID"])] = (row["Kernel Name"], row.get("Grid Size", ""), value * scale)
    return [(i, *launches[i]) for i in sorted(launches)]


def decode_summary(launches, layers, decode_marker="decode", prefill_marker="prefill"):
    last_prefill = max((k for k, l in enumerate(launches) if prefill_marker in l[1]), default=-1)
    decode = launches[last_prefill + 1:]
    attention = sum(1 for l in decode if decode_marker in l[1])
    if attention == 0 or attention % layers:
        raise SystemExit(f"kernel_times: {attention} decode attention launches after the last prefill, "
                         f"not a multiple of {layers} layers")
    steps = attention // layers
    per = defaultdict(lambda: [0, 0.0])
    for _, name, _, us in decode:
        per[name][0] += 1
        per[name][1] += us
    rows = sorted(((name, n / steps, us / steps) for name, (n, us) in per.items()), key=lambda r: -r[2])
    return steps, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --csv output ('-': stdin)")
    ap.add_argument("--layers", type=int, required=True, help="the model's layers (attention launches a step)")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    text = sys.stdin.read() if args.csv == "-" else open(args.csv, encoding="utf-8", errors="replace").read()
    steps, rows = decode_summary(read_launches(text), args.layers)
    total = sum(r[2] for r in rows)
    print(f"{steps} decode steps; kernel time a step {total / 1e3:.3f} ms (each kernel alone)")
    print(f"{'kernel':60} {'launches':>9} {'us/step':>10} {'share':>7}")
    for name, n, us in rows:
        print(f"{name[:60]:60} {n:9.1f} {us:10.1f} {100 * us / total:6.1f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"steps": steps, "total_us": total,
                       "kernels": [{"name": n, "launches": c, "us": u} for n, c, u in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
