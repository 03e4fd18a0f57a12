"""Every shell example in README.md and docs/ that talks to a server runs against a demo server
that this test starts, and must exit 0 (curl failing on an HTTP error status); an example that
cannot run here carries a `<!-- docs-test: skip: why -->` marker (docs_examples.py)."""
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e"))

import server_process as e2e  # noqa: E402
import docs_examples  # noqa: E402

setUpModule = e2e.setUpModule
tearDownModule = e2e.tearDownModule

SOURCE = Path(e2e.SOURCE)
EXAMPLE_TIMEOUT_S = 180
# The folders an example may name by their repository path (it is run in a scratch folder).
LINKED = ("models", "scripts", "bench", "share", "docs", "proto", "clients")


class DocsExamplesTest(e2e.ServerTestCase):
    HTTP = True
    CACHE = True
    TMP_PREFIX = "cube3d-docs-"

    def run_example(self, example, scratch):
        script = docs_examples.script_for(example, self.server.http_port, self.server.port)
        env = docs_examples.run_environment(os.environ, e2e.BIN_DIR, self.server.port)
        return subprocess.run(["bash", "-c", script], cwd=scratch, env=env, capture_output=True,
                              text=True, timeout=EXAMPLE_TIMEOUT_S)

    def scratch_folder(self, tmp):
        """A folder that looks like the repository to an example: build/bin and the sources."""
        scratch = Path(tmp)
        (scratch / "build").mkdir()
        (scratch / "build" / "bin").symlink_to(e2e.BIN_DIR)
        for name in LINKED:
            (scratch / name).symlink_to(SOURCE / name)
        return scratch

    def test_every_server_example_runs_or_says_why_not(self):
        ran, marked, failures = [], [], []
        for example in docs_examples.examples(SOURCE):
            if example.problems:
                failures.append(f"{example.where}: {'; '.join(example.problems)}")
                continue
            if not example.talks_to_server:
                continue
            if example.marker == "skip":
                marked.append(f"{example.where} ({example.reason})")
                continue
            if docs_examples.needs_other_server(example):
                failures.append(f"{example.where}: starts a server other than the demo one; "
                                "mark it <!-- docs-test: skip: why -->")
                continue
            with tempfile.TemporaryDirectory(prefix="cube3d-docs-example-") as tmp:
                try:
                    proc = self.run_example(example, self.scratch_folder(tmp))
                except subprocess.TimeoutExpired:
                    failures.append(f"{example.where}: still running after "
                                    f"{EXAMPLE_TIMEOUT_S} s")
                    continue
            if proc.returncode != 0:
                failures.append(f"{example.where}: exit {proc.returncode}\n{example.text}"
                                f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}")
            else:
                ran.append(example.where)
        print(f"[docs] {len(ran)} example(s) run, {len(marked)} marked: " + "; ".join(marked))
        self.assertEqual(failures, [], "\n\n".join(failures))
        self.assertGreater(len(ran), 0, "no example ran: the docs test would prove nothing")

    def test_a_failing_example_fails(self):
        # The runner itself: an HTTP error status and a non-zero exit are failures.
        with tempfile.TemporaryDirectory() as tmp:
            page = Path(tmp) / "README.md"
            page.write_text("```sh\ncurl -sS http://127.0.0.1:8080/v1/no-such-route\n```\n\n"
                            "```sh\nbuild/bin/cube3d-client --prompt '' --out x.glb\n```\n\n"
                            "```sh\ncurl -sS http://127.0.0.1:8080/healthz\n```\n")
            found = docs_examples.examples(tmp, [page])
            self.assertEqual(len(found), 3)
            codes = []
            for example in found:
                with tempfile.TemporaryDirectory() as scratch_tmp:
                    codes.append(self.run_example(example, self.scratch_folder(scratch_tmp))
                                 .returncode)
            self.assertNotEqual(codes[0], 0)
            self.assertNotEqual(codes[1], 0)
            self.assertEqual(codes[2], 0)


class MarkersTest(unittest.TestCase):
    def test_markers_need_a_reason_and_a_known_kind(self):
        with tempfile.TemporaryDirectory() as tmp:
            page = Path(tmp) / "README.md"
            page.write_text("<!-- docs-test: skip -->\n```sh\ncurl x\n```\n"
                            "<!-- docs-test: maybe: later -->\n\n```bash\ncurl y\n```\n"
                            "<!-- docs-test: skip: needs a cluster -->\n```sh\nkubectl apply\n"
                            "```\n```python\ncurl z\n```\n")
            found = docs_examples.examples(tmp, [page])
        self.assertEqual([e.line for e in found], [2, 7, 11])
        self.assertEqual(found[0].problems, ["a skip marker without a reason"])
        self.assertEqual(found[1].problems, ["unknown docs-test marker 'maybe'"])
        self.assertEqual((found[2].marker, found[2].reason, found[2].problems),
                         ("skip", "needs a cluster", []))
        self.assertFalse(found[2].talks_to_server)

    def test_ports_and_server_lines_are_the_tests(self):
        example = docs_examples.Example("README.md", 1, (
            "build/bin/cube3d-server --config models/demo-server.yaml \\\n  --log-level info\n"
            "curl -sS localhost:8080/healthz\n"
            "cube3d-client --server 127.0.0.1:50051 --prompt chair\n"))
        script = docs_examples.script_for(example, 1234, 5678)
        self.assertNotIn("cube3d-server", script)
        self.assertNotIn("--log-level", script)
        self.assertIn("curl -sS 127.0.0.1:1234/healthz", script)
        self.assertIn("--server 127.0.0.1:5678", script)
        self.assertFalse(docs_examples.needs_other_server(example))
        other = docs_examples.Example("README.md", 1, "cube3d-server --config real.yaml\n")
        self.assertTrue(docs_examples.needs_other_server(other))


if __name__ == "__main__":
    unittest.main()
