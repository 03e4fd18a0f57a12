"""scripts/fetch_models.py against a stand-in Hugging Face Hub on loopback (CI has no internet):
a full download whose server.yaml cube3d-server loads and serves a mesh from; a second run that
downloads nothing; --check-only that asks the hub nothing; a download cut mid-file that the next
run resumes where it stopped; corrupt files (a NaN, a renamed tensor, a wrong shape, the wrong
checkpoint on the hub) named with their tensor; and models/cube3d-v0.X-server.yaml through the
server's own config check. Run by ctest (tests/CMakeLists.txt: tools.fetch_models).

The hub (StandInHub) serves tests/tools/make_hub_fixture.py's repositories the way
huggingface_hub reads the real one: HEAD and GET of /{repo}/resolve/{revision}/{file} with
X-Repo-Commit and ETag (LFS files: a 302 to a CDN on another port, X-Linked-Etag and
X-Linked-Size), POST /api/models/{repo}/paths-info/{revision} (sizes, git blob ids, LFS
SHA-256s), and Range requests. Every request is logged, which the tests read.
"""
import hashlib
import http.server
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.parse

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("CUBE3D_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "scripts"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
import fetch_models  # noqa: E402
import server_process as e2e  # noqa: E402

# The binaries where the e2e suites find them (CUBE3D_BIN_DIR, else build/bin).
BIN_DIR, SERVER_BIN, CLIENT_BIN = e2e.BIN_DIR, e2e.SERVER_BIN, e2e.CLIENT_BIN
TOOL = os.path.join(SOURCE, "scripts", "fetch_models.py")
GOLDEN = os.path.join(SOURCE, "tests", "golden")
CUBE_REPO = "Roblox/cube3d-v0.5"
CLIP_REPO = "openai/clip-vit-large-patch14"
TOKEN = "hf_stand_in_token"
TOOL_TIMEOUT_S = 300
# What the server reads, and so what the tool may fetch: (repository, file).
FETCHED = {(CUBE_REPO, "shape_gpt.safetensors"), (CUBE_REPO, "shape_tokenizer.safetensors"),
           (CLIP_REPO, "config.json"), (CLIP_REPO, "model.safetensors"),
           (CLIP_REPO, "vocab.json"), (CLIP_REPO, "merges.txt")}

FIXTURE = None  # tempfile.TemporaryDirectory holding make_hub_fixture.py's output


def setUpModule():
    global FIXTURE
    for binary in (SERVER_BIN, CLIENT_BIN):
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"{binary} is missing: build cube3d-server and cube3d-client "
                               f"(CUBE3D_BIN_DIR={BIN_DIR})")
    FIXTURE = tempfile.TemporaryDirectory(prefix="cube3d-hub-fixture-")
    subprocess.run([sys.executable, os.path.join(HERE, "make_hub_fixture.py"), FIXTURE.name],
                   check=True, timeout=TOOL_TIMEOUT_S)
    e2e.setUpModule()


def tearDownModule():
    e2e.tearDownModule()
    if FIXTURE is not None:
        FIXTURE.cleanup()


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# --- the stand-in hub --------------------------------------------------------------------------

class StandInHub:
    """Two loopback HTTP servers: the hub (resolve URLs and the API) and the CDN its LFS files
    redirect to (another origin, so huggingface_hub must not send the token there).

    cut_once(repo, filename, at): the next GET of that file's bytes sends `at` bytes of the body
    and drops the connection; with refuse=True every GET of it then answers 503 until allow()."""

    def __init__(self, repos_dir):
        self.repos_dir = repos_dir
        self.lock = threading.Lock()
        self.log = []
        self.cut = None
        self.refusing = set()
        self.files = {}
        self.commits = {}
        for repo in (CUBE_REPO, CLIP_REPO):
            self.commits[repo] = hashlib.sha1(repo.encode()).hexdigest()
            self.reload(repo)
        self.hub = self._serve("hub")
        self.cdn = self._serve("cdn")

    def reload(self, repo, replace=None):
        """Reads the repository's files from disk (after a test changed one): replace maps a
        file name to the path of the bytes to serve instead."""
        folder = os.path.join(self.repos_dir, *repo.split("/"))
        for name in os.listdir(folder):
            path = (replace or {}).get(name, os.path.join(folder, name))
            with open(path, "rb") as f:
                data = f.read()
            self.files[(repo, name)] = {"data": data, "lfs": name.endswith(".safetensors"),
                                        "sha256": hashlib.sha256(data).hexdigest(),
                                        "git": git_blob_id(data)}

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.hub.server_address[1]}"

    def cut_once(self, repo, filename, at, refuse=False):
        with self.lock:
            self.cut = {"key": (repo, filename), "at": at, "refuse": refuse}

    def allow(self):
        with self.lock:
            self.refusing.clear()

    def requests(self, kind=None):
        with self.lock:
            return [r for r in self.log if kind is None or r["server"] == kind]

    def clear_log(self):
        with self.lock:
            self.log.clear()

    def close(self):
        for server in (self.hub, self.cdn):
            server.shutdown()
            server.server_close()

    def _serve(self, kind):
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as huggingface_hub's client expects

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._handle(self, kind, "HEAD")

            def do_GET(self):
                hub._handle(self, kind, "GET")

            def do_POST(self):
                hub._handle(self, kind, "POST")

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def _handle(self, handler, kind, method):
        body = b""
        if method == "POST":
            body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        entry = {"server": kind, "method": method, "path": urllib.parse.unquote(handler.path),
                 "range": handler.headers.get("Range"),
                 "auth": handler.headers.get("Authorization"), "sent": 0}
        with self.lock:
            self.log.append(entry)
        if kind == "cdn":
            return self._cdn(handler, method, entry)
        path = urllib.parse.urlsplit(handler.path).path
        api = re.fullmatch(r"/api/models/([^/]+/[^/]+)/paths-info/([^/]+)", path)
        if api and method == "POST":
            return self._paths_info(handler, urllib.parse.unquote(api.group(1)),
                                    urllib.parse.unquote(api.group(2)), body)
        resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if resolve and method in ("HEAD", "GET"):
            repo, revision, name = (urllib.parse.unquote(g) for g in resolve.groups())
            return self._resolve(handler, method, repo, revision, name, entry)
        self._error(handler, 404, "NotFound", f"no route {method} {path}")

    def _error(self, handler, status, code, message):
        data = json.dumps({"error": message}).encode()
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        handler.send_header("X-Error-Message", message)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    def _check_revision(self, handler, repo, revision):
        if repo not in self.commits:
            self._error(handler, 404, "RepoNotFound", f"Repository {repo} not found")
            return False
        if revision not in ("main", self.commits[repo]):
            self._error(handler, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return False
        return True

    def _paths_info(self, handler, repo, revision, body):
        if not self._check_revision(handler, repo, revision):
            return
        form = urllib.parse.parse_qs(body.decode())
        answer = []
        for name in form.get("paths", []):
            f = self.files.get((repo, name))
            if f is None:
                continue
            item = {"type": "file", "path": name, "size": len(f["data"]), "oid": f["git"]}
            if f["lfs"]:
                # A real LFS file's blob id is its pointer's; the size and oid are the content's.
                item["oid"] = git_blob_id(f"oid sha256:{f['sha256']}".encode())
                item["lfs"] = {"oid": f["sha256"], "size": len(f["data"]), "pointerSize": 134}
            answer.append(item)
        data = json.dumps(answer).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _resolve(self, handler, method, repo, revision, name, entry):
        if not self._check_revision(handler, repo, revision):
            return
        f = self.files.get((repo, name))
        if f is None:
            return self._error(handler, 404, "EntryNotFound", f"{name} not in {repo}")
        if f["lfs"]:
            # The hub answers for an LFS file with a redirect to a signed CDN URL, the file's
            # metadata in X-Linked-* headers.
            handler.send_response(302)
            handler.send_header("X-Repo-Commit", self.commits[repo])
            handler.send_header("X-Linked-Etag", f'"{f["sha256"]}"')
            handler.send_header("X-Linked-Size", str(len(f["data"])))
            handler.send_header("ETag", f'W/"{f["git"]}"')
            handler.send_header("Location", f"http://127.0.0.1:{self.cdn.server_address[1]}/"
                                f"lfs/{repo}/{name}?X-Amz-Signature=stand-in")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        self._send_bytes(handler, method, (repo, name), f, entry,
                         {"X-Repo-Commit": self.commits[repo], "ETag": f'"{f["git"]}"'})

    def _cdn(self, handler, method, entry):
        path = urllib.parse.urlsplit(handler.path).path
        match = re.fullmatch(r"/lfs/([^/]+/[^/]+)/(.+)", path)
        key = (urllib.parse.unquote(match.group(1)), urllib.parse.unquote(match.group(2))) \
            if match else None
        if key not in self.files:
            return self._error(handler, 404, "NotFound", f"no object {path}")
        self._send_bytes(handler, method, key, self.files[key], entry, {})

    def _send_bytes(self, handler, method, key, f, entry, headers):
        data = f["data"]
        with self.lock:
            refused = key in self.refusing
            cut = self.cut if method == "GET" and self.cut and self.cut["key"] == key else None
            if cut:
                self.cut = None
                if cut["refuse"]:
                    self.refusing.add(key)
        if refused and method == "GET":
            return self._error(handler, 503, "Unavailable", "try again later")
        start, status = 0, 200
        wanted = handler.headers.get("Range")
        if wanted:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
            start = int(m.group(1))
            end = int(m.group(2)) + 1 if m.group(2) else len(data)
            if start >= len(data):
                return self._error(handler, 416, "RangeNotSatisfiable", wanted)
            data, status = data[start:end], 206
        handler.send_response(status)
        for k, v in headers.items():
            handler.send_header(k, v)
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("Content-Length", str(len(data)))
        if status == 206:
            handler.send_header("Content-Range",
                                f"bytes {start}-{start + len(data) - 1}/{len(f['data'])}")
        handler.end_headers()
        if method == "HEAD":
            return
        if cut:
            # Half a body, then the connection goes: what a dropped download looks like.
            handler.wfile.write(data[:cut["at"]])
            handler.wfile.flush()
            entry["sent"] = cut["at"]
            handler.close_connection = True
            return
        handler.wfile.write(data)
        entry["sent"] = len(data)


# --- helpers -----------------------------------------------------------------------------------

def flip_to_nan(path, tensor, index=0):
    """Overwrites element `index` of a float32 tensor of a safetensors file with a NaN."""
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        entry = header[tensor]
        assert entry["dtype"] == "F32", entry
        f.seek(8 + n + entry["data_offsets"][0] + 4 * index)
        f.write(struct.pack("<I", 0x7FC00000))


def rename_tensor(path, old, new):
    """Renames a tensor in a safetensors header (names of equal length: no offset moves)."""
    assert len(old) == len(new)
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = f.read(n)
        assert header.count(f'"{old}"'.encode()) == 1
        f.seek(8)
        f.write(header.replace(f'"{old}"'.encode(), f'"{new}"'.encode()))


def print_config(config, *args):
    """cube3d-server --print-config: (returncode, parsed config or None, stderr)."""
    proc = subprocess.run([SERVER_BIN, "--config", config, *args, "--print-config"],
                          capture_output=True, text=True, timeout=60)
    parsed = yaml.safe_load(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, parsed, proc.stderr


def cpu_flags():
    """The command-line form of fetch_models.CPU_SETTINGS, as the server YAMLs document them."""
    flags = []
    for section, key, value in fetch_models.CPU_SETTINGS:
        value = value.strip('"').replace("[", "").replace("]", "").replace(" ", "")
        if section is None:
            flags += [f"--{key}", value]
        elif (section, key) == ("batching", "batch_buckets"):
            flags += ["--batch-buckets", value]
        else:
            flags += ["--set", f"{section}.{key}={value}"]
    return flags


class FetchModelsTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="cube3d-fetch-")
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "models")
        # HOME and the caches point into the test's folder: whatever lands there was written
        # outside DIR.
        self.home = os.path.join(self.tmp.name, "home")
        os.makedirs(self.home)
        repos = os.path.join(self.tmp.name, "repos")
        shutil.copytree(os.path.join(FIXTURE.name, "repos"), repos)
        self.model_yaml = os.path.join(FIXTURE.name, "model.yaml")
        self.hub = StandInHub(repos)
        self.addCleanup(self.hub.close)

    def run_tool(self, *args, model_yaml=None):
        """fetch_models.py v0.5 on the test's DIR and the tiny model, through the stand-in hub,
        with the token set and HOME and huggingface_hub's folders inside the test's folder."""
        environment = {k: v for k, v in os.environ.items()
                       if not k.startswith(("HF_", "HUGGINGFACE_"))}
        environment.update({
            "HF_ENDPOINT": self.hub.endpoint, "HF_TOKEN": TOKEN, "HOME": self.home,
            "HF_HOME": os.path.join(self.home, "hf"),
            "XDG_CACHE_HOME": os.path.join(self.home, "cache"),
            "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
            "CUBE3D_BIN_DIR": BIN_DIR})
        command = [sys.executable, TOOL, "v0.5", self.dir,
                   "--model-config", model_yaml or self.model_yaml, *args]
        return subprocess.run(command, capture_output=True, text=True, env=environment,
                              timeout=TOOL_TIMEOUT_S, cwd=self.tmp.name)

    def assert_rc(self, proc, rc, what):
        self.assertEqual(proc.returncode, rc, f"{what}: exit {proc.returncode}\n--- stdout\n"
                         f"{proc.stdout}\n--- stderr\n{proc.stderr}")

    def fetch(self, *args):
        proc = self.run_tool("--device", "cpu", *args)
        self.assert_rc(proc, 0, "fetch_models.py")
        return proc

    def gets(self):
        """(repository, file) of every GET of file bytes, with its Range header."""
        out = []
        for r in self.hub.requests():
            m = re.match(r"^/(?:lfs/)?([^/]+/[^/]+)/(?:resolve/[^/]+/)?([^?]+)", r["path"])
            if r["method"] == "GET" and m:
                out.append(((m.group(1), m.group(2)), r["range"], r["sent"]))
        return out

    # -- the cases --

    def test_download_then_serve_a_mesh(self):
        proc = self.fetch()
        self.assertEqual({key for key, _, _ in self.gets()}, FETCHED, "exactly the server's files")
        for r in self.hub.requests("cdn"):
            self.assertIsNone(r["auth"], f"the token went to the CDN: {r}")
        for r in self.hub.requests("hub"):
            self.assertEqual(r["auth"], f"Bearer {TOKEN}", f"no token for the hub: {r}")
        written = sorted(os.path.relpath(os.path.join(d, f), self.home)
                         for d, _, files in os.walk(self.home) for f in files)
        self.assertEqual(written, [], "files written outside DIR")
        for name in ("shape_gpt.safetensors", "shape_tokenizer.safetensors", "model.yaml",
                     "server.yaml", "fetch-manifest.json",
                     "clip-vit-large-patch14/config.json",
                     "clip-vit-large-patch14/model.safetensors",
                     "clip-vit-large-patch14/vocab.json", "clip-vit-large-patch14/merges.txt"):
            self.assertTrue(os.path.isfile(os.path.join(self.dir, name)), name)
        self.assertEqual(os.listdir(os.path.join(self.dir, ".partial")), [])

        # The written config: the CPU settings, the files beside it, the template's other keys.
        config = os.path.join(self.dir, "server.yaml")
        rc, effective, err = print_config(config)
        self.assertEqual(rc, 0, err)
        self.assertEqual(effective["model"]["gpt_weights"],
                         os.path.join(self.dir, "shape_gpt.safetensors"))
        self.assertEqual(effective["model"]["clip_model"],
                         os.path.join(self.dir, "clip-vit-large-patch14"))
        template = os.path.join(SOURCE, "models", "cube3d-v0.5-server.yaml")
        overrides = [f"--set=model.{key}={value}" for key, value in effective["model"].items()]
        rc, expected, err = print_config(template, *overrides, *cpu_flags())
        self.assertEqual(rc, 0, err)
        self.assertEqual(effective, expected, "server.yaml = the template + CPU settings")
        self.assertEqual((effective["device"], effective["dtype"]), ("cpu", "float32"))

        # The printed commands: serve it, then call it.
        lines = proc.stdout.splitlines()
        serve = shlex.split(lines[lines.index("Serve it:") + 1])
        # Paths as typed in the tool's current directory.
        serve[2] = os.path.join(self.tmp.name, serve[2])
        self.assertEqual(serve, [SERVER_BIN, "--config", config], proc.stdout)
        call = shlex.split(next(lines[i + 1] for i, line in enumerate(lines)
                                if line.startswith("Call it")))
        self.assertEqual(call[0], CLIENT_BIN)
        server = e2e.ServerProcess([], self.tmp.name, config=serve[2])
        self.addCleanup(server.kill)
        server.start()
        out = os.path.join(self.tmp.name, "chair.glb")
        call[call.index("--out") + 1] = out
        client = subprocess.run(call + ["--server", server.address, "--resolution-base", "4",
                                        "--no-progress"],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(client.returncode, 0, f"{client.stdout}\n{client.stderr}\n"
                         f"{server.log_tail()}")
        with open(out, "rb") as f:
            self.assertEqual(f.read(4), b"glTF")
        faces = re.search(r"(\d+) vertices, (\d+) faces", client.stdout)
        self.assertTrue(faces and int(faces.group(2)) > 0, client.stdout)
        self.assertIn("--bbox", call, "the v0.5 call shows the bounding box")
        server.stop()

    def test_second_run_downloads_nothing_and_check_only_asks_nothing(self):
        self.fetch()
        mtimes = {n: os.stat(os.path.join(self.dir, n)).st_mtime_ns
                  for n in ("shape_gpt.safetensors", "clip-vit-large-patch14/model.safetensors",
                            "server.yaml")}
        self.hub.clear_log()
        proc = self.fetch()
        self.assertEqual(self.gets(), [], "a second run downloaded again")
        self.assertIn("up to date: ok", proc.stdout)
        for name, mtime in mtimes.items():
            self.assertEqual(os.stat(os.path.join(self.dir, name)).st_mtime_ns, mtime, name)

        self.hub.clear_log()
        proc = self.run_tool("--check-only")
        self.assert_rc(proc, 0, "--check-only")
        self.assertEqual(self.hub.requests(), [], "--check-only asked the hub")
        self.assertIn("every file checked out", proc.stdout)

    def test_interrupted_download_resumes_in_the_next_run(self):
        size = len(self.hub.files[(CUBE_REPO, "shape_gpt.safetensors")]["data"])
        # Past the tool's first 1 MiB chunk (what a broken download keeps is whole chunks).
        cut = size - 100000
        self.assertGreater(cut, 1 << 20)
        self.hub.cut_once(CUBE_REPO, "shape_gpt.safetensors", cut, refuse=True)
        first = self.run_tool("--device", "cpu")
        self.assert_rc(first, 2, "a run whose download breaks off")
        self.assertIn("shape_gpt.safetensors", first.stderr)
        self.assertIn("run again to resume", first.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "shape_gpt.safetensors")))
        partials = os.listdir(os.path.join(self.dir, ".partial"))
        self.assertEqual(len(partials), 1, partials)
        kept = os.path.getsize(os.path.join(self.dir, ".partial", partials[0]))
        self.assertTrue(0 < kept <= cut, (kept, cut))

        self.hub.allow()
        self.hub.clear_log()
        self.fetch()
        gpt = [(rng, sent) for key, rng, sent in self.gets()
               if key == (CUBE_REPO, "shape_gpt.safetensors")]
        self.assertEqual(gpt, [(f"bytes={kept}-", size - kept)], "resumed, not started over")
        with open(os.path.join(self.dir, "shape_gpt.safetensors"), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                             self.hub.files[(CUBE_REPO, "shape_gpt.safetensors")]["sha256"])

    def test_corrupt_files_are_named_and_kept(self):
        self.fetch()
        gpt = os.path.join(self.dir, "shape_gpt.safetensors")
        flip_to_nan(gpt, "transformer.dual_blocks.1.attn.pre_x.c_qk.weight", index=70)
        proc = self.run_tool("--check-only")
        self.assert_rc(proc, 1, "--check-only on a NaN")
        self.assertRegex(proc.stderr, r"shape_gpt\.safetensors: tensor 'transformer\.dual_blocks"
                         r"\.1\.attn\.pre_x\.c_qk\.weight' \[128, 64\] F32: 1 NaN or infinite "
                         r"value\(s\) of 8192, the first at \[1, 6\]")
        self.assertRegex(proc.stderr, r"shape_gpt\.safetensors: sha256 [0-9a-f]{64} is not the "
                         r"hub's")
        # A normal run names it too, keeps it and downloads nothing in its place.
        self.hub.clear_log()
        proc = self.run_tool("--device", "cpu")
        self.assert_rc(proc, 1, "a run over a NaN")
        self.assertIn("c_qk.weight' [128, 64] F32: 1 NaN", proc.stderr)
        self.assertIn("delete it to download it again", proc.stderr)
        self.assertEqual(self.gets(), [])
        self.assertTrue(os.path.exists(gpt))

        # A renamed tensor: missing under its name, unexpected under the other.
        shape = os.path.join(self.dir, "shape_tokenizer.safetensors")
        rename_tensor(shape, "decoder.positional_encodings", "decoder.positional_encodingz")
        proc = self.run_tool("--check-only")
        self.assert_rc(proc, 1, "--check-only on a renamed tensor")
        self.assertIn("shape_tokenizer.safetensors: missing tensor 'decoder.positional_encodings' "
                      "[24, 64]", proc.stderr)
        self.assertIn("shape_tokenizer.safetensors: unexpected tensor "
                      "'decoder.positional_encodingz' [24, 64]", proc.stderr)

        # A model YAML the checkpoint does not fit: the shape is named.
        with open(self.model_yaml) as f:
            model = yaml.safe_load(f)
        model["shape_model"]["num_codes"] = 32
        other = os.path.join(self.tmp.name, "other.yaml")
        with open(other, "w") as f:
            yaml.safe_dump(model, f)
        proc = self.run_tool("--check-only", model_yaml=other)
        self.assert_rc(proc, 1, "--check-only against another model")
        self.assertIn("tensor 'bottleneck.block.codebook.weight' is [64, 8], expected [32, 8]",
                      proc.stderr)

    def test_wrong_checkpoint_on_the_hub_is_not_installed(self):
        # The hub serves v0.1's shape GPT as v0.5's: its checksum matches the hub, its tensors
        # do not match the model.
        self.hub.reload(CUBE_REPO, {"shape_gpt.safetensors":
                                    os.path.join(GOLDEN, "tiny_v01", "shape_gpt.safetensors")})
        proc = self.run_tool("--device", "cpu")
        self.assert_rc(proc, 1, "a download of the wrong checkpoint")
        self.assertIn("missing tensor 'bbox_proj.weight' [64, 3]", proc.stderr)
        self.assertIn("kept for inspection, not installed", proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "shape_gpt.safetensors")))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "server.yaml")))

    def test_official_checkpoints_pass_the_checks(self):
        # tests/golden's weights were written by the official code: its tensor names.
        from pathlib import Path
        for name in ("tiny_v01", "tiny_v05"):
            with open(os.path.join(GOLDEN, name, "model.yaml")) as f:
                model = yaml.safe_load(f)
            for role, file in (("gpt", "shape_gpt.safetensors"),
                               ("shape", "shape_tokenizer.safetensors")):
                with self.subTest(model=name, file=file):
                    path = Path(GOLDEN, name, file)
                    self.assertEqual(fetch_models.check_checkpoint(path, role, model), [])
        with open(os.path.join(GOLDEN, "tiny_v01", "model.yaml")) as f:
            v01 = yaml.safe_load(f)
        problems = fetch_models.check_checkpoint(
            Path(GOLDEN, "tiny_v05", "shape_gpt.safetensors"), "gpt", v01)
        self.assertEqual(len(problems), 2, problems)
        self.assertTrue(all("unexpected tensor 'bbox_proj." in p for p in problems), problems)


class ServerConfigsTest(unittest.TestCase):
    """models/cube3d-v0.X-server.yaml through cube3d-server's config check, in a copy of models/
    beside stand-ins for the fetched files (the check wants them to exist, not to be valid)."""

    def test_real_model_configs_pass_the_server_check(self):
        for version in ("v0.1", "v0.5"):
            with self.subTest(version=version), tempfile.TemporaryDirectory() as root:
                models = os.path.join(root, "models")
                os.makedirs(models)
                for name in (f"cube3d-{version}.yaml", f"cube3d-{version}-server.yaml"):
                    shutil.copyfile(os.path.join(SOURCE, "models", name),
                                    os.path.join(models, name))
                config = os.path.join(models, f"cube3d-{version}-server.yaml")
                rc, _, err = print_config(config)
                self.assertNotEqual(rc, 0, "no weights yet")
                self.assertIn("model.gpt_weights", err)

                fetched = os.path.join(root, ".cache", "models", f"cube3d-{version}")
                os.makedirs(os.path.join(fetched, "clip-vit-large-patch14"))
                for name in ("shape_gpt.safetensors", "shape_tokenizer.safetensors"):
                    open(os.path.join(fetched, name), "wb").close()
                rc, effective, err = print_config(config)
                self.assertEqual(rc, 0, err)
                self.assertEqual((effective["device"], effective["dtype"]), ("cuda", "bfloat16"))
                model = effective["model"]
                self.assertEqual(os.path.normpath(model["gpt_weights"]),
                                 os.path.join(fetched, "shape_gpt.safetensors"))
                self.assertEqual(os.path.normpath(model["clip_vocab"]),
                                 os.path.join(fetched, "clip-vit-large-patch14"))
                self.assertEqual(model["config"], os.path.join(models, f"cube3d-{version}.yaml"))

                # The CPU settings the file documents are the ones fetch_models.py writes.
                with open(config) as f:
                    text = f.read()
                flags = cpu_flags()
                documented = " ".join(text.split()).replace(" # ", " ").replace("\\ ", "")
                for i in range(0, len(flags), 2):
                    self.assertIn(f"{flags[i]} {flags[i + 1]}", documented)
                rc, cpu, err = print_config(config, *flags)
                self.assertEqual(rc, 0, err)
                self.assertEqual((cpu["device"], cpu["dtype"]), ("cpu", "float32"))
                self.assertEqual(cpu["limits"]["default_deadline_ms"], 3600000)
                self.assertGreater(cpu["grpc"]["max_connection_age_grace_ms"],
                                   cpu["limits"]["default_deadline_ms"])
                self.assertGreater(effective["grpc"]["max_connection_age_grace_ms"],
                                   effective["limits"]["default_deadline_ms"])

    def test_written_configs_pass_the_server_check(self):
        # What fetch_models.py makes of each template, for each device, in a folder of
        # stand-ins for the fetched files.
        from pathlib import Path
        for version in ("v0.1", "v0.5"):
            for device, dtype in (("cpu", "float32"), ("cuda", "bfloat16")):
                with self.subTest(version=version, device=device), \
                        tempfile.TemporaryDirectory() as folder:
                    model = f"cube3d-{version}.yaml"
                    shutil.copyfile(os.path.join(SOURCE, "models", model),
                                    os.path.join(folder, model))
                    os.makedirs(os.path.join(folder, "clip-vit-large-patch14"))
                    for name in ("shape_gpt.safetensors", "shape_tokenizer.safetensors"):
                        open(os.path.join(folder, name), "wb").close()
                    template = Path(SOURCE, "models", f"cube3d-{version}-server.yaml")
                    text = fetch_models.server_yaml_text(template, version, model, device, "test")
                    config = os.path.join(folder, "server.yaml")
                    with open(config, "w") as f:
                        f.write(text)
                    rc, effective, err = print_config(config)
                    self.assertEqual(rc, 0, err)
                    self.assertEqual((effective["device"], effective["dtype"]), (device, dtype))
                    self.assertEqual(effective["model"]["config"], os.path.join(folder, model))
                    self.assertEqual(effective["model"]["shape_weights"],
                                     os.path.join(folder, "shape_tokenizer.safetensors"))
                    # The template's comments on each key come along (the listen address's
                    # first of them).
                    self.assertIn("# This machine only", text)


if __name__ == "__main__":
    unittest.main()
