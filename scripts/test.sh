#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase's start and the whole run's time, so that the CI budget can be watched.
start=$SECONDS
phase() { echo "test.sh: $1 at $(date -u +%H:%M:%S) ($((SECONDS - start)) s in)"; }
phase setup
scripts/setup.sh
phase build
scripts/build.sh
# Torch's intra-op threads would oversubscribe the cores when ctest runs tests in parallel.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
phase ctest
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
# ASan + UBSan over the unit and e2e tests, TSan over the scheduler (CUBE3D_SKIP_SANITIZERS=1
# skips them for a quick local run; CI runs them).
if [ "${CUBE3D_SKIP_SANITIZERS:-0}" != 1 ]; then
  phase sanitizers
  scripts/sanitize.sh
fi
phase done
