#!/usr/bin/env python3
"""Sums Nsight Compute's gpu__time_duration by kernel name (with its template arguments) from an `ncu --csv` file.

Usage: python3 bench/results/ncu_summary.py NCU.csv [TOP]
"""
import collections
import csv
import sys

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
k, v, u = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
total = collections.defaultdict(float)
count = collections.Counter()
for r in rows[1:]:
    name = r[k].replace("sy::cuda::", "").replace("(anonymous namespace)::", "")[:110]
    total[name] += float(r[v].replace(",", "")) * UNITS[r[u]]
    count[name] += 1
for name, us in sorted(total.items(), key=lambda x: -x[1])[: int(sys.argv[2]) if len(sys.argv) > 2 else 40]:
    print(f"{us:10.1f} us {count[name]:5d}x {us / count[name]:8.2f} us/call  {name}")
