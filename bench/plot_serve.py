"""Draw `switchyard bench serve` runs (or SGLang bench_serving's JSON lines): output tokens/s and median TPOT
against the concurrency limit, one line per run label, so that layouts and engines compare on one picture.

    python3 bench/plot_serve.py --out serve.svg bench/results/serve-*-c*.json

Each file holds one JSON object per line (ours hold one); a run's label is its "label" key, else its
"backend" and file name. matplotlib: `python3 -m venv build/plot-venv && build/plot-venv/bin/pip install
matplotlib` (`switchyard bench serve --plot` uses that interpreter when it is there), or Debian's
python3-matplotlib.
"""
import argparse
import collections
import json
import os
import sys


def read_runs(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                run = json.loads(line)
                run.setdefault("label", run.get("backend", "") + " " + os.path.basename(path))
                runs.append(run)
    return runs


def concurrency_of(run):
    """The limit of the run; an unlimited one counts as its number of prompts."""
    c = run.get("max_concurrency")
    return c if c else run.get("num_prompts", run.get("completed", 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="JSON files of bench serve runs")
    ap.add_argument("--out", required=True, help="the picture: .svg, .png or .pdf")
    ap.add_argument("--title", default="", help="a title above both plots")
    args = ap.parse_args()

    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_serve.py: matplotlib is missing; python3 -m venv build/plot-venv && "
                 "build/plot-venv/bin/pip install matplotlib (or apt-get install python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = collections.defaultdict(list)
    for run in read_runs(args.files):
        lines[run["label"]].append((concurrency_of(run), run["output_throughput"], run["median_tpot_ms"]))

    fig, (tput, tpot) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, points in sorted(lines.items()):
        points.sort()
        xs = [p[0] for p in points]
        tput.plot(xs, [p[1] for p in points], marker="o", label=label)
        tpot.plot(xs, [p[2] for p in points], marker="o", label=label)
    for ax, ylabel in ((tput, "output tokens/s"), (tpot, "median TPOT (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("max concurrency")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        levels = sorted({x for points in lines.values() for x, _, _ in points})
        if levels and all(x > 0 for x in levels):
            ax.set_xticks(levels)
            ax.set_xticklabels([str(x) for x in levels])
    tput.set_ylim(bottom=0)
    tpot.set_ylim(bottom=0)
    tput.legend()
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"plot_serve.py: wrote {args.out} ({len(lines)} runs, "
          f"{sum(len(p) for p in lines.values())} points)")


if __name__ == "__main__":
    main()
