#!/usr/bin/env bash
# Prepares .deps/ for scripts/gpu_check.sh: the GPU machine has PyTorch, CUDA, CMake and ninja
# but none of our Debian C++ dependencies and no package registry. This downloads them here
# (apt-get download, no install) and unpacks them with dpkg -x into .deps/root, which the
# device run carries (name .deps in `carry`). .deps/ is ignored by git.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libyaml-cpp-dev libyaml-cpp0.7
  libgtest-dev libgmock-dev nlohmann-json3-dev libre2-dev libre2-9 libabsl20220623
  libmeshoptimizer-dev libmeshoptimizer2d zlib1g-dev
)
rm -rf .deps
mkdir -p .deps/debs .deps/root
(cd .deps/debs && apt-get download "${packages[@]}")
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
rm -rf .deps/debs
echo "fetch_gpu_deps: $(du -sh .deps | cut -f1) in .deps/root"
