#!/usr/bin/env python3
"""Static vs continuous batching under the same load (issue 13's acceptance comparison).

Starts cube3d-server twice on one model (by default models/decode-bound.yaml: the demo at
v0.1's 512 tokens, where decoding dominates as it does for the real model on a GPU), once with
`batching.mode: static` and once with `continuous`, and drives each with cube3d-loadgen:

  1. static capacity: a closed loop of 2 x the largest bucket (the batch is always full), its
     throughput in requests per second;
  2. the same open-loop Poisson load on both servers, `--load` (default 0.7) x that capacity,
     same arrival seed, same prompts;
  3. optionally (--overload F) both again at F x capacity with a short queue and deadlines: every
     request must end OK, RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED, and the server's
     cube3d_requests_total must equal what the load generator saw, code by code.

Writes each loadgen JSON, the servers' logs and a summary JSON (p50 queue-time ratio, p90
end-to-end cut) into --out, and prints the comparison.

    python3 bench/compare_batching.py --out bench/results/2026-11-30-cpu-batching
    python3 bench/compare_batching.py --requests 40 --load 0.5 --overload 2
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, args, log_path):
        self.port = free_port()
        self.metrics_port = free_port()
        self.log = open(log_path, "w")
        command = [os.path.join(args.bin_dir, "cube3d-server"), "--config", args.server_config,
                   "--set", f"model.config={os.path.abspath(args.model)}",
                   "--listen", f"127.0.0.1:{self.port}",
                   "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
                   "--batch-buckets", args.buckets, "--log-level", "info"]
        for override in args.extra:
            command += ["--set", override]
        self.command = command
        self.proc = None

    def start(self, overrides):
        command = self.command + [a for o in overrides for a in ("--set", o)]
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cube3d-server exited ({self.proc.returncode}); see "
                                   f"{self.log.name}")
            with open(self.log.name) as f:
                if "cube3d-server serving" in f.read():
                    return
            time.sleep(0.3)
        raise RuntimeError("cube3d-server did not start within 300 s")

    def status_counts(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=10) as r:
            text = r.read().decode()
        counts = {}
        for m in re.finditer(r'^cube3d_requests_total\{code="([A-Z_]+)"\} (\S+)$', text, re.M):
            counts[m.group(1)] = int(float(m.group(2)))
        return counts

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def loadgen(args, server, out_json, *shape):
    command = [os.path.join(args.bin_dir, "cube3d-loadgen"), "--server",
               f"127.0.0.1:{server.port}", "--resolution-base", str(args.resolution_base),
               "--json", out_json, *shape]
    proc = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"cube3d-loadgen failed ({proc.returncode}): {proc.stderr}")
    with open(out_json) as f:
        return json.load(f)


def counts_of(report):
    """The load generator's outcomes by gRPC code, OK included."""
    counts = dict(report["requests"]["errors"])
    if report["requests"]["ok"]:
        counts["OK"] = report["requests"]["ok"]
    return counts


def stat(report, metric, key):
    return report["latency_ms"][metric][key]


def run_mode(args, mode, rate, overload_rate):
    server = Server(args, os.path.join(args.out, f"server-{mode}.log"))
    result = {}
    try:
        server.start([f"batching.mode={mode}"])
        warm = ["--warmup", str(args.warmup)]
        if mode == "static" and rate is None:
            result["capacity"] = loadgen(
                args, server, os.path.join(args.out, "static-capacity.json"), "--concurrency",
                str(2 * int(args.buckets.split(",")[-1])), "--requests", str(args.capacity_requests),
                *warm)
        if rate is not None:
            result["load"] = loadgen(args, server, os.path.join(args.out, f"{mode}-load.json"),
                                     "--rate", f"{rate:.4f}", "--requests", str(args.requests),
                                     "--arrival-seed", "7", *warm)
    finally:
        server.stop()
    if overload_rate:
        server = Server(args, os.path.join(args.out, f"server-{mode}-overload.log"))
        try:
            server.start([f"batching.mode={mode}", "batching.max_queue_size=8"])
            before = server.status_counts()
            report = loadgen(args, server, os.path.join(args.out, f"{mode}-overload.json"),
                             "--rate", f"{overload_rate:.4f}", "--requests",
                             str(args.requests), "--arrival-seed", "11", "--deadline-ms",
                             str(args.overload_deadline_ms))
            time.sleep(1.0)
            after = server.status_counts()
            server_counts = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            server_counts = {k: v for k, v in server_counts.items() if v}
            result["overload"] = {"loadgen": report, "server_counts": server_counts}
        finally:
            server.stop()
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin-dir", default=os.path.join(SOURCE, "build", "bin"))
    p.add_argument("--server-config", default=os.path.join(SOURCE, "models", "demo-server.yaml"))
    p.add_argument("--model", default=os.path.join(SOURCE, "models", "decode-bound.yaml"))
    p.add_argument("--buckets", default="1,2,4,8")
    p.add_argument("--resolution-base", type=int, default=4)
    p.add_argument("--load", type=float, default=0.7, help="offered load / static capacity")
    p.add_argument("--requests", type=int, default=60)
    p.add_argument("--capacity-requests", type=int, default=48)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--overload", type=float, default=0.0,
                   help="also run F x capacity with a short queue and deadlines (0: skip)")
    p.add_argument("--overload-deadline-ms", type=int, default=20000)
    p.add_argument("--set", dest="extra", action="append", default=[],
                   help="extra server override for both modes, key=value")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    args.out = args.out or tempfile.mkdtemp(prefix="cube3d-batching-")
    os.makedirs(args.out, exist_ok=True)

    static = run_mode(args, "static", None, None)
    capacity = static["capacity"]["throughput_ok_rps"]
    rate = args.load * capacity
    overload_rate = args.overload * capacity if args.overload else None
    print(f"static capacity {capacity:.3f} requests/s; offered load {rate:.3f}/s "
          f"({args.load:.0%})")
    static.update(run_mode(args, "static", rate, overload_rate))
    continuous = run_mode(args, "continuous", rate, overload_rate)

    summary = {"model": os.path.relpath(args.model, SOURCE), "buckets": args.buckets,
               "resolution_base": args.resolution_base, "static_capacity_per_s": capacity,
               "offered_rate_per_s": rate, "load": args.load, "requests": args.requests,
               "modes": {}}
    for mode, result in (("static", static), ("continuous", continuous)):
        load = result["load"]
        summary["modes"][mode] = {
            "throughput_ok_per_s": load["throughput_ok_rps"],
            "errors": load["requests"]["errors"],
            **{f"{m}_{k}": stat(load, m, k) for m in ("queue", "ttft", "e2e")
               for k in ("p50", "p90", "p99")}}
        if "overload" in result:
            summary["modes"][mode]["overload"] = {
                "loadgen_counts": counts_of(result["overload"]["loadgen"]),
                "server_counts": result["overload"]["server_counts"]}
    s, c = summary["modes"]["static"], summary["modes"]["continuous"]
    summary["queue_p50_ratio"] = s["queue_p50"] / max(c["queue_p50"], 1e-9)
    summary["e2e_p90_cut"] = 1 - c["e2e_p90"] / s["e2e_p90"]
    summary["ttft_p50_ratio"] = s["ttft_p50"] / max(c["ttft_p50"], 1e-9)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))
    print(f"p50 queue time: static {s['queue_p50']:.1f} ms, continuous {c['queue_p50']:.1f} ms "
          f"({summary['queue_p50_ratio']:.1f}x less); p90 end to end: static "
          f"{s['e2e_p90']:.0f} ms, continuous {c['e2e_p90']:.0f} ms "
          f"({summary['e2e_p90_cut']:.0%} less)")


if __name__ == "__main__":
    main()
