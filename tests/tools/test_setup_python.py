"""scripts/setup_python.sh (the Python half of scripts/setup.sh) on a fresh environment: pip says
nothing (no ERROR or WARNING line) and the environment it leaves is consistent (pip check).

The fresh environment is made as setup makes it (python3 -m venv --system-site-packages). So
that the test does not download torch again (~4 GB), it sees this machine's torch as a machine
that already has one would: torch and what it requires, setuptools aside, linked into a folder
the environment reads through a .pth file. The test tools are installed from PyPI (pip's cache
makes that quick where setup ran before). Needs the network, as setup does.
"""
import importlib.metadata as metadata
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from packaging.requirements import Requirement

SOURCE = Path(os.environ.get("CUBE3D_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def requirement_closure(name, skip=("setuptools",)):
    """The distributions `name` needs (itself included), markers evaluated, extras left out."""
    seen, todo = {}, [name]
    while todo:
        current = todo.pop()
        key = current.lower().replace("_", "-")
        if key in seen or key in skip:
            continue
        dist = metadata.distribution(current)
        seen[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            todo.append(requirement.name)
    return list(seen.values())


def link_distributions(dists, folder):
    """Symlinks each distribution's top-level files and folders (and its .dist-info) into
    `folder`, so that a path entry of `folder` finds them as installed."""
    folder.mkdir(parents=True)
    for dist in dists:
        base = Path(dist.locate_file(""))
        for entry in dist.files or []:
            top = entry.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            target = folder / top
            if not target.exists() and not target.is_symlink():
                target.symlink_to(base / top)


class SetupPythonTest(unittest.TestCase):
    def test_a_fresh_environment_installs_without_a_word_from_pip(self):
        import torch  # noqa: F401  (the machine's torch, which the fresh environment will see)
        base_python = Path(getattr(sys, "_base_executable", sys.executable))
        with tempfile.TemporaryDirectory(prefix="cube3d-setup-") as tmp:
            venv = Path(tmp) / "venv"
            subprocess.run([str(base_python), "-m", "venv", "--system-site-packages", str(venv)],
                           check=True, capture_output=True, text=True)
            site = Path(subprocess.run(
                [str(venv / "bin" / "python"), "-c", "import sysconfig; "
                 "print(sysconfig.get_paths()['purelib'])"],
                check=True, capture_output=True, text=True).stdout.strip())
            machine = Path(tmp) / "machine-torch"
            link_distributions(requirement_closure("torch"), machine)
            (site / "machine_torch.pth").write_text(str(machine) + "\n")

            env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
            env["CUBE3D_VENV"] = str(venv)
            env["PATH"] = str(base_python.parent) + os.pathsep + env.get("PATH", "")
            proc = subprocess.run(["bash", "-c", ". scripts/setup_python.sh"], cwd=SOURCE,
                                  env=env, capture_output=True, text=True, timeout=1200)
            log = proc.stdout + proc.stderr
            self.assertEqual(proc.returncode, 0, log)
            self.assertIn("setup: installing the Python test tools", log)
            complaints = [line for line in log.splitlines()
                          if line.lstrip().startswith(("ERROR:", "WARNING:"))]
            self.assertEqual(complaints, [], log)
            check = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "check"],
                                   capture_output=True, text=True)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
            # torch came from the machine, not from PyPI.
            where = subprocess.run([str(venv / "bin" / "python"), "-c",
                                    "import torch; print(torch.__file__)"],
                                   check=True, capture_output=True, text=True).stdout
            self.assertTrue(where.startswith(str(machine)), where)


if __name__ == "__main__":
    unittest.main()
