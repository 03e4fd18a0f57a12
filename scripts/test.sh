#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase's start and the whole run's time, so that the CI budget can be watched.
# With each phase's start, the CPU time the machine spent in the previous one (all processes,
# from /proc/stat), so that idle cores can be told from a saturated machine.
start=$SECONDS
# Before OMP_NUM_THREADS is set below: nproc answers that variable when it is set.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $6 + $7 + $8 }' /proc/stat; }
last_phase="" last_at=$SECONDS last_ticks=$(cpu_ticks)
phase() {
  local ticks at=$SECONDS
  ticks=$(cpu_ticks)
  if [ -n "$last_phase" ] && ((at > last_at)); then
    echo "test.sh: $last_phase took $((at - last_at)) s, $(((ticks - last_ticks) / 100)) CPU s" \
      "($(((ticks - last_ticks) / (at - last_at))) % of one core on average, $CORES cores)"
  fi
  echo "test.sh: $1 at $(date -u +%H:%M:%S) ($((at - start)) s in)"
  last_phase=$1 last_at=$at last_ticks=$ticks
}
phase setup
scripts/setup.sh
phase build
scripts/build.sh
# Torch's intra-op threads would oversubscribe the cores when ctest runs tests in parallel.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
phase ctest
# One more test at a time than there are cores: image.build (started first, being the longest)
# holds its slot for its whole run, much of it waiting on downloads, mmdebstrap and the server.
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$((CORES + 1))" "$@"
# ASan + UBSan over the unit and e2e tests, TSan over the scheduler (CUBE3D_SKIP_SANITIZERS=1
# skips them for a quick local run; CI runs them).
if [ "${CUBE3D_SKIP_SANITIZERS:-0}" != 1 ]; then
  phase sanitizers
  scripts/sanitize.sh
fi
phase done
