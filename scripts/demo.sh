#!/usr/bin/env bash
# The README's main job: generates a shape with the embedded demo model (random weights made
# from a seed, so nothing is downloaded) and prints its tokens and timings.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh
mkdir -p build/demo
build/bin/cube3d-generate --model-config models/demo.yaml --resolution-base 6 \
  --tokens-out build/demo/tokens.txt --timings-json build/demo/timings.json \
  --dump build/demo/dump.safetensors "$@"
echo "demo: wrote build/demo/tokens.txt, build/demo/timings.json, build/demo/dump.safetensors"
