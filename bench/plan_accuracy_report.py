"""The comparison and the reports of bench/plan_accuracy.py (issue 19): each case's errors and tolerance marks,
the rank agreement of layouts, table.md and the printed summary. Standard library only."""

import json
import shlex
from pathlib import Path

PHASES = ["attention", "router", "experts", "combine", "dense", "norms", "communication",
          "sampling", "other"]
TIE = 0.05               # measured tok/s within 5 % of each other: a tie in the rank agreement
WORST_PHASE_CASES = 6    # cases with a per-phase table in table.md


def rel_err(pred, meas):
    if pred is None or meas is None or meas <= 0:
        return None
    return (pred - meas) / meas


def fmt(x, digits=3):
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def pct(e):
    return "-" if e is None else f"{100 * e:+.1f}%"


# ----------------------------------------------------------------------------------------------
# comparison


def compare(case):
    """Errors of a case with both a prediction and a measurement; marks those out of tolerance."""
    pred = case.get("predicted") or {}
    meas = case.get("measured") or {}
    dec, pre = pred.get("decode") or {}, pred.get("prefill") or {}
    err = {
        "decode": rel_err(dec.get("ms"), meas.get("decode_step_ms")),
        "decode_eager": rel_err(dec.get("eager_ms"), meas.get("decode_eager_step_ms")),
        "prefill": rel_err(pre.get("ms"), meas.get("prefill_ms")),
        "prefill_eager": rel_err(pre.get("eager_ms"), meas.get("prefill_eager_ms")),
    }
    case["error"] = err
    flags = []
    if err["decode"] is not None and abs(err["decode"]) > case["tol_decode"]:
        flags.append("decode")
    if err["prefill"] is not None and abs(err["prefill"]) > case["tol_prefill"]:
        flags.append("prefill")
    case["out_of_tolerance"] = flags
    # Set afresh: a case compared again after more runs (or merged) keeps no mark from an earlier comparison.
    case.pop("decode_run_within", None)
    case.pop("prefill_run_within", None)
    # A decode out of tolerance whose bench runs put it both ways: one of its runs' steps lies within the
    # tolerance of the prediction (the host's run-to-run spread is as wide as the tolerance; the case's figure
    # is the runs' median).
    runs = [r for r in meas.get("decode_step_ms_runs") or [] if r]
    if "decode" in flags and len(runs) > 1:
        case["decode_run_within"] = any(abs(rel_err(dec.get("ms"), r)) <= case["tol_decode"] for r in runs)
    # The same for a prefill timed in several runs (plan_accuracy --repeats times batch 1's in each).
    runs = [r for r in meas.get("prefill_ms_runs") or [] if r]
    if "prefill" in flags and len(runs) > 1:
        case["prefill_run_within"] = any(abs(rel_err(pre.get("ms"), r)) <= case["tol_prefill"] for r in runs)


def badness(case):
    """How far outside its tolerance a case is (worst first); measured cases only."""
    e = case.get("error") or {}
    worst = 0.0
    for key, tol in (("decode", case["tol_decode"]), ("prefill", case["tol_prefill"])):
        if e.get(key) is not None:
            worst = max(worst, abs(e[key]) / tol)
    return worst


def rank_agreement(cases):
    """Per (set, model, input length, batch) with two or more measured layouts: their order by
    measured decode tok/s and by predicted; pairs in the wrong order (ties: within 5 % measured).
    A wrong pair whose layouts' bench runs overlap (a run of the slower layout's decode step as
    fast as one of the faster's) is also listed in wrong_within_runs: the runs themselves put
    that pair both ways.
    """
    groups = {}
    for c in cases:
        if c["status"] != "ok":
            continue
        m = (c.get("measured") or {}).get("decode_tok_s")
        p = ((c.get("predicted") or {}).get("decode") or {}).get("tokens_per_second")
        if not m or not p:
            continue
        key = (c["set"], c["model"], c["input_len"], c["batch"])
        runs = (c.get("measured") or {}).get("decode_step_ms_runs") or []
        groups.setdefault(key, []).append((c["layout"], m, p, runs))
    out = []
    for (set_name, model, input_len, batch), rows in sorted(groups.items()):
        if len(rows) < 2:
            continue
        pairs = ties = 0
        wrong, within_runs = [], []
        for i in range(len(rows)):
            for j in range(i + 1, len(rows)):
                (a, ma, pa, ra), (b, mb, pb, rb) = rows[i], rows[j]
                pairs += 1
                if abs(ma - mb) <= TIE * max(ma, mb):
                    ties += 1
                elif (ma - mb) * (pa - pb) <= 0:
                    (fast, fast_runs), (slow, slow_runs) = ((a, ra), (b, rb)) if ma > mb else ((b, rb), (a, ra))
                    wrong.append(f"{fast}>{slow}")
                    # step ms: the slower layout's quickest run at most the faster one's slowest
                    if fast_runs and slow_runs and min(slow_runs) <= max(fast_runs):
                        within_runs.append(f"{fast}>{slow}")
        out.append({
            "set": set_name, "model": model, "input_len": input_len, "batch": batch,
            "by_measured": [r[0] for r in sorted(rows, key=lambda r: -r[1])],
            "by_predicted": [r[0] for r in sorted(rows, key=lambda r: -r[2])],
            "measured_tok_s": {r[0]: round(r[1], 2) for r in rows},
            "predicted_tok_s": {r[0]: round(r[2], 2) for r in rows},
            "pairs": pairs, "ties": ties, "wrong": len(wrong), "wrong_pairs": wrong,
            "wrong_within_runs": within_runs,
        })
    return out


# ----------------------------------------------------------------------------------------------
# reports


def case_name(c):
    return f"{c['model']} in{c['input_len']} {c['layout']} b{c['batch']}"


def md_table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def case_row(c):
    pred = c.get("predicted") or {}
    meas = c.get("measured") or {}
    dec, pre = pred.get("decode") or {}, pred.get("prefill") or {}
    e = c.get("error") or {}
    mark = ", ".join(c.get("out_of_tolerance") or [])
    status = c["status"] if c["status"] != "ok" else ("OUT: " + mark if mark else "ok")
    if c.get("decode_run_within"):
        status += " (a run within)"
    if c.get("prefill_run_within"):
        status += " (a prefill run within)"
    if meas.get("from_stdout"):
        status += " (stdout)"
    return [c["model"], c["input_len"], c["layout"], c["ranks"], c["batch"],
            fmt(dec.get("ms")), fmt(meas.get("decode_step_ms")), pct(e.get("decode")),
            fmt(dec.get("eager_ms")), fmt(meas.get("decode_eager_step_ms")),
            pct(e.get("decode_eager")),
            fmt(pre.get("ms"), 1), fmt(meas.get("prefill_ms"), 1), pct(e.get("prefill")),
            runs_cell(meas.get("decode_step_ms_runs")), status]


def runs_cell(runs):
    """A case's decode runs: their count and range (ms), "-" for one run."""
    runs = [r for r in runs or [] if r]
    if len(runs) < 2:
        return "-"
    return f"{len(runs)}: {fmt(min(runs))}–{fmt(max(runs))}"


CASE_HEAD = ["model", "in", "layout", "W", "batch", "decode pred ms", "decode meas ms", "err",
             "eager pred", "eager meas", "err", "prefill pred ms", "prefill meas ms", "err",
             "decode runs ms", "status"]


def phase_table(c):
    pred = c.get("predicted") or {}
    meas = c.get("measured") or {}
    dp = (pred.get("decode") or {}).get("phase_ms") or {}
    dm = meas.get("decode_phase_ms") or {}
    pp = (pred.get("prefill") or {}).get("phase_ms") or {}
    pm = meas.get("prefill_phase_ms") or {}
    rows = []
    for ph in PHASES:
        rows.append([ph, fmt(dp.get(ph)), fmt(dm.get(ph)), fmt(pp.get(ph), 2), fmt(pm.get(ph), 2)])

    def total(d):
        return sum(v for v in d.values() if v is not None) if d else None
    rows.append(["sum of phases", fmt(total(dp)), fmt(total(dm)), fmt(total(pp), 2),
                 fmt(total(pm), 2)])
    rows.append(["eager total", fmt((pred.get("decode") or {}).get("eager_ms")),
                 fmt(meas.get("decode_eager_step_ms")),
                 fmt((pred.get("prefill") or {}).get("eager_ms"), 2),
                 fmt(meas.get("prefill_eager_ms"), 2)])
    return md_table(["phase (eager)", "decode pred ms", "decode meas ms", "prefill pred ms",
                     "prefill meas ms"], rows)


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None


def steps_row(c):
    """A case's decode steps over time (bench latency's decode_eager_steps_ms, decode_steps_ms: rank 0's, in
    order): the profiled steps' median, the timed steps' first and second halves' medians, and the second half
    against the profiled steps; None without them (runs before they were written)."""
    meas = c.get("measured") or {}
    eager, timed = meas.get("decode_eager_steps_ms"), meas.get("decode_steps_ms")
    if not eager or not timed or len(timed) < 2:
        return None
    half = len(timed) // 2
    first, second, e = median(timed[:half]), median(timed[half:]), median(eager)
    return [c["model"], c["layout"], c["ranks"], c["batch"], fmt(e), fmt(first), fmt(second),
            f"{second / e:.2f}" if e else "-"]


def trace_ranks(md_text):
    """Each rank's eager step and its communication phase, ms a step, from the per-rank eager table that
    bench/comm_trace.py writes ("| rank | eager step | ... |"); {} when the table is not there."""
    lines = md_text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("| rank | eager step |"):
            continue
        head = [h.strip() for h in line.strip("|").split("|")]
        out = {}
        for row in lines[i + 2:]:
            if not row.startswith("| "):
                break
            cells = dict(zip(head, (x.strip() for x in row.strip("|").split("|"))))
            try:
                out[int(cells["rank"])] = (float(cells["eager step"]), float(cells["communication"]))
            except (KeyError, ValueError):
                return {}
        return out
    return {}


def traced_compute(case, run, out_dir):
    """For a case of several ranks without a pipeline whose first run was traced (plan_accuracy.py --comm-trace):
    each rank's compute in that run's eager decode steps (eager step - communication), beside the predicted
    compute of the busiest rank (the predicted eager step less its communication). The table is looked for in
    the trace/ folder beside the results.json that holds the run (out_dir for a run of this call). None when
    the case has no such table."""
    if case.get("ranks", 1) < 2 or "--pp" in (case.get("flags") or "") or not run:
        return None
    words = shlex.split(run.get("command") or "")
    if "--comm-trace" not in words[:-1]:
        return None
    folder = Path(run["source"]).parent if run.get("source") else out_dir
    if folder is None:
        return None
    md = folder / "trace" / f"{Path(words[words.index('--comm-trace') + 1]).name}.b{case['batch']}.md"
    ranks = trace_ranks(md.read_text()) if md.is_file() else {}
    pred = (case.get("predicted") or {}).get("decode") or {}
    if not ranks or 0 not in ranks or pred.get("eager_ms") is None:
        return None
    busy = {r: step - comm for r, (step, comm) in ranks.items()}
    order = sorted(busy, key=busy.get)
    slowest = order[-1]
    pred_comm = (pred.get("phase_ms") or {}).get("communication") or 0.0
    return {"predicted_ms": pred["eager_ms"] - pred_comm, "rank0_ms": busy[0],
            "median_ms": busy[order[(len(order) - 1) // 2]], "slowest_ms": busy[slowest], "slowest_rank": slowest,
            "predicted_comm_ms": pred_comm, "rank0_comm_ms": ranks[0][1]}


def traced_rows(cases, runs, out_dir):
    by_id = {r.get("id"): r for r in runs}
    rows = []
    for c in cases:
        if c["status"] != "ok":
            continue
        t = traced_compute(c, by_id.get(c.get("bench_command_id")), out_dir)
        if t is None:
            continue
        rows.append([c["model"], c["layout"], c["ranks"], c["batch"], pct((c.get("error") or {}).get("decode")),
                     fmt(t["predicted_ms"]), fmt(t["rank0_ms"]), pct(rel_err(t["predicted_ms"], t["rank0_ms"])),
                     fmt(t["median_ms"]), f"{fmt(t['slowest_ms'])} (rank {t['slowest_rank']})",
                     f"{t['slowest_ms'] / t['median_ms']:.2f}" if t["median_ms"] > 0 else "-",
                     fmt(t["predicted_comm_ms"]), fmt(t["rank0_comm_ms"])])
    return rows


TRACED_HEAD = ["model", "layout", "W", "batch", "decode err", "compute pred ms", "rank 0 compute ms", "err",
               "median rank ms", "slowest rank ms", "slowest / median", "communication pred ms",
               "rank 0 communication ms"]


def write_reports(out_dir, meta, runs, cases, ranks):
    if out_dir is None:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "runs": runs, "cases": cases, "rank_agreement": ranks}
    (out_dir / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    measured = sorted((c for c in cases if c["status"] == "ok"), key=badness, reverse=True)
    md = ["# Plan accuracy: `switchyard plan` predictions against `bench latency`", ""]
    md.append(f"sets {', '.join(meta.get('sets', []))}; profiles: "
              f"{', '.join(meta.get('profiles') or []) or 'none (the preset)'}; "
              "predicted profile: "
              f"{', '.join(sorted({c.get('profile') or '-' for c in cases}))}; "
              f"output {meta.get('output_len')} tokens; decode context = input + output/2; "
              f"error = (pred - meas) / meas; tolerance decode/prefill: "
              + "; ".join(f"{s} +-{100 * t[0]:.0f}%/+-{100 * t[1]:.0f}%"
                          for s, t in sorted(meta.get("tolerances", {}).items())))
    md += ["", "## Per case (worst first)", ""]
    others = [c for c in cases if c["status"] != "ok"]
    md.append(md_table(CASE_HEAD, [case_row(c) for c in measured + others]))
    md += ["", f"## Per phase, the {WORST_PHASE_CASES} worst cases "
           "(eager with device events; bench: rank 0's phases)", ""]
    for c in measured[:WORST_PHASE_CASES]:
        md += [f"### {case_name(c)}: decode {pct(c['error']['decode'])}, "
               f"prefill {pct(c['error']['prefill'])}", "", phase_table(c), ""]
    steps = [r for r in (steps_row(c) for c in measured) if r]
    if steps:
        md += ["## Decode steps over time (rank 0's steps in order, of the run that gives the case's "
               "decode figures)", ""]
        md.append(md_table(["model", "layout", "W", "batch", "profiled steps ms", "timed, first half",
                            "timed, second half", "second half / profiled"], steps))
        md.append("")
    traced = traced_rows(measured, runs, out_dir)
    if traced:
        md += ["## Each rank's compute in the traced runs (layouts without a pipeline)", "",
               "The first run of each layout traced its collectives (plan_accuracy.py --comm-trace; tables in "
               "trace/). Compute = a rank's eager decode step less its communication phase, in that run's profiled "
               "steps; predicted = the busiest rank's predicted eager step less its communication; the median "
               "rank is the lower middle one of an even count. The step waits for the slowest rank at each "
               "collective. The case's decode error is of its median run.", ""]
        md.append(md_table(TRACED_HEAD, traced))
        md.append("")
    if ranks:
        md += ["## Rank agreement (decode tok/s; ties within 5 % measured)", ""]
        rows = [[r["model"], r["input_len"], r["batch"], " > ".join(r["by_measured"]),
                 " > ".join(r["by_predicted"]), r["pairs"], r["ties"], r["wrong"],
                 ", ".join(r["wrong_pairs"])] for r in ranks]
        md.append(md_table(["model", "in", "batch", "by measured", "by predicted", "pairs",
                            "ties", "wrong", "wrong pairs"], rows))
        md.append("")
    failed = [r for r in runs if r.get("rc") not in (0, None) or r.get("timed_out")]
    bench_failed = [r for r in failed if r["kind"] == "bench"]
    if bench_failed:
        md += ["## Failed bench runs", ""]
        for r in bench_failed:
            last = ((r.get("stderr_tail") or "").strip().splitlines() or [""])[-1]
            md += [f"- `{r['command']}`: rc {r['rc']}"
                   f"{' (timed out)' if r.get('timed_out') else ''}: {last}"]
        md.append("")
    (out_dir / "table.md").write_text("\n".join(md) + "\n")


def print_summary(cases, ranks, runs):
    measured = sorted((c for c in cases if c["status"] == "ok"), key=badness, reverse=True)
    print("\n== plan accuracy (worst first; error = (pred - meas) / meas)")
    head = f"{'case':44} {'dec pred':>9} {'dec meas':>9} {'err':>8} " \
           f"{'pre pred':>9} {'pre meas':>9} {'err':>8}  mark"
    print(head)
    for c in measured:
        pred = c.get("predicted") or {}
        meas = c.get("measured") or {}
        print(f"{case_name(c)[:44]:44} {fmt((pred.get('decode') or {}).get('ms')):>9} "
              f"{fmt(meas.get('decode_step_ms')):>9} {pct(c['error']['decode']):>8} "
              f"{fmt((pred.get('prefill') or {}).get('ms'), 1):>9} "
              f"{fmt(meas.get('prefill_ms'), 1):>9} {pct(c['error']['prefill']):>8}  "
              f"{'OUT ' + ','.join(c['out_of_tolerance']) if c['out_of_tolerance'] else 'ok'}")
    others = [c for c in cases if c["status"] != "ok"]
    if others:
        by = {}
        for c in others:
            by.setdefault(c["status"], []).append(case_name(c))
        for status, names in sorted(by.items()):
            print(f"{status} ({len(names)}): {', '.join(names[:8])}"
                  f"{' ...' if len(names) > 8 else ''}")
    for r in ranks:
        print(f"rank {r['model']} in{r['input_len']} b{r['batch']}: {r['wrong']} wrong of "
              f"{r['pairs']} pairs ({r['ties']} ties){': ' if r['wrong'] else ''}"
              f"{', '.join(r['wrong_pairs'][:6])}"
              f"{'; within the runs: ' + str(len(r.get('wrong_within_runs', []))) if r['wrong'] else ''}")
    if measured:
        out = sum(1 for c in measured if c["out_of_tolerance"])
        within = sum(1 for c in measured if c.get("decode_run_within"))
        pre_within = sum(1 for c in measured if c.get("prefill_run_within"))
        print(f"{len(measured)} cases measured, {out} outside tolerance"
              f"{f' ({within} with a decode run within it)' if within else ''}"
              f"{f' ({pre_within} with a prefill run within it)' if pre_within else ''}; "
              f"{sum(1 for r in runs if r['kind'] == 'bench')} bench and "
              f"{sum(1 for r in runs if r['kind'] == 'plan')} plan runs")
