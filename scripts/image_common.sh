# shellcheck shell=bash
# Shared by scripts/image_build.sh and scripts/image_smoke.sh (sourced, never run): their one
# deadline, their log lines, the mounts they must undo, and the parts of running the image's
# server that both do the same way. The caller sets IMAGE_LOG_NAME, DEADLINE_S and T0 (=$SECONDS
# at its start) before it sources this file. Results come back in globals (T_READY, STOP_S,
# STOP_PROBLEM), so that the functions can wait for the caller's jobs.
# shellcheck disable=SC2034

log() { printf '%s: [%4d s] %s\n' "$IMAGE_LOG_NAME" $((SECONDS - T0)) "$*"; }
fail() {
  log "FAIL: $*" >&2
  exit 1
}
left() { echo $((DEADLINE_S - (SECONDS - T0))); }
need() {  # need SECONDS WHAT: at least SECONDS must be left for WHAT
  (($(left) >= $1)) || fail "the ${DEADLINE_S} s deadline leaves $(left) s, too little for $2"
}

# The mount points under DIR, deepest last (as /proc/mounts lists them).
mounts_under() { awk -v r="$1/" 'index($2, r) == 1 { print $2 }' /proc/mounts; }
# Lazily unmounts everything under DIR, deepest first; fails (status 1) if anything stays.
unmount_under() {
  local m
  for m in $(mounts_under "$1" | sort -r); do umount -l "$m" 2> /dev/null; done
  [ -z "$(mounts_under "$1")" ]
}

# Three free loopback TCP ports, for the image's gRPC, HTTP and metrics listeners.
free_loopback_ports() {
  python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])'
}

# await_health PID COMMAND...: runs COMMAND (the image's HEALTHCHECK, inside) every second until
# it exits 0, then logs what it said; calls the caller's server_died MESSAGE if PID dies first or
# if only 60 s of the deadline are left. Sets T_READY: the seconds since T_START.
await_health() {
  local pid=$1 health first=""
  shift
  while :; do
    kill -0 "$pid" 2> /dev/null || server_died "the server exited before it was serving"
    (($(left) > 60)) || server_died "not SERVING with 60 s of the deadline left (it said: $health)"
    health=$(timeout 20 "$@" 2>&1) && break
    [ -n "$first" ] || first=$health
    sleep 1
  done
  T_READY=$((SECONDS - T_START))
  log "HEALTHCHECK passed after $T_READY s: $health"
  [ -z "$first" ] || log "(before that it said: $first)"
}

# stop_server PID JOB GRACE: SIGTERM to the server PID, up to GRACE + 5 s for it to end, then the
# exit status of JOB (this shell's background job that runs it: PID itself, or the buildah run
# around it). Sets STOP_PROBLEM to what went wrong (empty: it exited 0 in time) and STOP_S.
stop_server() {
  local t=$SECONDS status
  STOP_PROBLEM=""
  kill -TERM "$1"
  while kill -0 "$1" 2> /dev/null && ((SECONDS - t <= $3 + 5)); do sleep 0.2; done
  if kill -0 "$1" 2> /dev/null; then
    STOP_PROBLEM="still running $(($3 + 5)) s after SIGTERM"
    return
  fi
  wait "$2"
  status=$?
  STOP_S=$((SECONDS - t))
  ((status == 0)) || STOP_PROBLEM="exited with status $status after SIGTERM (expected 0)"
}

# remove_work UNDER WORK: unmounts what is under UNDER, then removes WORK; with anything still
# mounted (rm -rf would reach through it) WORK stays, and says so.
remove_work() {
  if unmount_under "$1"; then
    rm -rf "$2"
  else
    log "cleanup: still mounted, $2 left in place: $(mounts_under "$1")" >&2
  fi
}

# on_exit FUNCTION: FUNCTION runs at every exit, an interrupt's and a SIGTERM's too.
on_exit() {
  # shellcheck disable=SC2064 # the function's name, now
  trap "$1" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# drain_grace COMMAND...: the drain grace in seconds of the server that COMMAND --print-config
# describes (the image's entry point, run inside), 30 (the default) if it says none.
drain_grace() {
  local grace
  grace=$(timeout 30 "$@" --print-config 2> /dev/null | sed -n 's/^drain_grace_seconds: *//p')
  echo "${grace:-30}"
}

# mesh_problem MAGIC OUT: empty if MAGIC (the output file's first bytes) is a GLB's and OUT
# (cube3d-client's words) counts more than 0 vertices; else what is wrong.
mesh_problem() {
  if [ "$1" != glTF ]; then
    echo "the client wrote no GLB (first bytes '$1'): $2"
  elif ! [[ $2 =~ ([0-9]+)\ vertices,\ ([0-9]+)\ faces ]] || ((BASH_REMATCH[1] == 0)); then
    echo "the mesh is empty: $2"
  fi
}
