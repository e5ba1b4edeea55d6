#!/usr/bin/env python3
"""Splits the collectives of `bench latency --comm-trace PREFIX` into waiting and transfer.

Each rank wrote PREFIX.b<B>.rank<R>.json: every collective of the timed decode steps with its group's key,
its call number on that group, and its enter and exit times on the host's one monotonic clock. The k-th call
on a group is the same collective on every member, so for each call:

    wait     = (the last member's enter) - (this rank's enter)   time spent waiting for the late ranks
    transfer = (this rank's exit) - (the last member's enter)    the collective once everyone is in

A calibrated profile times its collectives with every rank ready (back to back), i.e. the transfer. Point-to-
point calls (send/recv) are not matched: their time is reported whole, as wait + transfer unknown. A rank that
exchanges no data with the last member (an all-to-all-v with zero counts to and from it) may leave before that
member enters: its transfer comes out negative and its wait overlaps its next calls'. Read the ranks that exchange
data with every member (rank 0 of a batch-1 step holds the token).

Each file also holds its rank's eager (profiled) steps by phase, the steps bench latency runs before the traced
ones: printed per rank, they show in which phase a rank the others wait for is slower (bench latency itself
reports rank 0's phases only).

    python3 bench/comm_trace.py PREFIX.b1           # the files PREFIX.b1.rank*.json
"""
import argparse
import glob
import json
import statistics
import sys
from collections import defaultdict


def load(prefix):
    files = sorted(glob.glob(prefix + ".rank*.json"))
    if not files:
        sys.exit(f"no files {prefix}.rank*.json: run bench latency with --comm-trace and a layout of several ranks")
    ranks = {}
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        ranks[d["world_rank"]] = d
    return ranks


def analyse(ranks):
    # (group, seq) -> {rank: event}
    calls = defaultdict(dict)
    for r, d in ranks.items():
        for g, seq, op, size, nbytes, t0, t1, step in d["events"]:
            # sends and receives are numbered apart from the collectives (and differ between ranks)
            p2p = op in ("send", "recv")
            calls[(g, p2p, seq if not p2p else (r, seq))][r] = (op, size, nbytes, t0, t1, step)
    per_rank = defaultdict(lambda: defaultdict(float))
    step_wait = defaultdict(lambda: defaultdict(float))  # rank -> step -> ns waiting
    per_kind = defaultdict(lambda: defaultdict(list))  # (op, size, bytes) -> field -> values (rank 0's view)
    last = defaultdict(int)
    matched = unmatched = 0
    for members in calls.values():
        op, size = next(iter(members.values()))[:2]
        if op in ("send", "recv"):
            for r, (_, _, nbytes, t0, t1, _) in members.items():
                per_rank[r]["p2p"] += t1 - t0
                per_rank[r]["total"] += t1 - t0
                per_kind[(op, size, nbytes)]["whole"].append(t1 - t0)
            continue
        if len(members) != size:
            unmatched += 1
            continue
        matched += 1
        last_enter = max(m[3] for m in members.values())
        late = max(members, key=lambda r: members[r][3])
        last[late] += 1
        for r, (_, _, nbytes, t0, t1, step) in members.items():
            per_rank[r]["total"] += t1 - t0
            per_rank[r]["wait"] += last_enter - t0
            step_wait[r][step] += last_enter - t0
            per_rank[r]["transfer"] += t1 - last_enter
            per_rank[r]["calls"] += 1
            if r == min(members):
                k = per_kind[(op, size, nbytes)]
                k["whole"].append(t1 - t0)
                k["wait"].append(last_enter - t0)
                k["transfer"].append(t1 - last_enter)
    return per_rank, per_kind, last, matched, unmatched, step_wait


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix", help="PREFIX.b<B> of the files PREFIX.b<B>.rank<R>.json")
    a = ap.parse_args()
    ranks = load(a.prefix)
    steps = min(d["steps"] for d in ranks.values())
    per_rank, per_kind, last, matched, unmatched, step_wait = analyse(ranks)
    print(f"{a.prefix}: {len(ranks)} ranks, {steps} timed steps, {matched} collectives matched on every member"
          f"{f', {unmatched} not' if unmatched else ''}")
    print("\nper rank, ms a step: in collectives = waiting for the last rank + transfer after it (+ send/recv)")
    print("| rank | in collectives | waiting | transfer | send/recv | collectives a step | arrived last |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(per_rank):
        p = per_rank[r]
        print(f"| {r} | {p['total'] / 1e6 / steps:.3f} | {p['wait'] / 1e6 / steps:.3f} | "
              f"{p['transfer'] / 1e6 / steps:.3f} | {p['p2p'] / 1e6 / steps:.3f} | {p['calls'] / steps:.1f} | "
              f"{100.0 * last[r] / max(matched, 1):.0f}% |")
    print("\nper step: each rank's step time (ms, as it measured it) and its waiting in the step's collectives")
    print("| rank | step median | step min | step max | waiting median | waiting min | waiting max |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(ranks):
        st = ranks[r]["step_ms"]
        w = [step_wait[r].get(i, 0.0) / 1e6 for i in range(len(st))]
        print(f"| {r} | {statistics.median(st):.3f} | {min(st):.3f} | {max(st):.3f} | {statistics.median(w):.3f} | "
              f"{min(w):.3f} | {max(w):.3f} |")
    phased = {r: d for r, d in ranks.items() if d.get("eager_phase_ms")}
    if phased:
        names = [n for n in next(iter(phased.values()))["eager_phase_ms"]]
        print("\nper rank, its eager (profiled) steps: the step and each phase, ms a step (the untimed steps before the "
              "traced ones)")
        print("| rank | eager step | " + " | ".join(names) + " |")
        print("|---|---|" + "---|" * len(names))
        for r in sorted(phased):
            d = phased[r]
            print(f"| {r} | {statistics.mean(d['eager_step_ms']):.3f} | " +
                  " | ".join(f"{d['eager_phase_ms'][n]:.3f}" for n in names) + " |")
    print("\nper collective, the group's lowest rank's view (us: mean / median)")
    print("| op | ranks | bytes | calls a step | whole | waiting | transfer |")
    print("|---|---|---|---|---|---|---|")
    for (op, size, nbytes), k in sorted(per_kind.items(), key=lambda kv: -sum(kv[1]["whole"])):
        def mm(v):
            return f"{statistics.mean(v) / 1e3:.1f} / {statistics.median(v) / 1e3:.1f}" if v else "-"
        print(f"| {op} | {size} | {nbytes} | {len(k['whole']) / steps:.1f} | {mm(k['whole'])} | {mm(k['wait'])} | "
              f"{mm(k['transfer'])} |")


if __name__ == "__main__":
    main()
