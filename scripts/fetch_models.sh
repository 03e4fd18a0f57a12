#!/usr/bin/env bash
# Fetches and checks the real Cube 3D weights (Roblox/cube3d-v0.1 or -v0.5 and CLIP's text tower
# from openai/clip-vit-large-patch14) and writes a server config for them:
#   scripts/fetch_models.sh v0.1|v0.5 [DIR] [--device auto|cpu|cuda] [--check-only] ...
# DIR defaults to .cache/models/cube3d-<version>/ of this checkout, where
# models/cube3d-<version>-server.yaml expects the files. HF_TOKEN and HF_ENDPOINT are honoured.
# All the work is in fetch_models.py (its --help says more); this picks the project's Python
# (scripts/python_env.sh: .venv/ from scripts/setup.sh, or PYTHON), which has huggingface_hub,
# numpy and PyYAML. Arguments and the current directory pass through unchanged.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -f "$here/python_env.sh" ]; then
  # shellcheck source=scripts/python_env.sh
  . "$here/python_env.sh"
fi
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import huggingface_hub, numpy, yaml" 2> /dev/null; then
  echo "fetch_models: $PYTHON lacks huggingface_hub, numpy or PyYAML: run scripts/setup.sh" >&2
  exit 2
fi
exec "$PYTHON" "$here/fetch_models.py" "$@"
