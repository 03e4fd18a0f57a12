#!/usr/bin/env bash
# gRPC vs HTTP latency on one server: starts a demo cube3d-server with both listeners (gRPC and
# http_listen) and drives it
#   1. with the same closed loop over each protocol in turn, ROUNDS times alternating (grpc,
#      http, grpc, http, ...; a warm-up before the first): a closed loop of 32 on 8 decode slots
#      is mostly queueing, and its p50 moves by tens of ms from run to run with the machine's
#      throughput, so one pair of runs cannot resolve a few ms; the rounds show the spread, and
#      the server's CPU per request (process_cpu_seconds_total) what each protocol costs it;
#   2. with both protocols at once (CONCURRENCY/2 workers each) over the one queue: the
#      queueing is then the same for both, and what differs is the protocol,
# and writes
#   bench/results/<date>-loadgen-http-vs-grpc/{grpc,http}-<round>.json, shared-{grpc,http}.json
#       the loadgen reports
#   bench/results/<date>-loadgen-http-vs-grpc/server.log         the server's log (a line a
#       request)
#   bench/results/<date>-loadgen-http-vs-grpc/metrics-<protocol>-<round>.txt   the server's
#       counters after each run (requests by code, HTTP connections closed by reason), and
#       cpu-<protocol>-<round>.txt its CPU seconds before and after
#   bench/results/<date>-loadgen-http-vs-grpc.json               the comparison: each run's
#       p50/p90/p99 e2e, ttft and queue time, throughput, errors and server CPU per request, the
#       medians over the rounds, the shared-queue phase, the machine (and its load average when
#       the run began: the machine may be shared), the revision
# and prints a small table. Stops the server on exit, also on failure or Ctrl-C.
#
#   bench/compare_protocols.sh
#   CONCURRENCY=8 REQUESTS=50 WARMUP=8 bench/compare_protocols.sh
#
# Settings (environment): BUILD_DIR (build), SERVER_CONFIG (models/demo-server.yaml),
# CONCURRENCY (32), REQUESTS (200, measured per protocol and round), WARMUP (32), ROUNDS (2),
# SHARED_SECONDS (40, the both-at-once phase; 0 skips it), RESOLUTION_BASE (4), DEADLINE_MS
# (600000), OUT_DIR (bench/results), DATE (date +%F).
set -euo pipefail

SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$SOURCE"
BENCH_NAME=compare_protocols
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_settings CONCURRENCY=32 REQUESTS=200 WARMUP=32 ROUNDS=2 SHARED_SECONDS=40 RESOLUTION_BASE=4 \
  DEADLINE_MS=600000

set_bench_paths loadgen-http-vs-grpc
require_bench_tools 2
mkdir -p "$RUN_DIR"

pick_server_ports
stop_server_on_exit

echo "compare_protocols: starting $SERVER_BIN (gRPC :$GRPC_PORT, HTTP :$HTTP_PORT)" >&2
start_server_and_wait "$RUN_DIR/server.log" ""

server_cpu_s() {
  curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^process_cpu_seconds_total /{print $2}'
}
port_of() { if [[ $1 == grpc ]]; then echo "$GRPC_PORT"; else echo "$HTTP_PORT"; fi; }
run_loadgen() {  # protocol round warmup
  echo "compare_protocols: $1 (round $2): closed loop of $CONCURRENCY, $3 warm-up +" \
    "$REQUESTS requests" >&2
  local before after
  before="$(server_cpu_s)"
  "$LOADGEN_BIN" --protocol "$1" --server "127.0.0.1:$(port_of "$1")" \
    --concurrency "$CONCURRENCY" --requests "$REQUESTS" --warmup "$3" \
    --resolution-base "$RESOLUTION_BASE" --deadline-ms "$DEADLINE_MS" \
    --json "$RUN_DIR/$1-$2.json" >/dev/null
  after="$(server_cpu_s)"
  echo "$before $after" >"$RUN_DIR/cpu-$1-$2.txt"
  curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" |
    grep -E '^cube3d_(requests_total|http_connections_closed_total)' \
      >"$RUN_DIR/metrics-$1-$2.txt" || true
}
LOADAVG="$(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$RUN_DIR"/*.json "$RUN_DIR"/*.txt
for round in $(seq "$ROUNDS"); do
  warm=0
  if [[ $round == 1 ]]; then warm="$WARMUP"; fi
  run_loadgen grpc "$round" "$warm"
  run_loadgen http "$round" 0
done
if ((SHARED_SECONDS > 0)); then
  half=$((CONCURRENCY / 2))
  echo "compare_protocols: both at once: $half workers each for $SHARED_SECONDS s" >&2
  "$LOADGEN_BIN" --protocol grpc --server "127.0.0.1:$GRPC_PORT" --concurrency "$half" \
    --duration "$SHARED_SECONDS" --resolution-base "$RESOLUTION_BASE" \
    --deadline-ms "$DEADLINE_MS" --json "$RUN_DIR/shared-grpc.json" >/dev/null &
  shared_grpc=$!
  "$LOADGEN_BIN" --protocol http --server "127.0.0.1:$HTTP_PORT" --concurrency "$half" \
    --duration "$SHARED_SECONDS" --resolution-base "$RESOLUTION_BASE" \
    --deadline-ms "$DEADLINE_MS" --json "$RUN_DIR/shared-http.json" >/dev/null
  wait "$shared_grpc"
fi
stop_server

describe_machine

python3 - "$SUMMARY" "$RUN_DIR" "$NAME" "$DATE" "$REVISION" "$CORES" "$CPU_MODEL" \
  "$SERVER_CONFIG" "$CONCURRENCY" "$REQUESTS" "$WARMUP" "$RESOLUTION_BASE" "$LOADAVG" \
  "$ROUNDS" "$SHARED_SECONDS" <<'EOF'
import json
import os
import statistics
import sys

sys.path.insert(0, "bench")
from bench_summary import provenance  # noqa: E402

(summary_path, run_dir, name, date, revision, nproc, cpu_model, server_config, concurrency,
 requests, warmup, resolution_base, loadavg, rounds, shared_seconds) = sys.argv[1:]
rounds = int(rounds)


def load(file):
    with open(f"{run_dir}/{file}") as f:
        return json.load(f)


def run_summary(report, cpu_file=None):
    latency = report["latency_ms"]
    out = {
        "ok": report["requests"]["ok"],
        "sent": report["requests"]["sent"],
        "errors": report["requests"]["errors"],
        "wall_s": report["wall_s"],
        "throughput_ok_rps": report["throughput_ok_rps"],
        **{f"{kind}_ms": {k: latency[kind][k] for k in ("count", "mean", "p50", "p90", "p99", "max")}
           for kind in ("e2e", "ttft", "queue")},
    }
    if cpu_file and os.path.exists(f"{run_dir}/{cpu_file}"):
        before, after = (float(x) for x in open(f"{run_dir}/{cpu_file}").read().split())
        out["server_cpu_ms_per_request"] = (after - before) * 1000 / max(1, report["requests"]["sent"])
    return out


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


protocols = {}
for protocol in ("grpc", "http"):
    runs = [run_summary(load(f"{protocol}-{r}.json"), f"cpu-{protocol}-{r}.txt")
            for r in range(1, rounds + 1)]
    protocols[protocol] = {
        "reports": [f"{name}/{protocol}-{r}.json" for r in range(1, rounds + 1)],
        "rounds": runs,
        "median_of_rounds": {
            "e2e_p50_ms": median(r["e2e_ms"]["p50"] for r in runs),
            "ttft_p50_ms": median(r["ttft_ms"]["p50"] for r in runs),
            "queue_p50_ms": median(r["queue_ms"]["p50"] for r in runs),
            "throughput_ok_rps": median(r["throughput_ok_rps"] for r in runs),
            "server_cpu_ms_per_request": median(r.get("server_cpu_ms_per_request") for r in runs),
        },
    }
shared = None
if int(shared_seconds) > 0:
    shared = {p: run_summary(load(f"shared-{p}.json")) for p in ("grpc", "http")}


def diff(a, b):
    return None if a is None or b is None else a - b


m = {p: protocols[p]["median_of_rounds"] for p in protocols}
summary = {
    **provenance("bench/compare_protocols.sh", date, revision, nproc, cpu_model, loadavg),
    "server": {"config": server_config, "listeners": "gRPC and http_listen of one process"},
    "load": {"mode": "closed", "concurrency": int(concurrency), "requests": int(requests),
             "warmup": int(warmup), "resolution_base": int(resolution_base), "rounds": rounds,
             "order": "grpc, http alternating", "shared_seconds": int(shared_seconds)},
    "percentile_method": load("grpc-1.json")["percentile_method"],
    "protocols": protocols,
    "http_minus_grpc_ms": {
        "median_e2e_p50": diff(m["http"]["e2e_p50_ms"], m["grpc"]["e2e_p50_ms"]),
        "median_ttft_p50": diff(m["http"]["ttft_p50_ms"], m["grpc"]["ttft_p50_ms"]),
        "median_queue_p50": diff(m["http"]["queue_p50_ms"], m["grpc"]["queue_p50_ms"]),
        "server_cpu_per_request": diff(m["http"]["server_cpu_ms_per_request"],
                                       m["grpc"]["server_cpu_ms_per_request"]),
    },
    "shared_queue": shared,
}
if shared:
    d = summary["http_minus_grpc_ms"]
    d["shared_e2e_p50"] = diff(shared["http"]["e2e_ms"]["p50"], shared["grpc"]["e2e_ms"]["p50"])
    d["shared_e2e_minus_queue_p50"] = diff(
        shared["http"]["e2e_ms"]["p50"] - shared["http"]["queue_ms"]["p50"],
        shared["grpc"]["e2e_ms"]["p50"] - shared["grpc"]["queue_ms"]["p50"])
with open(summary_path, "w") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")


def cell(v):
    return "-" if v is None else f"{v:.1f}"


def row(label, r):
    triple = lambda kind: "/".join(cell(r[f"{kind}_ms"][q]) for q in ("p50", "p90", "p99"))
    cpu = cell(r.get("server_cpu_ms_per_request"))
    print(f"{label:<12} {str(r['ok']) + '/' + str(r['sent']):>9} {r['throughput_ok_rps']:>7.2f} "
          f"{cpu:>8}   {triple('e2e'):>22}   {triple('ttft'):>22}   {triple('queue'):>22}")


print(f"closed loop of {concurrency}, resolution_base {resolution_base}, {requests} requests "
      f"per protocol and round, {rounds} rounds; {nproc} x {cpu_model}; {revision}")
print(f"{'run':<12} {'ok/sent':>9} {'req/s':>7} {'cpu ms':>8}   {'e2e p50/p90/p99 ms':>22}   "
      f"{'ttft p50/p90/p99 ms':>22}   {'queue p50/p90/p99 ms':>22}")
for r in range(rounds):
    for protocol in ("grpc", "http"):
        row(f"{protocol} #{r + 1}", protocols[protocol]["rounds"][r])
if shared:
    for protocol in ("grpc", "http"):
        row(f"shared {protocol}", shared[protocol])
d = summary["http_minus_grpc_ms"]
print(f"http - grpc: median e2e p50 {cell(d['median_e2e_p50'])} ms, server CPU per request "
      f"{cell(d['server_cpu_per_request'])} ms"
      + (f"; sharing one queue: e2e p50 {cell(d['shared_e2e_p50'])} ms, e2e - queue p50 "
         f"{cell(d['shared_e2e_minus_queue_p50'])} ms" if shared else ""))
print(f"wrote {summary_path} and {run_dir}/")
EOF
