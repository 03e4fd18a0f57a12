"""cube3d-ray's pipeline end to end: `python -m cube3d_ray` on a local Ray of 2 CPUs, over the
demo model (cube3d-server from this build, one per actor), 2 actors, 20 prompts at resolution 4
(text lines and JSON lines with their own seed and resolution) and two rows that fail (malformed
JSON; a bounding box, which the demo model refuses). One actor is killed (SIGKILL) as the first
mesh lands. Then: every prompt has a valid GLB and one ok manifest row, each failure one error
row; every mesh file was created once (inotify on the folder); the killed actor's server died with
it, and Ray restarted the actor (rows from a new worker process), leaving no server behind. A
rerun makes nothing, writes nothing and starts no Ray (and exits 3 still, for the two failures).
Run by ctest (tests/CMakeLists.txt: e2e.ray_batch), one e2e suite at a time."""
import collections
import ctypes
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import package

SOURCE = package.SOURCE
BIN_DIR = os.environ.get("CUBE3D_BIN_DIR") or os.path.join(SOURCE, "build", "bin")
SERVER_BIN = os.path.join(BIN_DIR, "cube3d-server")
DEMO_MODEL = os.path.join(SOURCE, "models", "demo.yaml")
PROMPTS = [f"a catalogue shape number {i}" for i in range(18)]
JSON_PROMPTS = [{"prompt": "a red chair", "seed": 7, "resolution": 4},
                {"prompt": "a red chair", "seed": 8, "resolutionBase": 4}]
BAD = ['{"prompt": "a broken line", ', json.dumps({"prompt": "a box", "bbox": [1, 2, 1]})]
MESH_NAME = re.compile(r"^[0-9a-f]{20}\.glb$")
RUN_TIMEOUT_S = 420

IN_CREATE, IN_MOVED_TO = 0x100, 0x80


class Inotify:
    """The names created in (or moved into) one folder, counted, from a thread."""

    def __init__(self, folder):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        if self.fd < 0 or self.libc.inotify_add_watch(self.fd, folder.encode(),
                                                      IN_CREATE | IN_MOVED_TO) < 0:
            raise OSError(ctypes.get_errno(), "inotify")
        self.created = collections.Counter()
        self.stopping = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stopping:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            data = os.read(self.fd, 1 << 16)
            at = 0
            while at < len(data):
                _, _, _, length = struct.unpack_from("iIII", data, at)
                name = data[at + 16:at + 16 + length].rstrip(b"\0").decode()
                self.created[name] += 1
                at += 16 + length

    def stop(self):
        time.sleep(0.3)
        self.stopping = True
        self.thread.join()
        os.close(self.fd)

    def meshes(self):
        return {n: c for n, c in self.created.items() if MESH_NAME.match(n)}


def read_glb(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, length = struct.unpack_from("<4sII", data, 0)
    assert (magic, version, length) == (b"glTF", 2, len(data)), path
    chunk_length, kind = struct.unpack_from("<II", data, 12)
    assert kind == 0x4E4F534A, path
    return json.loads(data[20:20 + chunk_length])


def our_servers(config):
    """{pid: ppid} of the cube3d-server processes started with `config`."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if args and args[0].endswith(b"cube3d-server") and config.encode() in args:
            out[int(pid)] = ppid
    return out


class RayBatchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(SERVER_BIN, os.X_OK):
            raise RuntimeError(f"{SERVER_BIN} is missing: build cube3d-server")
        package.install()
        cls.tmp = tempfile.TemporaryDirectory(prefix="cube3d-ray-e2e-")
        cls.addClassCleanup(cls.tmp.cleanup)
        root = cls.tmp.name
        cls.config = os.path.join(root, "server.yaml")
        with open(cls.config, "w") as f:
            f.write(f"model:\n  config: {DEMO_MODEL}\ncache:\n  enabled: false\n")
        cls.prompts = os.path.join(root, "prompts.txt")
        with open(cls.prompts, "w") as f:
            f.write("# the e2e catalogue\n" + "\n".join(
                PROMPTS[:9] + [json.dumps(p) for p in JSON_PROMPTS] + BAD + PROMPTS[9:]
                + [PROMPTS[0]]) + "\n")
        cls.out = os.path.join(root, "catalog")
        cls.logs = os.path.join(root, "logs")
        os.makedirs(cls.out)
        cls.env = dict(os.environ, RAY_DEDUP_LOGS="0", RAY_USAGE_STATS_ENABLED="0")
        cls.env.pop("RAY_ADDRESS", None)

    def command(self):
        return [sys.executable, "-m", "cube3d_ray", "--prompts", self.prompts, "--out", self.out,
                "--binary", SERVER_BIN, "--config", self.config, "--concurrency", "2",
                "--batch-size", "4", "--resolution", "4", "--num-cpus", "2",
                "--server-log-dir", self.logs]

    def manifest(self):
        import pyarrow.parquet as pq
        return pq.read_table(os.path.join(self.out, "manifest")).to_pylist()

    def test_a_killed_actor_and_a_rerun(self):
        watch = Inotify(self.out)
        started = time.monotonic()
        log_path = os.path.join(self.tmp.name, "run1.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                    env=self.env)
        try:
            killed = self.kill_an_actor_mid_run(proc)
            rc = proc.wait(timeout=RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
            watch.stop()
        seconds = time.monotonic() - started
        with open(log_path) as f:
            log = f.read()
        print(f"\nfirst run: {seconds:.1f} s; killed actor {killed}\n"
              + "\n".join(log.splitlines()[-3:]), file=sys.stderr)
        self.assertEqual(rc, 3, log[-6000:])  # the two bad rows

        rows = self.manifest()
        ok = [r for r in rows if r["status"] == "ok"]
        errors = [r for r in rows if r["status"] != "ok"]
        # (A row made from a file an earlier attempt wrote has the request's own fields, seed
        # unset: None; the others the server's effective ones, seed 0 by default.)
        prompts = collections.Counter((r["prompt"], json.loads(r["request"])["seed"]) for r in ok)
        want = collections.Counter([(p, None) for p in PROMPTS] + [("a red chair", 7),
                                                                   ("a red chair", 8)])
        self.assertEqual(prompts, want, "every prompt once (the duplicate line too)")
        self.assertEqual(len({r["key"] for r in ok}), 20)
        self.assertEqual(sorted(r["line"] for r in errors), [13, 14], errors)
        self.assertIn("malformed JSON", errors[0]["error"])
        self.assertEqual([r["error_code"] for r in errors], ["INVALID_ARGUMENT"] * 2)
        for r in ok:
            path = os.path.join(self.out, r["file"])
            gltf = read_glb(path)
            self.assertEqual(os.path.getsize(path), r["bytes"])
            self.assertGreater(r["faces"], 0)
            self.assertEqual(r["resolution_base"] if not r["reused"] else 4, 4)
            self.assertGreater(gltf["accessors"][0]["count"], 0)
            if not r["reused"]:
                self.assertEqual(r["model_name"], "demo")
                self.assertEqual(len(r["model_digest"]), 64)
                self.assertEqual(gltf["asset"]["extras"]["request_id"], r["request_id"])
        self.assertEqual(sorted(n for n in os.listdir(self.out) if n != "manifest"),
                         sorted(r["file"] for r in ok), "the meshes and nothing else (no "
                         "temporary file of the killed actor's)")
        # Each mesh file created once, the killed actor's writes included.
        self.assertEqual(watch.meshes(), {r["file"]: 1 for r in ok})
        # The killed actor's server went with it; Ray restarted the actor, whose rows are there;
        # no server outlives the run.
        workers = {r["worker"].rsplit(":", 1)[1] for r in rows}
        self.assertTrue(workers - set(map(str, killed["actors"])),
                        f"no row from a restarted actor: {workers}, first {killed['actors']}")
        for _ in range(100):  # the local Ray's shutdown takes its actors, and so their servers
            if not our_servers(self.config):
                break
            time.sleep(0.1)
        self.assertEqual(our_servers(self.config), {}, "a server outlived the run")

        # The rerun: nothing made, nothing written, no Ray started.
        files_before = {n: os.stat(os.path.join(self.out, n)).st_mtime_ns
                        for n in os.listdir(self.out)}
        manifest_before = sorted(os.listdir(os.path.join(self.out, "manifest")))
        watch = Inotify(self.out)
        rerun = subprocess.run(self.command(), capture_output=True, text=True, env=self.env,
                               timeout=RUN_TIMEOUT_S)
        watch.stop()
        # 3: the two bad rows are still failures (made nothing new, but not all made).
        self.assertEqual(rerun.returncode, 3, rerun.stdout + rerun.stderr)
        self.assertIn("0 made (0 found written by an earlier attempt), 0 failed, 20 done before, "
                      "2 failed before, 1 duplicate rows", rerun.stdout)
        self.assertNotIn("Started a local Ray instance", rerun.stdout + rerun.stderr)
        self.assertEqual(sorted(os.listdir(os.path.join(self.out, "manifest"))), manifest_before)
        self.assertEqual({n: os.stat(os.path.join(self.out, n)).st_mtime_ns
                          for n in os.listdir(self.out)}, files_before)
        self.assertEqual(dict(watch.created), {})

    def kill_an_actor_mid_run(self, proc):
        """SIGKILL to the actor of one server as soon as the first mesh file lands; what was
        killed."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            meshes = [n for n in os.listdir(self.out) if MESH_NAME.match(n)]
            servers = our_servers(self.config)
            if meshes and servers:
                actors = sorted(set(servers.values()))
                victim_server, victim = sorted(servers.items())[0]
                os.kill(victim, signal.SIGKILL)
                self.assertLess(len(meshes), 20, "the run was over before the kill")
                for _ in range(100):  # its server dies with it (PR_SET_PDEATHSIG)
                    if victim_server not in our_servers(self.config):
                        break
                    time.sleep(0.05)
                self.assertNotIn(victim_server, our_servers(self.config),
                                 "the killed actor's server outlived it")
                return {"actor": victim, "server": victim_server, "actors": actors,
                        "meshes_then": len(meshes)}
            time.sleep(0.02)
        self.fail("no mesh file and server to kill before the run ended")


if __name__ == "__main__":
    unittest.main()
