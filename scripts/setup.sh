#!/usr/bin/env bash
# Installs everything cube3d-server needs to build and test, on a fresh Debian 12 machine.
# Idempotent: a second run checks and returns quickly.
#   Debian: compiler, CMake, gRPC, protobuf, spdlog, yaml-cpp, GoogleTest, prometheus-cpp,
#           meshoptimizer, tinygltf, nlohmann-json, RE2, libpng, ccache, Boost (Beast, Asio),
#           CLI11, hiredis (the Redis client's wire format), redis-server (the shared job
#           store's and cache tier's tests: e2e.redis and the unit tests start their own),
#           clang 14 + libFuzzer (the fuzz targets: scripts/fuzz.sh), mmdebstrap and buildah
#           (the CPU image's bases and its build without Docker: scripts/image_build.sh),
#           libjs-three (three.js for the browser playground), chromium (its browser test,
#           e2e.browser), libb64-0d (perf_analyzer's, e2e.inference_protocol),
#           libbenchmark-tools (Google Benchmark's compare.py, which reads cube3d-bench
#           --benchmark-json: tools.bench_cli and tools.tpot run it).
#   PyPI:   torch==2.11.0 (libtorch comes from its wheel) and the test-only Python tools
#           (kubernetes-validate==1.31.0: the Kubernetes JSON schemas for deploy.k8s, offline;
#           websocket-client and pillow: e2e.browser's DevTools client and its screenshots;
#           huggingface-hub and pyyaml: scripts/fetch_models.sh, the real weights;
#           tritonclient[http,grpc] and nvidia-cuda-runtime-cu12: the Open Inference
#           Protocol's clients and perf_analyzer, e2e.inference_protocol;
#           matplotlib==3.10.8: bench/tpot.py report, the TPOT history's picture, tools.tpot).
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
  libmeshoptimizer-dev libtbb-dev libtinygltf-dev nlohmann-json3-dev libre2-dev zlib1g-dev libpng-dev
  libicu-dev libhiredis-dev
  libboost-dev libcli11-dev libssl-dev
  libjs-three chromium
  clang-14 libclang-rt-14-dev
  mmdebstrap buildah python3-venv
  redis-server
  libb64-0d
  libbenchmark-tools
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

# Python: the project's virtual environment, torch and the test tools (scripts/setup_python.sh,
# which tests/tools/test_setup_python.py also runs on a fresh environment).
. scripts/setup_python.sh
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
