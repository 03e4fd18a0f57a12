#!/usr/bin/env bash
# The sanitizer stage of scripts/test.sh (also runnable alone, after scripts/setup.sh):
#   1. ASan + UBSan: builds the project into build-asan/ and runs the unit tests (every layer's
#      but model's and pipeline's: below) and the e2e suites under it (a finding aborts the test
#      that hit it, so ctest fails);
#   2. TSan: the scheduler tests and the server's base (the event-driven HTTP server, its
#      request reader, the timer queue), torch-free, so every line that runs is instrumented.
# TSan is not run over the server and engine tests: libtorch and its OpenMP runtime are not
# instrumented, so TSan reports their internal synchronisation as races (and the interceptors
# clash with libgomp), which would bury real findings in noise.
# ASAN_OPTIONS=detect_leaks=0: libtorch's static registries are never freed.
set -euo pipefail
cd "$(dirname "$0")/.."
# The cores to build with. Not plain nproc: it answers OMP_NUM_THREADS when that is set (test.sh
# sets it to 1 for the tests), which made every build here run one compiler at a time.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)

ASAN_DIR=${ASAN_BUILD_DIR:-build-asan}
TSAN_DIR=${TSAN_BUILD_DIR:-build-tsan}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
. scripts/python_env.sh

TORCH_ROOT=$("$PYTHON" -c "import os, torch; print(os.path.dirname(torch.__file__))")
configure() {  # build folder, then extra CMake arguments
  local dir=$1 generator=()
  shift
  if command -v ninja >/dev/null && [ ! -f "$dir/Makefile" ]; then generator=(-G Ninja); fi
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DTORCH_ROOT="$TORCH_ROOT" -DPython3_EXECUTABLE="$(command -v "$PYTHON")" \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON "$@" >/dev/null
}
export CCACHE_DIR=${CCACHE_DIR:-$PWD/.cache/ccache}

# Host code only (no CUDA: nvcc takes no sanitizer and the kernels cannot run here), and only
# what the selected tests run: the test binaries, the server, the clients and cube3d-generate.
echo "sanitize: $(date -u +%H:%M:%S) ASan + UBSan build in $ASAN_DIR"
# -O1: ASan's recommended level, and a quicker build than the main one's -O3.
# CPU-only (CUBE3D_TORCH_CUDA=OFF, the CPU image's configuration): these tests run on the CPU
# anyway, and this proves that configuration builds, links no CUDA backend and passes.
# UBSan without its vptr, alignment and null checks: they instrument every member access, and
# this build is the CI budget's largest item (http_sender.cpp: 60 CPU-s with them, 29 without;
# the whole build 2160 CPU-s, then 1740). ASan still reports a null dereference (as a SEGV with
# its stack), x86-64 takes misaligned loads, and the fuzzers (clang, full UBSan) keep all three
# over the hand-written parsers.
configure "$ASAN_DIR" -DCUBE3D_SANITIZE=address,undefined \
  -DCUBE3D_SANITIZE_SKIP=vptr,alignment,null -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DCUBE3D_TORCH_CUDA=OFF
# Not the model and pipeline tests: they are libtorch's math (not instrumented) and glue, golden
# checks that the main run makes; the readers of the model layer that parse bytes by hand
# (safetensors, the CLIP tokenizer) are fuzzed under ASan (fuzz.bounded), and the e2e suites
# below run the model and pipeline code under ASan in the server for every request.
cmake --build "$ASAN_DIR" -j "$CORES" --target cube3d_core_tests cube3d_tensor_io_tests cube3d_cli_tests \
  cube3d_mesh_tests cube3d_engine_tests \
  cube3d_scheduler_tests cube3d_server_base_tests cube3d_server_tests cube3d-server \
  cube3d_api_tests cube3d_clients_tests cube3d-client cube3d-loadgen \
  cube3d-generate >/dev/null
python3 scripts/check_layering.py --build-dir "$ASAN_DIR"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Each unit-test binary runs once, in one process (through ctest every test is a process of its
# own, and loading libtorch under ASan then takes most of the time), from where ctest runs them;
# then the e2e suites through ctest. Not the command-line tool checks (tools.*, mesh.files,
# e2e.cli: flag parsing and file formats, covered by the main run) nor the fuzzers (sanitized
# builds of their own).
for layer in core tensor_io cli mesh engine scheduler server_base server api clients; do
  echo "sanitize: $(date -u +%H:%M:%S) cube3d_${layer}_tests"
  (cd "$ASAN_DIR/tests" && "../bin/cube3d_${layer}_tests" --gtest_brief=1)
done
ctest --test-dir "$ASAN_DIR" --output-on-failure -R '^e2e\.(server|loadgen|http|security|observability|jobs)$'

echo "sanitize: $(date -u +%H:%M:%S) TSan build of the scheduler and server-base tests in $TSAN_DIR"
configure "$TSAN_DIR" -DCUBE3D_SANITIZE=thread
cmake --build "$TSAN_DIR" --target cube3d_scheduler_tests cube3d_server_base_tests -j "$CORES" \
  >/dev/null
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  "$TSAN_DIR/bin/cube3d_scheduler_tests" --gtest_repeat=3 --gtest_brief=1
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  "$TSAN_DIR/bin/cube3d_server_base_tests" --gtest_brief=1
echo "sanitize: $(date -u +%H:%M:%S) done"
