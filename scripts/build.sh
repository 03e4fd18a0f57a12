#!/usr/bin/env bash
# Configures and builds cube3d-server into build/ (binaries in build/bin/).
# Extra arguments go to the CMake configure step, e.g. scripts/build.sh -DCUBE3D_BUILD_TESTS=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
# The cores to build with. Not plain nproc: it answers OMP_NUM_THREADS when that is set (test.sh
# sets it to 1 for the tests), which made every build here run one compiler at a time.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)

. scripts/python_env.sh
BUILD_DIR=${BUILD_DIR:-build}
TORCH_ROOT=$("$PYTHON" -c "import os, torch; print(os.path.dirname(torch.__file__))")
generator=()
if command -v ninja >/dev/null && [ ! -f "$BUILD_DIR/Makefile" ]; then generator=(-G Ninja); fi
export CCACHE_DIR=${CCACHE_DIR:-$PWD/.cache/ccache}

cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTORCH_ROOT="$TORCH_ROOT" -DPython3_EXECUTABLE="$(command -v "$PYTHON")" "$@"
cmake --build "$BUILD_DIR" -j "$CORES"
