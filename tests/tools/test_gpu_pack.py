"""scripts/gpu_check.sh on a CPU machine: its packing step (BUILD_ONLY=1) and its device part in
smoke mode (GPU_CHECK_SMOKE=1: CPU, demo model). Run by ctest (tests/CMakeLists.txt,
tools.gpu_pack); standard library plus ldd/readelf/git.

The pack is made from this ctest build's own binaries (PACK_FROM=CUBE3D_BUILD_DIR) instead of a
second build into build-gpu/: cube3d_engine_tests, cube3d-bench and cube3d-generate do not depend
on CUBE3D_BUILD_SERVER, so the CI build's are the same programs, and a second Release build of the
engine and its tests would cost CI minutes on two cores. It needs a build with the CUDA graph
runner (a CUDA toolkit at configure time); without one, only the refusal is checked.

The library check here is written independently of the script's: with LD_LIBRARY_PATH = the
pack's lib + torch's lib + torch's nvidia/*/lib, as on the device, every library the packed
binaries need must resolve into the pack, torch, torch's CUDA wheels, or glibc/libstdc++/libgcc.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ["CUBE3D_SOURCE_DIR"]
BUILD = os.environ["CUBE3D_BUILD_DIR"]
SCRIPT = os.path.join(SOURCE, "scripts", "gpu_check.sh")
BINARIES = ["cube3d_engine_tests", "cube3d_model_tests", "cube3d-bench", "cube3d-generate"]
LIMIT = 64 * 1024 * 1024  # the device tool carries the tree and the pack, 64 MiB in all
SYSTEM = re.compile(r"^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|"
                    r"libutil|libstdc\+\+|libgcc_s)\.so")
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")

_tmp = None
_pack = None
_pack_proc = None


def cmake_cache(key):
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split("=", 1)[1].strip()
    return None


def graph_runner_on():
    path = os.path.join(BUILD, "compile_commands.json")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return "CUBE3D_WITH_CUDA=1" in f.read()


def torch_root():
    return cmake_cache("TORCH_ROOT")


def nvidia_dirs(root):
    return sorted(glob.glob(os.path.join(os.path.dirname(root), "nvidia", "*", "lib")))


def run_script(env_extra, timeout=300):
    env = dict(os.environ, **env_extra)
    return subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=SOURCE)


def outside_libraries(pack):
    """The libraries the packed binaries need that the device would not have:
    [(library, why)]."""
    root = torch_root()
    nv = nvidia_dirs(root)
    nv_names = {os.path.basename(p) for d in nv for p in glob.glob(os.path.join(d, "*"))}
    pack_lib = os.path.join(pack, "lib")
    allowed = [pack_lib + "/", os.path.join(root, "lib") + "/"] + [d + "/" for d in nv]
    env = dict(os.environ, LD_LIBRARY_PATH=":".join([pack_lib, os.path.join(root, "lib"), *nv]))
    problems = []
    for b in BINARIES:
        proc = subprocess.run(["ldd", os.path.join(pack, "bin", b)], capture_output=True,
                              text=True, env=env)
        if proc.returncode != 0:
            problems.append((b, f"ldd failed: {proc.stderr.strip()}"))
        for line in (proc.stdout + proc.stderr).splitlines():
            line = line.strip()
            if "=>" not in line:
                if "not found" in line:
                    problems.append((b, line))  # an unmet symbol version
                continue
            name, _, rest = line.partition(" => ")
            path = rest.split(" (")[0].strip()
            if path.startswith("not found"):
                problems.append((name, "not found"))
            elif SYSTEM.match(name):
                continue
            elif path.startswith("/usr/local/cuda"):
                if name not in nv_names:
                    problems.append((name, f"CUDA toolkit only ({path}): torch's wheels lack it"))
            elif not any(path.startswith(a) for a in allowed):
                problems.append((name, f"from {path}, outside the pack"))
    return sorted(set(problems))


def manifest(pack):
    out = {"file": [], "lib": []}
    with open(os.path.join(pack, "manifest.txt")) as f:
        for line in f:
            if line.startswith("#") or "=" not in line:
                continue
            key, value = line.rstrip("\n").split("=", 1)
            if key in out:
                out[key].append(value)
            else:
                out[key] = value
    return out


def setUpModule():
    global _tmp, _pack, _pack_proc
    _tmp = tempfile.mkdtemp(prefix="gpu_pack_")
    _pack = os.path.join(_tmp, "pack")
    if graph_runner_on():
        _pack_proc = run_script({"BUILD_ONLY": "1", "PACK_FROM": BUILD, "PACK_DIR": _pack})


def tearDownModule():
    shutil.rmtree(_tmp, ignore_errors=True)


class ScriptTest(unittest.TestCase):
    def test_bash_parses(self):
        proc = subprocess.run(["bash", "-n", SCRIPT], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_refuses_a_build_without_the_graph_runner(self):
        # A build folder like this one, but whose engine was compiled without CUBE3D_WITH_CUDA.
        fake = os.path.join(_tmp, "fake_build")
        os.makedirs(os.path.join(fake, "bin"), exist_ok=True)
        shutil.copy(os.path.join(BUILD, "CMakeCache.txt"), fake)
        with open(os.path.join(fake, "compile_commands.json"), "w") as f:
            json.dump([{"file": "src/engine/engine.cpp", "command": "c++ -DNDEBUG -c x"}], f)
        for b in BINARIES:
            os.symlink(os.path.join(BUILD, "bin", b), os.path.join(fake, "bin", b))
        pack = os.path.join(_tmp, "refused")
        proc = run_script({"BUILD_ONLY": "1", "PACK_FROM": fake, "PACK_DIR": pack})
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("graph runner is OFF", proc.stderr)
        self.assertFalse(os.path.exists(pack))


@unittest.skipUnless(graph_runner_on(), "this build has no CUDA graph runner (no CUDA toolkit at "
                     "configure time): nothing to pack for the GPU")
class PackTest(unittest.TestCase):
    def setUp(self):
        self.assertEqual(_pack_proc.returncode, 0,
                         f"packing failed:\n{_pack_proc.stdout}\n{_pack_proc.stderr}")

    def test_binaries_are_there_and_stripped(self):
        for b in BINARIES:
            path = os.path.join(_pack, "bin", b)
            self.assertTrue(os.access(path, os.X_OK), path)
            sections = subprocess.run(["readelf", "-S", "-W", path], capture_output=True,
                                      text=True, check=True).stdout
            self.assertNotIn(".symtab", sections, f"{b} is not stripped")

    def test_every_library_is_packed_or_on_the_device(self):
        self.assertEqual(outside_libraries(_pack), [])
        self.assertTrue(os.listdir(os.path.join(_pack, "lib")), "no library packed at all")

    def test_a_missing_library_is_detected(self):
        broken = os.path.join(_tmp, "broken")
        shutil.rmtree(broken, ignore_errors=True)
        shutil.copytree(_pack, broken, symlinks=True)
        victim = sorted(os.listdir(os.path.join(broken, "lib")))[0]
        os.remove(os.path.join(broken, "lib", victim))
        self.assertIn(victim, [name for name, _ in outside_libraries(broken)])

    def test_data_the_tests_read(self):
        src = os.path.join(_pack, "src")
        for rel in ["models/cube3d-v0.1.yaml", "models/demo.yaml",
                    "tests/golden/tiny_v01/model.yaml", "tests/golden/tiny_v05/expected.safetensors"]:
            self.assertTrue(os.path.isfile(os.path.join(src, rel)), rel)
        for path in glob.glob(os.path.join(SOURCE, "tests", "golden", "**", "*"), recursive=True):
            if os.path.isfile(path):
                rel = os.path.relpath(path, SOURCE)
                self.assertTrue(os.path.isfile(os.path.join(src, rel)), rel)

    def test_paths_the_engine_tests_build_are_in_the_pack(self):
        # Every `CUBE3D_SOURCE_DIR) + "/x"`, `source_dir() + "/x"` (and the TEST_DATA / test_data
        # forms) in the engine tests and the shared test headers names a file or folder the
        # pack must hold (when the checkout has it at all). A new data path in a test fails here
        # until the script packs it.
        pattern = re.compile(
            r'(?:CUBE3D_(SOURCE|TEST_DATA)_DIR\)|\b(source|test_data)_dir\(\))\s*\+\s*"(/[^"]*)"')
        sources = glob.glob(os.path.join(SOURCE, "tests", "engine", "*.*")) + \
            glob.glob(os.path.join(SOURCE, "tests", "*.h"))
        found = []
        for path in sources:
            with open(path, errors="replace") as f:
                text = f.read()
            for macro, function, rel in pattern.findall(text):
                rel = ("tests" if "test_data" in (macro + function).lower() else "") + rel
                rel = rel.lstrip("/")
                found.append(rel)
                if os.path.exists(os.path.join(SOURCE, rel)):
                    self.assertTrue(os.path.exists(os.path.join(_pack, "src", rel)),
                                    f"{os.path.basename(path)} reads {rel}, not in the pack")
        self.assertIn("tests/golden/", found)

    def test_manifest(self):
        m = manifest(_pack)
        self.assertEqual(m["graph_runner"], "on")
        self.assertEqual(m["source_dir"], cmake_cache("CMAKE_HOME_DIRECTORY"))
        self.assertRegex(m["glibc_required"], r"^2\.\d+$")
        self.assertGreater(int(m["engine_tests_selected"]), 0)
        self.assertRegex(m["commit"], r"^([0-9a-f]{7,}|unknown)(-dirty)?$")
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=SOURCE)
        if head.returncode == 0:
            self.assertEqual(m["commit"].removesuffix("-dirty"), head.stdout.strip())
        listed = {}
        for entry in m["file"]:
            rel, size, _ = entry.split(" ")
            listed[rel] = int(size)
        on_disk = {}
        for top in ("bin", "lib", "src"):
            for dirpath, _, files in os.walk(os.path.join(_pack, top)):
                for f in files:
                    path = os.path.join(dirpath, f)
                    on_disk[os.path.relpath(path, _pack)] = os.path.getsize(path)
        self.assertEqual(listed, on_disk)
        packed = {e.split(" ")[0] for e in m["lib"] if e.split(" ")[1] == "pack"}
        self.assertEqual(packed, set(os.listdir(os.path.join(_pack, "lib"))))

    def test_size_with_the_tree_fits_the_device_tool(self):
        pack_bytes = sum(os.path.getsize(os.path.join(d, f))
                         for d, _, files in os.walk(_pack) for f in files)
        listing = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"],
                                 capture_output=True, cwd=SOURCE)
        if listing.returncode != 0:
            self.skipTest("no git checkout: cannot size the tree")
        tree = 0
        for rel in listing.stdout.decode().split("\0"):
            path = os.path.join(SOURCE, rel)
            if rel and os.path.isfile(path):
                tree += os.path.getsize(path)
        self.assertLess(pack_bytes + tree, LIMIT,
                        f"pack {pack_bytes} B + tree {tree} B is over the device tool's 64 MiB")


@unittest.skipUnless(graph_runner_on(), "no CUDA graph runner in this build: no pack")
class DeviceSmokeTest(unittest.TestCase):
    """The device part on the CPU with the demo model: the steps, the 8-file limit of $OUT and
    the summary at the very end."""

    @classmethod
    def setUpClass(cls):
        if _pack_proc is None or _pack_proc.returncode != 0:
            raise unittest.SkipTest("packing failed (see PackTest)")
        cls.out = os.path.join(_tmp, "out")
        os.makedirs(cls.out, exist_ok=True)
        # This interpreter has torch (ctest runs it as the project's Python); python3 may not.
        cls.proc = run_script({"GPU_CHECK_SMOKE": "1", "PACK_DIR": _pack, "OUT": cls.out,
                               "DEADLINE_S": "240", "GPU_CHECK_PYTHON": sys.executable},
                              timeout=300)
        cls.build_info = manifest(_pack)["build_info"] != "unsupported"

    def test_out_holds_at_most_eight_plain_files(self):
        entries = os.listdir(self.out)
        self.assertLessEqual(len(entries), 8, entries)
        for e in entries:
            self.assertTrue(os.path.isfile(os.path.join(self.out, e)), e)
            self.assertRegex(e, OUT_NAME)
        self.assertIn("gpu_check.log", entries)
        # The environment (env.txt) is folded into the log at the end, leaving a file's room.
        with open(os.path.join(self.out, "gpu_check.log")) as f:
            self.assertIn("### env.txt", f.read())

    def test_summary_comes_last(self):
        out = self.proc.stdout
        self.assertIn("gpu_check summary", out, self.proc.stderr)
        tail = out[out.rindex("gpu_check summary"):]
        self.assertRegex(tail.strip().splitlines()[-1], r"^total \d+ s of the 240 s deadline; exit \d$")

    def test_steps_ran_or_stopped_clearly(self):
        out = self.proc.stdout
        if not self.build_info:
            # The bench predates --build-info: the run must stop there, saying why.
            self.assertEqual(self.proc.returncode, 2, out[-3000:])
            self.assertIn("STOP: cube3d-bench --build-info", out)
            return
        self.assertEqual(self.proc.returncode, 0, out[-5000:])
        self.assertRegex(out, r"engine tests: PASSED \(\d+ passed, 0 failed")
        with open(os.path.join(self.out, "bench_nocache.json")) as f:
            self.assertEqual([r["mode"] for r in json.load(f)["results"]], ["eager-nocache"])
        with open(os.path.join(self.out, "bench_ablation.json")) as f:
            data = json.load(f)
        self.assertEqual([r["mode"] for r in data["results"]], ["eager-kv"])
        self.assertEqual([s["mode"] for s in data["skipped"]], ["graph-kv"])  # CPU
        for line in ("eager-nocache", "eager-kv"):
            self.assertRegex(out, rf"\n{line}\s+1\s+\d+\s+[\d.]+")


if __name__ == "__main__":
    unittest.main()
