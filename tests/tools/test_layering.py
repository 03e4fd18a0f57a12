"""scripts/check_layering.py: the real tree and build pass; a planted violation of each kind fails."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SOURCE = Path(os.environ.get("CUBE3D_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("CUBE3D_BUILD_DIR", SOURCE / "build"))
SCRIPT = SOURCE / "scripts" / "check_layering.py"


def check(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True)


class LayeringTest(unittest.TestCase):
    def test_repository_and_its_build_hold(self):
        proc = check("--root", SOURCE, "--build-dir", BUILD)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("0 violation(s)", proc.stderr)

    def test_torch_free_client_really_links_no_torch(self):
        client = BUILD / "bin" / "cube3d-client"
        if not client.exists():
            self.skipTest("built without the server")
        needed = subprocess.run(["readelf", "-d", client], capture_output=True, text=True,
                                check=True).stdout
        self.assertIn("libgrpc++", needed)  # the check reads real dependencies
        self.assertNotIn("libtorch", needed)
        self.assertNotIn("libc10", needed)

    def test_planted_include_violations_fail(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "src" / "mesh").mkdir(parents=True)
            (root / "src" / "mesh" / "bad.cpp").write_text(
                '#include <ATen/ATen.h>\n#include "cube3d/engine/engine.h"\n'
                '#include "cube3d/core/safetensors.h"\n#include "cube3d/core/error.h"\n')
            (root / "src" / "scheduler").mkdir(parents=True)
            (root / "src" / "scheduler" / "bad.cpp").write_text(
                '#include <grpcpp/grpcpp.h>\n#include "cube3d/v1/mesh_service.pb.h"\n')
            (root / "src" / "model").mkdir(parents=True)
            (root / "src" / "model" / "bad.cpp").write_text(
                '#include <ATen/ATen.h>\n#include "cube3d/mesh/mesh.h"\n'
                '#include <cuda_runtime.h>\n')
            proc = check("--root", root)
            self.assertEqual(proc.returncode, 1, proc.stdout)
            lines = proc.stdout.splitlines()
            expected = [
                "src/mesh/bad.cpp:1: mesh is torch-free but includes <ATen/ATen.h>",
                "src/mesh/bad.cpp:2: mesh may not include cube3d/engine/engine.h (layer engine)",
                "src/mesh/bad.cpp:3: mesh is torch-free but includes cube3d/core/safetensors.h",
                "src/scheduler/bad.cpp:1: scheduler includes <grpcpp/grpcpp.h>",
                "src/scheduler/bad.cpp:2: scheduler includes cube3d/v1/mesh_service.pb.h",
                "src/model/bad.cpp:2: model may not include cube3d/mesh/mesh.h (layer mesh)",
                "src/model/bad.cpp:3: model includes <cuda_runtime.h>",
            ]
            for e in expected:
                self.assertTrue(any(line.startswith(e) for line in lines), f"{e}\n{proc.stdout}")
            self.assertEqual(len(lines), len(expected), proc.stdout)

    def test_planted_link_violations_fail(self):
        generate = BUILD / "bin" / "cube3d-generate"
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "src"
            root.mkdir()
            bin_dir = Path(tmp) / "build" / "bin"
            bin_dir.mkdir(parents=True)
            # A torch binary where a torch-free one belongs...
            shutil.copy(generate, bin_dir / "cube3d-client")
            # ...and a shipped binary that carries the (fake) source tree's path.
            (bin_dir / "cube3d-tokenize").write_bytes(
                b"\0" + str(root.resolve()).encode() + b"/.cache/clip/vocab.txt.gz\0")
            proc = check("--root", root, "--build-dir", bin_dir.parent)
            self.assertEqual(proc.returncode, 1, proc.stdout)
            self.assertIn("cube3d-client: needs no tensors but links libtorch", proc.stdout)
            self.assertIn("cube3d-tokenize: carries the source path", proc.stdout)
            # A header path recorded by the compiler (libtorch's __FILE__) is not a default.
            (bin_dir / "cube3d-tokenize").write_bytes(
                str(root.resolve()).encode() + b"/build/torch_include/ATen/Context.h\0")
            (bin_dir / "cube3d-client").unlink()
            proc = check("--root", root, "--build-dir", bin_dir.parent)
            self.assertEqual(proc.returncode, 0, proc.stdout)


if __name__ == "__main__":
    unittest.main()
