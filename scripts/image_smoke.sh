#!/usr/bin/env bash
# The CPU container image without Docker (ctest image.rootfs_smoke; Docker engines are not
# available on these machines). Assembles the file system of docker/Dockerfile's LAST stage and
# runs the server in it:
#   1. a Debian 12 minbase root file system with mmdebstrap, as debian:bookworm-slim is built
#      (deb.debian.org's bookworm, -updates and -security; SMOKE_MIRROR="ARG..." replaces them);
#   2. the stage's instructions as written in the Dockerfile, read by a small parser: RUN (in a
#      chroot, as root: apt-get install of docker/runtime-packages.txt, the uid 10001 user),
#      COPY from the source tree, COPY --from=builder /opt/cube3d as `cmake --install BUILD_DIR
#      --prefix /opt/cube3d --strip` (with DESTDIR), ENV, USER, WORKDIR, ENTRYPOINT/CMD and
#      HEALTHCHECK, so that the two cannot drift apart; an instruction it does not know fails;
#   3. checks: docker/check-runtime-packages.sh (the list names every system library's owner)
#      and ldd inside the root file system over every binary and library of /opt/cube3d;
#   4. the ENTRYPOINT as USER (chroot --userspec) with the stage's ENV, its three ports moved to
#      free loopback ports through CUBE3D_LISTEN / CUBE3D_HTTP_LISTEN / CUBE3D_METRICS_LISTEN;
#      waits until the HEALTHCHECK command (cube3d-client --health, run inside) exits 0, then
#      GET /healthz, /readyz and /metrics answer 200;
#   5. one generation with the installed cube3d-client inside (a GLB must come back), then
#      SIGTERM: the server must exit 0 within its drain grace.
# Proves: the runtime package list and the installed tree are enough on a bare bookworm (no
# missing library, the vocabulary and models found from /opt/cube3d), as a non-root user, with
# the image's config, variables, entry point and health check. Does not prove: that the base
# image tags exist, that the builder stage builds, or anything about docker/Dockerfile.cuda.
#
#   sudo scripts/image_smoke.sh [BUILD_DIR]     (default build/; its cube3d-server and
#                                                cube3d-client must be built)
# Needs root (mmdebstrap's root mode, chroot, mount), mmdebstrap (scripts/setup.sh), python3 and
# about 5 GB free in BUILD_DIR (the CUDA wheel's libraries are 3.3 GB). Works in
# BUILD_DIR/image-smoke/, removed at the end (SMOKE_KEEP=1 keeps it; mounts are always undone).
# One deadline for everything: SMOKE_DEADLINE_S (default 330). Exit 0: passed; 1: failed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DOCKERFILE=$ROOT/docker/Dockerfile
PACKAGE_LIST=$ROOT/docker/runtime-packages.txt
SUITE=bookworm
BASE_IMAGE=debian:bookworm-slim
DEADLINE_S=${SMOKE_DEADLINE_S:-330}
KEEP=${SMOKE_KEEP:-0}
T0=$SECONDS
IMAGE_LOG_NAME=image_smoke
# shellcheck source=scripts/image_common.sh
. "$ROOT/scripts/image_common.sh"

BUILD_DIR=${1:-$ROOT/build}
[ -d "$BUILD_DIR" ] || fail "$BUILD_DIR: no such build folder"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
WORK=$BUILD_DIR/image-smoke
ROOTFS=$WORK/rootfs

# ---- preconditions --------------------------------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then
  fail "needs root (mmdebstrap's root mode, chroot and mount): run it as root," \
    "e.g. sudo $0 $BUILD_DIR (CI runs as root)"
fi
for tool in mmdebstrap chroot mount umount python3 cmake timeout; do
  command -v "$tool" > /dev/null ||
    fail "needs $tool (mmdebstrap: scripts/setup.sh installs it, or apt-get install mmdebstrap)"
done
for b in cube3d-server cube3d-client; do
  [ -x "$BUILD_DIR/bin/$b" ] || fail "$BUILD_DIR/bin/$b is missing: build it first"
done
[[ $WORK != *[[:space:]]* ]] || fail "$WORK: a path with spaces is not supported"

# ---- cleanup: always, whatever happened ---------------------------------------------------
SERVER_PID=""
MOUNTS=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2> /dev/null; then
    kill -KILL "$SERVER_PID" 2> /dev/null
    wait "$SERVER_PID" 2> /dev/null
  fi
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTS[i]}" 2> /dev/null || umount -l "${MOUNTS[i]}" 2> /dev/null
  done
  if [ "$KEEP" = 1 ]; then
    unmount_under "$ROOTFS" || log "cleanup: still mounted: $(mounts_under "$ROOTFS")" >&2
    log "kept $WORK (SMOKE_KEEP=1)"
  else
    remove_work "$ROOTFS" "$WORK"  # unmounts first: rm -rf would reach through a mount
  fi
  exit "$rc"
}
on_exit cleanup

unmount_under "$ROOTFS" || fail "cannot unmount what is left under $ROOTFS"  # an interrupted run's
rm -rf "$WORK"
mkdir -p "$WORK"
free_kb=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
((free_kb > 5 * 1024 * 1024)) || fail "$WORK has $((free_kb / 1024)) MiB free; needs about 5 GiB"

# ---- the Dockerfile's last stage, as a plan of shell calls --------------------------------
PLAN=$(python3 - "$DOCKERFILE" << 'PY'
import json, re, shlex, sys

path = sys.argv[1]
instructions = []  # (line number, keyword, rest), continuation lines joined as Docker does
pending, start = "", 0
for number, raw in enumerate(open(path), 1):
    line = raw.rstrip("\n")
    if line.strip().startswith("#") or (not line.strip() and not pending):
        continue  # comments go, even inside a continuation (as Docker's parser does)
    if not pending:
        start = number
    if line.rstrip().endswith("\\"):
        pending += line.rstrip()[:-1]
        continue
    pending += line
    keyword, _, rest = pending.strip().partition(" ")
    instructions.append((start, keyword.upper(), rest.strip()))
    pending = ""

stages = [i for i, (_, k, _) in enumerate(instructions) if k == "FROM"]
if not stages:
    sys.exit(f"{path}: no FROM")
out = []
env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}  # the base's

def expand(value):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), value)

def emit(*words):
    out.append(" ".join(shlex.quote(w) for w in words))

def bad(number, what):
    sys.exit(f"{path}:{number}: {what} (scripts/image_smoke.sh reads the last stage: keep it "
             "to the instructions it knows, or teach it)")

for number, keyword, rest in instructions[stages[-1]:]:
    words = rest.split()
    if keyword == "FROM":
        emit("stage_from", [w for w in words if not w.startswith("--")][0])
        emit("step_env", "PATH=" + env["PATH"])
    elif keyword == "RUN":
        if rest.startswith("[") or rest.startswith("--"):
            bad(number, "RUN in exec form or with flags")
        emit("step_run", str(number), rest)
    elif keyword == "COPY":
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        if flags == ["--from=builder"] and len(paths) == 2:
            emit("step_install", str(number), paths[0], paths[1])
        elif not flags and len(paths) >= 2:
            emit("step_copy", str(number), paths[-1], *paths[:-1])
        else:
            bad(number, f"COPY {rest}")
    elif keyword == "ENV":
        pairs = shlex.split(rest)
        if not all("=" in p for p in pairs):
            bad(number, "ENV without KEY=VALUE")
        for pair in pairs:
            key, _, value = pair.partition("=")
            env[key] = expand(value)
            emit("step_env", f"{key}={env[key]}")  # from here on (a later one wins in env(1))
    elif keyword == "USER":
        emit("step_user", rest)
    elif keyword == "WORKDIR":
        emit("step_workdir", expand(rest))
    elif keyword in ("ENTRYPOINT", "CMD"):
        try:
            argv = json.loads(rest)
        except ValueError:
            bad(number, f"{keyword} in shell form")
        emit("step_" + keyword.lower(), *argv)
    elif keyword == "HEALTHCHECK":
        _, cmd, command = rest.partition(" CMD ")
        if not cmd or command.lstrip().startswith("["):
            bad(number, "HEALTHCHECK without a shell-form CMD")
        emit("step_healthcheck", command.strip())
    elif keyword in ("EXPOSE", "STOPSIGNAL", "LABEL"):
        emit("step_note", keyword, rest)
    else:
        bad(number, f"{keyword} is not supported")
print("\n".join(out))
PY
) || fail "cannot read $DOCKERFILE (above)"

# The plan's steps. RUN and COPY happen as they come; the rest is recorded for the server.
ENVV=()
RUN_USER=root
RUN_DIR=/
ENTRYPOINT=()
CMD=()
HEALTHCHECK=""
stage_from() {
  [ "$1" = "$BASE_IMAGE" ] ||
    fail "the last stage starts FROM $1; this test builds $BASE_IMAGE (mmdebstrap $SUITE minbase)"
}
step_env() { ENVV+=("$1"); }
step_user() { RUN_USER=$1; }
step_workdir() { RUN_DIR=$1; }
step_entrypoint() { ENTRYPOINT=("$@"); }
step_cmd() { CMD=("$@"); }
step_healthcheck() { HEALTHCHECK=$1; }
step_note() { :; }
# in_root USER DIR: sets IN_ROOT to the command prefix that runs a command inside the root file
# system as USER, in DIR, with the stage's ENV only (and HOME from its passwd, as Docker sets
# it): "${IN_ROOT[@]}" COMMAND... (an array, so that timeout(1) can run it).
IN_ROOT=()
in_root() {
  local user=$1 dir=$2 spec=() home=/root
  if [ "$user" != root ] && [ "$user" != 0 ] && [ "$user" != 0:0 ]; then
    spec=(--userspec="$user")
    home=$(chroot "$ROOTFS" getent passwd "${user%%:*}" | cut -d: -f6)
  fi
  IN_ROOT=(chroot "${spec[@]}" "$ROOTFS" /usr/bin/env -i "${ENVV[@]}" "HOME=${home:-/}"
    /bin/sh -c 'cd "$1" || exit 1; shift; exec "$@"' sh "$dir")
}

# ---- 1. the base: debian:bookworm-slim's minbase -------------------------------------------
need 120 "the root file system"
log "mmdebstrap --variant=minbase $SUITE (as $BASE_IMAGE is built) into $ROOTFS"
mirror=()
[ -n "${SMOKE_MIRROR:-}" ] && read -r -a mirror <<< "$SMOKE_MIRROR"
# The slim image's dpkg excludes (documentation, manuals, translations) keep it small and quick.
if ! timeout "$(left)" mmdebstrap --mode=root --variant=minbase --quiet \
  --dpkgopt=force-unsafe-io --aptopt='Acquire::Languages "none"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  "$SUITE" "$ROOTFS" "${mirror[@]}" < /dev/null > "$WORK/mmdebstrap.log" 2>&1; then
  tail -20 "$WORK/mmdebstrap.log" >&2
  fail "mmdebstrap failed (log: $WORK/mmdebstrap.log)"
fi
T_ROOTFS=$((SECONDS - T0))
# What Docker gives every container and build step: /proc, a read-only /sys, a /dev/shm.
mount_in() {  # mount_in TARGET MOUNT-ARGS...
  mkdir -p "$ROOTFS$1"
  mount "${@:2}" "$ROOTFS$1" || fail "mount ${*:2} $ROOTFS$1 failed"
  MOUNTS+=("$ROOTFS$1")
}
mount_in /proc -t proc proc
mount_in /sys -t sysfs -o ro sysfs
mount_in /dev/shm -t tmpfs -o size=64m,mode=1777 shm
[ -e "$ROOTFS/etc/resolv.conf" ] || cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"

# ---- 2. the stage ---------------------------------------------------------------------------
step_run() {
  need 30 "RUN at docker/Dockerfile:$1"
  log "RUN (docker/Dockerfile:$1) as $RUN_USER"
  # Proxy variables set here reach RUN, as Docker's predefined proxy build arguments do there.
  local stage_env=("${ENVV[@]}") v
  for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -z "${!v:-}" ] || ENVV+=("$v=${!v}")
  done
  in_root "$RUN_USER" "$RUN_DIR"
  ENVV=("${stage_env[@]}")
  if ! timeout "$(left)" "${IN_ROOT[@]}" /bin/sh -c "$2" > "$WORK/run-$1.log" 2>&1; then
    tail -20 "$WORK/run-$1.log" >&2
    fail "RUN at docker/Dockerfile:$1 failed (log: $WORK/run-$1.log)"
  fi
}
step_copy() {  # step_copy LINE DEST SRC...: from the source tree (the build context)
  local line=$1 dest=$2 src
  shift 2
  for src in "$@"; do
    [ -e "$ROOT/$src" ] || fail "COPY at docker/Dockerfile:$line: $src does not exist"
    if [ -d "$ROOT/$src" ]; then
      mkdir -p "$ROOTFS$dest" && cp -a "$ROOT/$src/." "$ROOTFS$dest/"
    elif [[ $dest == */ ]]; then
      mkdir -p "$ROOTFS$dest" && cp -a "$ROOT/$src" "$ROOTFS$dest"
    else
      mkdir -p "$(dirname "$ROOTFS$dest")" && cp -a "$ROOT/$src" "$ROOTFS$dest"
    fi || fail "COPY at docker/Dockerfile:$line: cannot copy $src"
    chown -R 0:0 "$ROOTFS$dest"
  done
  log "COPY $* -> $dest"
}
step_install() {  # step_install LINE SRC DEST: the builder's /opt/cube3d, from this build
  [ "$2" = /opt/cube3d ] && [ "$3" = /opt/cube3d ] ||
    fail "docker/Dockerfile:$1: COPY --from=builder $2 $3; this test only knows /opt/cube3d"
  need 60 "cmake --install"
  local t=$SECONDS
  if ! DESTDIR=$ROOTFS timeout "$(left)" cmake --install "$BUILD_DIR" --prefix /opt/cube3d \
    --strip > "$WORK/install.log" 2>&1; then
    tail -20 "$WORK/install.log" >&2
    fail "cmake --install $BUILD_DIR failed (log: $WORK/install.log)"
  fi
  chown -R 0:0 "$ROOTFS/opt/cube3d"
  T_INSTALL=$((SECONDS - t))
  log "COPY --from=builder /opt/cube3d: cmake --install $BUILD_DIR --prefix /opt/cube3d --strip" \
    "($(du -sm "$ROOTFS/opt/cube3d" | cut -f1) MiB, $T_INSTALL s)"
}
T_INSTALL=0
eval "$PLAN"
[ ${#ENTRYPOINT[@]} -gt 0 ] || fail "docker/Dockerfile's last stage has no ENTRYPOINT"
[ -n "$HEALTHCHECK" ] || fail "docker/Dockerfile's last stage has no HEALTHCHECK"
T_STAGE=$((SECONDS - T0))
# The image's size as this stage makes it, and what of it is the installed tree's CUDA part (the
# CPU image, built with CUBE3D_TORCH_CUDA=OFF, carries none of it: docker/README.md, "Size").
SIZE_ALL=$(du -sm --exclude=proc --exclude=sys --exclude=dev "$ROOTFS" | cut -f1)
SIZE_TREE=$(du -sm "$ROOTFS/opt/cube3d" | cut -f1)
SIZE_CUDA=$(find "$ROOTFS/opt/cube3d/lib" -type f \( -name 'libtorch_cuda*' -o -name 'libc10_cuda*' \
  -o -name 'libcu*' -o -name 'libnv*' -o -name 'libnccl*' -o -name 'libcaffe2_nvrtc*' \) \
  ! -name 'libcudart.so*' ! -name 'libcupti.so*' -printf '%s\n' |
  awk '{s += $1} END {printf "%d", s / 1048576}')
log "size: rootfs $SIZE_ALL MiB, of which /opt/cube3d $SIZE_TREE MiB, of which $SIZE_CUDA MiB is" \
  "the CUDA backend (libtorch_cuda and the CUDA libraries beyond libcudart/libcupti);" \
  "without it (the CPU image): $((SIZE_ALL - SIZE_CUDA)) MiB"

# ---- 3. the libraries ---------------------------------------------------------------------
need 30 "the library checks"
"$ROOT/docker/check-runtime-packages.sh" "$PACKAGE_LIST" "$ROOTFS/opt/cube3d" ||
  fail "docker/runtime-packages.txt does not cover what the binaries link (above)"
missing=$(timeout "$(left)" chroot "$ROOTFS" /bin/sh -c \
  'for f in /opt/cube3d/bin/* /opt/cube3d/lib/*; do ldd "$f" 2>&1 | sed "s|^|$f: |"; done' |
  grep "not found" | grep -Ev ":[[:space:]]*libcuda\.so") || true
[ -z "$missing" ] || fail "inside the root file system, libraries are missing:"$'\n'"$missing"
log "ldd inside the root file system: every binary and library of /opt/cube3d resolves" \
  "(libcuda.so.1, the driver's, aside)"

# ---- 4. the server, as the image runs it ---------------------------------------------------
read -r GRPC_PORT HTTP_PORT METRICS_PORT < <(free_loopback_ports)
ENVV+=("CUBE3D_LISTEN=127.0.0.1:$GRPC_PORT" "CUBE3D_HTTP_LISTEN=127.0.0.1:$HTTP_PORT"
  "CUBE3D_METRICS_LISTEN=127.0.0.1:$METRICS_PORT")
need 60 "the server"
log "starting ${ENTRYPOINT[*]}${CMD[*]:+ ${CMD[*]}} as $RUN_USER (gRPC :$GRPC_PORT, HTTP :$HTTP_PORT," \
  "metrics :$METRICS_PORT)"
T_START=$SECONDS
in_root "$RUN_USER" "$RUN_DIR"
"${IN_ROOT[@]}" "${ENTRYPOINT[@]}" "${CMD[@]}" > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
server_died() {
  log "server log (last 30 lines):" >&2
  tail -30 "$WORK/server.log" >&2
  fail "$1"
}

# The HEALTHCHECK command, inside, as the container's user: exit 0 only once SERVING.
await_health "$SERVER_PID" "${IN_ROOT[@]}" /bin/sh -c "$HEALTHCHECK"

http_status() {  # http_status PORT PATH: the HTTP status code of GET PATH on 127.0.0.1
  local line=""
  exec 3<> "/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  IFS= read -r -t 10 line <&3
  exec 3<&-
  line=${line%$'\r'}
  echo "${line#* }" | cut -d' ' -f1
}
for probe in "$HTTP_PORT /healthz" "$HTTP_PORT /readyz" "$METRICS_PORT /metrics"; do
  code=$(http_status $probe) || true
  [ "$code" = 200 ] || server_died "GET ${probe#* } on port ${probe%% *} answered '${code}', not 200"
done
log "GET /healthz, /readyz (HTTP) and /metrics: 200"

# ---- 5. one mesh, then SIGTERM -------------------------------------------------------------
need 30 "a generation"
rm -f "$ROOTFS/tmp/image-smoke.glb"
t=$SECONDS
if ! out=$(timeout $(($(left) - 15)) "${IN_ROOT[@]}" cube3d-client \
  --server "127.0.0.1:$GRPC_PORT" --prompt "a wooden chair" --resolution-base 4 \
  --out /tmp/image-smoke.glb --no-progress --timeout-ms $((($(left) - 20) * 1000)) 2>&1); then
  echo "$out" >&2
  server_died "cube3d-client failed inside the root file system"
fi
T_MESH=$((SECONDS - t))
magic=$(head -c 4 "$ROOTFS/tmp/image-smoke.glb" 2> /dev/null)
problem=$(mesh_problem "$magic" "$out")
[ -z "$problem" ] || server_died "$problem"
log "cube3d-client: ${out%%$'\n'*}"

grace=$(drain_grace "${IN_ROOT[@]}" "${ENTRYPOINT[@]}" "${CMD[@]}")
stop_server "$SERVER_PID" "$SERVER_PID" "$grace"
[ -z "$STOP_PROBLEM" ] || server_died "$STOP_PROBLEM"
SERVER_PID="" T_STOP=$STOP_S
log "SIGTERM: exit 0 after $T_STOP s (drain grace $grace s)"
log "PASS in $((SECONDS - T0)) s: rootfs $T_ROOTFS s, stage $((T_STAGE - T_ROOTFS)) s" \
  "(install $T_INSTALL s), serving after $T_READY s, mesh $T_MESH s, stop $T_STOP s"
