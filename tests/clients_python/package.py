"""The cube3d-ray package (clients/python) as a user gets it: `pip install` of the checkout's
folder, its gRPC messages generated from proto/ by the build, into a temporary folder that the
suites put first on sys.path and on PYTHONPATH (for the processes they start, and Ray's workers,
which inherit it). --no-build-isolation and --no-deps: the build uses this environment's
grpcio-tools and the run its ray, pyarrow and grpcio (scripts/setup.sh installs them), so
nothing is downloaded."""
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("CUBE3D_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
PACKAGE_DIR = os.path.join(SOURCE, "clients", "python")

_installed = None


def install():
    """Installs the package once per process; returns the folder it is in."""
    global _installed
    if _installed is not None:
        return _installed.name
    folder = tempfile.TemporaryDirectory(prefix="cube3d-ray-pkg-")
    # A copy of the package's folder: setuptools builds in place (build/, *.egg-info), and the
    # checkout stays as it is.
    work = os.path.join(folder.name, "src")
    shutil.copytree(PACKAGE_DIR, os.path.join(work, "clients", "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(os.path.join(SOURCE, "proto"), os.path.join(work, "proto"))
    target = os.path.join(folder.name, "site")
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-build-isolation", "--target", target,
         os.path.join(work, "clients", "python")],
        capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"pip install clients/python failed:\n{out.stdout}\n{out.stderr}")
    sys.path.insert(0, target)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [target] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    _installed = folder
    return target


def cleanup():
    global _installed
    if _installed is not None:
        _installed.cleanup()
        _installed = None
