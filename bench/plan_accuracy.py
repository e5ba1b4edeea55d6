#!/usr/bin/env python3
"""How well `switchyard plan` predicts what `switchyard bench latency` measures (issue 19).

For every case (model, input length, layout, batch) the planner's predicted decode step and
prefill (`plan --json`, layout.predicted) are set against the engine's measured ones
(`bench latency --json`), as totals and per phase (eager, with device events), with the error
(pred - meas) / meas. Cases outside the tolerance are marked: decode +-15 % and prefill +-20 % on
one GPU, +-25 % for both on CPU ranks. Where a (model, input length, batch) group has several
layouts, their order by measured decode tok/s is set against their order by predicted tok/s: a
pair in the wrong order counts, unless the two measured within 5 % of each other (a tie).

One `bench latency` per (model, input length, layout) runs every batch of the case (one model
load); one `plan` per (case, batch) comes first and says whether the layout is valid and whether
the bench's KV cache fits (`--min-kv-tokens` = the blocks bench latency allocates); cases that do
not fit or are invalid are reported and not run. The bench routes uniformly (`--routing uniform`,
the planner's assumption; a model of random weights routes its tokens alike). Under a layout of W ranks on the CPU, bench
latency starts itself under mpirun with OMP_NUM_THREADS = cores / W (leave OMP_NUM_THREADS unset
so that the calibration and the bench split the cores alike).

--repeats N runs each layout's bench once in full (prefill and decode), then N - 1 rounds of
`bench latency --prefill-max-batch 1` over every layout measured (each round in the reverse order
of the one before), so that a case's runs fall at different points of the call and a slow minute of
the machine does not land on one layout's runs alone. The later rounds time the decode steps at
every batch and the prefill at batch 1 only, where its passes take a second or two
(--repeat-prefill-max-batch; 0: `--decode-only`). A case's decode figures are those of its median
run, its prefill figures those of its median prefill run (the full run's above that batch), and
table.md lists the runs' range.

Sets:
  one-gpu    device cuda, one GPU: qwen3-30b-a3b, mixtral-8x7b, kimi-k2-4layers (bench/configs)
             x input 512 and 8192 x batch 1, 10, 64, 256.
  cpu-ranks  device cpu: the bundled model (models/) and bench/configs/qwen3-moe-cpu-medium under
             1, 2, 4 and 8 ranks (layouts base, tp2, ep2, pp2, dp2+ep2, tp4, ep4, pp2+tp2, pp4,
             dp4+ep4, tp8, ep8, pp8, dp8+ep8, pp2+tp4) x input 128 x batch 1 and 64.

Examples (from the repository root):
    python3 bench/plan_accuracy.py --set one-gpu --dry-run
    python3 bench/plan_accuracy.py --set one-gpu --plan-only --out /tmp/pa-plan
    python3 bench/plan_accuracy.py --set one-gpu --profile h200.json --out /tmp/pa-gpu
    python3 bench/plan_accuracy.py --set one-gpu --models qwen3-30b-a3b --input-len 512 \\
        --batches 1,64 --budget 500 --out /tmp/pa-qwen3
    python3 bench/plan_accuracy.py --set cpu-ranks --profile cpu-r1.json --profile cpu-r2.json \\
        --profile cpu-r4.json --profile cpu-r8.json --out /tmp/pa-cpu
    python3 bench/plan_accuracy.py --set cpu-ranks --models pydoc-moe --layouts base,tp2,ep2 \\
        --batches 1 --input-len 32 --output-len 8 --out /tmp/pa-test
    python3 bench/plan_accuracy.py --merge /tmp/pa-a/results.json /tmp/pa-b/results.json \\
        --out /tmp/pa-all

--out DIR gets results.json (every case, prediction, measurement and the exact commands with their
exit codes and stderr tails), table.md (markdown: per case, per phase for the worst cases, rank
agreement), bench/ (bench latency's JSON) and logs/ (each command's output); both files are
rewritten after every bench run, so a cut run leaves what finished. --merge rebuilds them from
earlier results.json files without running anything. --explain adds explain/, plan's op-by-op
pricing of each case outside its tolerance (`plan --explain` for a decode, `--explain-prefill` for a
prefill), e.g. after a replan:
    python3 bench/plan_accuracy.py --merge R/results.json --replan --switchyard build/switchyard \
        --profile cpu-r1.json ... --out /tmp/pa-replan --explain
Standard library only.
"""

import argparse
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from plan_accuracy_report import PHASES, compare, pct, print_summary, rank_agreement, write_reports

ROOT = Path(__file__).resolve().parent.parent
# bench latency names two phases by the backend's names.
PHASE_ALIASES = {"expert GEMMs": "experts", "dense GEMMs": "dense"}
BLOCK = 16               # bench latency's KV block size
MAX_BATCH_TOKENS = 8192  # bench latency's default, passed to plan alike

# Layouts by name: the flags given to both plan and bench latency (plan also gets --gpus W).
LAYOUTS = {
    "base": [],
    "tp2": ["--tp", "2"],
    "ep2": ["--tp", "2", "--ep", "2"],
    "pp2": ["--pp", "2"],
    "dp2+ep2": ["--dp", "2", "--ep", "2"],
    "tp4": ["--tp", "4"],
    "ep4": ["--tp", "4", "--ep", "4"],
    "pp2+tp2": ["--pp", "2", "--tp", "2"],
    "pp4": ["--pp", "4"],
    "dp4+ep4": ["--dp", "4", "--ep", "4"],
    "tp8": ["--tp", "8"],
    "ep8": ["--tp", "8", "--ep", "8"],
    "pp8": ["--pp", "8"],
    "dp8+ep8": ["--dp", "8", "--ep", "8"],
    "pp2+tp4": ["--pp", "2", "--tp", "4"],
}


def bundled_model():
    """The model folder shipped under models/ (the first with a config.json)."""
    for d in sorted((ROOT / "models").glob("*/config.json")):
        return d.parent.name, str(d.parent.relative_to(ROOT))
    return "bundled", "models/MISSING"


def case_sets():
    bundled_name, bundled_dir = bundled_model()
    return {
        "one-gpu": {
            "device": "cuda",
            "models": {
                "qwen3-30b-a3b": "bench/configs/qwen3-30b-a3b",
                "mixtral-8x7b": "bench/configs/mixtral-8x7b",
                "kimi-k2-4layers": "bench/configs/kimi-k2-4layers",
            },
            "input_lens": [512, 8192],
            "batches": [1, 10, 64, 256],
            "layouts": ["base"],
            "tol_decode": 0.15,
            "tol_prefill": 0.20,
        },
        "cpu-ranks": {
            "device": "cpu",
            "models": {
                bundled_name: bundled_dir,
                "qwen3-moe-cpu-medium": "bench/configs/qwen3-moe-cpu-medium",
            },
            "input_lens": [128],
            "batches": [1, 64],
            "layouts": list(LAYOUTS),
            "tol_decode": 0.25,
            "tol_prefill": 0.25,
        },
    }


def ranks_of(flags):
    """World size W = pp * dp * tp of layout flags (unset sizes are 1)."""
    sizes = {"--pp": 1, "--dp": 1, "--tp": 1}
    for i in range(0, len(flags) - 1):
        if flags[i] in sizes:
            sizes[flags[i]] = int(flags[i + 1])
    return sizes["--pp"] * sizes["--dp"] * sizes["--tp"]


def kv_tokens_needed(batch, input_len, output_len):
    """KV tokens bench latency allocates for a batch (per dp rank): B * ceil((N+M)/16) + B
    blocks of 16."""
    blocks = batch * -(-(input_len + output_len) // BLOCK) + batch
    return blocks * BLOCK


def tail(text, n=1500):
    text = text or ""
    return text[-n:]


class Runner:
    """Runs commands with a time limit (the whole process group is ended on timeout) and keeps a
    record of each: the command, exit code, seconds, stdout/stderr logs and tails."""

    def __init__(self, out_dir, dry_run):
        self.out_dir = out_dir
        self.dry_run = dry_run
        self.records = []
        if out_dir is not None:
            (out_dir / "logs").mkdir(parents=True, exist_ok=True)

    def run(self, kind, cmd, timeout, label):
        rec = {"id": len(self.records), "kind": kind, "label": label,
               "command": shlex.join(cmd), "rc": None, "seconds": 0.0, "timed_out": False}
        self.records.append(rec)
        if self.dry_run:
            print(rec["command"])
            return rec, "", ""
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
        except OSError as e:
            rec["rc"] = -1
            rec["stderr_tail"] = f"cannot start: {e}"
            return rec, "", rec["stderr_tail"]
        try:
            out, err = proc.communicate(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            rec["timed_out"] = True
            self._end(proc, signal.SIGTERM)
            try:
                out, err = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                self._end(proc, signal.SIGKILL)
                out, err = proc.communicate()
            err = (err or "") + f"\n[plan_accuracy] timed out after {timeout:.0f} s"
        rec["rc"] = proc.returncode
        rec["seconds"] = round(time.monotonic() - t0, 3)
        rec["stderr_tail"] = tail(err)
        if self.out_dir is not None:
            base = self.out_dir / "logs" / f"{rec['id']:03d}-{kind}"
            base.with_suffix(".out").write_text(out or "")
            base.with_suffix(".err").write_text(err or "")
            rec["log"] = str(base.relative_to(self.out_dir)) + ".{out,err}"
        return rec, out or "", err or ""

    @staticmethod
    def _end(proc, sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


# ----------------------------------------------------------------------------------------------
# plan


def plan_command(args, sy, model_dir, device, flags, batch, input_len):
    w = ranks_of(flags)
    cmd = [sy, "plan", "--model", model_dir, "--machine", args.machine, "--gpus", str(w)]
    cmd += flags if flags else ["--tp", "1"]
    cmd += ["--batch", str(batch), "--context", str(input_len + args.output_len // 2),
            "--prefill-len", str(input_len), "--max-batch-tokens", str(MAX_BATCH_TOKENS),
            "--min-kv-tokens", str(kv_tokens_needed(batch, input_len, args.output_len)), "--json"]
    if device == "cpu":
        cmd += ["--kv-dtype", "fp32"]  # bench latency's auto KV dtype on the CPU
    for p in args.profile:
        cmd += ["--profile", p]
    return cmd


def read_plan(rec, out, batch):
    """The parts of plan's JSON the comparison uses; status: ok, does not fit, invalid, failed."""
    res = {"command_id": rec["id"], "rc": rec["rc"]}
    try:
        j = json.loads(out)
    except ValueError:
        res["status"] = "plan failed"
        res["error"] = tail(rec.get("stderr_tail") or out, 600)
        return res
    lay = j.get("layout")
    if lay is None and j.get("layouts"):
        lay = j["layouts"][0]
    if lay is None:
        res["status"] = "plan failed"
        res["error"] = "no layout in plan's JSON"
        return res
    mem = lay.get("memory") or {}
    issues = lay.get("issues") or []
    res.update({
        "valid": lay.get("valid"),
        "flags": (lay.get("sizes") or {}).get("flags"),
        "fits": mem.get("fits"),
        "kv_tokens_per_replica": mem.get("kv_tokens_per_replica"),
        "issues": [i.get("message") for i in issues],
        "issue_rules": [i.get("rule") for i in issues],
    })
    pred = lay.get("predicted")
    if pred:
        res["profile"] = pred.get("profile")
        dec = [d for d in pred.get("decode", []) if d.get("batch") == batch]
        res["decode"] = dec[-1] if dec else None
        res["prefill"] = pred.get("prefill")
    rules = set(res["issue_rules"])
    if rules and rules <= {"memory_fit"}:
        res["status"] = "does not fit"
    elif issues or lay.get("valid") is False:
        res["status"] = "invalid"
    elif rec["rc"] != 0:
        res["status"] = "plan failed"
        res["error"] = tail(rec.get("stderr_tail"), 600)
    elif not pred or res.get("decode") is None:
        res["status"] = "plan failed"
        res["error"] = "no prediction for this batch in plan's JSON"
    else:
        res["status"] = "ok"
    return res


# ----------------------------------------------------------------------------------------------
# bench latency


# A batch whose prompts hold more tokens than this warms prefill up with a few prompts: its untimed passes
# would otherwise take minutes (kimi-k2-4layers, 256 prompts of 8,192 tokens: ~110 s a pass on the H200).
WARMUP_FULL_TOKENS = 1 << 20


def warmup_prompts(batches, input_len):
    """bench latency's --warmup-prompts for these batches: None (every prompt) or enough for 4 full steps."""
    if max(batches) * input_len <= WARMUP_FULL_TOKENS:
        return None
    return max(1, -(-4 * MAX_BATCH_TOKENS // input_len))


def bench_command(args, sy, model_dir, device, flags, batches, input_len, json_path):
    cmd = [sy, "bench", "latency", "--model", model_dir, "--device", device, "--random-weights",
           "--batch", ",".join(str(b) for b in batches), "--input-len", str(input_len),
           "--output-len", str(args.output_len), "--max-batch-tokens", str(MAX_BATCH_TOKENS),
           "--routing", args.routing, "--json", str(json_path)]
    warm = warmup_prompts(batches, input_len)
    if warm is not None:
        cmd += ["--warmup-prompts", str(warm)]
    return cmd + flags


def norm_phases(d):
    if not d:
        return None
    return {PHASE_ALIASES.get(k, k): v for k, v in d.items()}


ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+[\d.]+%\s+\|\s+([\d.]+)\s+\d+\s+[\d.]+\s+[\d.]+%\s+\|"
                 r"\s+([\d.]+)\s+\|((?:\s+[\d.]+){9})\s*$")
PREFILL_ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+\|((?:\s+[\d.]+){8})\s*$")
PREFILL_PHASES = [p for p in PHASES if p != "sampling"]


def results_from_stdout(out, input_len):
    """bench latency's printed rows, for a run that ended before writing its JSON (a timeout, a
    crash at a later batch): decode from the main table, prefill ms from prefill tok/s (or the
    prefill phase table when it was printed)."""
    rows = {}
    prefill_section = False
    for line in out.splitlines():
        if line.startswith("prefill phases"):
            prefill_section = True
            continue
        m = PREFILL_ROW.match(line) if prefill_section else ROW.match(line)
        if m and prefill_section:
            b = int(m.group(1))
            r = rows.setdefault(b, {"batch": b})
            r["prefill_ms"] = float(m.group(2))
            r["prefill_eager_ms"] = float(m.group(3))
            r["prefill_phase_ms"] = dict(zip(PREFILL_PHASES, map(float, m.group(4).split())))
        elif m:
            b = int(m.group(1))
            tok_s = float(m.group(2))
            rows[b] = {
                "batch": b,
                "prefill_ms": 1e3 * b * input_len / tok_s if tok_s > 0 else None,
                "decode_step_ms": float(m.group(3)),
                "decode_tok_s": b / (float(m.group(3)) * 1e-3),
                "decode_eager_step_ms": float(m.group(4)),
                "decode_phase_ms": dict(zip(PHASES, map(float, m.group(5).split()))),
                "from_stdout": True,
            }
    return rows


def read_bench(json_path, out, input_len):
    """Measured results by batch, and the layout bench latency reports."""
    try:
        j = json.loads(Path(json_path).read_text())
    except (OSError, ValueError):
        return results_from_stdout(out, input_len), None, "stdout"
    rows = {}
    for r in j.get("results", []):
        r = dict(r)
        r["decode_phase_ms"] = norm_phases(r.get("decode_phase_ms"))
        r["prefill_phase_ms"] = norm_phases(r.get("prefill_phase_ms"))
        rows[int(r["batch"])] = r
    meta = {k: j.get(k) for k in ("ranks", "layout", "transport", "copy_bandwidth_gb_s",
                                  "matrix_tflop_s", "weight_gb", "layers")}
    return rows, meta, "json"


# ----------------------------------------------------------------------------------------------
# main


def parse_list(text, cast=str):
    return [cast(x) for x in text.split(",") if x.strip()] if text else None


def write_explanations(args, cases):
    """--explain: for each measured case outside its tolerance, plan's op-by-op pricing of what is out (`plan
    --explain` for the decode step, `--explain-prefill` for the prefill's first chunk) in OUT/explain/."""
    sy = str(Path(args.switchyard).resolve())
    out_dir = args.out / "explain"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    for c in cases:
        for phase in c.get("out_of_tolerance") or []:
            flag = "--explain" if phase == "decode" else "--explain-prefill"
            args.output_len = c["output_len"]
            cmd = [a for a in plan_command(args, sy, c["model_dir"], c["device"], c["flags"].split(), c["batch"],
                                           c["input_len"]) if a != "--json"] + [flag]
            name = f"{c['model']}-in{c['input_len']}-{c['layout']}-b{c['batch']}-{phase}.txt"
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                text = p.stdout + p.stderr
            except (OSError, subprocess.TimeoutExpired) as e:
                text = f"{e}\n"
            (out_dir / name).write_text(" ".join(cmd) + "\n\n" + text)
            written += 1
    print(f"wrote {written} explanation(s) to {out_dir}")


def replan(args, cases, runs, meta):
    """Runs plan again for each measured case of a merge (same model, layout, batch, context),
    with this run's binary and profiles, and puts its prediction in place of the stored one."""
    sy = str(Path(args.switchyard).resolve())
    if not Path(sy).exists():
        sys.exit(f"--replan: no switchyard binary at {sy} (--switchyard)")
    meta["replanned"] = {"switchyard": sy, "profiles": args.profile}
    meta["profiles"] = args.profile
    runner = Runner(args.out, False)
    runner.records = runs
    for c in cases:
        if not c.get("measured"):
            continue
        args.output_len = c["output_len"]
        cmd = plan_command(args, sy, c["model_dir"], c["device"], c["flags"].split(), c["batch"],
                           c["input_len"])
        label = f"{c['model']} in{c['input_len']} {c['layout']} b{c['batch']}"
        rec, out, _ = runner.run("plan", cmd, 120, label + " (replan)")
        p = read_plan(rec, out, c["batch"])
        c["plan"] = {k: v for k, v in p.items() if k not in ("decode", "prefill")}
        c["predicted"] = {"decode": p.get("decode"), "prefill": p.get("prefill")}
        c["profile"] = p.get("profile")
        c["status"] = p["status"]
        for stale in ("note", "layout_mismatch"):
            c.pop(stale, None)
        bflags = ((c.get("bench_meta") or {}).get("layout") or {}).get("flags")
        if bflags and c["plan"].get("flags") and bflags != c["plan"]["flags"]:
            c["layout_mismatch"] = f"plan {c['plan']['flags']} vs bench {bflags}"
        if p["status"] != "ok":
            c["note"] = "; ".join(p.get("issues") or []) or p.get("error") or ""
            print(f"[replan] {label}: {p['status']}: {c['note'][:160]}", flush=True)


def bench_run(args, runner, item, i, timeout):
    """Run i of a layout's bench command (0: prefill and decode; later: --decode-only), its rows added to
    item["runs_rows"]."""
    cmd, json_path, label = item["cmd"], item["json_path"], item["label"]
    if args.repeats > 1:
        rep_json = json_path.with_name(f"{json_path.stem}.run{i}.json")
        cmd = [str(rep_json) if x == str(json_path) else str(x) for x in cmd]
        if i > 0 and args.repeat_prefill_max_batch > 0:
            cmd += ["--prefill-max-batch", str(args.repeat_prefill_max_batch)]
        elif i > 0:
            cmd.append("--decode-only")
        label = f"{label} run {i + 1}/{args.repeats}" + (
            "" if i == 0 else f" (prefill up to b{args.repeat_prefill_max_batch})" if args.repeat_prefill_max_batch
            else " (decode only)")
    else:
        rep_json = json_path
    trace = None
    if i == 0 and args.comm_trace and args.out and item["ranks"] > 1:
        trace = args.out / "trace" / json_path.stem
        trace.parent.mkdir(parents=True, exist_ok=True)
        cmd = list(cmd) + ["--comm-trace", str(trace)]
    rec, out, err = runner.run("bench", cmd, timeout, label)
    if trace is not None and not args.dry_run:
        summarise_trace(trace, args.keep_trace)
    if args.dry_run:
        return
    if i == 0:
        item["rec"], item["err"] = rec, err
    rows, meta, source = read_bench(rep_json, out, item["input_len"])
    item["runs_rows"].append((rec, (rows, meta, source)))


def median_run(runs, key):
    """The run whose `key` is the median of those that have it (the lower middle one of an even count)."""
    timed = sorted((r for r in runs if r.get(key)), key=lambda r: r[key])
    return timed[(len(timed) - 1) // 2] if timed else None


def summarise_trace(prefix, keep):
    """--comm-trace: bench/comm_trace.py's tables of each batch's files PREFIX.b<B>.rank<R>.json, written to
    PREFIX.b<B>.md; the rank files removed unless `keep` (8 ranks of a 64-step run come to about a megabyte)."""
    batches = sorted({Path(f).name[len(prefix.name) + 1:].split(".")[0]
                      for f in glob.glob(f"{prefix}.b*.rank*.json")})
    for b in batches:
        p = f"{prefix}.{b}"
        r = subprocess.run([sys.executable, str(Path(__file__).with_name("comm_trace.py")), p],
                           capture_output=True, text=True)
        failed = f"\ncomm_trace.py rc {r.returncode}: {r.stderr}" if r.returncode else ""
        Path(p + ".md").write_text(r.stdout + failed)
        if not keep and r.returncode == 0:
            for f in glob.glob(p + ".rank*.json"):
                os.unlink(f)


def merged_rows(runs_rows):
    """Per batch: the first run's figures with the decode figures of the run whose decode step is the median of
    all runs and the prefill figures of the run whose prefill is the median of the runs that timed it (the lower
    middle one of an even count), and every run's step and prefill in the order they ran (the first the full
    run; a run that did not time the prefill is left out of prefill_ms_runs)."""
    first, by_batch = {}, {}
    for n, (_, (rws, _, _)) in enumerate(runs_rows):
        for b, r in rws.items():
            if n == 0:
                first[b] = r
            by_batch.setdefault(b, []).append(r)
    rows = {}
    for b, in_order in by_batch.items():
        mid = median_run(in_order, "decode_step_ms") or in_order[0]
        row = dict(first.get(b) or mid)
        for k, v in mid.items():
            if k.startswith("decode_"):
                row[k] = v
        pre = median_run(in_order, "prefill_ms")
        for k, v in (pre or {}).items():
            if k.startswith("prefill_"):
                row[k] = v
        if len(runs_rows) > 1:
            row["decode_step_ms_runs"] = [r.get("decode_step_ms") for r in in_order]
            row["prefill_ms_runs"] = [r["prefill_ms"] for r in in_order if r.get("prefill_ms")]
        rows[b] = row
    return rows


def settle(item, set_name):
    """A layout's cases measured from its runs so far (merged_rows), compared, and a line printed."""
    rec, err = item["rec"], item.get("err", "")
    rows, bench_meta, source = merged_rows(item["runs_rows"]), None, None
    for _, (_, bm, src) in item["runs_rows"]:
        bench_meta, source = bench_meta or bm, source or src
    for c in item["group"]:
        c["bench_command_id"] = rec["id"]
        r = rows.get(c["batch"])
        if r is None:
            c["status"] = "bench timed out" if rec["timed_out"] else "bench failed"
            c["note"] = tail(err, 400).strip()
            continue
        c["measured"] = r
        c["measured_source"] = source
        if bench_meta:
            c["bench_meta"] = bench_meta
            bflags = (bench_meta.get("layout") or {}).get("flags")
            pflags = (c.get("plan") or {}).get("flags")
            if bflags and pflags and bflags != pflags:
                c["layout_mismatch"] = f"plan {pflags} vs bench {bflags}"
        c["status"] = "ok"
        compare(c)
    done = [c for c in item["group"] if c["status"] == "ok"]
    runs = len(item["runs_rows"])
    print(f"[{set_name}] {item['label']}: bench rc {rec['rc']} in {rec['seconds']:.0f} s"
          + (f", {runs} runs" if runs > 1 else "")
          + "".join(f"; b{c['batch']} decode {pct(c['error']['decode'])} prefill "
                    f"{pct(c['error']['prefill'])}" for c in done)
          + ("" if rec["rc"] == 0 else f"; {tail(err, 200).strip()!r}"), flush=True)


def finish_rounds(args, runner, repeating, set_name, cases, meta, t_start):
    """--repeats N: rounds 2..N over every layout measured in round 1, each round in the reverse order of the
    one before (a layout's runs fall at different points of the call), decode only; the reports rewritten
    after each round. A round stops where the --budget does: the cases keep the runs they have."""
    order = list(repeating)
    for i in range(1, max(1, args.repeats)):
        order.reverse()
        for item in order:
            if not any(c["status"] == "ok" for c in item["group"]):
                continue
            timeout = args.timeout
            if args.budget:
                left = args.budget - (time.monotonic() - t_start)
                if left < 30:
                    print(f"[{set_name}] round {i + 1}: stopped, {left:.0f} s of --budget left", flush=True)
                    return
                timeout = min(timeout, left)
            bench_run(args, runner, item, i, timeout)
            settle(item, set_name)
        write_reports(args.out, meta, runner.records, cases, rank_agreement(cases))


def run_set(args, set_name, spec, runner, cases, meta, t_start):
    sy = str(Path(args.switchyard).resolve()) if not args.dry_run else args.switchyard
    device = spec["device"]
    models = spec["models"]
    if args.models:
        unknown = [m for m in args.models if m not in models]
        if unknown:
            sys.exit(f"unknown model(s) {unknown} for --set {set_name}; known: {list(models)}")
        models = {m: models[m] for m in args.models}
    layouts = spec["layouts"]
    if args.layouts:
        unknown = [x for x in args.layouts if x not in LAYOUTS]
        if unknown:
            sys.exit(f"unknown layout(s) {unknown}; known: {list(LAYOUTS)}")
        layouts = [x for x in args.layouts]
    batches = args.batches or spec["batches"]
    input_lens = args.input_len or spec["input_lens"]
    repeating = []  # each layout's bench command and its runs so far (--repeats)
    for model, model_dir in models.items():
        for input_len in input_lens:
            for layout in layouts:
                flags = LAYOUTS[layout]
                w = ranks_of(flags)
                label = f"{model} in{input_len} {layout}"
                group = []
                for batch in batches:
                    case = {"set": set_name, "model": model, "model_dir": model_dir,
                            "device": device, "input_len": input_len,
                            "output_len": args.output_len, "layout": layout,
                            "flags": " ".join(flags), "ranks": w, "batch": batch,
                            "context": input_len + args.output_len // 2,
                            "kv_tokens_needed": kv_tokens_needed(batch, input_len,
                                                                 args.output_len),
                            "tol_decode": spec["tol_decode"],
                            "tol_prefill": spec["tol_prefill"], "status": "planned"}
                    cases.append(case)
                    cmd = plan_command(args, sy, model_dir, device, flags, batch, input_len)
                    rec, out, _ = runner.run("plan", cmd, 120, f"{label} b{batch}")
                    if args.dry_run:
                        group.append(case)
                        continue
                    p = read_plan(rec, out, batch)
                    case["plan"] = {k: v for k, v in p.items() if k not in ("decode", "prefill")}
                    case["predicted"] = {"decode": p.get("decode"), "prefill": p.get("prefill")}
                    case["profile"] = p.get("profile")
                    case["status"] = p["status"]
                    if p["status"] == "ok":
                        group.append(case)
                    else:
                        why = "; ".join(p.get("issues") or []) or p.get("error") or ""
                        case["note"] = why
                        print(f"[{set_name}] {label} b{batch}: {p['status']}: {why[:160]}",
                              flush=True)
                if not group:
                    continue
                json_path = ((args.out / "bench" if args.out else Path("/tmp")) /
                             f"{set_name}-{model}-in{input_len}-{layout}.json")
                cmd = bench_command(args, sy, model_dir, device, flags,
                                    [c["batch"] for c in group], input_len, json_path)
                timeout = args.timeout
                if args.budget:
                    left = args.budget - (time.monotonic() - t_start)
                    if left < 30 and not args.dry_run:
                        for c in group:
                            c["status"] = "skipped (budget)"
                        print(f"[{set_name}] {label}: skipped, {left:.0f} s of --budget left",
                              flush=True)
                        continue
                    timeout = min(timeout, left)
                if args.out and not args.dry_run:
                    json_path.parent.mkdir(parents=True, exist_ok=True)
                    json_path.unlink(missing_ok=True)
                if args.plan_only:
                    print(shlex.join(cmd))
                    for c in group:
                        c["status"] = "not run (--plan-only)"
                    continue
                # --repeats N: this first run times prefill and decode; rounds 2..N (after every case's first
                # run, finish_rounds) time the decode steps and batch 1's prefill again, so that a case's runs
                # are spread over the whole call rather than back to back.
                item = {"group": group, "cmd": cmd, "json_path": json_path, "label": label,
                        "input_len": input_len, "ranks": w, "runs_rows": [], "rec": None}
                bench_run(args, runner, item, 0, timeout)
                if args.dry_run:
                    continue
                settle(item, set_name)
                repeating.append(item)
                write_reports(args.out, meta, runner.records, cases, rank_agreement(cases))
    finish_rounds(args, runner, repeating, set_name, cases, meta, t_start)


def main():
    sets = case_sets()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See the module docstring for examples.")
    ap.add_argument("--set", action="append", choices=list(sets),
                    help="case set (repeatable)")
    ap.add_argument("--switchyard", default=str(ROOT / "build" / "switchyard"))
    ap.add_argument("--profile", action="append", default=[],
                    help="machine profile from bench calibrate, passed to plan (repeatable)")
    ap.add_argument("--machine", default="h200", help="plan's --machine (default h200)")
    ap.add_argument("--out", type=Path, help="folder for results.json, table.md, bench/, logs/")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--routing", choices=["uniform", "model"], default="uniform",
                    help="bench latency's --routing: uniform (default) as the planner predicts, or the random "
                         "model's own (far from uniform)")
    ap.add_argument("--input-len", type=lambda s: parse_list(s, int),
                    help="input lengths, e.g. 512,8192 (default: the set's)")
    ap.add_argument("--models", type=parse_list, help="model names to run, e.g. qwen3-30b-a3b")
    ap.add_argument("--layouts", type=parse_list, help=f"layouts to run, of {','.join(LAYOUTS)}")
    ap.add_argument("--batches", type=lambda s: parse_list(s, int), help="e.g. 1,64")
    ap.add_argument("--timeout", type=float, default=540, help="seconds per bench run")
    ap.add_argument("--repeats", type=int, default=1,
                    help="bench each case this many times: one full run, then rounds of runs over every case that "
                         "time the decode and the prefill up to --repeat-prefill-max-batch (each round in the "
                         "reverse order of the one before); a case's decode and prefill figures are the median "
                         "run's (CPU ranks vary 12-40%% run to run on one machine)")
    ap.add_argument("--repeat-prefill-max-batch", type=int, default=1,
                    help="with --repeats: the later runs time the prefill at batches up to this (bench latency "
                         "--prefill-max-batch); 0: they time the decode only (--decode-only)")
    ap.add_argument("--comm-trace", action="store_true",
                    help="with --out: the first run of each layout of several ranks traces its collectives (bench "
                         "latency --comm-trace); bench/comm_trace.py's tables of each batch (waiting and transfer "
                         "per rank, each rank's phases) go to OUT/trace/<case>.b<B>.md, and table.md gets each rank's "
                         "compute in those runs beside the predicted compute")
    ap.add_argument("--keep-trace", action="store_true",
                    help="with --comm-trace: keep the ranks' trace files beside the tables")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds for the whole run: no bench starts with under 30 s left")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    ap.add_argument("--plan-only", action="store_true",
                    help="run the plans (which cases are valid and fit), print the bench commands")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="RESULTS_JSON",
                    help="rebuild table.md/results.json in --out from earlier results.json files")
    ap.add_argument("--explain", action="store_true",
                    help="with --out: write plan's op-by-op pricing (plan --explain, --explain-prefill) of each "
                         "case outside its tolerance to OUT/explain/ (with --merge, needs --switchyard and the "
                         "profiles the predictions came from)")
    ap.add_argument("--replan", action="store_true",
                    help="with --merge: predict every measured case again with --switchyard and "
                         "--profile (the measurements are kept), e.g. after a cost-model change")
    args = ap.parse_args()
    if args.repeats > 1 and args.repeats % 2 == 0:
        print(f"plan_accuracy: --repeats {args.repeats} is even: each case keeps the lower of its two middle runs, "
              "the faster (r16's bundled model: 0.36 of runs 0.36 and 0.42 ms); an odd count keeps the median",
              file=sys.stderr)

    if args.merge:
        meta = {"merged": [str(p) for p in args.merge], "sets": [], "profiles": [],
                "tolerances": {}}
        runs, cases = [], []
        for p in args.merge:
            d = json.loads(p.read_text())
            offset = len(runs)
            for r in d["runs"]:
                runs.append(dict(r, id=r["id"] + offset, source=str(p)))
            for c in d["cases"]:
                for k in ("bench_command_id",):
                    if k in c:
                        c[k] += offset
                cases.append(c)
            m = d.get("meta", {})
            meta["sets"] += [s for s in m.get("sets", []) if s not in meta["sets"]]
            meta["profiles"] += [s for s in m.get("profiles", []) if s not in meta["profiles"]]
            meta["tolerances"].update(m.get("tolerances", {}))
            meta.setdefault("output_len", m.get("output_len"))
        # A case in several parts (skipped for the budget in one, run in a later one): the measured one counts.
        by_key = {}
        for c in cases:
            key = (c["set"], c["model"], c["input_len"], c["layout"], c["batch"])
            if key not in by_key or (c.get("measured") and not by_key[key].get("measured")):
                by_key[key] = c
        cases = list(by_key.values())
        if args.replan:
            replan(args, cases, runs, meta)
        for c in cases:
            if c["status"] == "ok":
                compare(c)
        ranks = rank_agreement(cases)
        write_reports(args.out, meta, runs, cases, ranks)
        print_summary(cases, ranks, runs)
        if args.explain and args.out:
            write_explanations(args, cases)
        return 0

    if not args.set:
        ap.error("--set is required (or --merge)")
    if args.output_len < 8:
        ap.error("--output-len must be at least 8: bench latency profiles the first 6 decode "
                 "steps and times the rest")
    if not args.dry_run and not Path(args.switchyard).exists():
        ap.error(f"no switchyard binary at {args.switchyard} (--switchyard)")
    if os.environ.get("OMP_NUM_THREADS"):
        print(f"note: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} is set: every CPU rank "
              "gets that many threads instead of its share of the cores", file=sys.stderr)
    meta = {
        "sets": args.set, "switchyard": args.switchyard, "profiles": args.profile,
        "machine": args.machine, "output_len": args.output_len,
        "argv": sys.argv, "host": os.uname().nodename, "cpus": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "tolerances": {s: [sets[s]["tol_decode"], sets[s]["tol_prefill"]] for s in args.set},
    }
    runner = Runner(None if args.dry_run else args.out, args.dry_run)
    cases = []
    t_start = time.monotonic()
    for set_name in args.set:
        run_set(args, set_name, sets[set_name], runner, cases, meta, t_start)
    if args.dry_run:
        print(f"# {sum(1 for r in runner.records if r['kind'] == 'plan')} plan and "
              f"{sum(1 for r in runner.records if r['kind'] == 'bench')} bench commands; "
              "a real run drops the batches plan finds invalid or not fitting")
        if args.repeats > 1:
            again = (f"--prefill-max-batch {args.repeat_prefill_max_batch}" if args.repeat_prefill_max_batch > 0
                     else "--decode-only")
            print(f"# then {args.repeats - 1} round(s) of the bench commands again with {again} "
                  "(runN.json), each in the reverse order of the one before")
        return 0
    meta["seconds"] = round(time.monotonic() - t_start, 1)
    ranks = rank_agreement(cases)
    write_reports(args.out, meta, runner.records, cases, ranks)
    print_summary(cases, ranks, runner.records)
    if args.out:
        print(f"wrote {args.out / 'results.json'} and {args.out / 'table.md'}")
        if args.explain:
            write_explanations(args, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
