"""cube3d-tokenize end to end: every golden case of tests/model/clip_tokens.json through stdin,
errors for lines that are not JSON strings, the CUBE3D_CLIP_VOCAB fallback and a missing
vocabulary. Run by ctest (tests/CMakeLists.txt)."""
import json
import os
import subprocess
import tempfile
import unittest

BIN = os.path.join(os.environ["CUBE3D_BIN_DIR"], "cube3d-tokenize")
TESTS = os.environ["CUBE3D_TEST_DATA_DIR"]
SOURCE = os.environ["CUBE3D_SOURCE_DIR"]
VOCAB = os.path.join(SOURCE, ".cache", "clip", "bpe_simple_vocab_16e6.txt.gz")
MISSING_VOCAB = os.path.join(SOURCE, ".cache", "clip", "no_such_vocab.txt.gz")


def golden_cases():
    with open(os.path.join(TESTS, "model", "clip_tokens.json"), encoding="utf-8") as f:
        return json.load(f)["cases"]


def json_lines(prompts):
    # ensure_ascii keeps every line pure ASCII: newlines, tabs and U+2028 stay escaped.
    return "".join(json.dumps(p) + "\n" for p in prompts)


def run(args, stdin="", env_vocab=None):
    """Runs cube3d-tokenize with CUBE3D_CLIP_VOCAB unset, or set to env_vocab."""
    env = dict(os.environ)
    env.pop("CUBE3D_CLIP_VOCAB", None)
    if env_vocab is not None:
        env["CUBE3D_CLIP_VOCAB"] = env_vocab
    return subprocess.run([BIN, *args], input=stdin, capture_output=True, text=True,
                          encoding="utf-8", env=env, timeout=300)


def parse_ids(stdout):
    return [[int(tok) for tok in line.split(" ")] for line in stdout.splitlines()]


class TokenizeCliTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(VOCAB):
            raise AssertionError(f"{VOCAB} is missing: run scripts/setup.sh to fetch CLIP's "
                                 "vocabulary (from the open_clip_torch wheel)")
        if not os.path.exists(BIN):
            raise AssertionError(f"{BIN} is missing: build the cube3d-tokenize target")
        cls.cases = golden_cases()

    def assert_ok(self, proc, what):
        self.assertEqual(proc.returncode, 0,
                         f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def assert_golden_output(self, stdout):
        lines = parse_ids(stdout)
        self.assertEqual(len(lines), len(self.cases), stdout)
        for case, ids in zip(self.cases, lines):
            with self.subTest(prompt=case["prompt"]):
                self.assertEqual(len(ids), 77)
                self.assertEqual(ids, case["input_ids_77"])

    def test_golden_cases_match_input_ids_77(self):
        self.assertGreater(len(self.cases), 0)
        proc = run(["--vocab", VOCAB], json_lines(c["prompt"] for c in self.cases))
        self.assert_ok(proc, "cube3d-tokenize --vocab")
        self.assert_golden_output(proc.stdout)

    def test_output_lines_are_single_space_separated(self):
        proc = run(["--vocab", VOCAB], json_lines(["a photo of a cat"]))
        self.assert_ok(proc, "cube3d-tokenize --vocab")
        self.assertTrue(proc.stdout.endswith("\n"), repr(proc.stdout))
        line = proc.stdout.rstrip("\n")
        self.assertNotIn("\n", line)
        self.assertNotIn("  ", line)
        self.assertEqual(line, line.strip())
        self.assertEqual(len(line.split(" ")), 77)

    def test_no_input_gives_no_output(self):
        proc = run(["--vocab", VOCAB], "")
        self.assert_ok(proc, "cube3d-tokenize with empty stdin")
        self.assertEqual(proc.stdout, "")

    def test_truncated_prompt_warns_on_stderr(self):
        proc = run(["--vocab", VOCAB], json_lines([" ".join(["chair"] * 100)]))
        self.assert_ok(proc, "cube3d-tokenize with a long prompt")
        ids = parse_ids(proc.stdout)
        self.assertEqual(len(ids), 1)
        self.assertEqual(len(ids[0]), 77)
        self.assertIn("stdin line 1", proc.stderr)
        self.assertIn("truncated", proc.stderr)

    def test_line_that_is_not_json_fails_naming_the_line(self):
        stdin = json_lines(["a chair"]) + "a table\n" + json_lines(["a lamp"])
        proc = run(["--vocab", VOCAB], stdin)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("stdin line 2", proc.stderr)
        self.assertIn("INVALID_ARGUMENT", proc.stderr)
        # The line before the bad one was answered; nothing after it was.
        self.assertEqual(len(parse_ids(proc.stdout)), 1, proc.stdout)

    def test_json_value_that_is_not_a_string_fails_naming_the_line(self):
        for value in ("42", '["a chair"]', '{"prompt": "a chair"}', "null"):
            with self.subTest(value=value):
                proc = run(["--vocab", VOCAB], json_lines(["a chair", "a lamp"]) + value + "\n")
                self.assertNotEqual(proc.returncode, 0, proc.stdout)
                self.assertIn("stdin line 3", proc.stderr)
                self.assertIn("expected a JSON string", proc.stderr)

    def test_invalid_utf8_in_a_json_string_fails_naming_the_line(self):
        proc = subprocess.run([BIN, "--vocab", VOCAB], input=b'"chair \x80"\n',
                              capture_output=True, timeout=300)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(b"stdin line 1", proc.stderr)

    def test_environment_vocabulary_is_used_without_vocab_option(self):
        proc = run([], json_lines(c["prompt"] for c in self.cases), env_vocab=VOCAB)
        self.assert_ok(proc, "cube3d-tokenize with CUBE3D_CLIP_VOCAB")
        self.assert_golden_output(proc.stdout)

    def test_environment_vocabulary_is_read_not_the_default(self):
        # A missing file in CUBE3D_CLIP_VOCAB must be reported, not replaced by the default.
        proc = run([], json_lines(["a chair"]), env_vocab=MISSING_VOCAB)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("NOT_FOUND", proc.stderr)
        self.assertIn(MISSING_VOCAB, proc.stderr)

    def test_vocab_option_wins_over_the_environment(self):
        proc = run(["--vocab", VOCAB], json_lines(["a chair"]), env_vocab=MISSING_VOCAB)
        self.assert_ok(proc, "cube3d-tokenize --vocab with a bad CUBE3D_CLIP_VOCAB")
        self.assertEqual(len(parse_ids(proc.stdout)), 1)

    def test_missing_vocab_path_fails_with_not_found(self):
        with tempfile.TemporaryDirectory() as tmp:
            missing = os.path.join(tmp, "missing.txt.gz")
            proc = run(["--vocab", missing], json_lines(["a chair"]))
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("NOT_FOUND", proc.stderr)
        self.assertIn(missing, proc.stderr)
        self.assertEqual(proc.stdout, "")


if __name__ == "__main__":
    unittest.main()
