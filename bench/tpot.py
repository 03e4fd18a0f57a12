#!/usr/bin/env python3
"""Tracking TPOT: two runs compared with statistics, a history per device, a picture.

    bench/tpot.py compare BASE NEW [--metric tpot|ttft|e2e|all] [--fail-above PCT]
                  [--threshold 1] [--confidence 0.95] [--bootstrap 2000] [--seed 0]
                  [--force] [--strict] [--json OUT]
    bench/tpot.py gbench RUN.json[#official] [-o OUT.json]
    bench/tpot.py history add RUN.json[,RUN.json...] [--dir bench/results/history]
                  [--change TEXT] [--prediction TEXT] [--compare-last] [--no-write]
    bench/tpot.py history merge LINES.jsonl [--dir bench/results/history]
    bench/tpot.py report HISTORY.jsonl [--out DIR] [--modes M,M] [--png NAME]
    bench/tpot.py figures [--check]

A run (BASE, NEW) is cube3d-bench's --json file, FILE.json#official (the official engine's
section of it, bench/official_engine.py), a history file (FILE.jsonl: its last run;
FILE.jsonl#REF: the last run of a commit whose id starts with REF, or #-2, the one before the
last; FILE.jsonl#REF#official), or several of those joined by commas, which count as one run
(the runs of one session: before and after interleaved, say).

compare: per mode and bucket the two medians, the change in percent with its interval and a
verdict: slower or faster when the interval excludes 0 and the change is at least --threshold
percent, otherwise no change (at this noise). The interval: with two timed runs or more a side,
Welch's t on the logarithms of each run's median (the runs are the independent samples: what a
shared machine does between runs is noise, so give the CPU --repeat 5 or more); with one run
a side, a bootstrap of the ratio of medians over its steps (step noise only, said so). It refuses runs that are not
comparable (another device or GPU, model, dtype, thread count on the CPU, guidance, build type,
graph runner; --force compares them anyway) and warns when the software, the machine or its load
differs (--strict refuses then). --fail-above PCT: exit 1 when any row is slower by more than
PCT percent (and significantly so). Exit status: 0, 1 (--fail-above), 2 (refused, bad input).

history add: the given files (one session; scripts/gpu_check.sh's four JSONs) as one line of
the device's history, bench/results/history/<device>.jsonl (nvidia-h200, cpu-amd-epyc, ...),
samples included; a run already there (same id: commit, date, device, results) is not added
twice; --compare-last first compares it with the last run of the same model there. merge: the
lines of another history file added to their devices' files the same way.
report: the PNG and the static HTML page of a history (bench/tpot_report.py; needs
matplotlib). figures: README.md's and bench/results/README.md's generated blocks from the
history; --check exits 1 when the committed text is not what the history gives.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tpot_stats as ts  # noqa: E402

ROOT = os.path.dirname(HERE)


def load(spec):
    parts = [p for p in spec.split(",") if p]
    if not parts:
        raise ts.Refused(f"'{spec}': no run named")
    runs = [ts.load_run(p) for p in parts]
    return runs[0] if len(runs) == 1 else ts.merge_runs(runs)


def describe(run):
    p = run.get("provenance") or {}
    bits = [f"{run.get('engine')} {str(run.get('commit') or '?')[:12]}",
            str(run.get("device_name") or run.get("device")), str(run.get("dtype")),
            f"{run['threads']} threads" if run.get("threads") else "",
            (run.get("date") or "")[:16]]
    if p.get("load_avg_at_start"):
        bits.append(f"load {p['load_avg_at_start'][0]:.2f}/{p.get('cpu_cores')} cores")
    return ", ".join(b for b in bits if b)


def fmt_pct(v):
    return "-" if v is None else f"{v:+.1f}%"


def cmd_compare(args):
    return compare_and_print(load(args.base), load(args.new), args)


def compare_and_print(base, new, args):
    """Prints the comparison; returns the exit status (0, 1 for --fail-above, 2 refused)."""
    refuse, warn, note = ts.comparability(base, new)
    if args.strict:
        refuse, warn = refuse + warn, []
    if args.force:
        refuse, warn = [], [f"(--force) {r}" for r in refuse] + warn
    print(f"base: {describe(base)}  [{base['source']}]")
    print(f"new:  {describe(new)}  [{new['source']}]")
    for n in note:
        print(f"note: {n}")
    for w in warn:
        print(f"warning: {w}")
    if refuse:
        for r in refuse:
            print(f"refused: {r}", file=sys.stderr)
        print("tpot.py compare: the runs are not comparable (--force compares them anyway)",
              file=sys.stderr)
        return 2
    metrics = list(ts.METRICS) if args.metric == "all" else [args.metric]
    rows = ts.compare_runs(base, new, metrics, draws=args.bootstrap, confidence=args.confidence,
                           threshold=args.threshold, seed=args.seed)
    if not rows:
        print("tpot.py compare: no (mode, bucket, tokens) in both runs", file=sys.stderr)
        return 2
    ci_head = f"{args.confidence:.0%} interval"
    print(f"\n{'metric':<6} {'mode':<13} {'bucket':>6} {'tokens':>6} {'base ms':>10} "
          f"{'new ms':>10} {'change':>8} {ci_head:>18}  {'runs':>5}  verdict")
    failed = []
    for r in rows:
        ci = "-" if not r["ci_pct"] else f"[{r['ci_pct'][0]:+.1f}%, {r['ci_pct'][1]:+.1f}%]"
        fused = r["fused_kernels"]
        mode = r["mode"] + ("" if None in fused or fused[0] == fused[1] else " (fused " +
                            "->".join("on" if f else "off" for f in fused) + ")")
        base_ms = "-" if r["base"] is None else f"{r['base']:.3f}"
        new_ms = "-" if r["new"] is None else f"{r['new']:.3f}"
        print(f"{r['metric']:<6} {mode:<13} {r['bucket']:>6} {r['tokens']:>6} {base_ms:>10} "
              f"{new_ms:>10} {fmt_pct(r['change_pct']):>8} {ci:>18}  "
              f"{r['runs'][0]}/{r['runs'][1]:<3}  {r['verdict']}"
              + (f" ({r['why']})" if r["why"] else ""))
        if args.fail_above is not None and r["verdict"] == "slower" and \
                r["change_pct"] > args.fail_above:
            failed.append(r)
    print("(medians of the pooled samples; interval: Welch's t on each run's median with two "
          f"runs or more a side, else {args.bootstrap} bootstrap resamples of the steps' median "
          f"ratio; threshold {args.threshold:g}%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"base": {k: base.get(k) for k in ts.RUN_KEYS},
                       "new": {k: new.get(k) for k in ts.RUN_KEYS},
                       "warnings": warn, "notes": note, "rows": rows,
                       "settings": {"bootstrap": args.bootstrap, "confidence": args.confidence,
                                    "threshold_pct": args.threshold, "seed": args.seed,
                                    "fail_above_pct": args.fail_above}}, f, indent=2)
            f.write("\n")
    for r in failed:
        print(f"FAIL: {r['metric']} {r['mode']} bucket {r['bucket']}: {fmt_pct(r['change_pct'])} "
              f"slower, above --fail-above {args.fail_above:g}%", file=sys.stderr)
    return 1 if failed else 0


def cmd_gbench(args):
    path, *refs = args.run.split("#")
    with open(path) as f:
        doc = json.load(f)
    if refs == ["official"]:
        doc = doc.get("official") or {}
    elif refs:
        raise ts.Refused(f"{args.run}: only #official is understood here")
    out = ts.google_benchmark_json(doc, args.run)
    text = json.dumps(out, indent=2) + "\n"
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def append_lines(lines, directory, dry=False):
    """Adds history lines to their devices' files (skipping ids already there); returns
    [(path, added?)]."""
    done = []
    for line in lines:
        path = os.path.join(directory, ts.device_slug(line) + ".jsonl")
        have = {r.get("id") for r in ts.read_history(path)} if os.path.exists(path) else set()
        added = line["id"] not in have
        if added and not dry:
            os.makedirs(directory, exist_ok=True)
            with open(path, "a") as f:
                f.write(json.dumps(line, separators=(",", ":")) + "\n")
        done.append((path, added))
    return done


def compare_with_last(line, directory):
    """Compares a run with the last run of the same model in its device's history (printed;
    never failing): what scripts/gpu_check.sh shows of each GPU run."""
    path = os.path.join(directory, ts.device_slug(line) + ".jsonl")
    model = os.path.basename(line.get("model") or "")
    earlier = [r for r in (ts.read_history(path) if os.path.exists(path) else [])
               if os.path.basename(r.get("model") or "") == model and r["id"] != line["id"]]
    if not earlier:
        print(f"no earlier run of {model} in {path} to compare with")
        return
    base = dict(earlier[-1], source=f"{path}#{str(earlier[-1].get('commit'))[:12]}")
    print(f"against the last run in {path}:")
    opts = argparse.Namespace(metric="tpot", strict=False, force=False, bootstrap=2000,
                              confidence=0.95, threshold=1.0, seed=0, fail_above=None, json=None)
    try:
        compare_and_print(base, dict(line, source="this run"), opts)
    except (ts.Refused, ImportError) as e:  # the device's Python may lack numpy
        print(f"(no comparison: {e})")


def cmd_history(args):
    if args.action == "add":
        run = load(args.files)
        lines = [ts.history_line(run, change=args.change, prediction=args.prediction)]
    else:
        lines = ts.read_history(args.files)
    if args.compare_last:
        for line in lines:
            compare_with_last(line, args.dir)
    if args.no_write:
        return 0
    for path, added in append_lines(lines, args.dir):
        print(f"{'added a run to' if added else 'already in'} {path}")
    return 0


def cmd_report(args):
    import tpot_report

    modes = args.modes.split(",") if args.modes else None
    png, page, drawn = tpot_report.report(args.history, args.out, modes, args.png)
    print(f"wrote {png} and {page}: " + "; ".join(
        f"{mode}: buckets {', '.join(map(str, buckets))}" for mode, buckets in drawn))
    return 0


def cmd_figures(args):
    import tpot_report

    stale = tpot_report.figures(args.root, check=args.check)
    if args.check:
        if stale:
            print("figures differ from what bench/results/history/ gives: " + ", ".join(stale) +
                  " (run bench/tpot.py figures and commit)", file=sys.stderr)
            return 1
        print("figures: README.md and bench/results/README.md match the history")
        return 0
    print("rewrote " + ", ".join(stale) if stale else "figures: nothing to change")
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench/tpot.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="compare two runs: medians, change, interval, verdict")
    c.add_argument("base")
    c.add_argument("new")
    c.add_argument("--metric", default="tpot", choices=[*ts.METRICS, "all"])
    c.add_argument("--fail-above", type=float, default=None, metavar="PCT",
                   help="exit 1 when a row is significantly slower by more than PCT percent")
    c.add_argument("--threshold", type=float, default=1.0, metavar="PCT",
                   help="the least change in percent called slower or faster (default 1)")
    c.add_argument("--confidence", type=float, default=0.95)
    c.add_argument("--bootstrap", type=int, default=2000, metavar="N", help="resamples")
    c.add_argument("--seed", type=int, default=0, help="of the resampling")
    c.add_argument("--force", action="store_true", help="compare runs that are not comparable")
    c.add_argument("--strict", action="store_true", help="refuse on warnings too")
    c.add_argument("--json", default=None, metavar="OUT", help="write the rows as JSON")
    c.set_defaults(func=cmd_compare)
    g = sub.add_parser("gbench", help="a bench JSON in Google Benchmark's layout")
    g.add_argument("run")
    g.add_argument("-o", "--output", default=None)
    g.set_defaults(func=cmd_gbench)
    h = sub.add_parser("history", help="add runs to the per-device history")
    h.add_argument("action", choices=["add", "merge"])
    h.add_argument("files", help="add: RUN.json[,RUN.json...]; merge: a history file")
    h.add_argument("--dir", default=os.path.join(ROOT, "bench", "results", "history"))
    h.add_argument("--change", default=None, help="what changed (the log of versions' column)")
    h.add_argument("--prediction", default=None, help="what was predicted")
    h.add_argument("--compare-last", action="store_true",
                   help="first compare with the last run of the same model in the history")
    h.add_argument("--no-write", action="store_true", help="touch no history file")
    h.set_defaults(func=cmd_history)
    r = sub.add_parser("report", help="PNG + HTML of a history file")
    r.add_argument("history")
    r.add_argument("--out", default=os.path.join("build", "tpot-report"))
    r.add_argument("--modes", default=None)
    r.add_argument("--png", default=None, help="the PNG's file name (default: the history's)")
    r.set_defaults(func=cmd_report)
    f = sub.add_parser("figures", help="README.md's and bench/results/README.md's figures")
    f.add_argument("--check", action="store_true")
    f.add_argument("--root", default=ROOT)
    f.set_defaults(func=cmd_figures)
    args = p.parse_args(argv)
    if getattr(args, "fail_above", None) is not None and args.fail_above < 0:
        p.error("--fail-above must be >= 0")
    if not 0.5 <= getattr(args, "confidence", 0.95) < 1:
        p.error("--confidence must be in [0.5, 1)")
    return args


def project_python():
    """The project's Python (scripts/python_env.sh: .venv/, numpy and matplotlib from
    scripts/setup.sh) when this one lacks numpy, so that `bench/tpot.py` runs as it is."""
    try:
        import numpy  # noqa: F401
        return None
    except ImportError:
        pass
    venv = os.environ.get("CUBE3D_VENV") or os.path.join(ROOT, ".venv")
    python = os.path.join(venv, "bin", "python")
    if os.access(python, os.X_OK) and os.path.realpath(venv) != os.path.realpath(sys.prefix) \
            and not os.environ.get("CUBE3D_TPOT_REEXEC"):
        return python
    return None


def main(argv=None):
    python = project_python()
    if python and argv is None:
        os.environ["CUBE3D_TPOT_REEXEC"] = "1"
        os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])
    args = parse_args(argv)
    try:
        return args.func(args)
    except ts.Refused as e:
        print(f"tpot.py: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"tpot.py: {e} (scripts/setup.sh installs numpy and matplotlib)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
