#!/usr/bin/env python3
"""Reads what bench/results/straggler-h200.sh wrote in OUT and prints, per run, which rank the others waited for
and whether its threads shared a vCPU.

For each run i: bench.i.out and .err (the layout table: each rank's pid; SY_CPU_PIN's line), bench.i.json (the
decode steps), trace.i.b<B>.md (bench/comm_trace.py's tables:
each rank's eager step and communication, so its compute, and how often it arrived last), samples.i.txt (blocks
of "T <seconds>", /proc/stat's cpuN lines, and ps's running threads: pid tid psr stat comm).

Per rank: the share of samples in which one of its running threads was on a vCPU with another running thread
(a rank's or any other process's), and its running threads a sample. Per vCPU: steal time as a share of the
vCPU's time between samples. The samples cover the whole run (load, prefill and both batches).

    python3 bench/straggler_samples.py OUT
"""
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from plan_accuracy_report import trace_ranks  # noqa: E402

SAMPLER = {"ps", "awk", "grep", "sed", "date", "sleep", "bash", "tee"}


def rank_pids(text):
    """pid -> rank from bench latency's layout table ("rank  host   pid  pp ...")."""
    pids, on = {}, False
    for line in text.splitlines():
        if re.match(r"\s*rank\s+host\s+pid\b", line):
            on = True
            continue
        m = re.match(r"\s*(\d+)\s+\S+\s+(\d+)\s", line) if on else None
        if not m:
            on = False if on and pids else on
            continue
        pids[int(m.group(2))] = int(m.group(1))
    return pids


def blocks(text):
    cur = None
    for line in text.splitlines():
        if line.startswith("T "):
            if cur:
                yield cur
            cur = {"t": float(line.split()[1]), "cpu": {}, "threads": []}
        elif cur is None:
            continue
        elif line.startswith("cpu"):
            f = line.split()
            cur["cpu"][int(f[0][3:])] = [int(x) for x in f[1:]]
        else:
            f = line.split(None, 4)
            if len(f) == 5:
                cur["threads"].append((int(f[0]), int(f[1]), int(f[2]), f[4].strip()))
    if cur:
        yield cur


def last_arrivals(md):
    """rank -> share of the collectives it arrived last at, from comm_trace.py's first table."""
    out = {}
    for line in md.splitlines():
        m = re.match(r"\| (\d+) \|(?: [^|]+ \|){5} (\d+)% \|$", line)
        if m:
            out[int(m.group(1))] = int(m.group(2))
    return out


def run_summary(out, i):
    bench_out = out / f"bench.{i}.out"
    text = bench_out.read_text() if bench_out.is_file() else ""
    err = out / f"bench.{i}.err"
    text += err.read_text() if err.is_file() else ""
    pids = rank_pids(text)
    pin = re.search(r"SY_CPU_PIN=1: (.*)", text)
    print(f"## run {i}: {len(pids)} ranks; {'SY_CPU_PIN=1, ' + pin.group(1) if pin else 'no SY_CPU_PIN'}")
    res = out / f"bench.{i}.json"
    if res.is_file():
        rows = json.loads(res.read_text()).get("results") or []
        print("- decode step ms: " + ", ".join(f"b{r['batch']} {r['decode_step_ms']:.3f}" for r in rows
                                                if r.get("decode_step_ms") is not None))
    for md in sorted(out.glob(f"trace.{i}.b*.md"), key=lambda p: int(p.name.split(".b")[1].split(".")[0])):
        text = md.read_text()
        ranks = trace_ranks(text)
        if not ranks:
            print(f"- {md.name}: no per-rank table")
            continue
        busy = {r: s - c for r, (s, c) in ranks.items()}
        order = sorted(busy, key=busy.get)
        med, slow = busy[order[(len(order) - 1) // 2]], order[-1]
        last = last_arrivals(text)
        print(f"- {md.name}: slowest rank {slow} computed {busy[slow]:.3f} ms a step, median {med:.3f} "
              f"({busy[slow] / med:.2f}x); arrived last: "
              + ", ".join(f"rank {r} {p}%" for r, p in sorted(last.items(), key=lambda kv: -kv[1])[:3]))
    samples = out / f"samples.{i}.txt"
    if not samples.is_file():
        print("- no samples")
        return
    shared, running, n = Counter(), defaultdict(list), 0
    others = Counter()
    steal = defaultdict(list)
    prev = None
    for blk in blocks(samples.read_text()):
        if prev is not None:
            for cpu, now in blk["cpu"].items():
                before = prev["cpu"].get(cpu)
                if before:
                    d = [a - b for a, b in zip(now, before)]
                    total = sum(d[:8])
                    if total > 0 and len(d) > 7:
                        steal[cpu].append(d[7] / total)
        prev = blk
        mine = [(pids[p], psr) for p, _, psr, _ in blk["threads"] if p in pids]
        if not mine:
            continue
        n += 1
        on_cpu = Counter(psr for p, _, psr, comm in blk["threads"] if comm not in SAMPLER or p in pids)
        for p, _, psr, comm in blk["threads"]:
            if p not in pids and comm not in SAMPLER:
                others[comm] += 1
        per_rank = defaultdict(list)
        for r, psr in mine:
            per_rank[r].append(psr)
        for r in pids.values():
            cpus = per_rank.get(r, [])
            running[r].append(len(cpus))
            if any(on_cpu[c] > 1 for c in cpus):
                shared[r] += 1
    print(f"- {n} samples with the ranks running")
    if n:
        print("  | rank | samples with a thread on a shared vCPU | running threads a sample |")
        print("  |---|---|---|")
        for r in sorted(set(pids.values())):
            print(f"  | {r} | {100.0 * shared[r] / n:.0f}% | {statistics.mean(running[r]):.2f} |")
    if others:
        print("  other running threads (samples): " + ", ".join(f"{c} {k}" for c, k in others.most_common(6)))
    if steal:
        means = {c: statistics.mean(v) for c, v in steal.items() if v}
        worst = max(means, key=means.get)
        print(f"  steal: mean over vCPUs {100 * statistics.mean(means.values()):.2f}%, highest vCPU {worst} "
              f"{100 * means[worst]:.2f}% (its highest sample {100 * max(steal[worst]):.1f}%)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    runs = sorted({int(p.name.split(".")[1]) for p in out.glob("bench.*.out")})
    if not runs:
        sys.exit(f"no bench.<i>.out in {out}: run bench/results/straggler-h200.sh first")
    for i in runs:
        run_summary(out, i)


if __name__ == "__main__":
    main()
