#!/usr/bin/env python3
"""The Open Inference Protocol door's overhead against /v1, on the same demo requests: a demo
cube3d-server with both listeners, and the same request (prompt, seed, resolution, GLB) sent
one at a time through four doors in turn (v1 HTTP, v2 HTTP, v1 gRPC, v2 gRPC; each round visits
all four, so that the machine's drift falls on each alike), twice:

  cached    the result cache on: after the first, every answer is a hit, so what is measured
            is the door itself (parse, the service's admission and cache lookup, the answer);
  computed  the result cache off: every request decodes and meshes, the door's cost inside a
            whole generation.

Each door's client is plain: http.client for both HTTP doors (v1 answering the GLB file itself
for Accept: model/gltf-binary, v2 with the binary tensor data extension, as tritonclient sends
it: the same bytes of mesh either way), and stubs generated from
the repository's protos with grpc_tools for both gRPC doors (the same grpcio), so the clients
cost alike and the difference is the server's.

Writes bench/results/<date>-v2-overhead.json (per mode and door: samples, p50, p90, mean; the
v2 - v1 difference of the p50s per transport, with the targets: within 5 ms over HTTP and 2 ms
over gRPC) and prints a table.

    bench/compare_v2_overhead.py                  # 200 rounds cached, 30 computed
    ROUNDS=50 COMPUTED_ROUNDS=10 bench/compare_v2_overhead.py

Settings (environment): BUILD_DIR (build), ROUNDS (200), COMPUTED_ROUNDS (30),
RESOLUTION_BASE (4), OUT_DIR (bench/results), DATE (today).
"""
import datetime
import http.client
import json
import os
import platform
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
from grpc_tools import protoc

SOURCE = Path(__file__).resolve().parents[1]
BUILD_DIR = Path(os.environ.get("BUILD_DIR", SOURCE / "build"))
SERVER_BIN = BUILD_DIR / "bin" / "cube3d-server"
ROUNDS = int(os.environ.get("ROUNDS", "200"))
COMPUTED_ROUNDS = int(os.environ.get("COMPUTED_ROUNDS", "30"))
RES = int(os.environ.get("RESOLUTION_BASE", "4"))
OUT_DIR = Path(os.environ.get("OUT_DIR", SOURCE / "bench" / "results"))
DATE = os.environ.get("DATE", datetime.date.today().isoformat())
HOST = "127.0.0.1"
PROMPT = "a wooden chair"
SEED = 7
TARGETS_MS = {"http": 5.0, "grpc": 2.0}


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind((HOST, 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def generated_stubs(folder):
    """The v1 and v2 gRPC modules, from the repository's protos."""
    for proto in ("cube3d/v1/mesh_service.proto", "inference/grpc_service.proto",
                  "inference/model_config.proto"):
        if protoc.main(["protoc", f"-I{SOURCE / 'proto'}", f"--python_out={folder}",
                        f"--grpc_python_out={folder}", str(SOURCE / "proto" / proto)]) != 0:
            raise SystemExit(f"grpc_tools.protoc failed for {proto}")
    sys.path.insert(0, str(folder))
    from cube3d.v1 import mesh_service_pb2, mesh_service_pb2_grpc  # noqa: E402
    from inference import grpc_service_pb2, grpc_service_pb2_grpc  # noqa: E402
    return mesh_service_pb2, mesh_service_pb2_grpc, grpc_service_pb2, grpc_service_pb2_grpc


class Server:
    def __init__(self, cache, log_path):
        self.grpc_port, self.http_port, self.metrics_port = free_ports(3)
        args = [str(SERVER_BIN), "--config", str(SOURCE / "models" / "demo-server.yaml"),
                "--listen", f"{HOST}:{self.grpc_port}",
                "--http-listen", f"{HOST}:{self.http_port}",
                "--metrics-listen", f"{HOST}:{self.metrics_port}",
                "--set", f"cache.enabled={'true' if cache else 'false'}"]
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=SOURCE)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited ({self.proc.returncode}); see {log_path}")
            try:
                conn = http.client.HTTPConnection(HOST, self.http_port, timeout=2)
                conn.request("GET", "/v2/health/ready")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit("the server did not get ready within 180 s")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=90)
        self.log.close()


class Doors:
    """One client a door, each sending the same request and checking it got a GLB."""

    def __init__(self, server, stubs):
        v1_pb, v1_grpc, v2_pb, v2_grpc = stubs
        self.v1_pb, self.v2_pb = v1_pb, v2_pb
        self.http = http.client.HTTPConnection(HOST, server.http_port, timeout=300)
        channel = grpc.insecure_channel(f"{HOST}:{server.grpc_port}",
                                        options=[("grpc.max_receive_message_length", -1)])
        self.v1 = v1_grpc.MeshServiceStub(channel)
        self.v2 = v2_grpc.GRPCInferenceServiceStub(channel)
        self.v1_body = json.dumps({"prompt": PROMPT, "seed": str(SEED), "resolutionBase": RES,
                                   "format": "MESH_FORMAT_GLB"}).encode()
        header = json.dumps({
            "inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [1, 1],
                        "parameters": {"binary_data_size": 4 + len(PROMPT)}},
                       {"name": "SEED", "datatype": "INT64", "shape": [1, 1], "data": [SEED]},
                       {"name": "RESOLUTION_BASE", "datatype": "INT32", "shape": [1, 1],
                        "data": [RES]}],
            "outputs": [{"name": "MESH", "parameters": {"binary_data": True}}]}).encode()
        self.v2_body = header + struct.pack("<I", len(PROMPT)) + PROMPT.encode()
        self.v2_header_length = str(len(header))
        self.v1_request = v1_pb.GenerateMeshRequest(prompt=PROMPT, seed=SEED,
                                                    resolution_base=RES,
                                                    format=v1_pb.MESH_FORMAT_GLB)
        request = v2_pb.ModelInferRequest(model_name="demo")
        for name, datatype, raw in (
                ("PROMPT", "BYTES", struct.pack("<I", len(PROMPT)) + PROMPT.encode()),
                ("SEED", "INT64", struct.pack("<q", SEED)),
                ("RESOLUTION_BASE", "INT32", struct.pack("<i", RES))):
            tensor = request.inputs.add(name=name, datatype=datatype, shape=[1, 1])
            del tensor  # its data goes raw
            request.raw_input_contents.append(raw)
        request.outputs.add(name="MESH")
        self.v2_request = request

    def v1_http(self):
        # The file itself (Accept), as v2 answers it as binary data: the same bytes either way.
        self.http.request("POST", "/v1/meshes:generate", body=self.v1_body,
                          headers={"Content-Type": "application/json",
                                   "Accept": "model/gltf-binary"})
        response = self.http.getresponse()
        body = response.read()
        assert response.status == 200, body
        assert body[:4] == b"glTF"

    def v2_http(self):
        self.http.request("POST", "/v2/models/demo/infer", body=self.v2_body,
                          headers={"Content-Type": "application/octet-stream",
                                   "Inference-Header-Content-Length": self.v2_header_length})
        response = self.http.getresponse()
        body = response.read()
        assert response.status == 200, body
        header = int(response.getheader("Inference-Header-Content-Length"))
        assert body[header + 4:header + 8] == b"glTF"

    def v1_grpc(self):
        assert self.v1.GenerateMesh(self.v1_request, timeout=300).encoded[:4] == b"glTF"

    def v2_grpc(self):
        answer = self.v2.ModelInfer(self.v2_request, timeout=300)
        assert answer.raw_output_contents[0][4:8] == b"glTF"


DOORS = ("v1_http", "v2_http", "v1_grpc", "v2_grpc")


def measure(doors, rounds):
    samples = {door: [] for door in DOORS}
    for door in DOORS:  # warm-up: connections made, the first answer computed
        getattr(doors, door)()
    for i in range(rounds):
        # Each round in another order, so that no door always follows the same one.
        order = DOORS[i % 4:] + DOORS[:i % 4]
        for door in order:
            start = time.perf_counter()
            getattr(doors, door)()
            samples[door].append((time.perf_counter() - start) * 1000)
    return samples


def summary(values):
    a = np.array(values)
    return {"count": len(values), "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)), "mean": float(a.mean()),
            "samples_ms": [round(v, 4) for v in values]}


def run_mode(name, cache, rounds, stubs, log_dir):
    server = Server(cache, log_dir / f"server-{name}.log")
    try:
        samples = measure(Doors(server, stubs), rounds)
    finally:
        server.stop()
    doors = {door: summary(samples[door]) for door in DOORS}
    overhead = {}
    for transport in ("http", "grpc"):
        v1, v2 = doors[f"v1_{transport}"]["p50"], doors[f"v2_{transport}"]["p50"]
        overhead[transport] = {"v2_minus_v1_p50_ms": v2 - v1,
                               "target_ms": TARGETS_MS[transport],
                               "within_target": v2 - v1 <= TARGETS_MS[transport]}
    return {"cache": cache, "rounds": rounds, "doors": doors, "overhead": overhead}


def revision():
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=SOURCE,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=SOURCE, capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    if not SERVER_BIN.exists():
        raise SystemExit(f"{SERVER_BIN} is missing: build it first (scripts/build.sh)")
    loadavg = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    with tempfile.TemporaryDirectory(prefix="cube3d-v2-bench-") as tmp:
        stubs = generated_stubs(Path(tmp))
        modes = {"cached": run_mode("cached", True, ROUNDS, stubs, Path(tmp)),
                 "computed": run_mode("computed", False, COMPUTED_ROUNDS, stubs, Path(tmp))}
    report = {
        "tool": "bench/compare_v2_overhead.py",
        "date": DATE,
        "git_revision": revision(),
        "machine": {"nproc": os.cpu_count(), "cpu_model": platform.processor() or
                    next((line.split(":", 1)[1].strip() for line in
                          Path("/proc/cpuinfo").read_text().splitlines()
                          if line.startswith("model name")), "unknown"),
                    "loadavg_1_5_15_min_at_start": loadavg},
        "request": {"prompt": PROMPT, "seed": SEED, "resolution_base": RES, "format": "GLB",
                    "model": "demo (models/demo-server.yaml)"},
        "clients": "http.client for both HTTP doors (v1: the GLB file for Accept: "
                   "model/gltf-binary; v2: binary tensor data); grpc_tools stubs of the "
                   "repository's protos for both gRPC doors",
        "percentile_method": "numpy 'linear' (Hyndman-Fan type 7)",
        "modes": modes,
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"{DATE}-v2-overhead.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'mode':9} {'door':8} {'p50 ms':>9} {'p90 ms':>9} {'mean ms':>9}")
    for mode, m in modes.items():
        for door in DOORS:
            d = m["doors"][door]
            print(f"{mode:9} {door:8} {d['p50']:9.3f} {d['p90']:9.3f} {d['mean']:9.3f}")
        for transport, o in m["overhead"].items():
            print(f"{mode:9} v2-v1 {transport}: {o['v2_minus_v1_p50_ms']:+.3f} ms "
                  f"(target {o['target_ms']} ms: {'met' if o['within_target'] else 'MISSED'})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
