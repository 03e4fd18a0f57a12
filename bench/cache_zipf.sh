#!/usr/bin/env bash
# The result cache under a skewed prompt mix: players repeat popular prompts, so the same
# offered load is served twice by a demo cube3d-server,
#   1. cache on  (--set cache.enabled=true, the server's default),
#   2. cache off (--set cache.enabled=false),
# each time a fresh server (an empty cache) driven by cube3d-loadgen in an open loop (Poisson
# arrivals at RATE for DURATION seconds, the same arrival seed, so both runs are offered the
# same requests at the same times) with --prompt-mix PROMPT_MIX (zipf:50: 50 distinct prompts,
# prompt k with probability proportional to 1/k; a repeated prompt is an identical request).
# An open loop, not a closed one, because the load must not follow the server: a closed loop
# would send faster to the cached server and compare different loads.
#
# Writes
#   bench/results/<date>-cache-zipf/cache-{on,off}.json    the loadgen reports
#   bench/results/<date>-cache-zipf/cache-{on,off}.csv     a line per request (with its cache
#       status)
#   bench/results/<date>-cache-zipf/server-{on,off}.log    the servers' logs
#   bench/results/<date>-cache-zipf/metrics-{on,off}.txt   the server's request and cache
#       counters after the run
#   bench/results/<date>-cache-zipf.json                   the comparison: each run's
#       throughput, e2e p50/p99, queue p50 and cache-status counts, the ratios on / off, the
#       machine and the revision, and warnings (e.g. a server that reports no cache status)
# and prints a small table. Stops the server on exit, also on failure or Ctrl-C.
#
#   bench/cache_zipf.sh
#   RATE=8 DURATION=60 bench/cache_zipf.sh
#   bench/cache_zipf.sh --dry-run      # the settings and commands, without running anything
#
# Settings (environment): BUILD_DIR (build), SERVER_CONFIG (models/demo-server.yaml), PROTOCOL
# (grpc or http; http starts the server's http_listen), PROMPT_MIX (zipf:50), RATE (4,
# requests/s offered), DURATION (40, seconds measured per run), WARMUP (0 requests: the cold
# cache is part of what is measured), ARRIVAL_SEED (1), SEED (0, the prompt draw's and the
# sampling seed), RESOLUTION_BASE (4), DEADLINE_MS (120000), CACHE_MAX_BYTES (unset: the
# server's; else the cache-on server's cache.max_bytes), OUT_DIR (bench/results), DATE
# (date +%F). The defaults take about 2 minutes in all on 2 CPU cores.
#
# Exit status: 0 when both runs completed, 1 when a server or loadgen failed, 2 on a usage
# error (unknown argument, a setting that is no number).
set -euo pipefail

usage() {  # the header comment, without its '#'
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"
}

DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "cache_zipf: unknown argument '$arg' (settings are environment variables; see --help)" >&2
      exit 2
      ;;
  esac
done

SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$SOURCE"
BENCH_NAME=cache_zipf
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_settings PROTOCOL=grpc PROMPT_MIX=zipf:50 RATE=4 DURATION=40 WARMUP=0 ARRIVAL_SEED=1 SEED=0 \
  RESOLUTION_BASE=4 DEADLINE_MS=120000 CACHE_MAX_BYTES=

# Every setting is checked before anything starts, so a typo costs no server start.
die_usage() {
  echo "cache_zipf: $1" >&2
  exit 2
}
positive_number() {  # name value
  if ! [[ $2 =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] || ! awk -v v="$2" 'BEGIN { exit !(v > 0) }'; then
    die_usage "$1 must be a positive number, got '$2'"
  fi
}
whole_number() {  # name value
  [[ $2 =~ ^[0-9]+$ ]] || die_usage "$1 must be a whole number >= 0, got '$2'"
}
positive_number RATE "$RATE"
positive_number DURATION "$DURATION"
whole_number WARMUP "$WARMUP"
whole_number ARRIVAL_SEED "$ARRIVAL_SEED"
whole_number SEED "$SEED"
whole_number RESOLUTION_BASE "$RESOLUTION_BASE"
whole_number DEADLINE_MS "$DEADLINE_MS"
((DEADLINE_MS > 0)) || die_usage "DEADLINE_MS must be positive, got '$DEADLINE_MS'"
if [[ -n "$CACHE_MAX_BYTES" ]]; then whole_number CACHE_MAX_BYTES "$CACHE_MAX_BYTES"; fi
[[ $PROTOCOL == grpc || $PROTOCOL == http ]] ||
  die_usage "PROTOCOL must be grpc or http, got '$PROTOCOL'"
# The form only; cube3d-loadgen checks the numbers (and names --prompt-mix when they are bad).
[[ $PROMPT_MIX =~ ^(fixed|zipf:[^:]+(:[^:]+)?)$ ]] ||
  die_usage "PROMPT_MIX must be fixed, zipf:N or zipf:N:S, got '$PROMPT_MIX'"
[[ $DATE =~ ^[A-Za-z0-9._-]+$ ]] || die_usage "DATE must be a plain file name part, got '$DATE'"

set_bench_paths cache-zipf

# The server's cache flags for run $1 (on or off), into CACHE_FLAGS.
set_cache_flags() {
  if [[ $1 == on ]]; then
    CACHE_FLAGS=(--set cache.enabled=true)
    if [[ -n "$CACHE_MAX_BYTES" ]]; then CACHE_FLAGS+=(--set "cache.max_bytes=$CACHE_MAX_BYTES"); fi
  else
    CACHE_FLAGS=(--set cache.enabled=false)
  fi
}
loadgen_flags=(--protocol "$PROTOCOL" --rate "$RATE" --duration "$DURATION" --warmup "$WARMUP"
  --arrival-seed "$ARRIVAL_SEED" --seed "$SEED" --prompt-mix "$PROMPT_MIX"
  --resolution-base "$RESOLUTION_BASE" --deadline-ms "$DEADLINE_MS")

if ((DRY_RUN)); then
  for run in on off; do
    set_cache_flags "$run"
    echo "cache $run: $SERVER_BIN --config $SERVER_CONFIG ${CACHE_FLAGS[*]} (ports chosen at start)"
    echo "cache $run: $LOADGEN_BIN ${loadgen_flags[*]} --json $RUN_DIR/cache-$run.json" \
      "--per-request-csv $RUN_DIR/cache-$run.csv"
  done
  echo "summary: $SUMMARY"
  exit 0
fi

require_bench_tools 1
mkdir -p "$RUN_DIR"

stop_server_on_exit

# Starts a server for run $1 (on or off) and waits until it is ready; sets GRPC_PORT,
# HTTP_PORT and METRICS_PORT.
start_server() {
  pick_server_ports
  set_cache_flags "$1"
  echo "cache_zipf: cache $1: starting $SERVER_BIN (gRPC :$GRPC_PORT, HTTP :$HTTP_PORT)" >&2
  start_server_and_wait "$RUN_DIR/server-$1.log" " (does it know cache.enabled?):" \
    "${CACHE_FLAGS[@]}"
}

run_once() {  # on | off
  start_server "$1"
  local port="$GRPC_PORT"
  if [[ $PROTOCOL == http ]]; then port="$HTTP_PORT"; fi
  echo "cache_zipf: cache $1: $PROMPT_MIX at $RATE req/s for $DURATION s over $PROTOCOL" >&2
  "$LOADGEN_BIN" --server "127.0.0.1:$port" "${loadgen_flags[@]}" \
    --json "$RUN_DIR/cache-$1.json" --per-request-csv "$RUN_DIR/cache-$1.csv" >/dev/null
  curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" |
    grep -E '^cube3d_(requests_total|cache)' >"$RUN_DIR/metrics-$1.txt" || true
  stop_server
}

LOADAVG="$(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$RUN_DIR"/cache-*.json "$RUN_DIR"/cache-*.csv "$RUN_DIR"/metrics-*.txt
run_once on
run_once off

describe_machine

python3 - "$SUMMARY" "$RUN_DIR" "$NAME" "$DATE" "$REVISION" "$CORES" "$CPU_MODEL" \
  "$SERVER_CONFIG" "$LOADAVG" "$CACHE_MAX_BYTES" <<'EOF'
import json
import sys

sys.path.insert(0, "bench")
from bench_summary import provenance  # noqa: E402

(summary_path, run_dir, name, date, revision, nproc, cpu_model, server_config, loadavg,
 cache_max_bytes) = sys.argv[1:]


def load(file):
    with open(f"{run_dir}/{file}") as f:
        return json.load(f)


def run_summary(report):
    latency = report["latency_ms"]
    cache = report["cache_status"]
    ok = report["requests"]["ok"]
    return {
        "sent": report["requests"]["sent"],
        "ok": ok,
        "errors": report["requests"]["errors"],
        "wall_s": report["wall_s"],
        "offered_rps": report["offered_rps"],
        "throughput_ok_rps": report["throughput_ok_rps"],
        "e2e_p50_ms": latency["e2e"]["p50"],
        "e2e_p99_ms": latency["e2e"]["p99"],
        "queue_p50_ms": latency["queue"]["p50"],
        "cache_status": cache,
        # Answered without a computation of their own.
        "hit_or_coalesced_share": (cache["hit"] + cache["coalesced"]) / ok if ok else None,
    }


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


reports = {run: load(f"cache-{run}.json") for run in ("on", "off")}
runs = {run: run_summary(reports[run]) for run in reports}
on, off = runs["on"], runs["off"]
warnings = []
for run, r in runs.items():
    if r["ok"] and r["cache_status"]["unknown"] == r["ok"]:
        warnings.append(f"cache {run}: no answer carried a cache status (a server without the "
                        "result cache?)")
    if r["errors"]:
        warnings.append(f"cache {run}: failed requests {r['errors']}")
if off["ok"] and off["cache_status"]["hit"] + off["cache_status"]["coalesced"] > 0:
    warnings.append("cache off: some answers came from the cache")
if on["ok"] and on["cache_status"]["hit"] == 0 and on["cache_status"]["unknown"] < on["ok"]:
    warnings.append("cache on: no hit at all")
for w in warnings:
    print(f"cache_zipf: warning: {w}", file=sys.stderr)

config = reports["on"]["config"]
summary = {
    **provenance("bench/cache_zipf.sh", date, revision, nproc, cpu_model, loadavg),
    "server": {"config": server_config,
               "cache_on": "--set cache.enabled=true" +
                           (f" --set cache.max_bytes={cache_max_bytes}" if cache_max_bytes else ""),
               "cache_off": "--set cache.enabled=false",
               "fresh_server_per_run": True},
    "load": {"protocol": config["protocol"], "mode": config["mode"],
             "rate_rps": config["rate_rps"], "arrival_seed": config["arrival_seed"],
             "max_duration_s": config["max_duration_s"], "warmup": config["warmup"],
             "prompt_mix": config["prompt_mix"], "request": config["request"]},
    "percentile_method": reports["on"]["percentile_method"],
    "reports": {run: f"{name}/cache-{run}.json" for run in runs},
    "runs": {"cache_on": on, "cache_off": off},
    "cache_on_over_off": {
        "throughput_ok_rps": ratio(on["throughput_ok_rps"], off["throughput_ok_rps"]),
        "e2e_p50_ms": ratio(on["e2e_p50_ms"], off["e2e_p50_ms"]),
        "e2e_p99_ms": ratio(on["e2e_p99_ms"], off["e2e_p99_ms"]),
    },
    "warnings": warnings,
}
with open(summary_path, "w") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")


def cell(v, fmt="{:.1f}"):
    return "-" if v is None else fmt.format(v)


print(f"{config['prompt_mix']['spec']} at {config['rate_rps']} req/s for "
      f"{config['max_duration_s']} s over {config['protocol']}; {nproc} x {cpu_model}; {revision}")
print(f"{'run':<10} {'ok/sent':>9} {'req/s':>7} {'e2e p50':>9} {'e2e p99':>9}   "
      f"{'hit':>5} {'miss':>5} {'coal':>5} {'bypass':>6} {'unkn':>5}")
for run, r in (("cache on", on), ("cache off", off)):
    c = r["cache_status"]
    print(f"{run:<10} {str(r['ok']) + '/' + str(r['sent']):>9} {r['throughput_ok_rps']:>7.2f} "
          f"{cell(r['e2e_p50_ms']):>9} {cell(r['e2e_p99_ms']):>9}   {c['hit']:>5} {c['miss']:>5} "
          f"{c['coalesced']:>5} {c['bypass']:>6} {c['unknown']:>5}")
q = summary["cache_on_over_off"]
print(f"on / off: throughput {cell(q['throughput_ok_rps'], '{:.2f}')}, e2e p50 "
      f"{cell(q['e2e_p50_ms'], '{:.3f}')}, e2e p99 {cell(q['e2e_p99_ms'], '{:.3f}')}")
print(f"wrote {summary_path} and {run_dir}/")
EOF
