"""The shell examples of README.md and docs/*.md, as the docs tests read them.

An example is a fenced block whose info string is `sh` or `bash`. It talks to a server when it
calls curl, grpcurl, cube3d-client or cube3d-loadgen; those are run against a demo server (the
docs test starts one), the others are commands a reader runs on their own machine (set-up,
builds, a server with real weights) and are left alone.

A marker on the line before the fence (blank lines between are allowed) says how to take an
example:

    <!-- docs-test: skip: needs a Kubernetes cluster -->
    <!-- docs-test: server: --set auth.api_keys_file=... -->   (not used yet)

`skip` needs a reason (what the test cannot provide); a server example without a marker must run.
"""
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

SERVER_COMMANDS = ("curl ", "grpcurl ", "cube3d-client", "cube3d-loadgen")
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*docs-test:\s*(\w+)\s*:?\s*(.*?)\s*-->\s*$")
SHELLS = {"sh", "bash", "shell"}


@dataclass
class Example:
    path: str          # relative to the repository
    line: int          # of the opening fence, 1-based
    text: str
    marker: str = ""   # "skip", or "" for none
    reason: str = ""
    problems: list = field(default_factory=list)

    @property
    def where(self):
        return f"{self.path}:{self.line}"

    @property
    def talks_to_server(self):
        return any(command in self.text for command in SERVER_COMMANDS)


def doc_files(root):
    """README.md and every page under docs/, sorted."""
    root = Path(root)
    files = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
    return [f for f in files if f.is_file()]


def examples(root, files=None):
    """Every sh/bash block of the docs, with the marker before it."""
    root = Path(root)
    found = []
    for path in files if files is not None else doc_files(root):
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            fence, info = m.group(1), m.group(2).lower()
            end = i + 1
            while end < len(lines) and not lines[end].startswith(fence):
                end += 1
            if info in SHELLS:
                example = Example(str(path.relative_to(root)), i + 1,
                                  "\n".join(lines[i + 1:end]) + "\n")
                j = i - 1
                while j >= 0 and not lines[j].strip():
                    j -= 1
                marker = MARKER.match(lines[j].strip()) if j >= 0 else None
                if marker:
                    example.marker, example.reason = marker.group(1), marker.group(2)
                    if example.marker != "skip":
                        example.problems.append(f"unknown docs-test marker '{example.marker}'")
                    elif not example.reason:
                        example.problems.append("a skip marker without a reason")
                found.append(example)
            i = end + 1
    return found


def script_for(example, http_port, grpc_port):
    """The example as the test runs it: against the test's server (its ports in place of the
    documented 8080 and 50051), with curl failing on an HTTP error status, every command's
    failure failing the script, and the server-start lines dropped (the test's server runs the
    demo config already)."""
    text = example.text
    for documented in ("127.0.0.1:8080", "localhost:8080"):
        text = text.replace(documented, f"127.0.0.1:{http_port}")
    for documented in ("127.0.0.1:50051", "localhost:50051"):
        text = text.replace(documented, f"127.0.0.1:{grpc_port}")
    kept = []
    skipping_continuation = False
    for line in text.splitlines():
        starts_server = re.match(r"^\s*(build/bin/)?cube3d-server\b", line)
        if starts_server or skipping_continuation:
            skipping_continuation = line.rstrip().endswith("\\")
            continue
        kept.append(line)
    prelude = "\n".join([
        "set -euo pipefail",
        # An HTTP error status is a failure (with the body shown), as a reader would see it.
        'curl() { command curl --fail-with-body "$@"; }',
    ])
    return prelude + "\n" + "\n".join(kept) + "\n"


def needs_other_server(example):
    """A block that starts a server other than the demo one (real weights, other settings)."""
    for line in example.text.splitlines():
        if re.match(r"^\s*(build/bin/)?cube3d-server\b", line):
            if "models/demo-server.yaml" not in line or "--set" in line:
                return True
    return False


def run_environment(base_env, bin_dir, grpc_port):
    env = dict(base_env)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    # cube3d-client and cube3d-loadgen without --server reach the test's server.
    env["CUBE3D_SERVER"] = f"127.0.0.1:{grpc_port}"
    return env
