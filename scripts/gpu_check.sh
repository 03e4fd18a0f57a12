#!/usr/bin/env bash
# The GPU check (one H200, run through the device tool; see DEVELOPERS.md): builds only the
# engine, its tests and cube3d-bench against the machine's own PyTorch, runs the GPU tests and
# the v0.1-size bench, and writes logs and JSON to $OUT. Budget: under 8 minutes.
#
# Here, first: scripts/fetch_gpu_deps.sh (our Debian C++ dependencies into .deps/). Then:
#   run(command="bash scripts/gpu_check.sh", carry=[".deps"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build-gpu/out}
mkdir -p "$OUT"
log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$OUT/gpu_check.log"; }

DEPS=$PWD/.deps/root
if [ ! -d "$DEPS/usr" ]; then
  log "no .deps/root: run scripts/fetch_gpu_deps.sh here and carry .deps"; exit 2
fi
export PKG_CONFIG_PATH="$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$DEPS"
export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
TORCH_ROOT=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
log "torch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$OUT/gpu_check.log" 2>&1

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
start=$(date +%s)
if ! cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCUBE3D_BUILD_SERVER=OFF -DTORCH_ROOT="$TORCH_ROOT" -DCMAKE_PREFIX_PATH="$DEPS/usr" \
    -DCMAKE_CXX_FLAGS="-isystem $DEPS/usr/include" > "$OUT/configure.log" 2>&1; then
  log "configure failed"; tail -40 "$OUT/configure.log"; exit 1
fi
if ! cmake --build build-gpu -j "$(nproc)" --target cube3d_engine_tests cube3d-bench \
    > "$OUT/build.log" 2>&1; then
  log "build failed"; grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1
fi
log "built in $(( $(date +%s) - start )) s"

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
log "GPU tests"
timeout 120 build-gpu/bin/cube3d_engine_tests --gtest_filter='CudaPath*:*GoldenGeneration*' \
  > "$OUT/engine_tests.log" 2>&1
log "engine tests exit $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUT/engine_tests.log" | tr '\n' ' ')"

bench=(build-gpu/bin/cube3d-bench --model-config models/cube3d-v0.1.yaml --device cuda
       --dtype bfloat16 --commit "$commit")
log "bench: graph-kv at buckets 1, 4, 16, 512 tokens"
timeout 200 "${bench[@]}" --buckets 1,4,16 --tokens 512 --modes graph-kv --warmup 1 --repeat 3 \
  --mesh-resolution 8 --json "$OUT/bench_graph_kv.json" > "$OUT/bench_graph_kv.log" 2>&1
log "bench exit $?"; cat "$OUT/bench_graph_kv.log" | tee -a "$OUT/gpu_check.log"
log "bench: ablation at bucket 1 (eager-nocache, eager-kv), 512 tokens"
timeout 150 "${bench[@]}" --buckets 1 --tokens 512 --modes eager-nocache,eager-kv --warmup 0 \
  --repeat 1 --mesh-resolution 0 --json "$OUT/bench_ablation.json" > "$OUT/bench_ablation.log" 2>&1
log "bench exit $?"; cat "$OUT/bench_ablation.log" | tee -a "$OUT/gpu_check.log"
log "done in $(( $(date +%s) - start )) s"
