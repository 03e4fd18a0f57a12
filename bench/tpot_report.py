"""The history drawn and written out: a PNG of TPOT per bucket across commits (matplotlib) with a
static HTML page beside it, and the figures of README.md and bench/results/README.md generated
from the history (bench/tpot.py report | figures; bench/README.md, "History")."""
import html
import os
import re
import textwrap

import tpot_stats as ts

MODES = ("graph-kv", "eager-kv", "eager-nocache")  # the panels, top to bottom
# One colour per bucket, the same in every panel and every report (the picture test reads
# them): matplotlib's tab10 without its red, green and grey, which mark other things.
BUCKET_COLOURS = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
                  "#000080")
SLOWER_COLOUR, FASTER_COLOUR, OFFICIAL_COLOUR = "#d62728", "#2ca02c", "#7f7f7f"
PANEL_WIDTH_IN, PANEL_HEIGHT_IN, DPI = 12.0, 3.6, 100


def bucket_colour(buckets, bucket):
    return BUCKET_COLOURS[sorted(buckets).index(bucket) % len(BUCKET_COLOURS)]


def picture_size(panels):
    """The PNG's size in pixels for a number of panels (one per mode)."""
    return int(PANEL_WIDTH_IN * DPI), int(round(PANEL_HEIGHT_IN * panels * DPI))


def short(commit):
    return (commit or "?")[:12]


def series(runs, mode, model=None):
    """{bucket: [(index of the run, result)]} for one mode: per run and bucket its first result
    with the fused kernels (or where they do not apply), else its first without (the CPU's), at
    the token count of the mode's latest result, of the runs of `model` (a YAML's file name)."""
    chosen = []
    for i, run in enumerate(runs):
        if model is not None and os.path.basename(run.get("model") or "") != model:
            continue
        firsts = {}
        for r in run["results"]:
            if r.get("mode") != mode:
                continue
            key = (r.get("bucket"), r.get("tokens"))
            if key not in firsts or (firsts[key].get("fused_kernels") is False and
                                     r.get("fused_kernels") is not False):
                firsts[key] = r
        chosen += [(i, r) for r in firsts.values()]
    if not chosen:
        return {}
    tokens = chosen[-1][1].get("tokens")
    out = {}
    for i, r in chosen:
        if r.get("tokens") == tokens:
            out.setdefault(r["bucket"], []).append((i, r))
    return out


def changes(points, **kwargs):
    """The comparison of each point with the one before it, where both have samples."""
    out = {}
    for (_, before), (i, after) in zip(points, points[1:]):
        row = ts.compare_result(before, after, "tpot", **kwargs)
        if row["verdict"] != "too few samples":
            out[i] = row
    return out


def official_reference(runs, mode):
    """{bucket: (ms, engine, commit)}: the official engine's latest TPOT per bucket in a mode."""
    ref = {}
    for run in runs:
        off = run.get("official")
        for r in (off or {}).get("results", []):
            if r.get("mode") == mode and r.get("tpot_ms_median"):
                ref[r["bucket"]] = (r["tpot_ms_median"], r.get("engine") or "official",
                                    off.get("commit"))
    return ref


def median_interval(result, draws=1000, seed=0):
    """The 95% bootstrap interval of a result's median TPOT, or None without samples."""
    import numpy as np

    runs = ts.metric_runs(result, "tpot")
    if not runs or sum(map(len, runs)) < 2:
        return None
    medians = ts.bootstrap_medians(runs, draws, np.random.default_rng(seed))
    return np.percentile(medians, [2.5, 97.5]).tolist()


def draw(runs, png_path, modes=None, title=None):
    """The PNG: one panel per mode, one line per bucket across the runs (x: the runs in the
    history's order, labelled by commit and date), the median TPOT with its 95% interval where
    samples were kept, a triangle at each significant change from the point before (red up:
    slower, green down: faster) and the official engine as a dashed grey line. Returns what was
    drawn: [(mode, [buckets])]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model = os.path.basename(runs[-1].get("model") or "") or None
    modes = [m for m in (modes or MODES) if series(runs, m, model)]
    if not modes:
        raise ts.Refused("nothing to draw: no TPOT result in the history")
    all_buckets = sorted({b for m in modes for b in series(runs, m, model)})
    fig, axes = plt.subplots(len(modes), 1, squeeze=False,
                             figsize=(PANEL_WIDTH_IN, PANEL_HEIGHT_IN * len(modes)), dpi=DPI)
    labels = [f"{short(r.get('commit'))[:8]}\n{(r.get('date') or '')[5:10]}" for r in runs]
    drawn = []
    for ax, mode in zip(axes[:, 0], modes):
        lines = series(runs, mode, model)
        for bucket in sorted(lines):
            pts = lines[bucket]
            colour = bucket_colour(all_buckets, bucket)
            xs = [i for i, _ in pts]
            ys = [ts.point(r, "tpot") for _, r in pts]
            ax.plot(xs, ys, "-o", color=colour, linewidth=2.2, markersize=5,
                    label=f"bucket {bucket}")
            for x, (_, r), y in zip(xs, pts, ys):
                ci = median_interval(r)
                if ci:
                    ax.errorbar([x], [y], yerr=[[y - ci[0]], [ci[1] - y]], color=colour,
                                capsize=3, linewidth=1)
            for i, row in changes(pts).items():
                if row["verdict"] in ("slower", "faster"):
                    slower = row["verdict"] == "slower"
                    y = ts.point(dict(pts)[i], "tpot")
                    ax.plot([i], [y], "^" if slower else "v", markersize=11,
                            color=SLOWER_COLOUR if slower else FASTER_COLOUR, zorder=5)
                    ax.annotate(f"{row['change_pct']:+.1f}%", (i, y), textcoords="offset points",
                                xytext=(6, 8 if slower else -14), fontsize=8,
                                color=SLOWER_COLOUR if slower else FASTER_COLOUR)
        for bucket, (ms, engine, _) in sorted(official_reference(runs, mode).items()):
            ax.axhline(ms, color=OFFICIAL_COLOUR, linestyle="--", linewidth=1.5,
                       label=f"official {engine}, bucket {bucket}: {ms:.2f} ms")
        tokens = next(iter(lines.values()))[-1][1].get("tokens")
        ax.set_title(f"{mode}, {tokens} tokens", fontsize=10, loc="left")
        ax.set_ylabel("TPOT median (ms)")
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_xlim(-0.5, len(runs) - 0.5)
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="y", color="#dddddd")
        ax.legend(fontsize=8, loc="best")
        drawn.append((mode, sorted(lines)))
    last = runs[-1]
    fig.suptitle(title or f"TPOT across commits: {last.get('device_name')}, {model}, "
                 f"{last.get('dtype')}", fontsize=11)
    fig.tight_layout()
    fig.savefig(png_path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return drawn


def _cell(result, row):
    text = f"{ts.point(result, 'tpot'):.3f}"
    ci = median_interval(result)
    if ci:
        text += f" <small>[{ci[0]:.3f}, {ci[1]:.3f}]</small>"
    if row:
        cls = {"slower": "slower", "faster": "faster"}.get(row["verdict"], "same")
        text += (f"<br><span class='{cls}'>{row['change_pct']:+.1f}% "
                 f"[{row['ci_pct'][0]:+.1f}, {row['ci_pct'][1]:+.1f}] {row['verdict']}</span>")
    return text


def write_html(runs, html_path, png_name, drawn, source):
    """The static page: the picture, then a table per mode (a row per run, newest first: the
    median TPOT per bucket with its interval and the change from the run before), and each
    run's provenance."""
    model = os.path.basename(runs[-1].get("model") or "") or None
    e = html.escape
    out = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
           f"<title>TPOT history: {e(str(runs[-1].get('device_name')))}</title>",
           "<style>body{font-family:sans-serif;margin:2em;max-width:80em}"
           "table{border-collapse:collapse;margin-bottom:2em}"
           "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right;vertical-align:top}"
           "td.l,th.l{text-align:left}.slower{color:#d62728}.faster{color:#2ca02c}"
           ".same{color:#555}</style></head><body>",
           f"<h1>TPOT history: {e(str(runs[-1].get('device_name')))}, {e(str(model))}</h1>",
           f"<p>From <code>{e(source)}</code>: {len(runs)} runs. Medians in ms with their 95% "
           "bootstrap interval where the run kept its samples; under them, the change from the "
           "run before with its interval and the verdict (bench/tpot.py compare).</p>",
           f"<p><img src='{e(png_name)}' alt='TPOT per bucket across commits' "
           "style='max-width:100%'></p>"]
    for mode, buckets in drawn:
        lines = series(runs, mode, model)
        rows = {b: changes(lines[b]) for b in buckets}
        at = {b: dict(lines[b]) for b in buckets}
        tokens = next(iter(lines.values()))[-1][1].get("tokens")
        out.append(f"<h2>{e(mode)}, {tokens} tokens</h2><table><tr><th class='l'>commit</th>"
                   "<th class='l'>date</th><th class='l'>change</th>" +
                   "".join(f"<th>bucket {b}</th>" for b in buckets) + "</tr>")
        for i in reversed(range(len(runs))):
            if not any(i in at[b] for b in buckets):
                continue
            run = runs[i]
            cells = "".join(f"<td>{_cell(at[b][i], rows[b].get(i)) if i in at[b] else ''}</td>"
                            for b in buckets)
            out.append(f"<tr><td class='l'><code>{e(short(run.get('commit')))}</code></td>"
                       f"<td class='l'>{e(str(run.get('date') or ''))}</td>"
                       f"<td class='l'>{e(str(run.get('change') or ''))}</td>{cells}</tr>")
        out.append("</table>")
        ref = official_reference(runs, mode)
        if ref:
            out.append("<p>Official engine: " + "; ".join(
                f"bucket {b}: {ms:.3f} ms ({e(engine)}, official commit "
                f"<code>{e(short(c))}</code>)" for b, (ms, engine, c) in sorted(ref.items())) +
                "</p>")
    out.append("<h2>Provenance</h2><table><tr><th class='l'>commit</th><th class='l'>source</th>"
               "<th class='l'>build</th><th class='l'>torch</th><th class='l'>driver</th>"
               "<th>threads</th><th>load at start</th></tr>")
    for run in reversed(runs):
        p = run.get("provenance") or {}
        load = p.get("load_avg_at_start")
        load_text = (f"{load[0]:.2f} on {p.get('cpu_cores')} cores"
                     if isinstance(load, list) and load else "")
        out.append(f"<tr><td class='l'><code>{e(short(run.get('commit')))}</code></td>"
                   f"<td class='l'>{e(str(run.get('source') or ''))}</td>"
                   f"<td class='l'>{e(str(p.get('build_type') or ''))}</td>"
                   f"<td class='l'>{e(str(p.get('torch') or ''))}</td>"
                   f"<td class='l'>{e(str(p.get('driver') or ''))}</td>"
                   f"<td>{e(str(run.get('threads') or ''))}</td><td>{e(load_text)}</td></tr>")
    out.append("</table></body></html>")
    with open(html_path, "w") as f:
        f.write("\n".join(out) + "\n")


def report(history_path, out_dir, modes=None, png_name=None):
    """The PNG and the HTML page of a history file; returns their paths and what was drawn."""
    runs = ts.read_history(history_path)
    if not runs:
        raise ts.Refused(f"{history_path}: no run in it")
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(history_path))[0]
    png_name = png_name or f"{stem}.png"
    png = os.path.join(out_dir, png_name)
    drawn = draw(runs, png, modes)
    page = os.path.join(out_dir, f"{stem}.html")
    write_html(runs, page, png_name, drawn, history_path)
    return png, page, drawn


# --- the figures of README.md and bench/results/README.md --------------------------------------

HISTORY_DIR = os.path.join("bench", "results", "history")
GPU_HISTORY = os.path.join(HISTORY_DIR, "nvidia-h200.jsonl")
CPU_HISTORY = os.path.join(HISTORY_DIR, "cpu-amd-epyc.jsonl")
BEGIN = ("<!-- generated: {name} (bench/tpot.py figures, from bench/results/history/; edit the "
         "history, not this) -->")
END = "<!-- end generated: {name} -->"


def _find(run, mode, bucket, fused=True, tokens=None):
    for r in run["results"]:
        if r.get("mode") == mode and r.get("bucket") == bucket and \
                (r.get("fused_kernels") is not False) == fused and \
                (tokens is None or r.get("tokens") == tokens):
            return r
    return None


def _ms(r, digits=2):
    return f"{ts.point(r, 'tpot'):.{digits}f}" if r else "-"


def readme_block(root):
    gpu = ts.read_history(os.path.join(root, GPU_HISTORY))
    cpu = ts.read_history(os.path.join(root, CPU_HISTORY))
    last = next(r for r in reversed(gpu) if _find(r, "graph-kv", 1) and _find(r, "graph-kv", 16))
    b1, b16 = _find(last, "graph-kv", 1), _find(last, "graph-kv", 16)
    with_official = next((r for r in reversed(gpu) if r.get("official")), None)
    off = None
    if with_official:
        off = next((x for x in with_official["official"]["results"]
                    if x.get("mode") == "graph-kv" and x.get("bucket") == 1), None)
    ours, theirs = ts.point(b1, "tpot"), ts.point(off, "tpot") if off else None
    model = os.path.basename(last.get("model") or "")
    size = re.sub(r"^cube3d-|\.yaml$", "", model)
    dtype = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(last["dtype"],
                                                                            last["dtype"])
    lines = [
        f"Measured on an {last['device_name']} with random weights of the {size}-size model, "
        f"{dtype}, CUDA graphs, {b1['tokens']} tokens (commit {short(last['commit'])}, "
        f"{(last.get('date') or '')[:10]}: `{GPU_HISTORY}`; [bench/results]"
        "(bench/results/README.md) has the log of versions and a profile of one decode step):",
        "",
        "| | cube3d-server | official `EngineFast` | |",
        "| --- | --- | --- | --- |",
        f"| time per output token, 1 request | **{ours:.2f} ms** | "
        f"{f'{theirs:.2f} ms' if theirs else '-'} | "
        f"{f'{theirs / ours:.1f}x' if theirs else ''} |",
        f"| time per output token, 16 requests at once | **{ts.point(b16, 'tpot'):.2f} ms** "
        f"({ts.point(b16, 'tpot') / 16:.2f} ms a request) | one request at a time | |",
    ]
    cpu_run = next((r for r in reversed(cpu) if r.get("official")), None)
    if cpu_run:
        ours_cpu = next(r for r in cpu_run["results"] if r.get("mode") == "eager-kv")
        theirs_cpu = next(r for r in cpu_run["official"]["results"] if r.get("mode") == "eager-kv")
        lines += ["", f"On the CPU the {os.path.splitext(os.path.basename(cpu_run['model']))[0]} "
                  f"model decodes in {ts.point(ours_cpu, 'tpot'):.2f} ms a token against the "
                  f"official `{theirs_cpu.get('engine') or 'Engine'}`'s "
                  f"{ts.point(theirs_cpu, 'tpot'):.2f} ms (commit {short(cpu_run['commit'])}: "
                  f"`{CPU_HISTORY}`; `bench/official_engine.py`, "
                  "[load testing and benchmarks](docs/load-testing.md))."]
    wrap = lambda text: textwrap.fill(text, 99, break_long_words=False, break_on_hyphens=False)
    return "\n".join(wrap(l) if l and not l.startswith("|") else l for l in lines)


def versions_block(root):
    """bench/results/README.md's log of versions: a row per H200 run."""
    runs = ts.read_history(os.path.join(root, GPU_HISTORY))
    nocache_tokens = sorted({r.get("tokens") for run in runs for r in run["results"]
                             if r.get("mode") == "eager-nocache"})
    head = (f"eager-nocache b1 ({'/'.join(map(str, nocache_tokens))} tok)" if nocache_tokens
            else "eager-nocache b1")
    lines = ["| date, commit | change | prediction | graph-kv TPOT b1 / b4 / b16 (ms) | "
             f"eager-kv b1 | {head} |", "| --- | --- | --- | --- | --- | --- |"]
    previous = None
    for run in runs:
        graph = [_find(run, "graph-kv", b) for b in (1, 4, 16)]
        cell = " / ".join(_ms(r) for r in graph)
        unfused = [_find(run, "graph-kv", b, fused=False) for b in (1, 4, 16)]
        if any(unfused):
            cell += " (unfused " + " / ".join(_ms(r) for r in unfused) + ")"
        if previous and graph[0] and _find(previous, "graph-kv", 1):
            row = ts.compare_result(_find(previous, "graph-kv", 1), graph[0], "tpot")
            if row["ci_pct"]:
                cell += (f"; b1 {row['change_pct']:+.1f}% [{row['ci_pct'][0]:+.1f}, "
                         f"{row['ci_pct'][1]:+.1f}]: {row['verdict']}")
        previous = run
        date = (run.get("date") or "")[:10]
        lines.append(f"| {date}, {short(run.get('commit'))} | {run.get('change') or ''} | "
                     f"{run.get('prediction') or ''} | {cell} | "
                     f"{_ms(_find(run, 'eager-kv', 1))} | "
                     f"{_ms(_find(run, 'eager-nocache', 1), 1)} |")
    return "\n".join(lines)


FIGURES = {"README.md": {"tpot": readme_block},
           os.path.join("bench", "results", "README.md"): {"versions": versions_block}}


def replace_block(text, name, body, path):
    begin, end = BEGIN.format(name=name), END.format(name=name)
    pattern = re.compile(re.escape(begin) + r"\n.*?\n" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ts.Refused(f"{path}: no generated block '{name}' (a line '{begin}', the text, a "
                         f"line '{end}')")
    return pattern.sub(lambda _: f"{begin}\n{body}\n{end}", text, count=1)


def figures(root, check=False):
    """Regenerates (or, with check, compares) the generated blocks; returns the paths whose
    text differs from the history's."""
    stale = []
    for rel, blocks in FIGURES.items():
        path = os.path.join(root, rel)
        with open(path) as f:
            text = f.read()
        new = text
        for name, make in blocks.items():
            new = replace_block(new, name, make(root), rel)
        if new != text:
            stale.append(rel)
            if not check:
                with open(path, "w") as f:
                    f.write(new)
    return stale
