#!/usr/bin/env bash
# The README's main job, on the embedded demo model (random weights made from a seed, a small
# random CLIP with the real vocabulary: nothing is downloaded):
#   1. cube3d-generate: a prompt -> shape tokens, timings, a mesh file and its picture;
#   2. cube3d-server on models/demo-server.yaml, then cube3d-client asks it for a mesh.
# Outputs land in build/demo/. Extra arguments go to cube3d-client (e.g. --prompt "a chair").
# The server also serves the browser playground (http_listen, CUBE3D_DEMO_HTTP, default
# 127.0.0.1:8080); `scripts/demo.sh --serve` keeps it running after the demo, until Ctrl-C, for
# trying prompts in a browser.
set -euo pipefail
cd "$(dirname "$0")/.."
serve=0
if [ "${1:-}" = "--serve" ]; then
  serve=1
  shift
fi

scripts/setup.sh
scripts/build.sh
out=build/demo
mkdir -p "$out"
prompt="a small wooden chair"

echo "== cube3d-generate (offline)"
build/bin/cube3d-generate --model-config models/demo.yaml --prompt "$prompt" \
  --resolution-base 6 --mesh-out "$out/generate.glb" --preview "$out/generate.png" \
  --tokens-out "$out/tokens.txt" --timings-json "$out/timings.json"

echo "== cube3d-server + cube3d-client"
listen=${CUBE3D_DEMO_LISTEN:-127.0.0.1:50051}
metrics=${CUBE3D_DEMO_METRICS:-127.0.0.1:9464}
http=${CUBE3D_DEMO_HTTP:-127.0.0.1:8080}
build/bin/cube3d-server --config models/demo-server.yaml --listen "$listen" \
  --metrics-listen "$metrics" --http-listen "$http" 2> "$out/server.log" &
server=$!
stop_server() {
  if kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server"
    wait "$server" || true
  fi
}
trap stop_server EXIT
# The server reports SERVING once the model is loaded and warmed up.
for _ in $(seq 1 120); do
  grep -q "cube3d-server serving" "$out/server.log" && break
  kill -0 "$server" 2>/dev/null || { cat "$out/server.log"; echo "demo: the server exited" >&2; exit 1; }
  sleep 0.5
done
grep -q "cube3d-server serving" "$out/server.log" || { cat "$out/server.log"; exit 1; }
build/bin/cube3d-client --server "$listen" --prompt "$prompt" --out "$out/client.glb" \
  --tokens-out "$out/client_tokens.txt" "$@"
. scripts/python_env.sh
"$PYTHON" - "$metrics" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
ok = [l for l in body.splitlines() if l.startswith('cube3d_requests_total{code="OK"}')]
print(f"metrics at http://{sys.argv[1]}/metrics: {ok[0] if ok else 'no requests yet'}")
PY
if ((serve)); then
  echo "playground: http://$http/ (type a prompt, watch it decode and mesh, turn the shape)"
  echo "demo: serving until Ctrl-C (the server's log: $out/server.log)"
  wait "$server" || true
else
  echo "playground: http://$http/ while a server runs: scripts/demo.sh --serve keeps this one up"
fi
stop_server
trap - EXIT
echo "demo: wrote $out/generate.glb (and its picture, generate.png), $out/client.glb, $out/tokens.txt, $out/timings.json ($out/server.log has the server's log)"
