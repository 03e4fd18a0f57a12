"""TPOT runs as data: reading cube3d-bench's and the official engine's JSON and the history's
lines into one shape, comparing two runs with a confidence interval, and Google Benchmark's
JSON layout. bench/tpot.py is the command line; bench/README.md ("Comparing runs") says what
it does. Standard library and numpy (matplotlib only in bench/tpot_report.py).

A run, as this module and the history's lines hold it (one JSON object per history line):

    {"id", "commit", "date", "engine": "cube3d-bench" | "official", "source",
     "device", "device_name", "model", "dtype", "threads", "guidance_scale", "cuda_graphs",
     "provenance": {...as the bench wrote it...}, "change", "prediction",
     "results": [{"mode", "bucket", "tokens", "fused_kernels", "tpot_kind", "steps",
                  "tpot_ms_median", "tpot_ms_p90", "tpot_ms_mean", "ttft_ms", "e2e_ms",
                  "samples": {"tpot_ms": [[run 1's steps], ...], "ttft_ms": [...],
                              "e2e_ms": [...]} or null}],
     "official": a run of engine "official", or null}
"""
import hashlib
import json
import math
import os
import re

METRICS = {"tpot": "tpot_ms", "ttft": "ttft_ms", "e2e": "e2e_ms"}
# What a line of a history file must carry besides its results (bench/tpot.py history).
RUN_KEYS = ("commit", "date", "engine", "source", "device", "device_name", "model", "dtype",
            "threads", "guidance_scale", "cuda_graphs", "provenance", "change", "prediction")
RESULT_KEYS = ("mode", "bucket", "tokens", "fused_kernels", "tpot_kind", "steps", "engine",
               "tpot_ms_median", "tpot_ms_p90", "tpot_ms_mean", "ttft_ms", "e2e_ms",
               "tokens_per_s", "ids_checksum", "samples")


class Refused(Exception):
    """Runs that cannot be compared, or a file that holds no run: exit status 2."""


# --- reading runs ------------------------------------------------------------------------------

def _percentile(values, q):
    """numpy's default (linear between closest ranks), as cube3d-bench's table."""
    s = sorted(values)
    if not s:
        return None
    i = q * (len(s) - 1)
    lo = int(math.floor(i))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (i - lo)


def _result(r, defaults):
    out = {k: r.get(k) for k in RESULT_KEYS if k in r}
    out.setdefault("fused_kernels", defaults.get("fused_kernels"))
    if r.get("mode_note") == "--fused-kernels off":  # the hand-merged 2026-11-30-h200.json
        out["fused_kernels"] = False
    out.setdefault("engine", defaults.get("engine"))
    out.setdefault("samples", None)
    return out


def _cube3d_run(doc, source):
    prov = dict(doc.get("provenance") or {})
    prov.setdefault("commit", doc.get("commit"))
    prov.setdefault("threads", doc.get("threads"))
    prov.setdefault("device_name", doc.get("device_name"))
    prov.setdefault("torch", (doc.get("build") or {}).get("torch"))
    run = {"commit": doc.get("commit"), "date": doc.get("date"), "engine": "cube3d-bench",
           "source": source, "device": doc.get("device"), "device_name": doc.get("device_name"),
           "model": doc.get("model"), "dtype": doc.get("dtype"), "threads": doc.get("threads"),
           "guidance_scale": doc.get("guidance_scale"), "cuda_graphs": doc.get("cuda_graphs"),
           "provenance": prov, "change": None, "prediction": None,
           "gpt_params": doc.get("gpt_params")}
    defaults = {"fused_kernels": doc.get("fused_kernels"), "engine": "cube3d-bench"}
    run["results"] = [_result(r, defaults) for r in doc.get("results", [])]
    run["official"] = _official_run(doc["official"], source + "#official") \
        if isinstance(doc.get("official"), dict) else None
    return run


def _official_run(sec, source):
    prov = dict(sec.get("provenance") or {})
    for key in ("commit", "threads", "device_name", "torch", "device"):
        prov.setdefault(key, sec.get(key))
    return {"commit": sec.get("commit"), "date": sec.get("date"), "engine": "official",
            "source": source, "device": sec.get("device"), "device_name": sec.get("device_name"),
            "model": sec.get("model"), "dtype": sec.get("dtype"), "threads": sec.get("threads"),
            "guidance_scale": sec.get("guidance_scale"), "cuda_graphs": None,
            "provenance": prov, "change": None, "prediction": None,
            "gpt_params": (sec.get("weights") or {}).get("gpt_params"),
            "results": [_result(r, {"engine": r.get("engine", "official"),
                                    "fused_kernels": None}) for r in sec.get("results", [])],
            "official": None}


def read_history(path):
    """Every run of a history file (JSON lines), oldest first as written."""
    runs = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                runs.append(json.loads(line))
            except ValueError as e:
                raise Refused(f"{path}:{number}: not a JSON line ({e})") from None
    return runs


def _pick(runs, ref, path):
    if ref is None:
        if not runs:
            raise Refused(f"{path}: no run in it")
        return runs[-1]
    if re.fullmatch(r"-?\d+", ref) and len(ref) < 4:
        try:
            return runs[int(ref)]
        except IndexError:
            raise Refused(f"{path}: no run #{ref} (it holds {len(runs)})") from None
    found = [r for r in runs if (r.get("commit") or "").startswith(ref)]
    if not found:
        raise Refused(f"{path}: no run of commit {ref}")
    return found[-1]


def load_run(spec):
    """A run from FILE.json (cube3d-bench's --json), FILE.json#official (its official engine
    section), FILE.jsonl (a history: its last run), FILE.jsonl#REF (REF: a commit's prefix, or
    an index such as -2) or FILE.jsonl#REF#official."""
    path, *refs = spec.split("#")
    official = bool(refs) and refs[-1] == "official"
    if official:
        refs = refs[:-1]
    if not os.path.isfile(path):
        raise Refused(f"{path}: no such file")
    if path.endswith(".jsonl"):
        run = _pick(read_history(path), refs[0] if refs else None, path)
        run = dict(run, source=spec)
    else:
        if refs:
            raise Refused(f"{spec}: only a history (.jsonl) takes #REF")
        try:
            with open(path) as f:
                doc = json.load(f)
        except ValueError as e:
            raise Refused(f"{path}: not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise Refused(f"{path}: holds no JSON object")
        if "results" not in doc and "official" not in doc:
            raise Refused(f"{path}: no \"results\": not cube3d-bench's or the official "
                          "engine's JSON")
        run = _cube3d_run(doc, path) if "results" in doc else \
            dict(_cube3d_run({"results": []}, path), official=_official_run(doc["official"],
                                                                            path + "#official"))
    if official:
        if not run.get("official"):
            raise Refused(f"{spec}: no official engine section in it")
        return run["official"]
    return run


def merge_runs(runs):
    """One run of several bench JSONs of the same session (scripts/gpu_check.sh's four): the
    first one's description, every result; a (mode, bucket, tokens, fused_kernels) measured in
    two files keeps both files' runs as one set of samples."""
    first = runs[0]
    for other in runs[1:]:
        for key in ("commit", "device_name", "model", "dtype"):
            if other.get(key) != first.get(key):
                raise Refused(f"{other['source']}: {key} {other.get(key)!r} is not "
                              f"{first['source']}'s {first.get(key)!r}: not one session")
    merged = dict(first, results=[], source=" + ".join(r["source"] for r in runs))
    seen = {}
    for run in runs:
        for r in run["results"]:
            key = result_key(r)
            if key in seen and seen[key].get("samples") and r.get("samples"):
                seen[key]["samples"] = {m: seen[key]["samples"].get(m, []) +
                                        r["samples"].get(m, []) for m in METRICS.values()}
                summarize(seen[key])
                continue
            if key in seen:
                continue
            seen[key] = dict(r)
            merged["results"].append(seen[key])
    merged["official"] = next((r["official"] for r in runs if r.get("official")), None)
    return merged


def summarize(r):
    """Recomputes a result's figures from its samples (after a merge)."""
    steps = [v for run in r["samples"]["tpot_ms"] for v in run]
    if steps:
        r["tpot_ms_median"] = _percentile(steps, 0.5)
        r["tpot_ms_p90"] = _percentile(steps, 0.9)
        r["tpot_ms_mean"] = sum(steps) / len(steps)
        r["steps"] = len(steps)
    for key in ("ttft_ms", "e2e_ms"):
        if r["samples"].get(key):
            r[key] = sum(r["samples"][key]) / len(r["samples"][key])


def result_key(r):
    return (r.get("mode"), r.get("bucket"), r.get("tokens"), r.get("fused_kernels"))


def device_slug(run):
    """The history file's name for a run's device: nvidia-h200, cpu-amd-epyc."""
    name = run.get("device_name") or run.get("device") or "unknown"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"
    if not str(run.get("device") or "").startswith("cuda") and not slug.startswith("cpu"):
        slug = "cpu-" + slug
    return slug


def history_line(run, change=None, prediction=None):
    """The run as one line of a history: its description and results (samples included)."""
    line = {k: run.get(k) for k in RUN_KEYS}
    line["change"] = change if change is not None else run.get("change")
    line["prediction"] = prediction if prediction is not None else run.get("prediction")
    line["gpt_params"] = run.get("gpt_params")
    line["results"] = [{k: r.get(k) for k in RESULT_KEYS} for r in run["results"]]
    off = run.get("official")
    line["official"] = history_line(off) if off else None
    if off:
        line["official"].pop("official", None)
    ident = json.dumps([line["commit"], line["date"], line["device_name"], line["engine"],
                        [result_key(r) for r in line["results"]]], sort_keys=True)
    line["id"] = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return {"id": line.pop("id"), **line}


# --- statistics --------------------------------------------------------------------------------

def metric_runs(result, metric):
    """A result's samples of one metric as runs (lists): TPOT's are each run's steps, TTFT's and
    end to end's one value per run. None without samples."""
    samples = result.get("samples")
    if not samples or not samples.get(METRICS[metric]):
        return None
    values = samples[METRICS[metric]]
    runs = [list(v) for v in values] if metric == "tpot" else [[v] for v in values]
    runs = [r for r in runs if r]
    return runs or None


def point(result, metric):
    """The figure the comparison is about: the median of the pooled samples (TPOT), or of the
    runs (TTFT, end to end); the recorded summary when there are no samples."""
    runs = metric_runs(result, metric)
    if runs:
        return _percentile([v for r in runs for v in r], 0.5)
    return result.get("tpot_ms_median") if metric == "tpot" else result.get(METRICS[metric])


def bootstrap_medians(runs, draws, rng):
    """Medians of `draws` hierarchical bootstrap resamples: the runs are drawn with replacement,
    then each drawn run's samples with replacement, then the pooled median taken. The noise
    between runs (a shared machine's load comes and goes) then widens the interval as it
    should; with one run, only the steps are resampled."""
    import numpy as np

    lengths = np.array([len(r) for r in runs])
    width = int(lengths.max())
    table = np.full((len(runs), width), np.nan)
    for i, r in enumerate(runs):
        table[i, :len(r)] = r
    if len(runs) > 1:
        chosen = rng.integers(0, len(runs), size=(draws, len(runs)))
    else:
        chosen = np.zeros((draws, 1), dtype=int)
    n = lengths[chosen]                                         # (draws, slots)
    within = (rng.random((draws, len(runs), width)) * n[:, :, None]).astype(int)
    values = table[chosen[:, :, None], within]                  # (draws, slots, width)
    values[np.arange(width)[None, None, :] >= n[:, :, None]] = np.nan
    return np.nanmedian(values.reshape(draws, -1), axis=1)


def _betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b) (continued fraction, Lentz)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) +
                     a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    f, c, d = 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-12:
            break
    return front * (f - 1.0)


def t_quantile(p, df):
    """Student's t quantile for a probability p > 0.5 and real degrees of freedom (bisection on
    the distribution function, through the incomplete beta function)."""
    upper = lambda t: 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))  # P(T > t)
    lo, hi = 0.0, 1.0
    while upper(hi) > 1 - p:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if upper(mid) > 1 - p else (lo, mid)
    return (lo + hi) / 2


def welch_log_interval(base_values, new_values, confidence):
    """The interval of new / base - 1 in percent from Welch's t on the logarithms of per-run
    values (each run's median step, TTFT or end to end): the runs are the independent samples,
    so what a shared machine's load does between runs counts as noise."""
    lb = [math.log(v) for v in base_values]
    ln = [math.log(v) for v in new_values]
    mean = lambda xs: sum(xs) / len(xs)
    var = lambda xs: sum((x - mean(xs)) ** 2 for x in xs) / (len(xs) - 1)
    vb, vn = var(lb) / len(lb), var(ln) / len(ln)
    diff = mean(ln) - mean(lb)
    se = math.sqrt(vb + vn)
    if se == 0:
        return [(math.exp(diff) - 1) * 100] * 2
    df = (vb + vn) ** 2 / (vb ** 2 / (len(lb) - 1) + vn ** 2 / (len(ln) - 1))
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    return [(math.exp(diff - half) - 1) * 100, (math.exp(diff + half) - 1) * 100]


def compare_result(base, new, metric, draws=2000, confidence=0.95, threshold=1.0, seed=0):
    """One row of a comparison: the medians, the change in percent with its interval, and the
    verdict: slower or faster when the interval excludes 0 and the change is at least
    `threshold` percent; no change otherwise; too few samples when either side has under two
    samples. The interval: with two runs or more a side, Welch's t on the logarithms of each
    run's median (the runs are what is independent; steps of one run share its machine's
    moment); with one run (of many steps) a side, a bootstrap of the ratio of medians over the
    steps, which knows only the step noise."""
    b_runs, n_runs = metric_runs(base, metric), metric_runs(new, metric)
    row = {"metric": metric, "base": point(base, metric), "new": point(new, metric),
           "change_pct": None, "ci_pct": None, "verdict": "too few samples", "why": "",
           "method": None,
           "samples": [sum(map(len, b_runs or [])), sum(map(len, n_runs or []))],
           "runs": [len(b_runs or []), len(n_runs or [])]}
    if row["base"] and row["new"] is not None:
        row["change_pct"] = (row["new"] / row["base"] - 1) * 100
    if not b_runs or not n_runs or row["samples"][0] < 2 or row["samples"][1] < 2:
        row["why"] = "no samples recorded" if not b_runs or not n_runs else \
            "one sample a side cannot show the noise"
        return row
    if min(row["runs"]) >= 2:
        medians = lambda runs: [_percentile(r, 0.5) for r in runs]
        low, high = welch_log_interval(medians(b_runs), medians(n_runs), confidence)
        row["method"] = "welch-t on log run medians"
    else:
        import numpy as np

        rng = np.random.default_rng(seed)
        ratio = bootstrap_medians(n_runs, draws, rng) / bootstrap_medians(b_runs, draws, rng)
        tail = (1 - confidence) / 2 * 100
        low, high = ((np.percentile(ratio, [tail, 100 - tail]) - 1) * 100).tolist()
        row["method"] = "bootstrap of the median ratio"
    row["ci_pct"] = [low, high]
    change = row["change_pct"]
    significant = low > 0 or high < 0
    if significant and abs(change) >= threshold:
        row["verdict"] = "slower" if change > 0 else "faster"
        row["why"] = f"the {confidence:.0%} interval excludes 0"
    elif significant:
        row["verdict"] = "no change"
        row["why"] = f"significant, but under the {threshold:g}% threshold"
    else:
        row["verdict"] = "no change"
        row["why"] = "within the noise"
    if min(row["runs"]) < 2:
        row["why"] += "; one run: step noise only"
    return row


# --- comparability -----------------------------------------------------------------------------

def _load_note(run):
    prov = run.get("provenance") or {}
    load, cores = prov.get("load_avg_at_start"), prov.get("cpu_cores")
    threads = prov.get("threads") or run.get("threads") or 1
    if isinstance(load, list) and load and cores:
        # The bench's own threads come on top of what was running before it started.
        if load[0] + threads > cores:
            return (f"{run['source']}: a busy machine: load {load[0]:.2f} at the start, "
                    f"{threads} bench threads on {cores} cores")
    return None


def comparability(base, new):
    """(refusals, warnings, notes) for comparing two runs: refused when they differ in what sets
    the speed (device, model, dtype, threads on the CPU, guidance, build type, graph runner),
    warned when the software or the machine differs or one was busy."""
    refuse, warn, note = [], [], []
    bp, np_ = base.get("provenance") or {}, new.get("provenance") or {}

    def differ(label, a, b, into):
        if a is not None and b is not None and a != b:
            into.append(f"{label}: {a!r} -> {b!r}")

    kind = lambda r: "cuda" if str(r.get("device") or "").startswith("cuda") else "cpu"
    differ("device", kind(base), kind(new), refuse)
    differ("device name", base.get("device_name"), new.get("device_name"), refuse)
    model = lambda r: os.path.basename(r.get("model") or "") or None
    differ("model", model(base), model(new), refuse)
    differ("model parameters", base.get("gpt_params"), new.get("gpt_params"), refuse)
    one_official = "official" in (base.get("engine"), new.get("engine"))
    if one_official:
        if base.get("engine") != new.get("engine"):
            note.append(f"engines: {base.get('engine')} -> {new.get('engine')} (dtype "
                        f"{base.get('dtype')!r} -> {new.get('dtype')!r})")
    else:
        differ("dtype", base.get("dtype"), new.get("dtype"), refuse)
    threads = (warn if kind(base) == "cuda" else refuse)
    differ("threads", base.get("threads"), new.get("threads"), threads)
    differ("guidance scale", base.get("guidance_scale"), new.get("guidance_scale"), refuse)
    if base.get("engine") == new.get("engine"):  # one engine's build against its own
        differ("build type", bp.get("build_type"), np_.get("build_type"), refuse)
        differ("assertions", bp.get("assertions"), np_.get("assertions"), refuse)
        differ("compiler", bp.get("compiler"), np_.get("compiler"), warn)
    differ("graph-kv runner (--cuda-graphs)", base.get("cuda_graphs"), new.get("cuda_graphs"),
           refuse)
    # libtorch's C++ version has no local part; its wheel's has (2.11.0+cu130).
    torch = lambda p: str(p["torch"]).split("+")[0] if p.get("torch") else None
    differ("torch", torch(bp), torch(np_), warn)
    differ("GPU driver", bp.get("driver"), np_.get("driver"), warn)
    differ("host (another machine of the same kind)", bp.get("host"), np_.get("host"), warn)
    for run in (base, new):
        busy = _load_note(run)
        if busy:
            warn.append(busy)
    return refuse, warn, note


def pair_results(base, new):
    """(base result, new result) pairs: the same mode, bucket, tokens and fused_kernels; then,
    for what is left, the same mode, bucket and tokens when that is unique on both sides (two
    runs that differ only by --fused-kernels: the A/B itself)."""
    pairs, used = [], set()
    by_key = {}
    for i, r in enumerate(new["results"]):
        by_key.setdefault(result_key(r), []).append(i)
    left = []
    for b in base["results"]:
        match = [i for i in by_key.get(result_key(b), []) if i not in used]
        if match:
            used.add(match[0])
            pairs.append((b, new["results"][match[0]]))
        else:
            left.append(b)
    loose = lambda r: result_key(r)[:3]
    for b in left:
        same_b = [x for x in left if loose(x) == loose(b)]
        match = [i for i, r in enumerate(new["results"]) if i not in used and loose(r) == loose(b)]
        if len(match) == 1 and len(same_b) == 1:
            used.add(match[0])
            pairs.append((b, new["results"][match[0]]))
    return pairs


def compare_runs(base, new, metrics=("tpot",), **kwargs):
    """Every paired (mode, bucket) of two runs, per metric: a list of rows."""
    rows = []
    for b, n in pair_results(base, new):
        for metric in metrics:
            row = compare_result(b, n, metric, **kwargs)
            row.update(mode=b.get("mode"), bucket=b.get("bucket"), tokens=b.get("tokens"),
                       fused_kernels=[b.get("fused_kernels"), n.get("fused_kernels")])
            rows.append(row)
    return rows


# --- Google Benchmark's JSON -------------------------------------------------------------------

def _gbench_aggregates(values):
    n = len(values)
    mean = sum(values) / n
    s = sorted(values)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    stddev = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return [("mean", mean), ("median", median), ("stddev", stddev),
            ("cv", stddev / mean if mean else 0.0)]


def google_benchmark_json(doc, executable):
    """Google Benchmark's JSON of a cube3d-bench --json document, or of an official engine
    section: the layout of bench/gbench_json.cpp (cube3d-bench --benchmark-json), the same
    names and values."""
    prov = doc.get("provenance") or {}
    load = prov.get("load_avg_at_start")
    context = {"date": doc.get("date", ""), "host_name": prov.get("host", ""),
               "executable": executable, "num_cpus": prov.get("cpu_cores", 0),
               "mhz_per_cpu": 0, "cpu_scaling_enabled": False, "caches": [],
               "load_avg": load if isinstance(load, list) else [],
               "library_build_type": "debug" if prov.get("build_type") == "Debug" else "release",
               "cube3d": prov}
    benchmarks, family = [], 0
    us = lambda ms: round(ms * 1e6) / 1e3
    for r in doc.get("results", []):
        samples = r.get("samples")
        if not samples:
            continue
        prefix = f"{r.get('mode', '?')}/bucket:{r.get('bucket', 0)}/tokens:{r.get('tokens', 0)}/"
        per_sample = max(1, r.get("tokens", 1) - 1) if r.get("tpot_kind") == "per_run_mean" else 1
        for metric, key, nested, iterations in (("tpot", "tpot_ms", True, per_sample),
                                                ("ttft", "ttft_ms", False, 1),
                                                ("e2e", "e2e_ms", False, 1)):
            items = samples.get(key) or []
            values = [us(v) for run in items for v in run] if nested else [us(v) for v in items]
            if not values:
                continue
            name = prefix + metric
            base = {"family_index": family, "per_family_instance_index": 0, "run_name": name,
                    "repetitions": len(values), "threads": 1}
            for i, v in enumerate(values):
                benchmarks.append({"name": name, **base, "run_type": "iteration",
                                   "repetition_index": i, "iterations": iterations,
                                   "real_time": v, "cpu_time": v, "time_unit": "us"})
            if len(values) >= 2:
                for aggregate, v in _gbench_aggregates(values):
                    benchmarks.append({
                        "name": f"{name}_{aggregate}", **base, "run_type": "aggregate",
                        "aggregate_name": aggregate,
                        "aggregate_unit": "percentage" if aggregate == "cv" else "time",
                        "iterations": len(values), "real_time": v, "cpu_time": v,
                        "time_unit": "us"})
            family += 1
    return {"context": context, "benchmarks": benchmarks}
