#!/usr/bin/env bash
# The GPU check: the CUDA tests and the v0.1-size bench on one H200, in one short device run.
# Nothing is built on the GPU machine (it has torch, CUDA and cmake, but none of our Debian C++
# libraries, and too little device time): everything is built HERE and packed into .gpu-pack/.
#
# 1. Here (Debian, CUDA toolkit, torch from scripts/setup.sh):
#      BUILD_ONLY=1 scripts/gpu_check.sh
#    configures and builds build-gpu/ (Release, -DCUBE3D_BUILD_SERVER=OFF; it must print
#    "CUDA graph runner: on"), builds only cube3d_engine_tests, cube3d_model_tests, cube3d-bench
#    and cube3d-generate,
#    and packs into .gpu-pack/ (git-ignored, under 64 MiB with the tracked tree):
#      bin/      the three binaries, stripped
#      lib/      the shared libraries they need that are not torch's, CUDA's or the C/C++ runtime
#                (found with ldd; on Debian 12: spdlog, fmt, yaml-cpp, re2, meshoptimizer, zlib)
#      src/      the data the tests read, at the paths they were compiled with (tests/golden/,
#                models/*.yaml, CLIP's vocabulary when present)
#      manifest.txt  commit (with -dirty), compiled-in source dir, glibc needs, libraries, sizes
#    PACK_FROM=DIR packs DIR's binaries instead of building (DIR must be a Release build with the
#    graph runner; ctest tools.gpu_pack packs the CI build this way). PACK_DIR=DIR writes the pack
#    elsewhere. Run it under `nice -n 10` on a shared machine.
#
# 2. On the GPU, through the device tool:
#      run(command="bash scripts/gpu_check.sh", carry=[".gpu-pack"], timeout_s=540)
#    One deadline, DEADLINE_S (default 480 s from the start): each step gets timeout
#    min(its cap, time left) and is skipped, with a note, when less than its minimum is left.
#      step          cap   min   what
#      env            60     -   nvidia-smi, torch / CUDA / cuDNN versions, the manifest, ldd
#      build_info     30     5   cube3d-bench --build-info must say "cuda_graph_runner": true
#      engine_tests   90    20   cube3d_engine_tests --gtest_filter='CudaPath*:*GraphRunner*:*Golden*'
#      bench_graph   120    60   graph-kv, buckets 1,4,16, 512 tokens, warmup 1, repeat 3
#      bench_nocache  60    25   eager-nocache, bucket 1, 128 tokens, warmup 0, repeat 1
#      bench_kv      120    45   eager-kv,graph-kv, bucket 1, 512 tokens, warmup 1, repeat 1,
#                                then one object's shape at resolution 8, dense and hierarchical
#      bench_unfused  60    20   graph-kv without the fused kernels, buckets 1 and 16
#      kernel_tests  150    40   the Triton decode kernels' tests (tests/kernels) compiled on the
#                                GPU (CUBE3D_KERNEL_TEST_DEVICE=cuda), not interpreted
#      bench_triton  120    50   graph-kv with --decode-kernels triton, the buckets and tokens of
#                                bench_graph (its torch rows)
#      bench_v05_*    60    25   v0.5 (1,024 tokens) graph-kv at bucket 1, torch then triton
#      history        30     5   the four bench JSONs as one run of the device's TPOT history
#                                (bench/tpot.py history add --compare-last: the table against
#                                the history's last run; bench/results/history/<gpu>.jsonl,
#                                GPU_CHECK_HISTORY=DIR elsewhere; not written with SMOKE)
#    The benches run v0.1-size random weights in bf16 with --strict and --commit from the
#    manifest. Files in $OUT (8): gpu_check.log (everything, timestamped; env.txt's
#    environment appended at the end), engine_tests.log (the kernel tests' too), bench.log (every
#    bench's output), bench_graph.json, bench_nocache.json, bench_ablation.json,
#    bench_unfused.json (graph-kv at buckets 1 and 16 without the fused kernels: what they save),
#    bench_triton.json (the Triton path's runs, {"runs": {name: cube3d-bench JSON}}).
#    The summary (TPOT per mode and bucket, test results, step times) is printed last.
#    Back here, the run joins the committed history with the command the history step prints:
#      bench/tpot.py history add F/bench_graph.json,F/bench_nocache.json,... (F: files_at).
#    Exit status: 0 all passed; 1 a step failed or was skipped; 2 stopped before the tests.
#    Expected: about 3 minutes on the device plus the machine's start.
#
# Test data: the device run exports CUBE3D_SOURCE_DIR=.gpu-pack/src and CUBE3D_TEST_DATA_DIR=
# .gpu-pack/src/tests, which tests/golden_model.h reads before the paths compiled in at build
# time (this checkout's, e.g. /work/main); where such a compiled-in path does not exist on the
# device, it is also linked to .gpu-pack/src for code that still uses the macros directly.
# GPU_CHECK_SMOKE=1 runs the device part on the CPU with the demo model (ctest tools.gpu_pack);
# GPU_CHECK_PYTHON names the Python with torch to try first (the test passes its own).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
# The machine's cores, not OMP_NUM_THREADS (which nproc answers when it is set).
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
PACK=${PACK_DIR:-.gpu-pack}
case $PACK in /*) ;; *) PACK=$ROOT/$PACK ;; esac

BINARIES=(cube3d_engine_tests cube3d_model_tests cube3d-bench cube3d-generate
  cube3d_decode_plan_tool)
# cube3d_model_tests: the weights loaded onto the GPU (page release, random weights drawn there).
MODEL_TEST_FILTER='WeightsCuda*:WeightsTest.Cuda*'
TEST_FILTER='CudaPath*:*GraphRunner*:*Golden*'
MAX_TRANSFER=$((64 * 1024 * 1024))  # the device tool's limit: tracked tree + carried paths
# Libraries every Linux machine with a C++ toolchain has (glibc and the GCC runtime).
SYSTEM_LIBS='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'

die() {
  echo "gpu_check: ERROR: $*" >&2
  exit 1
}

# ============================== BUILD_ONLY: build and pack, here ==============================

# The torch site-packages' nvidia/*/lib folders (CUDA runtime, cuBLAS, cuDNN... of the wheel).
nvidia_lib_dirs() {
  local site=$1 d dirs=""
  for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && dirs+="${dirs:+:}$d"; done
  echo "$dirs"
}

# ldd_classify FILE...: one line per library the files need, "name class path", where class is
# system | torch | cuda | pack | other | missing | cuda-missing. Needs TORCH_ROOT and SITE (its
# site-packages) and, optionally, PACK_LIB; LD_LIBRARY_PATH as the caller wants it.
ldd_classify() {
  local f
  for f in "$@"; do ldd "$f" 2>&1; done | awk '
    /=>/ { name = $1; path = ($3 == "not" ? "" : $3); print name, path; next }
    /not found/ { print $0 > "/dev/stderr"; print "unmet-symbol-version"; next }
    /^[[:space:]]+\// { n = split($1, p, "/"); print p[n], $1 }' | sort -u |
    while read -r name path; do
      local cls
      [ -n "$path" ] && path=$(realpath -m "$path")
      if [ -z "$path" ]; then cls=missing
      elif [[ $name =~ $SYSTEM_LIBS ]]; then cls=system
      elif [ -n "${PACK_LIB:-}" ] && [[ $path == "$PACK_LIB"/* ]]; then cls=pack
      elif [[ $path == "$TORCH_ROOT"/lib/* ]]; then cls=torch
      elif [[ $path == "$SITE"/nvidia/* ]]; then cls=cuda
      elif [[ $path == /usr/local/cuda* ]]; then
        # The toolkit's copy here; the device's torch wheel must carry the same soname.
        if compgen -G "$SITE/nvidia/*/lib/$name" > /dev/null; then cls=cuda; else cls=cuda-missing; fi
      else cls=other
      fi
      echo "$name $cls $path"
    done
}

max_symbol_version() {  # max_symbol_version PREFIX FILE...: highest PREFIX_x.y the files need
  local prefix=$1
  shift
  objdump -T "$@" 2>/dev/null | grep -o "${prefix}_[0-9][0-9.]*" | sort -uV | tail -1 |
    sed "s/^${prefix}_//"
}

pack_main() {
  local python=${PYTHON:-python3} build_dir t0
  t0=$(date +%s)
  for tool in ldd strip objdump realpath; do command -v "$tool" > /dev/null || die "needs $tool"; done
  if [ -n "${PACK_FROM:-}" ]; then
    build_dir=$(cd "$PACK_FROM" 2> /dev/null && pwd) || die "PACK_FROM=$PACK_FROM: no such folder"
    [ -f "$build_dir/CMakeCache.txt" ] || die "PACK_FROM=$build_dir is not a CMake build folder"
    echo "gpu_check: packing the binaries of $build_dir (no build)"
  else
    build_dir=$ROOT/build-gpu
    local torch_root generator=()
    torch_root=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))') ||
      die "torch is not installed for $python (scripts/setup.sh)"
    command -v ninja > /dev/null && [ ! -f "$build_dir/Makefile" ] && generator=(-G Ninja)
    export CCACHE_DIR=${CCACHE_DIR:-$ROOT/.cache/ccache}
    echo "gpu_check: configuring $build_dir (Release, no server) against $torch_root"
    mkdir -p "$build_dir"
    if ! cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCUBE3D_BUILD_SERVER=OFF -DTORCH_ROOT="$torch_root" \
      -DPython3_EXECUTABLE="$(command -v "$python")" > "$build_dir/gpu_configure.log" 2>&1; then
      tail -30 "$build_dir/gpu_configure.log"
      die "configure failed (log: $build_dir/gpu_configure.log)"
    fi
    grep -E "CUDA graph runner|libtorch:" "$build_dir/gpu_configure.log"
    if ! grep -q "CUDA graph runner: on" "$build_dir/gpu_configure.log"; then
      die "the CUDA graph runner is OFF in this build (no CUDA toolkit found, or a CPU-only torch):" \
        "the GPU check would measure nothing. Install the CUDA toolkit (nvcc, cudart) and retry."
    fi
    echo "gpu_check: building ${BINARIES[*]}"
    if ! cmake --build "$build_dir" -j "$CORES" --target "${BINARIES[@]}" \
      > "$build_dir/gpu_build.log" 2>&1; then
      grep -E "error|Error" -A3 "$build_dir/gpu_build.log" | head -60
      die "build failed (log: $build_dir/gpu_build.log)"
    fi
    echo "gpu_check: built in $(($(date +%s) - t0)) s"
  fi

  # The build's own facts, from its cache: the same for a fresh build-gpu and for PACK_FROM.
  cache() { sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt" | head -1; }
  local build_type source_dir
  TORCH_ROOT=$(cache TORCH_ROOT)
  build_type=$(cache CMAKE_BUILD_TYPE)
  source_dir=$(cache CMAKE_HOME_DIRECTORY)
  [ "$build_type" = Release ] || die "$build_dir is a '$build_type' build; the GPU check needs Release"
  [ -f "$TORCH_ROOT/lib/libtorch_cuda.so" ] ||
    die "$build_dir was built against $TORCH_ROOT, which has no libtorch_cuda.so (a CPU-only torch)"
  # The graph runner is compiled in when the engine's sources get CUBE3D_WITH_CUDA=1.
  if ! grep -q 'CUBE3D_WITH_CUDA=1' "$build_dir/compile_commands.json" 2> /dev/null; then
    die "the CUDA graph runner is OFF in $build_dir (its engine was compiled without" \
      "CUBE3D_WITH_CUDA=1: no CUDA toolkit at configure time): the GPU check needs it on"
  fi
  [ "$source_dir" = "$ROOT" ] ||
    echo "gpu_check: warning: $build_dir was configured from $source_dir, not $ROOT; packing data from $ROOT"
  local b stale=no
  for b in "${BINARIES[@]}"; do
    [ -x "$build_dir/bin/$b" ] || die "$build_dir/bin/$b is missing (build it first)"
  done
  local oldest newer
  oldest=$(ls -tr "${BINARIES[@]/#/$build_dir/bin/}" | head -1)
  newer=$(find src include bench kernels tests/engine tests/*.h cmake CMakeLists.txt -newer "$oldest" \
    -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cmake' \
    -o -name CMakeLists.txt \) 2> /dev/null | head -3)
  if [ -n "$newer" ]; then
    stale=yes
    echo "gpu_check: warning: sources changed after $oldest was built (packing it anyway):" $newer
  fi
  SITE=$(dirname "$TORCH_ROOT")
  NV_DIRS=$(nvidia_lib_dirs "$SITE")

  local tmp=$PACK.tmp
  rm -rf "$tmp"
  trap 'rm -rf "$PACK.tmp"' EXIT  # a failed pack leaves nothing half-made
  mkdir -p "$tmp/bin" "$tmp/lib" "$tmp/src/tests" "$tmp/src/models"
  for b in "${BINARIES[@]}"; do
    cp "$build_dir/bin/$b" "$tmp/bin/$b"
    strip --strip-unneeded "$tmp/bin/$b"
  done

  # Libraries: resolve as the device will (torch's lib and its nvidia libs), copy the "other"s.
  local lines name cls path
  lines=$(LD_LIBRARY_PATH="$TORCH_ROOT/lib:$NV_DIRS" PACK_LIB="" ldd_classify "$tmp"/bin/*)
  if grep -qE ' (missing|cuda-missing)( |$)' <<< "$lines"; then
    grep -E ' (missing|cuda-missing)( |$)' <<< "$lines"
    die "libraries above are not found here, or are CUDA libraries the device's torch lacks"
  fi
  while read -r name cls path; do
    [ "$cls" = other ] || continue
    cp -L "$path" "$tmp/lib/$name"
    chmod u+w "$tmp/lib/$name"
    strip --strip-unneeded "$tmp/lib/$name"
  done <<< "$lines"

  # Check the pack as the device will load it: the pack's lib first, then torch's.
  local check
  check=$(LD_LIBRARY_PATH="$tmp/lib:$TORCH_ROOT/lib:$NV_DIRS" PACK_LIB="$tmp/lib" \
    ldd_classify "$tmp"/bin/*)
  if grep -qvE ' (system|torch|cuda|pack) ' <<< "$check"; then
    grep -vE ' (system|torch|cuda|pack) ' <<< "$check"
    die "the packed binaries still need the libraries above from outside the pack"
  fi

  # Data the tests read through the compiled-in CUBE3D_SOURCE_DIR / CUBE3D_TEST_DATA_DIR.
  cp -r tests/golden "$tmp/src/tests/golden"
  cp models/*.yaml "$tmp/src/models/"
  if [ -f .cache/clip/bpe_simple_vocab_16e6.txt.gz ]; then
    mkdir -p "$tmp/src/.cache/clip"
    cp .cache/clip/bpe_simple_vocab_16e6.txt.gz "$tmp/src/.cache/clip/"
  fi

  # Smoke: the stripped binaries start from the pack alone, and what --build-info says.
  local run_env=(env LD_LIBRARY_PATH="$tmp/lib:$TORCH_ROOT/lib:$NV_DIRS")
  local selected build_info
  selected=$("${run_env[@]}" "$tmp/bin/cube3d_engine_tests" --gtest_list_tests \
    --gtest_filter="$TEST_FILTER" 2>&1 | grep -c '^  ') ||
    die "the packed cube3d_engine_tests does not start or selects no test with $TEST_FILTER"
  if build_info=$("${run_env[@]}" "$tmp/bin/cube3d-bench" --build-info 2> /dev/null | tail -1) &&
    [[ $build_info == "{"* ]]; then
    [[ $build_info =~ \"cuda_graph_runner\":\ *true ]] ||
      die "cube3d-bench --build-info says the graph runner is off: $build_info"
  else
    build_info=unsupported
    echo "gpu_check: WARNING: cube3d-bench has no --build-info yet: the device run will stop at" \
      "its build_info step until it does"
  fi
  "${run_env[@]}" "$tmp/bin/cube3d-generate" --help > /dev/null 2>&1 ||
    die "the packed cube3d-generate does not start"

  # Size: what the device tool sends is the tracked and untracked-not-ignored files plus carry.
  local pack_bytes tree_bytes total commit full dirty=""
  pack_bytes=$(du -sb "$tmp" | cut -f1)
  tree_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2> /dev/null |
    awk '{s += $1} END {print s + 0}')
  [ -d shared ] && tree_bytes=$((tree_bytes + $(du -sb shared | cut -f1)))
  total=$((pack_bytes + tree_bytes))
  ((total < MAX_TRANSFER)) || die "pack ($pack_bytes B) + tree ($tree_bytes B) = $total B is over" \
    "the device tool's 64 MiB"

  commit=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)
  full=$(git rev-parse HEAD 2> /dev/null || echo unknown)
  [ -n "$(git status --porcelain 2> /dev/null)" ] && dirty=-dirty
  {
    echo "# cube3d GPU pack: written by BUILD_ONLY=1 scripts/gpu_check.sh, read by its device run"
    echo "commit=$commit$dirty"
    echo "commit_full=$full"
    [ -n "$dirty" ] && echo "diff_sha256=$(git diff HEAD 2> /dev/null | sha256sum | cut -c1-16)"
    echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "built_on=$(. /etc/os-release 2> /dev/null && echo "$PRETTY_NAME"), $(getconf GNU_LIBC_VERSION)"
    echo "build_dir=$build_dir"
    echo "build_stale=$stale"
    echo "source_dir=$source_dir"
    echo "torch_build=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$TORCH_ROOT/version.py")"
    echo "torch_root_build=$TORCH_ROOT"
    echo "cuda_toolkit=$(sed -n 's/.*CUDA graph runner: on (CUDA \(.*\)).*/\1/p' \
      "$build_dir/gpu_configure.log" 2> /dev/null | head -1)"
    echo "graph_runner=on"
    echo "build_info=$build_info"
    echo "engine_test_filter=$TEST_FILTER"
    echo "engine_tests_selected=$selected"
    echo "glibc_required=$(max_symbol_version GLIBC "$tmp"/bin/* "$tmp"/lib/*)"
    echo "glibcxx_required=$(max_symbol_version GLIBCXX "$tmp"/bin/* "$tmp"/lib/*)"
    echo "pack_bytes=$pack_bytes"
    echo "tree_bytes=$tree_bytes"
    while read -r name cls path; do echo "lib=$name $cls ${path/#$tmp\//$PACK/}"; done <<< "$check"
    (cd "$tmp" && find bin lib src -type f | sort | while read -r f; do
      echo "file=$f $(stat -c %s "$f") $(sha256sum "$f" | cut -c1-16)"
    done)
  } > "$tmp/manifest.txt.part"
  rm -rf "$PACK"
  mv "$tmp/manifest.txt.part" "$tmp/manifest.txt"
  mv "$tmp" "$PACK"
  echo "gpu_check: packed $PACK: $(du -sh "$PACK" | cut -f1) ($pack_bytes B; with the tree" \
    "$((total / 1024 / 1024)) MiB of 64), commit $commit$dirty, $selected engine tests selected," \
    "build-info: $build_info"
  sed -n 's/^lib=\([^ ]*\) pack .*/  packed \1/p' "$PACK/manifest.txt"
}

if [ "${BUILD_ONLY:-0}" = 1 ]; then
  pack_main
  exit $?
fi

# ================================ the device run (on the GPU) ================================

SECONDS=0
DEADLINE_S=${DEADLINE_S:-480}
RESERVE_S=10  # kept back for the summary
SMOKE=${GPU_CHECK_SMOKE:-0}
OUT=${OUT:-$ROOT/build-gpu/out}
mkdir -p "$OUT" || exit 2
LOG=$OUT/gpu_check.log
ENVTXT=$OUT/env.txt
: > "$LOG"
: > "$ENVTXT"
rm -f "$OUT"/engine_tests.log "$OUT"/bench_*.json "$OUT"/bench_*.log
STEPS=$(mktemp "${TMPDIR:-/tmp}/gpu_check_steps.XXXXXX")
LINKED=""
trap 'rm -f "$STEPS"; [ -n "$LINKED" ] && rm -f "$LINKED"' EXIT
export PYTHONUNBUFFERED=1
STDBUF=()
command -v stdbuf > /dev/null && STDBUF=(stdbuf -oL -eL)
PY=python3

log() { printf '[%(%H:%M:%S)T +%3ds] %s\n' -1 "$SECONDS" "$*" | tee -a "$LOG"; }
stamp() {
  local l
  while IFS= read -r l || [ -n "$l" ]; do printf '[%(%H:%M:%S)T +%3ds]   | %s\n' -1 "$SECONDS" "$l"; done
}
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$STEPS"; }

# run_step NAME CAP MIN LOGFILE CMD...: CMD under timeout min(CAP, time left before the deadline),
# its output appended to LOGFILE and echoed with timestamps; skipped when under MIN s are left.
# Returns CMD's status (124 or 137: timed out; 99: skipped).
run_step() {
  local name=$1 cap=$2 min=$3 file=$4
  shift 4
  local left=$((DEADLINE_S - SECONDS - RESERVE_S))
  if ((left < min)); then
    log "SKIP $name: ${left} s left before the deadline, it needs at least ${min} s"
    record "$name" skipped 0 "${left} s left, needs ${min} s"
    return 99
  fi
  local t=$((cap < left ? cap : left)) t0=$SECONDS rc
  log "$name (timeout ${t} s): $*"
  echo "### $name: $*" >> "$file"
  timeout -k 5 "$t" "${STDBUF[@]}" "$@" < /dev/null 2>&1 | tee -a "$file" | stamp | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) record "$name" ok $((SECONDS - t0)) "" ;;
    124 | 137) record "$name" TIMEOUT $((SECONDS - t0)) "killed at ${t} s" ;;
    *) record "$name" FAILED $((SECONDS - t0)) "exit $rc" ;;
  esac
  log "$name: exit $rc after $((SECONDS - t0)) s$( ((rc == 124 || rc == 137)) && echo " (TIMED OUT)")"
  return "$rc"
}

# The summary, printed last (the device tool returns only the end of the output), then exit.
finish() {
  local code=$1
  # The environment joins the log: $OUT comes back as at most 8 files.
  { echo "### env.txt"; cat "$ENVTXT"; } >> "$LOG" 2> /dev/null && rm -f "$ENVTXT"
  log "summary (exit $code after $SECONDS s)"
  timeout 20 "$PY" - "$STEPS" "$OUT" "$code" "$SECONDS" "$DEADLINE_S" "${COMMIT:-unknown}" \
    "${GPU_LINE:-no nvidia-smi}" "${TORCH_LINE:-torch unknown}" << 'PY' 2>&1 | tee -a "$LOG"
import json, os, re, sys
steps_file, out, code, secs, deadline, commit, gpu, torch_line = sys.argv[1:9]
print("=" * 30 + " gpu_check summary " + "=" * 30)
print(f"commit {commit} | {gpu} | {torch_line}")
print(f"{'step':<14}{'status':<9}{'secs':>5}  detail")
for line in open(steps_file).read().splitlines():
    name, status, t, detail = (line.split("\t") + ["", "", "", ""])[:4]
    print(f"{name:<14}{status:<9}{t:>5}  {detail}")
log = os.path.join(out, "engine_tests.log")
if os.path.exists(log):
    text = open(log, errors="replace").read()
    count = lambda tag: sum(int(n) for n in re.findall(r"^\[\s+%s\s+\] (\d+) tests?" % tag, text, re.M))
    failed = sorted(set(re.findall(r"^\[\s+FAILED\s+\] (\S+\.\S+)", text, re.M)))
    passed, skipped, nfail = count("PASSED"), count("SKIPPED"), count("FAILED")
    ok = passed > 0 and nfail == 0 and not failed and "[  PASSED  ]" in text
    print(f"engine tests: {'PASSED' if ok else 'FAILED'} ({passed} passed, {nfail} failed, "
          f"{skipped} skipped)" + (": " + ", ".join(failed) if failed else ""))
    for name in sorted(set(re.findall(r"^\[\s+SKIPPED\s+\] (\S+\.\S+)", text, re.M))):
        print(f"  skipped: {name}")
    running = re.findall(r"^\[ RUN\s+\] (\S+)", text, re.M)
    if running and not re.search(r"^\[=+\] \d+ tests? from .* ran", text, re.M):
        print(f"  the test binary died or was killed during {running[-1]}")
else:
    print("engine tests: NOT RUN")
rows, skipped_modes = [], []
for f in ("bench_graph.json", "bench_nocache.json", "bench_ablation.json", "bench_unfused.json"):
    path = os.path.join(out, f)
    if not os.path.exists(path):
        print(f"{f}: missing")
        continue
    try:
        data = json.load(open(path))
    except ValueError as e:
        print(f"{f}: unreadable ({e})")
        continue
    for r in data.get("results", []):
        rows.append((f, data.get("device_name", "?"), r))
    for s in data.get("skipped", []):
        skipped_modes.append(f"{f}: {s.get('mode')}: {s.get('reason')}")
path = os.path.join(out, "bench_triton.json")
if os.path.exists(path):
    try:
        for name, data in json.load(open(path)).get("runs", {}).items():
            for r in data.get("results", []):
                rows.append((f"bench_triton.json {name}", data.get("device_name", "?"), r))
    except ValueError as e:
        print(f"bench_triton.json: unreadable ({e})")
if rows:
    num = lambda v, fmt: format(v, fmt) if isinstance(v, (int, float)) else "-"
    print(f"{'mode':<14}{'bucket':>6}{'tokens':>7}{'TPOT med':>10}{'p90':>8}{'TTFT':>8}"
          f"{'tok/s':>9}{'GB/s':>8}{'peak GiB':>9}  json")
    for f, dev, r in rows:
        peak = r.get("peak_memory_bytes")
        print(f"{r.get('mode', '?'):<14}{r.get('bucket', '?'):>6}{r.get('tokens', '?'):>7}"
              f"{num(r.get('tpot_ms_median'), '.3f'):>10}{num(r.get('tpot_ms_p90'), '.3f'):>8}"
              f"{num(r.get('ttft_ms'), '.1f'):>8}{num(r.get('tokens_per_s'), '.0f'):>9}"
              f"{num(r.get('achieved_gb_per_s'), '.0f'):>8}"
              f"{num(peak / 2**30 if isinstance(peak, (int, float)) else None, '.2f'):>9}  {f}")
    print("(TPOT and TTFT in ms; graph-kv TPOT is each run's mean step)")
else:
    print("bench: no results")
for s in skipped_modes:
    print(f"skipped mode: {s}")
# The Nsight Compute profile of one decode step (bucket 1), if it ran: kernels by kind.
import csv, collections
bench_log = os.path.join(out, "bench.log")
if os.path.exists(bench_log):
    text = open(bench_log, errors="replace").read()
    if "### profile csv follows" in text:
        rows = [r for r in csv.reader(l for l in text.split("### profile csv follows", 1)[1].splitlines()
                                      if l.startswith('"'))]
        header = next((r for r in rows if "Kernel Name" in r), None)
        kernels = []
        if header:
            name_i, metric_i = header.index("Kernel Name"), header.index("Metric Name")
            value_i = header.index("Metric Value")
            for r in rows:
                if len(r) > value_i and r[metric_i] == "gpu__time_duration.sum":
                    try:
                        kernels.append((r[name_i], float(r[value_i].replace(",", "")) / 1000.0))
                    except ValueError:
                        pass
        if kernels:
            def kind(name):
                n = name.lower()
                if "qk_norm_rope" in n: return "fused q/k norm + RoPE (ours)"
                if any(k in n for k in ("fmha", "attention", "efficient", "flash")): return "attention"
                if any(k in n for k in ("gemm", "gemv", "nvjet", "xmma", "cublas", "splitk")): return "GEMM / GEMV (cuBLAS)"
                if "scatter" in n: return "KV-cache writes (scatter)"
                if "norm" in n: return "layer / RMS norm"
                if any(k in n for k in ("sort", "scan", "radix", "cumsum", "reduce", "argmax")): return "sampler: sort / scan / reduce"
                return "elementwise / copy / other"
            by = collections.defaultdict(lambda: [0, 0.0])
            for n, us in kernels:
                by[kind(n)][0] += 1
                by[kind(n)][1] += us
            total = sum(us for _, us in kernels)
            print(f"profile of one eager decode step at bucket 1 (ncu, clocks and caches left alone): "
                  f"{len(kernels)} kernels, {total / 1000:.3f} ms of kernel time")
            for k, (count, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
                print(f"  {k:<34}{count:>5} kernels {us / 1000:>8.3f} ms  ({us / max(count, 1):.1f} us each)")
        else:
            print("profile: no kernel rows in the ncu output (see bench.log)")
print(f"total {secs} s of the {deadline} s deadline; exit {code}")
PY
  exit "$code"
}

# ---- 1. environment ----------------------------------------------------------------------
log "gpu_check device run: deadline ${DEADLINE_S} s, pack $PACK, out $OUT$( ((SMOKE)) && echo ", SMOKE (CPU, demo model)")"
if [ ! -f "$PACK/manifest.txt" ]; then
  log "STOP: no $PACK/manifest.txt. Here first: BUILD_ONLY=1 scripts/gpu_check.sh; then run with carry=[\".gpu-pack\"]"
  record preflight STOP 0 "no pack"
  finish 2
fi
mf() { sed -n "s/^$1=//p" "$PACK/manifest.txt" | head -1; }
COMMIT=$(mf commit)
grep -vE '^(file|lib)=' "$PACK/manifest.txt" | stamp | tee -a "$LOG"
[ "$(mf build_stale)" = yes ] &&
  log "WARNING: the pack's binaries are older than some sources of $COMMIT (build_stale=yes)"
{
  echo "### date: $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), $(uname -srm)"
  echo "### os: $(. /etc/os-release 2> /dev/null && echo "$PRETTY_NAME"), $(getconf GNU_LIBC_VERSION)," \
    "$CORES CPUs, $(awk '/MemTotal/ {print $2 / 1048576 " GiB"}' /proc/meminfo)"
  echo "### nvidia-smi"
  timeout 20 nvidia-smi 2>&1
} >> "$ENVTXT"
GPU_LINE=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used \
  --format=csv,noheader 2> /dev/null | head -1)
log "GPU: ${GPU_LINE:-nvidia-smi gave nothing}"

probe='import os, sys, torch
print("python=%s %s" % (sys.executable, sys.version.split()[0]))
print("torch=" + torch.__version__)
print("torch_cuda=%s" % torch.version.cuda)
print("cudnn=%s" % torch.backends.cudnn.version())
ok = torch.cuda.is_available()
print("cuda_available=%s" % ok)
if ok:
    p = torch.cuda.get_device_properties(0)
    print("device=%s, sm_%d%d, %d SMs, %.0f GiB" % (p.name, p.major, p.minor, p.multi_processor_count, p.total_memory / 2**30))
print("torch_dir=" + os.path.dirname(torch.__file__))'
TORCH_INFO=""
# GPU_CHECK_PYTHON first where set (the smoke test's own interpreter: on a machine whose torch is
# in the project's .venv, python3 has none).
for cand in ${GPU_CHECK_PYTHON:+"$GPU_CHECK_PYTHON"} python3 /opt/torch/.venv/bin/python3; do
  if TORCH_INFO=$(timeout 60 "$cand" -c "$probe" 2>> "$ENVTXT"); then
    PY=$cand
    break
  fi
done
{
  echo "### torch"
  echo "$TORCH_INFO"
} >> "$ENVTXT"
ti() { sed -n "s/^$1=//p" <<< "$TORCH_INFO" | head -1; }
TORCH_DIR=$(ti torch_dir)
TORCH_LINE="torch $(ti torch), CUDA $(ti torch_cuda), cuDNN $(ti cudnn)"
log "$TORCH_LINE; $(ti python); $(ti device)"
record env ok "$SECONDS" "${GPU_LINE:-no GPU}"
if [ -n "$(ti torch)" ] && [ "$(ti torch)" != "$(mf torch_build)" ]; then
  log "WARNING: the pack was built against torch $(mf torch_build), this is torch $(ti torch):" \
    "libtorch's C++ ABI may differ"
fi
if [ -z "$TORCH_DIR" ] || [ ! -d "$TORCH_DIR/lib" ]; then
  log "STOP: no python3 with torch found (tried ${GPU_CHECK_PYTHON:+$GPU_CHECK_PYTHON, }python3," \
    "/opt/torch/.venv/bin/python3)"
  record preflight STOP "$SECONDS" "no torch"
  finish 2
fi
if ((!SMOKE)) && [ "$(ti cuda_available)" != True ]; then
  log "STOP: torch sees no CUDA device"
  record preflight STOP "$SECONDS" "no CUDA device"
  finish 2
fi

# The binaries: the pack's libraries, then this torch's and its CUDA libraries (nvidia/*/lib).
NV_DIRS=$(nvidia_lib_dirs "$(dirname "$TORCH_DIR")")
export LD_LIBRARY_PATH="$PACK/lib:$TORCH_DIR/lib${NV_DIRS:+:$NV_DIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  echo "### LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "### ldd"
  for b in "$PACK"/bin/*; do
    echo "$b:"
    ldd "$b" 2>&1
  done
} >> "$ENVTXT"
need=$(mf glibc_required)
have=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | tail -1)" != "$have" ]; then
  log "STOP: the pack needs glibc $need, this machine has $have: build the pack on an older system"
  record preflight STOP "$SECONDS" "glibc $have < $need"
  finish 2
fi
missing=$(sed -n '/^### ldd/,$p' "$ENVTXT" | grep "not found" | sort -u)
if [ -n "$missing" ]; then
  log "STOP: libraries not found (pack older than the build, or another torch here?):"
  echo "$missing" | stamp | tee -a "$LOG"
  record preflight STOP "$SECONDS" "missing libraries"
  finish 2
fi

# Data: the tests read CUBE3D_SOURCE_DIR/... as compiled in (the packing checkout's path). Where
# that path does not exist here, it becomes a link to the pack's copy of the data.
SRC_DIR=$(mf source_dir)
export CUBE3D_SOURCE_DIR=$PACK/src CUBE3D_TEST_DATA_DIR=$PACK/src/tests  # for a run-time override
# Without CUBE3D_CLIP_VOCAB the binaries look beside themselves (bin/../share/cube3d/, then
# bin/../../.cache/clip/), where the pack has no copy: point them at the pack's, since the tiny
# test engines load a random CLIP with the real vocabulary.
[ -f "$PACK/src/.cache/clip/bpe_simple_vocab_16e6.txt.gz" ] &&
  export CUBE3D_CLIP_VOCAB=$PACK/src/.cache/clip/bpe_simple_vocab_16e6.txt.gz
if [ -f "$SRC_DIR/tests/golden/tiny_v01/model.yaml" ] && [ -f "$SRC_DIR/models/demo.yaml" ]; then
  log "data: the compiled-in $SRC_DIR has the test data"
elif [ ! -e "$SRC_DIR" ] && mkdir -p "$(dirname "$SRC_DIR")" && ln -s "$PACK/src" "$SRC_DIR"; then
  LINKED=$SRC_DIR
  log "data: linked the compiled-in $SRC_DIR to $PACK/src"
else
  log "WARNING: the compiled-in $SRC_DIR exists without the test data and cannot be linked:" \
    "the tests that read files will fail"
fi

# ---- 2. the graph runner must be compiled in ------------------------------------------------
run_step build_info 30 5 "$ENVTXT" "$PACK/bin/cube3d-bench" --build-info
BUILD_INFO=$(sed -n '/^### build_info/,$p' "$ENVTXT" | grep '^{' | tail -1)
if ! [[ $BUILD_INFO =~ \"cuda_graph_runner\":\ *true ]]; then
  log "STOP: cube3d-bench --build-info does not say \"cuda_graph_runner\": true (got:" \
    "${BUILD_INFO:-nothing}): the graph runner is compiled out, or the bench predates --build-info"
  record preflight STOP "$SECONDS" "graph runner not confirmed"
  finish 2
fi

# ---- 3. the CUDA tests -----------------------------------------------------------------------
run_step model_tests 60 10 "$OUT/engine_tests.log" "$PACK/bin/cube3d_model_tests" \
  --gtest_filter="$MODEL_TEST_FILTER" --gtest_color=no
run_step engine_tests 90 20 "$OUT/engine_tests.log" "$PACK/bin/cube3d_engine_tests" \
  --gtest_filter="$TEST_FILTER" --gtest_color=no

# ---- 4, 5. the bench: graph-kv per bucket, then the ablation at bucket 1 ----------------------
model=models/cube3d-v0.1.yaml device=cuda dtype=bfloat16 buckets=1,4,16 tokens=512 short=128
extra=(--strict) mesh_resolution=8
if ((SMOKE)); then
  model=models/demo.yaml device=cpu dtype=float32 buckets=1,2 tokens=16 short=8
  extra=(--threads 1) mesh_resolution=4
fi
[ -f "$model" ] || model=$PACK/src/$model
bench=("$PACK/bin/cube3d-bench" --model-config "$model" --device "$device" --dtype "$dtype"
  --commit "$COMMIT" "${extra[@]}")
no_mesh=(--mesh-resolution 0)
run_step bench_graph 120 60 "$OUT/bench.log" "${bench[@]}" "${no_mesh[@]}" --log-level info \
  --modes graph-kv --buckets "$buckets" --tokens "$tokens" --warmup 1 --repeat 3 \
  --json "$OUT/bench_graph.json"
run_step bench_nocache 60 25 "$OUT/bench.log" "${bench[@]}" "${no_mesh[@]}" \
  --modes eager-nocache --buckets 1 --tokens "$short" --warmup 0 --repeat 1 \
  --json "$OUT/bench_nocache.json"
# With one whole object per occupancy mode (the shape pipeline on the GPU: latents, dense and
# coarse-to-fine fields at resolution 8, marching cubes, GLB), after the ablation's rows.
run_step bench_kv 120 45 "$OUT/bench.log" "${bench[@]}" --modes eager-kv,graph-kv \
  --buckets 1 --tokens "$tokens" --warmup 1 --repeat 1 --mesh-resolution "$mesh_resolution" \
  --occupancy both --json "$OUT/bench_ablation.json"
run_step bench_unfused 60 20 "$OUT/bench.log" "${bench[@]}" "${no_mesh[@]}" \
  --fused-kernels off --modes graph-kv --buckets "1,${buckets##*,}" --tokens "$tokens" \
  --warmup 1 --repeat 1 \
  --json "$OUT/bench_unfused.json"

# ---- 5a. the Triton decode kernels (decode_kernels: triton, kernels/README.md) ----------------
# Their tests, compiled by Triton on this GPU; then the bench on that path (bench_graph holds the
# torch rows of the same buckets) and v0.5 on both paths; the runs merged into bench_triton.json.
if ((SMOKE)); then
  record kernel_tests ok 0 "skipped: smoke run (CI runs them under the interpreter: ctest kernels.*)"
elif ! [[ $BUILD_INFO =~ \"triton_kernels\":\ *true ]]; then
  log "SKIP the Triton kernels: cube3d-bench --build-info has no \"triton_kernels\": true"
  record kernel_tests skipped 0 "no Triton kernels in this build"
else
  run_step kernel_tests 150 40 "$OUT/engine_tests.log" env -C "$ROOT/tests/kernels" \
    CUBE3D_KERNEL_TEST_DEVICE=cuda CUBE3D_BIN_DIR="$PACK/bin" "$PY" -m unittest -v \
    test_decode_kernels test_plan_replay
  triton_runs=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_triton.XXXXXX")
  run_step bench_triton 120 50 "$OUT/bench.log" "${bench[@]}" "${no_mesh[@]}" \
    --decode-kernels triton --modes graph-kv --buckets "$buckets" --tokens "$tokens" --warmup 1 \
    --repeat 3 --json "$triton_runs/v0.1-triton.json"
  v05=models/cube3d-v0.5.yaml
  [ -f "$v05" ] || v05=$PACK/src/$v05
  for kernels in torch triton; do
    run_step "bench_v05_$kernels" 60 25 "$OUT/bench.log" "${bench[@]}" "${no_mesh[@]}" \
      --model-config "$v05" --decode-kernels "$kernels" --modes graph-kv --buckets 1 \
      --warmup 1 --repeat 2 --json "$triton_runs/v0.5-$kernels.json"
  done
  "$PY" - "$triton_runs" "$OUT/bench_triton.json" << 'PY'
import json, os, sys
folder, target = sys.argv[1:3]
runs = {}
for name in ("v0.1-triton", "v0.5-torch", "v0.5-triton"):
    path = os.path.join(folder, name + ".json")
    if os.path.exists(path):
        runs[name] = json.load(open(path))
json.dump({"what": "scripts/gpu_check.sh: graph-kv TPOT on the Triton decode path (v0.1 at the "
                   "buckets of bench_graph.json, its torch rows) and v0.5 at bucket 1 on both",
           "runs": runs}, open(target, "w"), indent=1)
PY
  rm -rf "$triton_runs"
fi

# ---- 5b. a profile of one decode step: every kernel's duration (Nsight Compute) ----------------
# eager-kv with 2 tokens runs exactly one decode step; DecodeRunner marks it with the NVTX range
# "cube3d.decode_step", so only its kernels are measured, with caches left warm as in a replay.
# The CSV goes to bench.log; the summary adds the kernels up by kind.
NCU=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2> /dev/null | tail -1)
if ((SMOKE)) || [ -z "$NCU" ]; then
  record profile ok 0 "skipped: $( ((SMOKE)) && echo "smoke run" || echo "no ncu found")"
else
  echo "### profile csv follows" >> "$OUT/bench.log"
  run_step profile 100 40 "$OUT/bench.log" "$NCU" --clock-control none --cache-control none \
    --nvtx --nvtx-include "cube3d.decode_step/" --metrics gpu__time_duration.sum --csv \
    --print-units base "${bench[@]}" "${no_mesh[@]}" --modes eager-kv --buckets 1 --tokens 2 --warmup 0 --repeat 1
fi

# ---- 5c. the TPOT history: this run as one line of the device's (bench/tpot.py) ---------------
history=(--dir "${GPU_CHECK_HISTORY:-$ROOT/bench/results/history}")
((SMOKE)) && [ -z "${GPU_CHECK_HISTORY:-}" ] && history+=(--no-write)
jsons=""
for f in bench_graph bench_nocache bench_ablation bench_unfused; do
  [ -f "$OUT/$f.json" ] && jsons+="${jsons:+,}$OUT/$f.json"
done
if [ -n "$jsons" ]; then
  run_step history 30 5 "$OUT/bench.log" "$PY" "$ROOT/bench/tpot.py" history add "$jsons" \
    --compare-last "${history[@]}"
  log "to add this run to the committed history, here: bench/tpot.py history add" \
    "$(sed "s|$OUT/|F/|g" <<< "$jsons") (F: the folder the device's files came back to)"
fi

# ---- 6. summary ------------------------------------------------------------------------------
code=0
awk -F'\t' '$2 != "ok" {bad = 1} END {exit !bad}' "$STEPS" && code=1
grep -q '^\[  PASSED  \]' "$OUT/engine_tests.log" 2> /dev/null || code=1
finish "$code"
