#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan) and fuzzes each for a while.
#
#   scripts/fuzz.sh [seconds per target] [target...]
#
# Seconds: the first argument, else $FUZZ_SECONDS, else $FUZZ_DEFAULT_SECONDS (the ctest test
# fuzz.bounded sets it to 35), else 300. Targets: safetensors model_config
# server_config clip_tokenizer request mesh_writers mesh_metadata http_request
# admission compact_mesh (default: all). Each runs on its own copy of
# fuzz/corpus/<target>/ (build-fuzz/corpus/<target>/, kept between runs so that longer runs
# build on earlier ones); findings go to build-fuzz/crashes/<target>/ and each is printed with
# the command that reproduces it. Exit status: 0 when no target found anything, 1 otherwise.
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_CXX (default clang++-14), FUZZ_JOBS
# (targets fuzzed at once, default 1), FUZZ_BUILD_ONLY=1 (build, do not fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
# The cores to build with. Not plain nproc: it answers OMP_NUM_THREADS when that is set (test.sh
# sets it to 1 for the tests), which made every build here run one compiler at a time.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
root=$(pwd)

all_targets=(safetensors model_config server_config clip_tokenizer request mesh_writers
  mesh_metadata http_request admission compact_mesh infer_body)
seconds=${FUZZ_SECONDS:-${FUZZ_DEFAULT_SECONDS:-300}}
if (($#)) && [[ $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")
for target in "${targets[@]}"; do
  if [[ ! " ${all_targets[*]} " =~ " $target " ]]; then
    echo "fuzz: unknown target '$target' (known: ${all_targets[*]})" >&2
    exit 2
  fi
done

build=${FUZZ_BUILD_DIR:-build-fuzz}
[[ $build = /* ]] || build="$root/$build"
jobs=${FUZZ_JOBS:-1}

# The largest input per target: a little above the largest seed, and what the code under test
# meets in practice (prompts: limits.max_prompt_bytes is 1024 by default; config files a page or
# two). Longer inputs mostly slow the fuzzer down.
declare -A max_len=(
  [safetensors]=4096 [model_config]=4096 [server_config]=16384
  [clip_tokenizer]=2048 [request]=2048 [mesh_writers]=8192 [mesh_metadata]=1024
  # http_request: a head up to its 2 KiB limit, a body up to 4 KiB, and pipelined requests.
  [http_request]=8192
  # admission: a keys file or a denylist of a few dozen lines, or an end user id.
  [admission]=4096
  # compact_mesh: a payload of a few hundred vertices.
  [compact_mesh]=8192
  # infer_body: a v2 inference body of a few tensors, JSON or with binary data.
  [infer_body]=4096
)

start=$SECONDS
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
mkdir -p "$build"
if [ ! -f "$build/CMakeCache.txt" ]; then
  # The project's Python (scripts/python_env.sh: .venv/ where setup made one) finds torch; the
  # system's python3 may have none.
  . scripts/python_env.sh
  torch_root=$("$PYTHON" -c "import os, torch; print(os.path.dirname(torch.__file__))") || {
    echo "fuzz: $PYTHON has no torch: run scripts/setup.sh" >&2
    exit 1
  }
  cmake -S fuzz -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="${FUZZ_CXX:-clang++-14}" \
    -DTORCH_ROOT="$torch_root" -DPython3_EXECUTABLE="$(command -v "$PYTHON")" \
    >"$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2
    exit 1
  }
fi
cmake --build "$build" -j "$CORES" --target "${targets[@]/#/fuzz_}" >"$build/build.log" 2>&1 || {
  tail -n 60 "$build/build.log" >&2
  echo "fuzz: build failed (whole log: $build/build.log)" >&2
  exit 1
}
echo "fuzz: built ${#targets[@]} target(s) in $((SECONDS - start)) s ($build)"
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0

# libtorch is not instrumented: ASan would report its allocations as leaks. The other targets
# keep leak detection. UBSan findings already abort (-fno-sanitize-recover).
asan_options() {
  if [ "$1" = safetensors ]; then echo "detect_leaks=0"; else echo "detect_leaks=1"; fi
}

# Runs one target; its log goes to $build/logs/<target>.log. Returns non-zero on a finding.
run_target() {
  local target=$1
  local corpus="$build/corpus/$target" crashes="$build/crashes/$target" log="$build/logs/$target.log"
  mkdir -p "$corpus" "$crashes" "$build/logs"
  cp -n fuzz/corpus/"$target"/* "$corpus"/
  # Inputs saved by earlier runs stay in $crashes; only this run's are reported.
  local marker="$build/logs/$target.started"
  touch "$marker"
  local rc=0
  # The outer timeout is only a backstop should libFuzzer itself stop answering; -timeout (per
  # input), -rss_limit_mb and -max_total_time are what normally end a run.
  ASAN_OPTIONS="$(asan_options "$target")" UBSAN_OPTIONS=print_stacktrace=1 \
    timeout --kill-after=10 $((seconds + 120)) \
    "$build/bin/fuzz_$target" "$corpus" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len="${max_len[$target]}" -artifact_prefix="$crashes/" \
    -print_final_stats=1 >"$log" 2>&1 || rc=$?
  local summary
  summary=$(grep -aE '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 | sed -E 's/[[:space:]]+/ /g') || true
  if ((rc == 0)); then
    echo "fuzz: $target: ok, ${seconds} s: ${summary:-no summary}"
    return 0
  fi
  echo "fuzz: $target: FINDING (exit status $rc); the end of $log:" >&2
  tail -n 40 "$log" | sed 's/^/  | /' >&2
  local artifact found=0
  while IFS= read -r artifact; do
    found=1
    echo "fuzz: $target: reproduce with:" >&2
    echo "  ASAN_OPTIONS=$(asan_options "$target") $build/bin/fuzz_$target $artifact" >&2
  done < <(find "$crashes" -type f -newer "$marker")
  ((found)) || echo "fuzz: $target: no input was saved (the fuzzer itself failed?)" >&2
  return 1
}

echo "fuzz: ${seconds} s per target, ${jobs} at a time: ${targets[*]}"
failed=()
pids=()
names=()
wait_one() {
  # Waits for the oldest running target and records it when it found something.
  if ! wait "${pids[0]}"; then failed+=("${names[0]}"); fi
  pids=("${pids[@]:1}")
  names=("${names[@]:1}")
}
for target in "${targets[@]}"; do
  while ((${#pids[@]} >= jobs)); do wait_one; done
  run_target "$target" &
  pids+=($!)
  names+=("$target")
done
while ((${#pids[@]})); do wait_one; done

if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $build/crashes/; total $((SECONDS - start)) s)" >&2
  exit 1
fi
echo "fuzz: ok: no findings in ${targets[*]} (total $((SECONDS - start)) s)"
