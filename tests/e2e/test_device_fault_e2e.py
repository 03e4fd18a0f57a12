"""e2e.device_fault: a device fault restarts the server cleanly; an ordinary error does not.

One demo server with one decode slot (--batch-buckets 1: requests decode one after another, so
the decode steps are counted exactly) and the test-only fault injection
CUBE3D_FAULT_INJECTION=mesh_error_at_request:1,device_fault_at_step:N (engine_executor.h):

  1. the first request's mesh stage fails (an ordinary per-request error): INTERNAL, and the
     server keeps serving (health SERVING, /readyz 200, the next request, over HTTP, succeeds);
  2. a slow-to-mesh request M decodes and goes on to the mesh stage; the two requests sent while
     it decoded wait for the slot; the first of them to decode meets the injected device fault
     (an illegal memory access, as CUDA reports it) part-way: it fails INTERNAL "the device
     failed during decoding ...", the other, never started, UNAVAILABLE (retry elsewhere);
     health turns NOT_SERVING for "" and cube3d.v1.MeshService, /readyz 503, the fault is
     counted (cube3d_device_faults_total 1) and logged once; M, past decoding, still gets its
     mesh (the drain), and the process exits with status 70 (kExitDeviceFault).

Run: cd build && ctest -R e2e.device_fault --output-on-failure
"""
import json
import os
import subprocess
import threading
import time
import unittest

import grpc

import server_process as e2e
from server_process import RPC_TIMEOUT_S, make_request, metric_value, rpc_code

setUpModule = e2e.setUpModule
tearDownModule = e2e.tearDownModule

EXIT_DEVICE_FAULT = 70          # kExitDeviceFault, include/cube3d/core/device_fault.h
STEPS = e2e.TOKENS - 1          # decode steps per request: the prefill makes the first token
# Requests 1 and 2, then M decode (3 * STEPS steps); the next request faults part-way.
FAULT_STEP = 3 * STEPS + STEPS // 2
INJECTION = f"mesh_error_at_request:1,device_fault_at_step:{FAULT_STEP}"
SLOW_RES = 7                    # seconds of meshing on a CPU: M is still meshing at the fault
EXIT_WITHIN_S = 30              # M's meshing + the front doors' wind-down (5 s at most)
MESH_SERVICE = "cube3d.v1.MeshService"
ACCEPT_JSON = {"Accept": "application/json"}


class DeviceFaultTest(e2e.ServerTestCase):
    SERVER_ARGS = ["--batch-buckets", "1"]
    HTTP = True

    @classmethod
    def setUpClass(cls):
        # The server inherits the environment at launch; nothing else here reads it.
        saved = os.environ.get("CUBE3D_FAULT_INJECTION")
        os.environ["CUBE3D_FAULT_INJECTION"] = INJECTION
        try:
            super().setUpClass()
        finally:
            if saved is None:
                os.environ.pop("CUBE3D_FAULT_INJECTION", None)
            else:
                os.environ["CUBE3D_FAULT_INJECTION"] = saved

    @classmethod
    def tearDownClass(cls):
        # No stop: the server exits by itself (status 70) in the test. One a failed test left up
        # is killed by the class cleanups (ServerTestCase.setUpClass).
        pass

    # -- helpers --

    def readyz(self):
        status, _, body = self.server.http("GET", "/readyz", timeout=10)
        return status, body.decode(errors="replace")

    def http_generate(self, prompt, **fields):
        body = {"prompt": prompt, "resolutionBase": e2e.RES, **fields}
        status, _, data = self.server.http("POST", "/v1/meshes:generate", body, ACCEPT_JSON)
        return status, json.loads(data) if data else {}

    def device_faults(self):
        return metric_value(self.server.metrics(), "cube3d_device_faults_total")

    # -- the story --

    def test_ordinary_error_keeps_serving_then_device_fault_restarts(self):
        server = self.server
        self.assertIn("TEST-ONLY fault injection is on", server.log())
        stub = server.stub()

        # 1. An ordinary per-request error: that request fails, the server goes on.
        code, details = rpc_code(lambda: stub.GenerateMesh(
            make_request("a chair whose mesh stage fails"), timeout=RPC_TIMEOUT_S))
        self.assertEqual(code, grpc.StatusCode.INTERNAL, details)
        self.assertIn("mesh stage failed", details)
        self.assertIn("injected", details)
        self.assertNotIn("device", details)
        self.assertEqual(server.health(), "SERVING")
        self.assertEqual(server.health(service=MESH_SERVICE), "SERVING")
        self.assertEqual(self.readyz()[0], 200)
        status, answer = self.http_generate("a table after the trouble")
        self.assertEqual(status, 200, answer)
        self.assertGreater(int(answer["faceCount"]), 0)
        self.assertEqual(self.device_faults(), 0)
        self.assertEqual(server.proc.poll(), None)

        # 2. M decodes (its stream says when it holds the slot), then meshes for seconds.
        slow = stub.GenerateMeshStream(make_request("a slow cathedral", resolution_base=SLOW_RES),
                                       timeout=RPC_TIMEOUT_S)
        for event in slow:
            if event.WhichOneof("event") == "progress" and \
                    event.progress.stage >= e2e.pb.STAGE_TEXT_ENCODING:
                break
        slow_outcome = {}

        def finish_slow():
            slow_outcome["outcome"] = rpc_code(lambda: [e for e in slow
                                                        if e.WhichOneof("event") == "result"])

        slow_reader = threading.Thread(target=finish_slow)
        slow_reader.start()

        # Two requests wait for the slot meanwhile: one over gRPC, one over HTTP.
        grpc_call = stub.GenerateMesh.future(make_request("a boat on a broken GPU"),
                                             timeout=RPC_TIMEOUT_S)
        http_outcome = {}

        def http_request():
            http_outcome["outcome"] = self.http_generate("a lamp on a broken GPU")

        http_sender = threading.Thread(target=http_request)
        http_sender.start()

        # The first of them to decode meets the fault; the other never starts.
        try:
            grpc_result = (grpc.StatusCode.OK, grpc_call.result())
        except grpc.RpcError as e:
            grpc_result = (e.code(), e.details() or "")
        http_sender.join(RPC_TIMEOUT_S)
        http_status, http_body = http_outcome["outcome"]
        http_message = http_body.get("error", {}).get("message", "")
        http_code = http_body.get("error", {}).get("status", "OK")

        # At once, while M still meshes: not ready anywhere, counted.
        self.assertEqual(server.health(), "NOT_SERVING")
        self.assertEqual(server.health(service=MESH_SERVICE), "NOT_SERVING")
        ready_status, ready_body = self.readyz()
        self.assertEqual(ready_status, 503, ready_body)
        self.assertIn("device failed", ready_body)
        self.assertEqual(self.device_faults(), 1)
        fault_seen = time.monotonic()

        outcomes = [(grpc_result[0].name, grpc_result[1]), (http_code, http_message)]
        faulted = [o for o in outcomes if o[0] == "INTERNAL"]
        queued = [o for o in outcomes if o[0] == "UNAVAILABLE"]
        self.assertEqual((len(faulted), len(queued)), (1, 1), outcomes)
        self.assertIn("the device failed during decoding (CUDA error: an illegal memory access",
                      faulted[0][1])
        self.assertIn("this replica is restarting", faulted[0][1])
        self.assertIn("retry it on another replica", queued[0][1])
        self.assertIn(http_status, (500, 503), http_body)

        # New work is refused, retryably, until the process is gone.
        code, details = rpc_code(lambda: stub.GenerateMesh(make_request("one more"), timeout=30))
        if code != grpc.StatusCode.UNAVAILABLE:
            self.fail(f"a request after the fault: {code} {details}")

        # M was past decoding: the drain lets it answer.
        slow_reader.join(RPC_TIMEOUT_S)
        code, results = slow_outcome["outcome"]
        self.assertEqual(code, grpc.StatusCode.OK, results)
        self.assertEqual(len(results), 1)
        self.assertGreater(results[0].result.face_count, 0)

        # Then the process exits, with the device fault's status, for a restart.
        try:
            rc = server.proc.wait(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            self.fail(f"cube3d-server still running {EXIT_WITHIN_S} s after the device fault")
        exited_after = time.monotonic() - fault_seen
        self.assertEqual(rc, EXIT_DEVICE_FAULT, server.log_tail())
        self.assertLess(exited_after, EXIT_WITHIN_S)
        log = server.log()
        fault_lines = [line for line in log.splitlines() if "DEVICE FAULT" in line]
        self.assertEqual(len(fault_lines), 1, fault_lines)
        self.assertIn("[error]", fault_lines[0])
        self.assertRegex(fault_lines[0], r"failed requests \[[^\]]+\]")
        self.assertIn(f"exiting with status {EXIT_DEVICE_FAULT}", log)


if __name__ == "__main__":
    unittest.main()
