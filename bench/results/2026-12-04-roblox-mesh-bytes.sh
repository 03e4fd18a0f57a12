#!/bin/bash
# Bytes of one 20,000-triangle mesh (MESH_PROFILE_ROBLOX) per encoding, with and without gzip.
# Usage: 2026-12-04-roblox-mesh-bytes.sh PORT (a demo server's http_listen port on 127.0.0.1);
# the answers are kept in a temporary folder, printed at the end.
set -e
port=$1
out=$(mktemp -d)
url=http://127.0.0.1:$port/v1/meshes:generate
base='"prompt": "a wooden chair", "seed": "1", "meshProfile": "MESH_PROFILE_ROBLOX", "targetFaceCount": 20000, "resolutionBase": 7'
row() {  # name, body, accept
  local plain gz
  plain=$(curl -s -H 'Content-Type: application/json' -H "Accept: $3" -d "{$base, $2}" -o $out/$1 -w '%{size_download}' "$url")
  gz=$(curl -s -H 'Content-Type: application/json' -H "Accept: $3" -H 'Accept-Encoding: gzip' -d "{$base, $2}" -o $out/$1.gz -w '%{size_download}' "$url")
  printf '| %s | %s | %s |\n' "$1" "$plain" "$gz"
}
echo "| answer | bytes | bytes with Accept-Encoding: gzip |"
echo "| --- | --- | --- |"
row raw_json '"format": "MESH_FORMAT_RAW"' application/json
row compact_float32_json '"format": "MESH_FORMAT_COMPACT"' application/json
row compact_q16_json '"format": "MESH_FORMAT_COMPACT", "compact": {"positions": "COMPACT_POSITIONS_QUANTIZED16"}' application/json
row compact_q16_normals_json '"format": "MESH_FORMAT_COMPACT", "compact": {"positions": "COMPACT_POSITIONS_QUANTIZED16", "normals": true}' application/json
row compact_float32_body '"format": "MESH_FORMAT_COMPACT"' application/vnd.cube3d.mesh
row compact_q16_body '"format": "MESH_FORMAT_COMPACT", "compact": {"positions": "COMPACT_POSITIONS_QUANTIZED16"}' application/vnd.cube3d.mesh
row glb_body '"format": "MESH_FORMAT_GLB"' model/gltf-binary
python3 - "$out" <<'PY'
import json, sys
a = json.load(open(sys.argv[1] + "/raw_json"))
print("faces", a["faceCount"], "vertices", a["vertexCount"])
PY
echo "answers in $out"
