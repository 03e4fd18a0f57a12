#!/usr/bin/env bash
# The mesh-stage benchmark: cube3d-mesh-bench (ours: marching cubes, clean-up, decimation, GLB on
# the analytic shapes of bench/analytic_shapes.h, per stage, at each resolution and thread count)
# and, on the very same grids, the official post-processing (bench/official_mesh.py:
# scikit-image's marching cubes and pymeshlab as the official cube3d/generate.py calls them),
# joined into one JSON file under a label:
#
#   bench/mesh_stage.sh OUT.json [--label after] [--resolutions 8,9] [--threads 1,2,0]
#       [--repeat 3] [--official-resolutions 8] [--official-repeat 1] [--no-official]
#       [--mesh-bench BIN] [-- BENCH ARGS...]
#
# OUT.json keeps one entry per label ({"runs": {"before": ..., "after": ...}}): run it again with
# another label (and --mesh-bench pointing at another build) to put two versions side by side.
# With --no-official, official figures already under the label are kept.
# scikit-image and pymeshlab are installed into the project's venv by this script when missing;
# they are the bench's only, never the server's. The grids (67 MB each at resolution 8, 540 MB at
# 9) go to a temporary folder, removed at the end. The official path runs on one core and takes
# minutes on the noise field at resolution 9 (12.7M faces), hence its own resolutions (default 8).
set -euo pipefail
cd "$(dirname "$0")/.."

out="" label="after" resolutions="8,9" threads="1,2,0" repeat=3 official_repeat=1
official_resolutions="8"
official=1 bench="${BUILD_DIR:-build}/bin/cube3d-mesh-bench" extra=()
while (($#)); do
  case "$1" in
    --label) label=$2; shift 2 ;;
    --resolutions) resolutions=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --official-repeat) official_repeat=$2; shift 2 ;;
    --official-resolutions) official_resolutions=$2; shift 2 ;;
    --no-official) official=0; shift ;;
    --mesh-bench) bench=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "mesh_stage.sh: unknown option $1" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
[ -n "$out" ] || { echo "usage: bench/mesh_stage.sh OUT.json [options] (see the header)" >&2; exit 2; }
[ -x "$bench" ] || { echo "mesh_stage.sh: no $bench (scripts/build.sh builds it)" >&2; exit 2; }

. scripts/python_env.sh
if ((official)) && ! "$PYTHON" -c "import skimage, pymeshlab" 2>/dev/null; then
  echo "mesh_stage.sh: installing scikit-image and pymeshlab into $("$PYTHON" -c 'import sys; print(sys.prefix)') (bench only)"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check scikit-image pymeshlab
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "mesh_stage.sh: ours ($bench) at resolutions $resolutions, threads $threads"
dump=()
((official)) && dump=(--dump-grids "$tmp")
"$bench" --resolutions "$resolutions" --threads "$threads" --repeat "$repeat" \
  --json "$tmp/ours.json" "${dump[@]}" "${extra[@]}"
if ((official)); then
  grids=()
  for r in ${official_resolutions//,/ }; do
    for grid in "$tmp"/*-r"$r".grid; do [ -e "$grid" ] && grids+=("$grid"); done
  done
  echo "mesh_stage.sh: the official post-processing on the same grids (resolutions" \
    "$official_resolutions)"
  "$PYTHON" bench/official_mesh.py --json "$tmp/official.json" --repeat "$official_repeat" \
    "${grids[@]}"
fi

"$PYTHON" - "$out" "$label" "$tmp/ours.json" "$tmp/official.json" <<'EOF'
import datetime
import json
import os
import sys

out, label, ours, official = sys.argv[1:5]
data = {"bench": "mesh-stage", "runs": {}}
if os.path.exists(out):
    with open(out) as f:
        data = json.load(f)
run = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
with open(ours) as f:
    run["ours"] = json.load(f)
if os.path.exists(official):
    with open(official) as f:
        run["official"] = json.load(f)
elif "official" in data["runs"].get(label, {}):
    # --no-official: the label's earlier official figures (same grids) are kept.
    run["official"] = data["runs"][label]["official"]
data["runs"][label] = run
with open(out + ".tmp", "w") as f:
    json.dump(data, f, indent=2)
    f.write("\n")
os.replace(out + ".tmp", out)
print(f"mesh_stage.sh: {out}: run '{label}' written")
EOF
