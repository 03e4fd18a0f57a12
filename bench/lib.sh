# shellcheck shell=bash
# The shell code the load benches share (bench/cache_zipf.sh, bench/compare_protocols.sh): sourced
# from the repository root by the bench, never run. It defaults the settings every load bench
# takes (below; bench_settings defaults a bench's own) and defines functions and SERVER_PID; the functions read the settings and
# BENCH_NAME (the prefix of their messages) and return results in globals that the bench reads
# (the paths, the ports, REVISION, CORES, CPU_MODEL).
# shellcheck disable=SC2034,SC2153

# Gives each setting NAME its DEFAULT unless the environment sets it (to something not empty):
# NAME="${NAME:-DEFAULT}" for each.
bench_settings() {  # NAME=DEFAULT ...
  local setting name
  for setting in "$@"; do
    name="${setting%%=*}"
    [[ -n "${!name:-}" ]] || printf -v "$name" '%s' "${setting#*=}"
  done
}

# The settings every load bench takes.
bench_settings BUILD_DIR=build SERVER_CONFIG=models/demo-server.yaml OUT_DIR=bench/results \
  DATE="$(date +%F)"

# The binaries in BUILD_DIR, and where run RUN (cache-zipf, ...) writes under OUT_DIR: NAME
# (DATE-RUN), RUN_DIR (its folder of reports and logs) and SUMMARY (its comparison).
set_bench_paths() {  # RUN
  SERVER_BIN="$BUILD_DIR/bin/cube3d-server"
  LOADGEN_BIN="$BUILD_DIR/bin/cube3d-loadgen"
  NAME="$DATE-$1"
  RUN_DIR="$OUT_DIR/$NAME"
  SUMMARY="$OUT_DIR/$NAME.json"
}

# Exits with status $1 unless the server and loadgen are built and python3 and curl are there.
require_bench_tools() {  # exit status
  local bin tool
  for bin in "$SERVER_BIN" "$LOADGEN_BIN"; do
    [[ -x "$bin" ]] || { echo "$BENCH_NAME: $bin is missing (build it first)" >&2; exit "$1"; }
  done
  for tool in python3 curl; do
    command -v "$tool" >/dev/null || { echo "$BENCH_NAME: needs $tool" >&2; exit "$1"; }
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Three different free ports into GRPC_PORT, METRICS_PORT and HTTP_PORT.
pick_server_ports() {
  GRPC_PORT="$(free_port)"
  METRICS_PORT="$(free_port)"
  HTTP_PORT="$(free_port)"
  while [[ "$METRICS_PORT" == "$GRPC_PORT" ]]; do METRICS_PORT="$(free_port)"; done
  while [[ "$HTTP_PORT" == "$GRPC_PORT" || "$HTTP_PORT" == "$METRICS_PORT" ]]; do
    HTTP_PORT="$(free_port)"
  done
}

SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}

# Stops the server on exit, also on failure or Ctrl-C.
stop_server_on_exit() {
  trap stop_server EXIT
  trap 'exit 130' INT TERM
}

# Starts $SERVER_BIN with $SERVER_CONFIG on the ports of pick_server_ports and the flags after the
# first two arguments, its output into LOG, and waits up to 180 s for /readyz; exits 1 when the
# server exits first (printing "the server exited" and EXITED_NOTE, then LOG) or is not ready.
start_server_and_wait() {  # LOG EXITED_NOTE [server flags...]
  local log="$1" exited_note="$2"
  shift 2
  "$SERVER_BIN" --config "$SERVER_CONFIG" --listen "127.0.0.1:$GRPC_PORT" \
    --metrics-listen "127.0.0.1:$METRICS_PORT" --http-listen "127.0.0.1:$HTTP_PORT" \
    --log-level info "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 180); do
    curl -sf "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null 2>&1 && return 0
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "$BENCH_NAME: the server exited$exited_note" >&2
      cat "$log" >&2
      SERVER_PID=""
      exit 1
    fi
    sleep 1
  done
  curl -sf "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null && return 0
  echo "$BENCH_NAME: the server is not ready after 180 s" >&2
  exit 1
}

# REVISION (git's short hash, -dirty with uncommitted changes, or unknown), CORES and CPU_MODEL,
# for the summary.
describe_machine() {
  REVISION="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [[ "$REVISION" != unknown && -n "$(git status --porcelain 2>/dev/null)" ]]; then
    REVISION="$REVISION-dirty"
  fi
  # The machine's cores, not OMP_NUM_THREADS (which nproc answers when it is set).
  CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  CPU_MODEL="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
  [[ -n "$CPU_MODEL" ]] || CPU_MODEL="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
}
