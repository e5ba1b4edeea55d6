#!/usr/bin/env python3
"""Compares two machine profiles of `bench calibrate` point by point: for each op, the points both timed and the
spread of their time ratio (A / B). Two calibrations of one machine minutes apart say how far a single point can
be trusted; docs/perf-notes.md item 36. --coverage: how far each profile's series reach instead (item 41): per
op, the points timed and, over the series (the points that share every dim but the first, the rows), the median
and the smallest of the largest rows timed. --outliers: per op, the points more than 3x slower than a point of more
rows in their series (the planner holds them to it, item 45; single calls caught slow, item 53).

    python3 bench/profile_diff.py A.json B.json [--alone] [--coverage | --outliers]
"""
import argparse
import json
import statistics


def points(profile, which):
    out = {}
    for op, table in profile.get(which, {}).items():
        out[op] = {tuple(p[:-1]): p[-1] for p in table["points"]}
    return out


def reach(table):
    """The largest first dim timed in each series of an op's points (a series: every other dim the same)."""
    top = {}
    for dims in table:
        top[dims[1:]] = max(top.get(dims[1:], 0), dims[0])
    return sorted(top.values())


def coverage(pa, pb, a, b):
    print(f"coverage: points timed, and the largest rows a series reached (median, smallest) ({a} | {b})")
    print("| op | points A | points B | series A | rows A median / min | series B | rows B median / min |")
    print("|---|---|---|---|---|---|---|")
    for op in sorted(set(pa) | set(pb)):
        ra, rb = reach(pa.get(op, {})), reach(pb.get(op, {}))
        cell = lambda r: f"{statistics.median(r):g} / {r[0]:g}" if r else "-"
        print(f"| {op} | {len(pa.get(op, {}))} | {len(pb.get(op, {}))} | {len(ra)} | {cell(ra)} | {len(rb)} | "
              f"{cell(rb)} |")
    print(f"| all | {sum(len(t) for t in pa.values())} | {sum(len(t) for t in pb.values())} | | | | |")


def outliers(table, factor=3.0):
    """The points more than `factor` times slower than a point of more rows (the first dim) in their series."""
    series = {}
    for dims, us in table.items():
        series.setdefault(dims[1:], []).append((dims[0], us))
    found = []
    for rest, pts in series.items():
        pts.sort()
        for i, (rows, us) in enumerate(pts):
            larger = [u for _, u in pts[i + 1:]]
            if larger and us > factor * min(larger):
                found.append(((rows,) + rest, us, min(larger)))
    return found


def outlier_table(pa, pb, a, b):
    print(f"outliers: points over 3x slower than a point of more rows in their series ({a} | {b})")
    print("| op | points A | outliers A | points B | outliers B | worst A (us, larger's) |")
    print("|---|---|---|---|---|---|")
    ta = tb = 0
    for op in sorted(set(pa) | set(pb)):
        oa, ob = outliers(pa.get(op, {})), outliers(pb.get(op, {}))
        ta, tb = ta + len(oa), tb + len(ob)
        worst = max(oa, key=lambda o: o[1] / o[2]) if oa else None
        cell = f"{list(worst[0])} {worst[1]:g}, {worst[2]:g}" if worst else "-"
        print(f"| {op} | {len(pa.get(op, {}))} | {len(oa)} | {len(pb.get(op, {}))} | {len(ob)} | {cell} |")
    print(f"| all | {sum(len(t) for t in pa.values())} | {ta} | {sum(len(t) for t in pb.values())} | {tb} | |")


def quantile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--alone", action="store_true", help="compare the ops_alone tables (rank 0 alone) instead")
    ap.add_argument("--coverage", action="store_true", help="how far the series reach in each, not the times")
    ap.add_argument("--outliers", action="store_true", help="the points far slower than a larger one of their series")
    args = ap.parse_args()
    which = "ops_alone" if args.alone else "ops"
    with open(args.a) as f:
        pa = points(json.load(f), which)
    with open(args.b) as f:
        pb = points(json.load(f), which)
    if args.coverage:
        coverage(pa, pb, args.a, args.b)
        return
    if args.outliers:
        outlier_table(pa, pb, args.a, args.b)
        return
    print(f"{which}: time ratio A / B of the points both profiles timed ({args.a} / {args.b})")
    print("| op | points | median | p10 | p90 | outside 0.8-1.25 |")
    print("|---|---|---|---|---|---|")
    every = []
    for op in sorted(set(pa) & set(pb)):
        common = [k for k in pa[op] if k in pb[op] and pb[op][k] > 0 and pa[op][k] > 0]
        if not common:
            continue
        r = sorted(pa[op][k] / pb[op][k] for k in common)
        every += r
        out = sum(1 for v in r if v < 0.8 or v > 1.25)
        print(f"| {op} | {len(r)} | {statistics.median(r):.2f} | {quantile(r, 0.1):.2f} | {quantile(r, 0.9):.2f} | "
              f"{out} ({100.0 * out / len(r):.0f}%) |")
    if every:
        every.sort()
        out = sum(1 for v in every if v < 0.8 or v > 1.25)
        print(f"| all | {len(every)} | {statistics.median(every):.2f} | {quantile(every, 0.1):.2f} | "
              f"{quantile(every, 0.9):.2f} | {out} ({100.0 * out / len(every):.0f}%) |")


if __name__ == "__main__":
    main()
