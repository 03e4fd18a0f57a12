#!/usr/bin/env bash
# Builds docker/Dockerfile for real, without a Docker engine, and runs the image (ctest
# image.build; Docker engines are not available on these machines, and podman run is refused by
# their rlimits):
#   1. the Dockerfile's base images, made here: each FROM that is not a stage is made with
#      mmdebstrap as Debian makes it (debian:bookworm: the minbase variant; debian:bookworm-slim:
#      the same without documentation, manuals and translations) plus the apt settings of the
#      official images, and committed into buildah's storage under that very name
#      (docker.io/library/debian:TAG), so that `FROM debian:...` resolves to it; any other base
#      (NVIDIA's, for docker/Dockerfile.cuda) fails here, saying so;
#   2. `buildah bud --isolation chroot --pull-never --format docker`: every stage and instruction
#      as Docker would run it, the builder's compile included (ccache's cache on a build volume
#      under IMAGE_CACHE: it keeps the compiles that do not use the precompiled ATen headers);
#   3. the image's config: USER 10001:10001, a shell-form HEALTHCHECK, the ENTRYPOINT; its size,
#      at most IMAGE_MAX_MIB (1536), and no CUDA backend in it (no libtorch_cuda, cuBLAS, cuDNN,
#      NCCL, nvshmem or any other nvidia-* package or library beyond libcudart/libcupti);
#   4. a container of it run with `buildah run --isolation chroot` (the host's network, so on
#      loopback): the ENTRYPOINT with the image's ENV and USER, its three ports moved to free
#      loopback ports; it must run as uid 10001; the HEALTHCHECK command (inside) passes, then
#      GET /healthz, /readyz and /metrics answer 200;
#   5. one mesh through the installed cube3d-client inside (a GLB must come back), then SIGTERM
#      to the server: it must exit 0 within its drain grace.
# Proves: the Dockerfile's stages, base names, COPY --from lines and commands build and give an
# image that serves as a non-root user. Does not prove: that the registry's debian images match
# mmdebstrap's (they are built the same way, from the same archive), anything of
# docker/Dockerfile.cuda beyond its lint (no NVIDIA base image is reachable here).
#
#   sudo scripts/image_build.sh            (as root: mmdebstrap's root mode, buildah's storage)
# Variables:
#   IMAGE_DOCKERFILE  the Dockerfile (docker/Dockerfile)
#   IMAGE_TAG         the image's name (localhost/cube3d-server:cpu)
#   IMAGE_WORK        buildah's storage, the logs (build-image/; removed at the end unless
#                     IMAGE_KEEP=1 keeps it, with the image in it)
#   IMAGE_CACHE       ccache's cache, kept between runs (.cache/image-build/)
#   IMAGE_MIRROR      mmdebstrap's mirror arguments (default: deb.debian.org's bookworm,
#                     -updates and -security)
#   IMAGE_MAX_MIB     the largest image that passes (1536)
#   IMAGE_DEADLINE_S  one deadline for everything (1800)
# Exit 0: passed; 1: failed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DOCKERFILE=${IMAGE_DOCKERFILE:-$ROOT/docker/Dockerfile}
TAG=${IMAGE_TAG:-localhost/cube3d-server:cpu}
WORK=${IMAGE_WORK:-$ROOT/build-image}
CACHE=${IMAGE_CACHE:-$ROOT/.cache/image-build}
MAX_MIB=${IMAGE_MAX_MIB:-1536}
DEADLINE_S=${IMAGE_DEADLINE_S:-1800}
KEEP=${IMAGE_KEEP:-0}
T0=$SECONDS
IMAGE_LOG_NAME=image_build
# shellcheck source=scripts/image_common.sh
. "$ROOT/scripts/image_common.sh"

# ---- preconditions --------------------------------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then
  fail "needs root (mmdebstrap's root mode, buildah's storage and mounts): run it as root," \
    "e.g. sudo $0 (CI runs as root)"
fi
for tool in buildah mmdebstrap python3 timeout; do
  command -v "$tool" > /dev/null ||
    fail "needs $tool (scripts/setup.sh installs it, or apt-get install buildah mmdebstrap)"
done
[ -f "$DOCKERFILE" ] || fail "$DOCKERFILE: no such Dockerfile"
[[ $WORK != *[[:space:]]* && $CACHE != *[[:space:]]* ]] ||
  fail "$WORK / $CACHE: a path with spaces is not supported"

# Everything of buildah's lives under WORK: its own storage, never the machine's.
BUILDAH=(buildah --root "$WORK/storage" --runroot "$WORK/runroot" --storage-driver overlay)
SERVER_PID=""
RUN_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$SERVER_PID" ] || kill -KILL "$SERVER_PID" 2> /dev/null
  if [ -n "$RUN_PID" ]; then
    kill -KILL "$RUN_PID" 2> /dev/null
    wait "$RUN_PID" 2> /dev/null
  fi
  if [ "$KEEP" = 1 ]; then
    "${BUILDAH[@]}" rm --all > /dev/null 2>&1
    log "kept $WORK (IMAGE_KEEP=1): ${BUILDAH[*]} images"
    exit "$rc"
  fi
  if [ -d "$WORK/storage" ]; then
    "${BUILDAH[@]}" rm --all > /dev/null 2>&1
    "${BUILDAH[@]}" rmi --all --force > /dev/null 2>&1
  fi
  remove_work "$WORK" "$WORK"  # unmounts first: rm -rf would reach through a mount
  exit "$rc"
}
on_exit cleanup

if [ -d "$WORK/storage" ]; then  # an interrupted run's
  "${BUILDAH[@]}" rm --all > /dev/null 2>&1
  "${BUILDAH[@]}" rmi --all --force > /dev/null 2>&1
fi
unmount_under "$WORK" || fail "cannot unmount what is left under $WORK"
rm -rf "$WORK"
mkdir -p "$WORK" "$CACHE/ccache"
free_kb=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
((free_kb > 12 * 1024 * 1024)) || fail "$WORK has $((free_kb / 1024)) MiB free; needs about 12 GiB"

# ---- 1. the bases ---------------------------------------------------------------------------
# The FROM lines' images that are not earlier stages, with the Dockerfile's ARG defaults.
BASES=$(python3 - "$DOCKERFILE" << 'PY'
import re, sys
args, stages, bases = {}, set(), []
text = re.sub(r"\\\n", " ", open(sys.argv[1]).read())
for line in text.splitlines():
    words = line.split()
    if not words or words[0].startswith("#"):
        continue
    keyword = words[0].upper()
    if keyword == "ARG" and len(words) > 1 and "=" in words[1]:
        key, _, value = words[1].partition("=")
        args.setdefault(key, value.strip('"'))
    elif keyword == "FROM":
        names = [w for w in words[1:] if not w.startswith("--")]
        image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""),
                       names[0])
        if image not in stages and image not in bases:
            bases.append(image)
        if len(names) == 3 and names[1].upper() == "AS":
            stages.add(names[2])
print("\n".join(bases))
PY
) || fail "cannot read the FROM lines of $DOCKERFILE"
mirror=()
[ -n "${IMAGE_MIRROR:-}" ] && read -r -a mirror <<< "$IMAGE_MIRROR"
# make_base NAME SUITE SLIM: mmdebstrap's minbase of SUITE in a new scratch container, then
# committed as docker.io/library/NAME.
make_base() {
  local name=$1 suite=$2 slim=$3 ctr mnt excludes=()
  need 120 "the base $name"
  if ((slim)); then
    excludes=(--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias'
      --dpkgopt='path-exclude=/usr/share/groff/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
      --dpkgopt='path-exclude=/usr/share/linda/*')
  fi
  ctr=$("${BUILDAH[@]}" from scratch) || fail "buildah from scratch failed"
  mnt=$("${BUILDAH[@]}" mount "$ctr") || fail "buildah mount failed"
  if ! timeout "$(left)" mmdebstrap --mode=root --variant=minbase --quiet \
    --dpkgopt=force-unsafe-io --aptopt='Acquire::Languages "none"' "${excludes[@]}" \
    "$suite" "$mnt" "${mirror[@]}" < /dev/null > "$WORK/mmdebstrap-$suite-$slim.log" 2>&1; then
    tail -20 "$WORK/mmdebstrap-$suite-$slim.log" >&2
    fail "mmdebstrap $suite failed (log: $WORK/mmdebstrap-$suite-$slim.log)"
  fi
  # The official images' apt settings: no package cache left in a layer.
  cat > "$mnt/etc/apt/apt.conf.d/docker-clean" << 'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/*.bin
  "${BUILDAH[@]}" unmount "$ctr" > /dev/null
  "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd bash "$ctr" || fail "buildah config of $name failed"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "docker.io/library/$name" > /dev/null ||
    fail "buildah commit of $name failed"
  log "base $name: mmdebstrap --variant=minbase $suite$( ((slim)) && echo ' (slim: no docs, manuals, translations)'), as docker.io/library/$name"
}
for base in $BASES; do
  case $base in
    debian:bookworm | debian:12) make_base "$base" bookworm 0 ;;
    debian:bookworm-slim | debian:12-slim) make_base "$base" bookworm 1 ;;
    *) fail "FROM $base: this machine reaches no registry, and only Debian bases can be made" \
      "here (mmdebstrap): $DOCKERFILE cannot be built on it" ;;
  esac
done
T_BASES=$((SECONDS - T0))

# ---- 2. the build -----------------------------------------------------------------------------
need 300 "buildah bud"
volumes=(-v "$CACHE/ccache:/root/.cache/ccache")
build_args=()
# A machine whose HTTPS goes through a proxy with a CA of its own trusts it in its bundle; the
# build's pip must too (Debian's bundle in the image does not have it).
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
  volumes+=(-v /etc/ssl/certs/ca-certificates.crt:/run/build-host-ca.crt:ro)
  build_args+=(--build-arg PIP_ARGS=--cert=/run/build-host-ca.crt)
fi
log "buildah bud -f ${DOCKERFILE#"$ROOT"/} -t $TAG (log: $WORK/build.log)"
t=$SECONDS
# Each line of the log starts with the seconds since the build began, so that the steps' times
# can be told (said below).
timeout "$(left)" "${BUILDAH[@]}" bud --isolation chroot --pull-never --format docker \
  --layers=false "${volumes[@]}" "${build_args[@]}" -f "$DOCKERFILE" -t "$TAG" "$ROOT" \
  < /dev/null 2>&1 | while IFS= read -r line; do
  printf '%4d %s\n' $((SECONDS - t)) "$line"
done > "$WORK/build.log"
((PIPESTATUS[0] == 0)) || {
  tail -30 "$WORK/build.log" >&2
  fail "buildah bud failed (log: $WORK/build.log)"
}
T_BUILD=$((SECONDS - t))
log "built $TAG in $T_BUILD s; the steps that took 10 s or more:"
awk -v end="$T_BUILD" '
  function flush() { if (step != "" && $1 - at >= 10) printf "  %4d s  %s\n", $1 - at, step }
  / STEP [0-9]+\/[0-9]+: / { flush(); at = $1; step = $0; sub(/^ *[0-9]+ /, "", step); step = substr(step, 1, 96) }
  END { $1 = end; flush() }' "$WORK/build.log"

# ---- 3. the image's config, size and contents -------------------------------------------------
"${BUILDAH[@]}" inspect --type image "$TAG" > "$WORK/inspect.json" || fail "buildah inspect failed"
# One line each: USER, then the HEALTHCHECK's shell command, then the ENTRYPOINT and CMD words
# (one per line after a count), so that bash can read them without parsing JSON.
CONFIG=$(python3 - "$WORK/inspect.json" << 'PY'
import json, sys
config = json.load(open(sys.argv[1]))["Docker"]["config"]
test = (config.get("Healthcheck") or {}).get("Test") or []
if test[:1] != ["CMD-SHELL"] or len(test) != 2:
    sys.exit(f"the image has no shell-form HEALTHCHECK (Healthcheck.Test: {test})")
argv = (config.get("Entrypoint") or []) + (config.get("Cmd") or [])
if not argv:
    sys.exit("the image has no ENTRYPOINT")
if any("\n" in word for word in argv + test):
    sys.exit("a newline in the ENTRYPOINT, CMD or HEALTHCHECK")
print(config.get("User", ""))
print(test[1])
print(len(argv))
print("\n".join(argv))
PY
) || fail "the image's config (above)"
{
  read -r USER_CONFIG
  read -r HEALTHCHECK
  read -r argc
  ARGV=()
  for ((i = 0; i < argc; i++)); do
    read -r word
    ARGV+=("$word")
  done
} <<< "$CONFIG"
[ "$USER_CONFIG" = 10001:10001 ] || fail "the image's USER is '$USER_CONFIG', not 10001:10001"
log "config: USER $USER_CONFIG, ENTRYPOINT+CMD ${ARGV[*]}, HEALTHCHECK $HEALTHCHECK"

CTR=$("${BUILDAH[@]}" from --pull-never "$TAG") || fail "buildah from $TAG failed"
MNT=$("${BUILDAH[@]}" mount "$CTR") || fail "buildah mount failed"
SIZE_MIB=$(du -sm --exclude=./proc --exclude=./sys --exclude=./dev "$MNT" | cut -f1)
SIZE_TREE=$(du -sm "$MNT/opt/cube3d" | cut -f1)
cuda=$(find "$MNT" -xdev -type f \( -name 'libtorch_cuda*' -o -name 'libc10_cuda*' \
  -o -name 'libcublas*' -o -name 'libcudnn*' -o -name 'libnccl*' -o -name 'libnvshmem*' \
  -o -name 'libcufft*' -o -name 'libcusparse*' -o -name 'libcusolver*' -o -name 'libcurand*' \
  -o -name 'libnvrtc*' -o -name 'libnvJitLink*' -o -name 'libcaffe2_nvrtc*' \) -printf '%P\n')
# shellcheck disable=SC2016 # dpkg-query's own format
packages=$(chroot "$MNT" dpkg-query -W -f '${Package}\n' 2> /dev/null | grep -E '^(nvidia|cuda|libcudnn|libnccl)' || true)
"${BUILDAH[@]}" unmount "$CTR" > /dev/null
[ -z "$cuda" ] || fail "the CPU image carries CUDA libraries:"$'\n'"$cuda"
[ -z "$packages" ] || fail "the CPU image has CUDA packages installed: $packages"
log "size: $SIZE_MIB MiB (of which /opt/cube3d $SIZE_TREE MiB); no CUDA backend in it"
((SIZE_MIB <= MAX_MIB)) || fail "the image is $SIZE_MIB MiB, over IMAGE_MAX_MIB=$MAX_MIB"

# ---- 4. the server, as the image runs it ------------------------------------------------------
read -r GRPC_PORT HTTP_PORT METRICS_PORT < <(free_loopback_ports)
ENVS=(--env "CUBE3D_LISTEN=127.0.0.1:$GRPC_PORT" --env "CUBE3D_HTTP_LISTEN=127.0.0.1:$HTTP_PORT"
  --env "CUBE3D_METRICS_LISTEN=127.0.0.1:$METRICS_PORT")
in_image() { "${BUILDAH[@]}" run --isolation chroot "${ENVS[@]}" "$CTR" -- "$@"; }
need 90 "the server"
log "buildah run: ${ARGV[*]} (gRPC :$GRPC_PORT, HTTP :$HTTP_PORT, metrics :$METRICS_PORT)"
T_START=$SECONDS
in_image "${ARGV[@]}" > "$WORK/server.log" 2>&1 &
RUN_PID=$!
server_died() {
  log "server log (last 30 lines):" >&2
  tail -30 "$WORK/server.log" >&2
  fail "$1"
}
# The server: the process among buildah run's descendants that runs the ENTRYPOINT.
descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1"); do
    echo "$child"
    descendants "$child"
  done
}
entry=$(basename "${ARGV[0]}")
while [ -z "$SERVER_PID" ]; do
  kill -0 "$RUN_PID" 2> /dev/null || server_died "buildah run exited before the server started"
  ((SECONDS - T_START < 60)) || server_died "no $entry process 60 s after buildah run"
  for pid in $(descendants "$RUN_PID"); do
    [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = "${entry:0:15}" ] && SERVER_PID=$pid
  done
  [ -n "$SERVER_PID" ] || sleep 0.2
done
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$SERVER_PID/status")
[ "$uid" = 10001 ] || server_died "the server runs as uid $uid, not 10001"
log "$entry is pid $SERVER_PID, uid $uid"

await_health "$SERVER_PID" "${BUILDAH[@]}" run --isolation chroot "${ENVS[@]}" "$CTR" -- \
  /bin/sh -c "$HEALTHCHECK"
for probe in "$HTTP_PORT/healthz" "$HTTP_PORT/readyz" "$METRICS_PORT/metrics"; do
  code=$(python3 -c '
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://127.0.0.1:" + sys.argv[1], timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:
    print(type(e).__name__)' "$probe")
  [ "$code" = 200 ] || server_died "GET /${probe#*/} on port ${probe%%/*} answered '$code', not 200"
done
log "GET /healthz, /readyz (HTTP) and /metrics: 200"

# ---- 5. one mesh, then SIGTERM ----------------------------------------------------------------
need 45 "a generation"
t=$SECONDS
if ! out=$(timeout $(($(left) - 20)) "${BUILDAH[@]}" run --isolation chroot "$CTR" -- \
  cube3d-client --server "127.0.0.1:$GRPC_PORT" --prompt "a wooden chair" --resolution-base 4 \
  --out /tmp/image-build.glb --no-progress --timeout-ms $((($(left) - 25) * 1000)) 2>&1); then
  echo "$out" >&2
  server_died "cube3d-client failed inside the image"
fi
T_MESH=$((SECONDS - t))
magic=$("${BUILDAH[@]}" run --isolation chroot "$CTR" -- head -c 4 /tmp/image-build.glb 2> /dev/null)
problem=$(mesh_problem "$magic" "$out")
[ -z "$problem" ] || server_died "$problem"
log "cube3d-client inside: ${out%%$'\n'*}"

grace=$(drain_grace "${BUILDAH[@]}" run --isolation chroot "$CTR" -- "${ARGV[@]}")
stop_server "$SERVER_PID" "$RUN_PID" "$grace"  # buildah run's status is the server's
[ -z "$STOP_PROBLEM" ] || server_died "$STOP_PROBLEM"
SERVER_PID="" RUN_PID="" T_STOP=$STOP_S
log "SIGTERM: exit 0 after $T_STOP s (drain grace $grace s)"
log "PASS in $((SECONDS - T0)) s: bases $T_BASES s, build $T_BUILD s, serving after $T_READY s," \
  "mesh $T_MESH s, stop $T_STOP s; image $SIZE_MIB MiB"
