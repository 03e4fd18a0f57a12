"""bench/tpot.py on synthetic runs (no bench is run): the comparison's verdicts under realistic
noise, the runs it refuses, --fail-above, the two engines joined, the history files, the report
drawn from fixture runs and opened as a picture, Google Benchmark's JSON read by Debian's
compare.py, and README.md's and bench/results/README.md's figures being what the history gives.
Run by ctest (tools.tpot); numpy, matplotlib and pillow from scripts/setup.sh, compare.py from
Debian's libbenchmark-tools."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

SOURCE = os.environ.get("CUBE3D_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
                            __file__)))))
TOOL = os.path.join(SOURCE, "bench", "tpot.py")
COMPARE_PY = "/usr/share/benchmark/compare.py"  # Debian's libbenchmark-tools
sys.path.insert(0, os.path.join(SOURCE, "bench"))
import tpot_report  # noqa: E402
import tpot_stats as ts  # noqa: E402


def steps(rng, runs, count, ms, shift, step_sd=0.05, run_sd=0.015, outliers=0.02):
    """Realistic decode steps of a shared CPU: each run on its own moment of the machine (a
    log-normal factor of sd run_sd), steps slowly growing with the position, log-normal jitter
    of sd step_sd and a few outliers 1.5-3x; `shift` scales everything (0.05: 5% slower)."""
    out = []
    for _ in range(runs):
        moment = rng.lognormal(0, run_sd)
        v = ms * (1 + shift) * moment * (1 + 0.1 * np.arange(count) / count) * \
            rng.lognormal(0, step_sd, count)
        hit = rng.random(count) < outliers
        v[hit] *= rng.uniform(1.5, 3, hit.sum())
        out.append([round(float(x), 6) for x in v])
    return out


def bench_doc(seed, shift=0.0, runs=5, count=100, buckets=(1, 4), device="cpu",
              device_name="AMD EPYC", model="models/demo.yaml", dtype="float32", threads=1,
              commit="base", date="2026-12-07T10:00:00Z", load=0.2, cores=8, graph=False):
    """A cube3d-bench --json document with synthetic samples (eager-kv per bucket; graph-kv's
    one mean step per run too when `graph`)."""
    rng = np.random.default_rng(seed)
    results = []
    for b in buckets:
        for mode in ("eager-kv", "graph-kv") if graph else ("eager-kv",):
            if mode == "graph-kv":
                tpot = [[round(float(x), 6)] for x in
                        1.5 * b ** 0.1 * (1 + shift) * rng.lognormal(0, 0.002, runs)]
            else:
                tpot = steps(rng, runs, count, 2.0 * b ** 0.2, shift)
            pooled = sorted(v for r in tpot for v in r)
            results.append({
                "mode": mode, "bucket": b, "tokens": count + 1, "steps": len(pooled),
                "tpot_kind": "per_run_mean" if mode == "graph-kv" else "per_step",
                "tpot_ms_median": float(np.median(pooled)),
                "tpot_ms_p90": float(np.percentile(pooled, 90)),
                "tpot_ms_mean": float(np.mean(pooled)),
                "ttft_ms": 10.0, "e2e_ms": 300.0,
                "samples": {"tpot_ms": tpot,
                            "ttft_ms": [round(10 * (1 + shift) * x, 6)
                                        for x in rng.lognormal(0, 0.03, runs)],
                            "e2e_ms": [round(300 * (1 + shift) * x, 6)
                                       for x in rng.lognormal(0, 0.02, runs)]}})
    return {"device": device, "device_name": device_name, "dtype": dtype, "model": model,
            "commit": commit, "date": date, "threads": threads, "tokens": count + 1,
            "guidance_scale": 3.0, "cuda_graphs": "on", "fused_kernels": False,
            "provenance": {"commit": commit, "build_type": "Release", "assertions": False,
                           "compiler": "12.2.0", "torch": "2.11.0", "device": device,
                           "device_name": device_name, "driver": None, "threads": threads,
                           "cpu_cores": cores, "host": "ci", "load_avg_at_start": [load, 0, 0]},
            "results": results, "complete": True}


def tpot(*args, check=None):
    proc = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                          timeout=120)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def rows_of(stdout):
    """{(metric, mode, bucket): verdict} from compare's table."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in ts.METRICS and len(parts) > 8 and parts[2].isdigit():
            verdict = line.split("  ")[-1].split(" (")[0].strip()
            out[(parts[0], parts[1], int(parts[2]))] = verdict
    return out


class Files(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, name, doc):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path


class CompareVerdictTest(Files):
    """The verdicts on synthetic samples: 5 runs of 100 steps a side, realistic noise."""

    def test_a_five_percent_slowdown_is_slower(self):
        base = self.write("base.json", bench_doc(1))
        new = self.write("new.json", bench_doc(2, shift=0.05, commit="new"))
        proc = tpot("compare", base, new, check=0)
        self.assertEqual(rows_of(proc.stdout),
                         {("tpot", "eager-kv", 1): "slower", ("tpot", "eager-kv", 4): "slower"},
                         proc.stdout)
        self.assertRegex(proc.stdout, r"\+\d\.\d%\s+\[\+\d")

    def test_the_same_noise_without_a_shift_is_no_change(self):
        base = self.write("base.json", bench_doc(1))
        new = self.write("new.json", bench_doc(3, commit="new"))
        proc = tpot("compare", base, new, "--fail-above", "0", check=0)
        self.assertEqual(set(rows_of(proc.stdout).values()), {"no change"}, proc.stdout)

    def test_rates_over_many_draws(self):
        # The method's behaviour, not one lucky draw: 30 pairs each way.
        slower = same = 0
        for i in range(30):
            base = bench_doc(100 + i, buckets=(1,))["results"][0]
            shifted = bench_doc(200 + i, shift=0.05, buckets=(1,))["results"][0]
            unshifted = bench_doc(300 + i, buckets=(1,))["results"][0]
            slower += ts.compare_result(base, shifted, "tpot")["verdict"] == "slower"
            same += ts.compare_result(base, unshifted, "tpot")["verdict"] == "no change"
        self.assertGreaterEqual(slower, 27, "a 5% slowdown was missed too often")
        self.assertGreaterEqual(same, 27, "no shift was called a change too often")

    def test_faster(self):
        base = self.write("base.json", bench_doc(1))
        new = self.write("new.json", bench_doc(4, shift=-0.08, commit="new"))
        proc = tpot("compare", base, new, "--fail-above", "0", check=0)
        self.assertEqual(set(rows_of(proc.stdout).values()), {"faster"}, proc.stdout)

    def test_graph_kv_run_means_and_every_metric(self):
        # graph-kv keeps one mean step per run: the runs are the samples (Welch's t); a GPU's
        # 0.2% noise shows a 3% change.
        base = self.write("base.json", bench_doc(1, runs=3, graph=True, buckets=(1,)))
        new = self.write("new.json", bench_doc(5, shift=0.03, runs=3, graph=True, buckets=(1,),
                                               commit="new"))
        proc = tpot("compare", base, new, "--metric", "all", "--json",
                    os.path.join(self.tmp.name, "rows.json"), check=0)
        rows = rows_of(proc.stdout)
        self.assertEqual(rows[("tpot", "graph-kv", 1)], "slower", proc.stdout)
        self.assertIn(("ttft", "eager-kv", 1), rows)
        self.assertIn(("e2e", "graph-kv", 1), rows)
        with open(os.path.join(self.tmp.name, "rows.json")) as f:
            saved = json.load(f)
        row = next(r for r in saved["rows"] if r["mode"] == "graph-kv" and r["metric"] == "tpot")
        self.assertEqual(row["method"], "welch-t on log run medians")
        self.assertGreater(row["ci_pct"][0], 0)
        self.assertAlmostEqual(row["change_pct"], 3.0, delta=0.6)

    def test_one_run_says_it_sees_step_noise_only(self):
        base = bench_doc(1, runs=1)["results"][0]
        new = bench_doc(2, runs=1)["results"][0]
        row = ts.compare_result(base, new, "tpot")
        self.assertEqual(row["method"], "bootstrap of the median ratio")
        self.assertIn("one run: step noise only", row["why"])

    def test_results_without_samples(self):
        # The history's seed (figures typed by hand) has medians only: no verdict, no failure.
        base = bench_doc(1, buckets=(1,))
        for r in base["results"]:
            r["samples"] = None
        new = bench_doc(2, shift=0.5, buckets=(1,), commit="new")
        proc = tpot("compare", self.write("b.json", base), self.write("n.json", new),
                    "--fail-above", "0", check=0)
        self.assertEqual(rows_of(proc.stdout), {("tpot", "eager-kv", 1): "too few samples"})


class FailAboveTest(Files):
    def setUp(self):
        super().setUp()
        self.base = self.write("base.json", bench_doc(1))
        self.slower = self.write("slower.json", bench_doc(2, shift=0.05, commit="new"))
        self.same = self.write("same.json", bench_doc(3, commit="new"))

    def test_a_slowdown_beyond_the_limit_fails(self):
        proc = tpot("compare", self.base, self.slower, "--fail-above", "2", check=1)
        self.assertIn("FAIL: tpot eager-kv bucket 1", proc.stderr)
        self.assertIn("above --fail-above 2%", proc.stderr)

    def test_a_slowdown_under_the_limit_passes(self):
        tpot("compare", self.base, self.slower, "--fail-above", "15", check=0)

    def test_no_change_passes_any_limit(self):
        tpot("compare", self.base, self.same, "--fail-above", "0", check=0)

    def test_a_speedup_passes(self):
        tpot("compare", self.slower, self.base, "--fail-above", "0", check=0)


class RefusedTest(Files):
    def check(self, base_kwargs, new_kwargs, words, status=2, extra=()):
        base = self.write("base.json", bench_doc(1, **base_kwargs))
        new = self.write("new.json", bench_doc(2, commit="new", **new_kwargs))
        proc = tpot("compare", base, new, *extra)
        self.assertEqual(proc.returncode, status, proc.stdout + proc.stderr)
        for word in words:
            self.assertIn(word, proc.stdout + proc.stderr)
        return proc

    def test_two_devices(self):
        self.check({}, {"device_name": "Intel Xeon"}, ["refused: device name", "Intel Xeon",
                                                       "not comparable"])
        self.check({"device": "cuda:0", "device_name": "NVIDIA H200"},
                   {"device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3"},
                   ["refused: device name"])
        self.check({}, {"device": "cuda:0"}, ["refused: device: 'cpu' -> 'cuda'"])

    def test_model_dtype_threads(self):
        self.check({}, {"model": "models/cube3d-v0.1.yaml"}, ["refused: model"])
        self.check({}, {"dtype": "bfloat16"}, ["refused: dtype"])
        self.check({}, {"threads": 2}, ["refused: threads: 1 -> 2"])

    def test_threads_on_a_gpu_only_warn(self):
        gpu = {"device": "cuda:0", "device_name": "NVIDIA H200"}
        self.check(gpu, dict(gpu, threads=16), ["warning: threads"], status=0)

    def test_force_compares_anyway(self):
        proc = self.check({}, {"device_name": "Intel Xeon"}, ["warning: (--force) device name"],
                          status=0, extra=["--force"])
        self.assertIn(("tpot", "eager-kv", 1), rows_of(proc.stdout))

    def test_a_busy_machine_warns_and_strict_refuses(self):
        busy = {"load": 7.5, "cores": 8}
        self.check({}, busy, ["warning:", "a busy machine: load 7.50", "on 8 cores"], status=0)
        self.check({}, busy, ["refused:", "a busy machine"], extra=["--strict"])

    def test_nothing_in_common(self):
        self.check({}, {"count": 50}, ["no (mode, bucket, tokens) in both runs"])

    def test_bad_files(self):
        path = self.write("list.json", [1, 2])
        proc = tpot("compare", path, path)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("holds no JSON object", proc.stderr)
        proc = tpot("compare", path + ".missing", path)
        self.assertIn("no such file", proc.stderr)


class EnginesAndHistoryTest(Files):
    def test_ours_against_the_official_engine(self):
        doc = bench_doc(1, buckets=(1,))
        official = bench_doc(2, shift=1.5, buckets=(1,))
        doc["official"] = {k: official[k] for k in ("device", "device_name", "model", "threads",
                                                     "guidance_scale", "date", "results")}
        doc["official"].update(dtype="float32 weights, bfloat16 autocast", commit="3c6d06dd",
                               provenance=dict(official["provenance"], torch="2.11.0+cu130"))
        for r in doc["official"]["results"]:
            r["engine"] = "Engine"
        path = self.write("both.json", doc)
        proc = tpot("compare", path + "#official", path, check=0)
        self.assertIn("note: engines: official -> cube3d-bench", proc.stdout)
        self.assertNotIn("warning: torch", proc.stdout)  # 2.11.0+cu130 is libtorch's 2.11.0
        self.assertEqual(rows_of(proc.stdout), {("tpot", "eager-kv", 1): "faster"})

    def test_history_files(self):
        hist = os.path.join(self.tmp.name, "history")
        gpu = {"device": "cuda:0", "device_name": "NVIDIA H200"}
        first = self.write("a.json", bench_doc(1, commit="aaaa111", **gpu))
        # One session's two files (gpu_check's) are one run: the same result's runs pooled.
        second = [self.write("b1.json", bench_doc(2, commit="bbbb222", runs=2, **gpu)),
                  self.write("b2.json", bench_doc(3, commit="bbbb222", runs=3, **gpu))]
        cpu = self.write("c.json", bench_doc(4, commit="cccc333"))
        tpot("history", "add", first, "--dir", hist, "--change", "first", check=0)
        proc = tpot("history", "add", ",".join(second), "--dir", hist, "--compare-last", check=0)
        self.assertIn("against the last run in", proc.stdout)
        self.assertIn("no change", proc.stdout)
        tpot("history", "add", cpu, "--dir", hist, check=0)
        again = tpot("history", "add", first, "--dir", hist, check=0)
        self.assertIn("already in", again.stdout)
        self.assertEqual(sorted(os.listdir(hist)), ["cpu-amd-epyc.jsonl", "nvidia-h200.jsonl"])
        runs = ts.read_history(os.path.join(hist, "nvidia-h200.jsonl"))
        self.assertEqual([r["commit"] for r in runs], ["aaaa111", "bbbb222"])
        self.assertEqual(runs[0]["change"], "first")
        pooled = runs[1]["results"][0]["samples"]["tpot_ms"]
        self.assertEqual(len(pooled), 5)
        # History specs: the last run, a commit's, an index.
        path = os.path.join(hist, "nvidia-h200.jsonl")
        self.assertEqual(ts.load_run(path)["commit"], "bbbb222")
        self.assertEqual(ts.load_run(path + "#aaaa")["commit"], "aaaa111")
        self.assertEqual(ts.load_run(path + "#-2")["commit"], "aaaa111")
        tpot("compare", path + "#-2", path, check=0)
        # merge: another history's lines join by id.
        other = os.path.join(self.tmp.name, "other")
        tpot("history", "merge", path, "--dir", other, check=0)
        self.assertEqual(len(ts.read_history(os.path.join(other, "nvidia-h200.jsonl"))), 2)


class GoogleBenchmarkJsonTest(Files):
    def test_the_layout_loads_in_compare_py(self):
        self.assertTrue(os.path.isfile(COMPARE_PY),
                        f"{COMPARE_PY} is missing: Debian's libbenchmark-tools (scripts/setup.sh)")
        base = self.write("base.json", bench_doc(1, buckets=(1,), graph=True, runs=3))
        new = self.write("new.json", bench_doc(2, buckets=(1,), graph=True, runs=3, shift=0.05))
        outs = []
        for path in (base, new):
            outs.append(path + ".gbench.json")
            tpot("gbench", path, "-o", outs[-1], check=0)
        with open(outs[0]) as f:
            gb = json.load(f)
        names = {b["name"] for b in gb["benchmarks"]}
        self.assertIn("eager-kv/bucket:1/tokens:101/tpot", names)
        self.assertIn("graph-kv/bucket:1/tokens:101/tpot_median", names)
        graph = [b for b in gb["benchmarks"] if b["name"] == "graph-kv/bucket:1/tokens:101/tpot"]
        self.assertEqual([b["iterations"] for b in graph], [100] * 3)  # a run's mean of 100 steps
        proc = subprocess.run([sys.executable, COMPARE_PY, "-a", "--no-color", "benchmarks",
                               *outs], capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("eager-kv/bucket:1/tokens:101/tpot_median", proc.stdout)
        self.assertIn("tpot_pvalue", proc.stdout)  # its U test ran on our repetitions


class ReportTest(unittest.TestCase):
    """The history report from fixture runs, opened as a picture."""

    BUCKETS = (1, 4, 16)

    @classmethod
    def setUpClass(cls):
        from PIL import Image

        cls.tmp = tempfile.TemporaryDirectory()
        hist = os.path.join(cls.tmp.name, "history")
        gpu = {"device": "cuda:0", "device_name": "NVIDIA H200"}
        shifts = [0.0, 0.0, 0.10, 0.10, -0.05]  # a slowdown at the third run, a speedup at the 5th
        paths = []
        for i, shift in enumerate(shifts):
            doc = bench_doc(10 + i, shift=shift, buckets=cls.BUCKETS, commit=f"c0mm1t{i}",
                            date=f"2026-12-0{i + 1}T10:00:00Z", **gpu)
            if i == len(shifts) - 1:
                doc["official"] = {"device": "cuda:0", "device_name": "NVIDIA H200",
                                   "model": doc["model"], "dtype": "float32", "commit": "0ff1c1a1",
                                   "results": [{"mode": "eager-kv", "bucket": 1,
                                                "engine": "Engine", "tokens": 101,
                                                "tpot_ms_median": 5.5}]}
            paths.append(os.path.join(cls.tmp.name, f"run{i}.json"))
            with open(paths[-1], "w") as f:
                json.dump(doc, f)
            tpot("history", "add", paths[-1], "--dir", hist, check=0)
        cls.history = os.path.join(hist, "nvidia-h200.jsonl")
        cls.out = os.path.join(cls.tmp.name, "report")
        cls.proc = tpot("report", cls.history, "--out", cls.out, check=0)
        cls.png = os.path.join(cls.out, "nvidia-h200.png")
        cls.image = Image.open(cls.png).convert("RGB")
        cls.pixels = np.asarray(cls.image)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def columns_of(self, colour):
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        mask = np.all(self.pixels == rgb, axis=2)
        return np.nonzero(mask.any(axis=0))[0], int(mask.sum())

    def test_the_png_has_the_expected_size(self):
        self.assertTrue(os.path.isfile(self.png))
        self.assertEqual(self.image.size, tpot_report.picture_size(1))  # one mode: one panel
        self.assertEqual(self.image.size, (1200, 360))

    def test_one_line_per_bucket(self):
        width = self.image.size[0]
        for bucket in self.BUCKETS:
            colour = tpot_report.bucket_colour(self.BUCKETS, bucket)
            columns, count = self.columns_of(colour)
            with self.subTest(bucket=bucket, colour=colour):
                self.assertGreater(count, 500)  # a line, not a legend swatch
                # Across the runs: from near the left edge of the axes to near the right.
                self.assertLess(columns.min(), 0.25 * width)
                self.assertGreater(columns.max(), 0.75 * width)
        # No line for a bucket that was not measured.
        for unused in tpot_report.BUCKET_COLOURS[len(self.BUCKETS):]:
            self.assertEqual(self.columns_of(unused)[1], 0, unused)

    def test_changes_and_the_official_line_are_marked(self):
        self.assertGreater(self.columns_of(tpot_report.SLOWER_COLOUR)[1], 50)
        self.assertGreater(self.columns_of(tpot_report.FASTER_COLOUR)[1], 50)
        columns, count = self.columns_of(tpot_report.OFFICIAL_COLOUR)
        self.assertGreater(count, 300)

    def test_the_page(self):
        with open(os.path.join(self.out, "nvidia-h200.html")) as f:
            page = f.read()
        self.assertIn("<img src='nvidia-h200.png'", page)
        for i in range(5):
            self.assertIn(f"c0mm1t{i}", page)
        self.assertIn("slower</span>", page)
        self.assertIn("faster</span>", page)
        self.assertIn("official commit", page)
        self.assertIn("eager-kv: buckets 1, 4, 16", self.proc.stdout)


class FiguresTest(unittest.TestCase):
    def test_the_committed_figures_are_the_historys(self):
        tpot("figures", "--check", check=0)

    def test_a_typed_figure_is_caught(self):
        with tempfile.TemporaryDirectory() as root:
            for rel in ("README.md", os.path.join("bench", "results", "README.md")):
                os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
                shutil.copy(os.path.join(SOURCE, rel), os.path.join(root, rel))
            shutil.copytree(os.path.join(SOURCE, "bench", "results", "history"),
                            os.path.join(root, "bench", "results", "history"))
            readme = os.path.join(root, "README.md")
            with open(readme) as f:
                text = f.read()
            self.assertIn("| time per output token, 1 request | **", text)
            with open(readme, "w") as f:
                f.write(text.replace("| time per output token, 1 request | **",
                                     "| time per output token, 1 request | **0.0", 1))
            proc = tpot("figures", "--check", "--root", root, check=1)
            self.assertIn("README.md", proc.stderr)
            tpot("figures", "--root", root, check=0)
            tpot("figures", "--check", "--root", root, check=0)


if __name__ == "__main__":
    unittest.main()
