"""cube3d-generate's batch mode (--prompts-file, --out-dir, --shard) end to end on the demo model:
shards that together make every good prompt once, bad lines reported with their line numbers,
output names that follow the documented digest rule (src/tools/output_name.h), and a run killed
with SIGKILL that a rerun resumes. Run by ctest (tests/CMakeLists.txt: tools.batch_generate)."""
import glob
import hashlib
import json
import os
import signal
import struct
import subprocess
import tempfile
import time
import unittest

BIN = os.path.join(os.environ["CUBE3D_BIN_DIR"], "cube3d-generate")
SOURCE = os.environ["CUBE3D_SOURCE_DIR"]
CONFIG = os.path.join(SOURCE, "models", "demo.yaml")
RESOLUTION = 4
BASE = ["--model-config", CONFIG, "--resolution-base", str(RESOLUTION)]
# One thread a process: the shards run side by side on a small, busy machine.
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
for variable in ("JOB_COMPLETION_INDEX", "CUBE3D_SHARD_COUNT"):
    ENV.pop(variable, None)

GOOD = ["a red dragon", "a wooden chair", "a small boat", "a tall lamp", "a blue teapot"]
LONG = "x" * 1025  # over the server's default limits.max_prompt_bytes (1024)
# Line numbers (1-based) below: 1 comment, 2 good, 3 blank, 4 good, 5 too long, 6 good (JSON,
# seed 7), 7 malformed JSON, 8 good, 9 good (JSON: the same prompt as line 6, seed 8), 10 good.
LINES = [
    "# catalog of test shapes",
    GOOD[0],
    "",
    "  " + GOOD[1] + "  ",
    LONG,
    json.dumps({"prompt": GOOD[2], "seed": 7, "topP": 0.9}),
    '{"prompt": "a broken line", ',
    GOOD[3],
    json.dumps({"prompt": GOOD[2], "seed": 8, "top_p": 0.9}),
    GOOD[4],
]
GOOD_LINES = {2: GOOD[0], 4: GOOD[1], 6: GOOD[2], 8: GOOD[3], 9: GOOD[2], 10: GOOD[4]}
BAD_LINES = {5: "limit is 1024", 7: "malformed JSON"}


def canonical(fields):
    out = b""
    for tag, value in fields:
        value = value if isinstance(value, bytes) else str(value).encode()
        out += tag.encode() + b"=" + str(len(value)).encode() + b":" + value + b";"
    return out


def double_bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def expected_name(prompt, seed=0, top_p=None, guidance=3.0, resolution=RESOLUTION, fmt="glb"):
    """The documented rule (output_name.h), for the demo model (no weight files, the default
    settings on the CPU). `prompt` must already be normalised (lower case, one space)."""
    with open(CONFIG, "rb") as f:
        config_digest = hashlib.sha256(f.read()).hexdigest()
    model = canonical([("config", config_digest), ("gpt_weights", "-"), ("shape_weights", "-"),
                       ("clip_model", "-"), ("clip_vocab", "-")])
    fields = [("cube3d-batch-output", "v1"), ("model", model), ("prompt", prompt),
              ("guidance_scale", double_bits(guidance)),
              ("top_p", "set" if top_p is not None else "greedy")]
    if top_p is not None:
        fields.append(("top_p_value", double_bits(top_p)))
    fields += [("seed", seed), ("bounding_box", "none"), ("resolution_base", resolution),
               ("format", fmt), ("target_faces", "-"), ("mesh_profile", "none"),
               ("postprocess", 1), ("occupancy", "hierarchical"),
               ("single_stream_decode", "causal"), ("kv_cache", 1), ("device", "cpu"),
               ("dtype", "float32")]
    return hashlib.sha256(canonical(fields)).hexdigest()[:20] + "." + fmt


def read_manifest(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def assert_glb(test, path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, length = struct.unpack_from("<4sII", data, 0)
    test.assertEqual(magic, b"glTF", path)
    test.assertEqual(version, 2, path)
    test.assertEqual(length, len(data), path)
    chunk_length, kind = struct.unpack_from("<II", data, 12)
    test.assertEqual(kind, 0x4E4F534A, path)  # "JSON"
    gltf = json.loads(data[20:20 + chunk_length])
    test.assertGreater(gltf["accessors"][0]["count"], 0, path)
    return gltf


def start(prompts, out, *extra, env=None):
    return subprocess.Popen([BIN, *BASE, "--prompts-file", prompts, "--out-dir", out, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or ENV)


def finish(proc, timeout=120):
    stdout, stderr = proc.communicate(timeout=timeout)
    return proc.returncode, stdout, stderr


class ShardsTest(unittest.TestCase):
    """Three shards side by side (one of them an Indexed Job pod: JOB_COMPLETION_INDEX and
    CUBE3D_SHARD_COUNT) over one prompts file into one folder."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.prompts = os.path.join(cls.tmp.name, "prompts.txt")
        with open(cls.prompts, "w") as f:
            f.write("\n".join(LINES) + "\n")
        cls.out = os.path.join(cls.tmp.name, "out")
        t0 = time.monotonic()
        procs = [start(cls.prompts, cls.out, "--shard", "0/3"),
                 start(cls.prompts, cls.out, "--shard", "1/3"),
                 start(cls.prompts, cls.out,
                       env=dict(ENV, JOB_COMPLETION_INDEX="2", CUBE3D_SHARD_COUNT="3"))]
        cls.results = [finish(p) for p in procs]
        cls.seconds = time.monotonic() - t0
        # The manifests as the three shards left them (later tests append to them).
        cls.manifests = {os.path.basename(m): read_manifest(m)
                         for m in glob.glob(os.path.join(cls.out, "manifest-*.jsonl"))}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_every_good_line_once_and_the_bad_ones_reported(self):
        # Lines 5 (shard 1) and 7 (shard 0) are bad: those shards exit 3; shard 2 exits 0.
        codes = [rc for rc, _, _ in self.results]
        self.assertEqual(codes, [3, 3, 0], [r[2] for r in self.results])
        self.assertEqual(sorted(self.manifests),
                         ["manifest-0-of-3.jsonl", "manifest-1-of-3.jsonl",
                          "manifest-2-of-3.jsonl"])
        records = []
        for index in range(3):
            for r in self.manifests[f"manifest-{index}-of-3.jsonl"]:
                self.assertEqual((r["line"] - 1) % 3, index, r)  # the shard rule
                self.assertEqual(r["shard"], f"{index}/3")
                records.append(r)
        ok = {r["line"]: r for r in records if r["status"] == "ok"}
        self.assertEqual(sorted(ok), sorted(GOOD_LINES))
        self.assertEqual(len([r for r in records if r["status"] == "ok"]), len(GOOD_LINES))
        for line, prompt in GOOD_LINES.items():
            self.assertEqual(ok[line]["prompt"], prompt)
        errors = {r["line"]: r for r in records if r["status"] == "error"}
        self.assertEqual(sorted(errors), sorted(BAD_LINES))
        stderr = "".join(r[2] for r in self.results)
        for line, needle in BAD_LINES.items():
            self.assertIn(needle, errors[line]["error"])
            self.assertIsNone(errors[line]["file"])
            self.assertIn(f"{self.prompts}:{line}: INVALID_ARGUMENT", stderr)
        # Blank lines and comments are not "handled": no manifest line.
        self.assertEqual(len(records), len(GOOD_LINES) + len(BAD_LINES))
        print(f"\n[batch] {len(LINES)} lines over 3 shards in {self.seconds:.1f} s: made "
              f"{len(ok)} once each, {len(errors)} bad lines reported, exit codes {codes}")

    def test_outputs_are_glb_files_named_by_the_digest_rule(self):
        records = [r for m in self.manifests.values() for r in m if r["status"] == "ok"]
        by_line = {r["line"]: r for r in records}
        for r in records:
            path = os.path.join(self.out, r["file"])
            assert_glb(self, path)
            self.assertGreater(r["faces"], 0)
            self.assertGreater(r["vertices"], 0)
            self.assertEqual(r["tokens"], 64)
            self.assertEqual(r["params"]["resolution_base"], RESOLUTION)
            for key in ("text_ms", "prefill_ms", "decode_ms", "tpot_ms", "mesh_ms", "total_ms"):
                self.assertGreaterEqual(r["timings"][key], 0, key)
        self.assertEqual(by_line[2]["file"], expected_name("a red dragon"))
        self.assertEqual(by_line[4]["file"], expected_name("a wooden chair"))  # trimmed
        self.assertEqual(by_line[6]["file"], expected_name("a small boat", seed=7, top_p=0.9))
        self.assertEqual(by_line[9]["file"], expected_name("a small boat", seed=8, top_p=0.9))
        self.assertNotEqual(by_line[6]["file"], by_line[9]["file"])  # another seed
        self.assertEqual(by_line[6]["params"]["seed"], 7)
        self.assertEqual(by_line[9]["params"]["top_p"], 0.9)
        outputs = [f for f in os.listdir(self.out) if not f.startswith("manifest-")]
        self.assertEqual(sorted(outputs), sorted(r["file"] for r in records))

    def test_a_rerun_skips_everything_without_loading_the_model(self):
        rc, stdout, stderr = finish(start(self.prompts, self.out, "--shard", "2/3"))
        self.assertEqual(rc, 0, stderr)
        self.assertIn("2 skipped", stdout)
        last = read_manifest(os.path.join(self.out, "manifest-2-of-3.jsonl"))[-2:]
        self.assertEqual([r["status"] for r in last], ["skipped", "skipped"])
        self.assertEqual([r["line"] for r in last], [6, 9])

    def test_same_prompt_and_settings_same_name(self):
        # A normalised spelling of line 2 in another file: the same name, so it is skipped.
        other = os.path.join(self.tmp.name, "same.txt")
        with open(other, "w") as f:
            f.write("A  Red Dragon\n")
        rc, stdout, stderr = finish(start(other, self.out))
        self.assertEqual(rc, 0, stderr)
        record = read_manifest(os.path.join(self.out, "manifest-0-of-1.jsonl"))[-1]
        self.assertEqual(record["status"], "skipped")
        self.assertEqual(record["file"], expected_name("a red dragon"))


class ResumeTest(unittest.TestCase):
    """SIGKILL after the first output appears; the rerun skips what was made, makes the rest,
    removes the killed run's temporary files, and the whole file is done."""

    def test_kill_and_resume(self):
        prompts = ["a green frog", "a stone tower", "an old car", "a paper plane", "a red apple",
                   "a desk lamp"]
        names = [expected_name(p) for p in prompts]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "prompts.txt")
            with open(path, "w") as f:
                f.write("\n".join(prompts) + "\n")
            out = os.path.join(tmp, "out")
            os.makedirs(out)
            # A temporary file as a kill mid-write leaves it (another pid's).
            planted = os.path.join(out, names[-1] + ".tmp.99999")
            with open(planted, "wb") as f:
                f.write(b"glTF half a file")
            proc = start(path, out)
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not any(
                    os.path.exists(os.path.join(out, n)) for n in names):
                time.sleep(0.05)
                self.assertIsNone(proc.poll(), "the run ended before it was killed")
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
            made_before = {n for n in names if os.path.exists(os.path.join(out, n))}
            self.assertGreaterEqual(len(made_before), 1)
            self.assertLess(len(made_before), len(names), "killed too late to test a resume")
            self.assertFalse(os.path.exists(planted), "the first run removes leftovers as well")

            rc, stdout, stderr = finish(start(path, out))
            self.assertEqual(rc, 0, stderr)
            records = read_manifest(os.path.join(out, "manifest-0-of-1.jsonl"))
            rerun = records[-len(prompts):]
            self.assertEqual([r["line"] for r in rerun], list(range(1, len(prompts) + 1)))
            self.assertEqual([r["file"] for r in rerun], names)
            for r in rerun:
                expected = "skipped" if r["file"] in made_before else "ok"
                self.assertEqual(r["status"], expected, r)
            # Each prompt made exactly once over both runs (a kill between the rename and the
            # manifest line leaves a file with no "ok" line, which the rerun skips).
            ok = [r["file"] for r in records if r["status"] == "ok"]
            self.assertEqual(len(ok), len(set(ok)))
            self.assertLessEqual(len(names) - len(ok), 1)
            for n in names:
                assert_glb(self, os.path.join(out, n))
            leftovers = [f for f in os.listdir(out) if ".tmp." in f]
            self.assertEqual(leftovers, [])
            self.assertEqual(sorted(os.listdir(out)), sorted(names + ["manifest-0-of-1.jsonl"]))
            print(f"\n[batch resume] killed after {len(made_before)} of {len(names)} outputs; "
                  f"the rerun skipped {sum(r['status'] == 'skipped' for r in rerun)} and made "
                  f"{sum(r['status'] == 'ok' for r in rerun)}")


class OptionErrorsTest(unittest.TestCase):
    def run_batch(self, *extra, env=None):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "p.txt")
            with open(path, "w") as f:
                f.write("a chair\n")
            return subprocess.run([BIN, *BASE, "--prompts-file", path, "--out-dir",
                                   os.path.join(tmp, "out"), *extra], capture_output=True,
                                  text=True, timeout=60, env=env or ENV)

    def test_bad_shards_and_flags_name_the_flag(self):
        cases = [
            (["--shard", "3/3"], None, "--shard"),
            (["--shard", "1"], None, "--shard"),
            (["--shard", "0/2", "--shard-count", "3"], None, "--shard-count"),
            (["--shard-count", "2"], None, "--shard-count"),
            ([], dict(ENV, JOB_COMPLETION_INDEX="1"), "CUBE3D_SHARD_COUNT"),
            ([], dict(ENV, JOB_COMPLETION_INDEX="4", CUBE3D_SHARD_COUNT="4"),
             "JOB_COMPLETION_INDEX"),
            (["--format", "stl"], None, "--format"),
            (["--mesh-out", "x.glb"], None, "--mesh-out"),
        ]
        for extra, env, needle in cases:
            with self.subTest(extra=extra, env=env and env.get("JOB_COMPLETION_INDEX")):
                proc = self.run_batch(*extra, env=env)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn("INVALID_ARGUMENT", proc.stderr)
                self.assertIn(needle, proc.stderr)

    def test_help_documents_batch_mode(self):
        proc = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0)
        for flag in ("--prompts-file", "--out-dir", "--shard", "--shard-count", "--format",
                     "JOB_COMPLETION_INDEX"):
            self.assertIn(flag, proc.stdout)


if __name__ == "__main__":
    unittest.main()
