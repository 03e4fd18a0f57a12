"""The result cache end to end: identical requests in flight share one computation (coalesced),
a repeat is a hit, byte-identical to a fresh computation with the same request id, bypass_cache
and Cache-Control: no-cache compute afresh, each API key has a cache of its own, the HTTP
X-Cache header, the disk tier across restarts and a corrupt entry recomputed (never served); and
what every mesh file records (provenance: GLB asset.extras, OBJ and PLY header comments) and the
Roblox mesh profile. Run by ctest (e2e.cache):

    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_cache_e2e

Uses server_process's helpers; the demo model on the CPU, resolution 4 unless a test needs more
faces than the Roblox limit (resolution 7). Every wait is bounded; the server's log is printed
when a test fails.
"""
import glob
import http.client
import json
import os
import re
import threading
import time
import unittest

import grpc
import pygltflib
from google.protobuf import json_format

import server_process as e2e
from server_process import (RES, KeyedServerTestCase, ServerProcess, ServerTestCase, auth,
                            bearer, make_request, metric_value)

GENERATE = "/v1/meshes:generate"
CONCURRENT = 20
ROBLOX_FACES = 20000
ROBLOX_VERTICES = 60000
BIG_RES = 7  # about 30,000 faces for a target of 30,000 on the demo model: over Roblox's limit
PROVENANCE_KEYS = ("prompt", "seed", "guidance_scale", "resolution_base", "mesh_profile", "model",
                   "weights_digest", "server_version", "request_id")

setUpModule = e2e.setUpModule
tearDownModule = e2e.tearDownModule


def status_name(response):
    return e2e.pb.CacheStatus.Name(response.cache_status)


def cache_counts(samples):
    return {r: metric_value(samples, "cube3d_cache_requests_total", result=r) or 0
            for r in ("hit", "miss", "coalesced", "bypass")}


def delta(after, before):
    return {k: after[k] - before[k] for k in after}


def glb_extras(data):
    gltf = pygltflib.GLTF2.load_from_bytes(data)
    extras = gltf.asset.extras
    if isinstance(extras, str):
        extras = json.loads(extras)
    return extras


def header_metadata(text, prefix):
    """`<prefix><key>: <json>` lines of a text header -> {key: value}."""
    found = {}
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(prefix)}([a-z_][a-z0-9_]*): (.*)$", line)
        if m:
            found[m.group(1)] = json.loads(m.group(2))
    return found


def obj_metadata(data):
    head = []
    for line in data.decode().splitlines():
        if not line.startswith("#"):
            break
        head.append(line)
    return header_metadata("\n".join(head), "# ")


def ply_metadata(data):
    head = data[:data.index(b"end_header")].decode()
    return header_metadata(head, "comment ")


class CacheTestCase(ServerTestCase):
    CACHE = True

    def wait_cache_counts(self, predicate, what, timeout=30):
        """Polls /metrics until predicate(cache counts) holds; returns the counts."""
        samples = self.wait_for_metrics(lambda s: predicate(cache_counts(s)), what, timeout)
        return cache_counts(samples)


class CacheTest(KeyedServerTestCase, CacheTestCase):
    """Two API keys (the cache is per key), the gateway; a request waits 200 ms for others to
    join its batch, a window in which identical requests join the first one's computation."""

    HTTP = True
    TMP_PREFIX = "cube3d-cache-e2e-"
    KEYS = [("studio-a", "key-a", {}), ("studio-b", "key-b", {})]
    SERVER_ARGS = ["--max-queue-delay-ms", "200"]

    def gen(self, request, key="key-a"):
        return self.server.stub().GenerateMesh(request, timeout=120, metadata=bearer(key))

    def test_identical_requests_in_flight_share_one_computation(self):
        before = cache_counts(self.server.metrics())
        request = make_request("twenty identical teapots", seed=3)
        barrier = threading.Barrier(CONCURRENT)
        outcomes = [None] * CONCURRENT

        def send(i):
            barrier.wait(timeout=30)
            try:
                outcomes[i] = self.gen(request)
            except grpc.RpcError as e:
                outcomes[i] = e

        threads = [threading.Thread(target=send, args=(i,)) for i in range(CONCURRENT)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
        errors = [o for o in outcomes if not isinstance(o, e2e.pb.GenerateMeshResponse)]
        self.assertEqual(errors, [])
        statuses = [status_name(o) for o in outcomes]
        self.assertEqual(statuses.count("CACHE_STATUS_MISS"), 1, statuses)
        coalesced = statuses.count("CACHE_STATUS_COALESCED")
        self.assertEqual(coalesced + statuses.count("CACHE_STATUS_HIT"), CONCURRENT - 1, statuses)
        self.assertGreaterEqual(coalesced, 1, statuses)
        # One mesh, byte for byte, made by the one that missed; each answer keeps its own id.
        self.assertEqual(len({o.encoded for o in outcomes}), 1)
        self.assert_mesh(outcomes[0])
        first = next(o for o in outcomes if o.cache_status == e2e.pb.CACHE_STATUS_MISS)
        self.assertEqual({o.effective.computed_by_request_id for o in outcomes},
                         {first.request_id})
        self.assertEqual(len({o.request_id for o in outcomes}), CONCURRENT)
        self.assertEqual(glb_extras(first.encoded)["request_id"], first.request_id)
        counts = delta(self.wait_cache_counts(
            lambda c: sum(delta(c, before).values()) >= CONCURRENT, "20 more cache answers"),
            before)
        self.assertEqual(counts["miss"], 1, counts)
        self.assertEqual(counts["coalesced"] + counts["hit"], CONCURRENT - 1, counts)
        self.assertEqual(counts["coalesced"], coalesced, counts)
        self.assertEqual(counts["bypass"], 0, counts)

    def test_a_repeat_is_a_hit_and_bypass_computes_the_same_bytes(self):
        before = cache_counts(self.server.metrics())
        fields = dict(seed=5, top_p=0.9, guidance_scale=2.5)
        first = self.gen(make_request("a repeated vase", request_id="cache-rep-1", **fields))
        self.assertEqual(status_name(first), "CACHE_STATUS_MISS")
        self.assertEqual(first.effective.computed_by_request_id, "cache-rep-1")
        self.assert_mesh(first)
        hit = self.gen(make_request("a repeated vase", request_id="cache-rep-2", **fields))
        self.assertEqual(status_name(hit), "CACHE_STATUS_HIT")
        self.assertEqual(hit.request_id, "cache-rep-2")
        self.assertEqual(hit.effective.computed_by_request_id, "cache-rep-1")
        self.assertEqual(hit.encoded, first.encoded)
        self.assertEqual((hit.face_count, hit.vertex_count), (first.face_count, first.vertex_count))
        # Computed afresh with the first one's request id: the same bytes.
        fresh = self.gen(make_request("a repeated vase", request_id="cache-rep-1",
                                      bypass_cache=True, **fields))
        self.assertEqual(status_name(fresh), "CACHE_STATUS_BYPASS")
        self.assertEqual(fresh.effective.computed_by_request_id, "cache-rep-1")
        self.assertEqual(fresh.encoded, first.encoded)
        # With another request id the file records that id instead (the shape is the same).
        other = self.gen(make_request("a repeated vase", request_id="cache-rep-3",
                                      bypass_cache=True, **fields))
        self.assertEqual(status_name(other), "CACHE_STATUS_BYPASS")
        self.assertNotEqual(other.encoded, first.encoded)
        self.assertEqual(glb_extras(other.encoded)["request_id"], "cache-rep-3")
        self.assertEqual((other.face_count, other.vertex_count),
                         (first.face_count, first.vertex_count))
        # Any other parameter is another entry.
        for changed in (dict(fields, seed=6), dict(fields, top_p=0.8),
                        dict(fields, resolution_base=5),
                        dict(fields, format=e2e.pb.MESH_FORMAT_OBJ)):
            self.assertEqual(status_name(self.gen(make_request("a repeated vase", **changed))),
                             "CACHE_STATUS_MISS", changed)
        counts = delta(self.wait_cache_counts(lambda c: sum(delta(c, before).values()) >= 8,
                                              "8 more cache answers"), before)
        self.assertEqual(counts, {"hit": 1, "miss": 5, "coalesced": 0, "bypass": 2})
        samples = self.server.metrics()
        self.assertGreaterEqual(metric_value(samples, "cube3d_cache_entries", tier="memory"), 5)
        self.assertGreater(metric_value(samples, "cube3d_cache_bytes", tier="memory"),
                           len(first.encoded))

    def test_each_api_key_has_a_cache_of_its_own(self):
        request = make_request("a key-scoped lantern")
        self.assertEqual(status_name(self.gen(request, "key-a")), "CACHE_STATUS_MISS")
        self.assertEqual(status_name(self.gen(request, "key-b")), "CACHE_STATUS_MISS")
        b_again = self.gen(request, "key-b")
        self.assertEqual(status_name(b_again), "CACHE_STATUS_HIT")
        self.assertEqual(status_name(self.gen(request, "key-a")), "CACHE_STATUS_HIT")
        # Over HTTP too.
        body = {"prompt": "a key-scoped lantern", "resolutionBase": RES}
        for key in ("key-a", "key-b"):
            status, headers, data = self.server.http(
                "POST", GENERATE, body, {**auth(key), "Accept": "model/gltf-binary"})
            self.assertEqual(status, 200, data)
            self.assertEqual(headers["X-Cache"], "hit")

    def test_http_x_cache_and_cache_control(self):
        body = {"prompt": "an http cached kettle", "resolutionBase": RES, "seed": "9"}
        glb = {**auth("key-a"), "Accept": "model/gltf-binary"}
        status, headers, miss = self.server.http("POST", GENERATE, body, glb)
        self.assertEqual(status, 200, miss)
        self.assertEqual(headers["X-Cache"], "miss")
        first_id = headers["X-Request-Id"]
        status, headers, hit = self.server.http("POST", GENERATE, body, glb)
        self.assertEqual(status, 200, hit)
        self.assertEqual(headers["X-Cache"], "hit")
        self.assertEqual(hit, miss)
        self.assertNotEqual(headers["X-Request-Id"], first_id)
        # RFC 9111 directives: case-insensitive tokens of a list (not substrings).
        for value in ("no-cache", "no-store", "max-age=0, no-cache", "No-Cache", "NO-STORE"):
            status, headers, fresh = self.server.http(
                "POST", GENERATE, {**body, "requestId": first_id},
                {**glb, "Cache-Control": value})
            self.assertEqual(status, 200, fresh)
            self.assertEqual(headers["X-Cache"], "bypass", value)
            self.assertEqual(fresh, miss, value)
        for value in ("no-cachex", 'ext="no-cache"', "max-age=0"):
            status, headers, cached = self.server.http(
                "POST", GENERATE, body, {**glb, "Cache-Control": value})
            self.assertEqual(headers["X-Cache"], "hit", value)
        # The list goes on across field lines: a second Cache-Control line counts too.
        conn = http.client.HTTPConnection(e2e.HOST, self.server.http_port, timeout=120)
        try:
            payload = json.dumps(body).encode()
            conn.putrequest("POST", GENERATE)
            for name, value in (*glb.items(), ("Content-Type", "application/json"),
                                ("Cache-Control", "max-age=0"), ("Cache-Control", "no-store"),
                                ("Content-Length", str(len(payload)))):
                conn.putheader(name, value)
            conn.endheaders(payload)
            response = conn.getresponse()
            response.read()
            self.assertEqual(response.status, 200)
            self.assertEqual(response.getheader("X-Cache"), "bypass")
        finally:
            conn.close()
        # bypassCache in the body is the same as the header.
        status, headers, fresh = self.server.http(
            "POST", GENERATE, {**body, "requestId": first_id, "bypassCache": True}, glb)
        self.assertEqual(headers["X-Cache"], "bypass")
        self.assertEqual(fresh, miss)
        # JSON answers carry cacheStatus and the effective parameters.
        status, headers, data = self.server.http("POST", GENERATE, body, auth("key-a"))
        self.assertEqual(status, 200, data)
        self.assertEqual(headers["Content-Type"], "application/json")
        answer = json.loads(data)
        self.assertEqual(answer["cacheStatus"], "CACHE_STATUS_HIT")
        self.assertEqual(answer["effective"]["computedByRequestId"], first_id)
        self.assertEqual(answer["effective"]["seed"], "9")
        response = json_format.Parse(data, e2e.pb.GenerateMeshResponse())
        self.assertEqual(response.encoded, miss)
        status, headers, data = self.server.http("POST", GENERATE, body,
                                                 {**auth("key-a"), "Cache-Control": "no-cache"})
        self.assertEqual(json.loads(data)["cacheStatus"], "CACHE_STATUS_BYPASS")
        # A job answered from the cache reads as done, with every token (issue 58: it read
        # JOB_STATE_SUCCEEDED with progress.stage STAGE_QUEUED and tokensTotal 0).
        status, _, data = self.server.http("POST", "/v1/jobs", body, auth("key-a"))
        self.assertEqual(status, 202, data)
        status, _, data = self.server.http("GET", f"/v1/jobs/{json.loads(data)['id']}?wait_ms=5000",
                                           None, auth("key-a"))
        job = json.loads(data)
        self.assertEqual(job["state"], "JOB_STATE_SUCCEEDED", job)
        self.assertEqual(job["result"]["cacheStatus"], "CACHE_STATUS_HIT")
        self.assertEqual(job["progress"]["stage"], "STAGE_DONE", job["progress"])
        self.assertGreater(int(job["progress"]["tokensTotal"]), 0, job["progress"])
        self.assertEqual(job["progress"]["tokensDone"], job["progress"]["tokensTotal"])

    def test_glb_provenance(self):
        prompt = "a provenance \"chair\"\nwith ümlauts"
        response = self.gen(make_request(prompt, seed=42, top_p=0.9, guidance_scale=2.5,
                                         target_face_count=500, request_id="prov-glb-1"))
        extras = glb_extras(response.encoded)
        effective = response.effective
        for key in PROVENANCE_KEYS + ("top_p", "target_face_count"):
            self.assertIn(key, extras)
        self.assertNotIn("bounding_box", extras)  # a v0.1 model (the demo's) takes none
        self.assertEqual(extras["prompt"], prompt)
        self.assertEqual(extras["seed"], 42)
        self.assertAlmostEqual(extras["guidance_scale"], 2.5, places=5)
        self.assertAlmostEqual(extras["top_p"], 0.9, places=5)
        self.assertEqual(extras["resolution_base"], RES)
        self.assertEqual(extras["target_face_count"], 500)
        self.assertEqual(extras["mesh_profile"], "none")
        self.assertEqual(extras["request_id"], "prov-glb-1")
        self.assertEqual(extras["model"], effective.model)
        self.assertEqual(extras["model"], "demo")
        self.assertRegex(extras["weights_digest"], r"^[0-9a-f]{64}$")
        self.assertEqual(extras["weights_digest"], effective.weights_digest)
        self.assertEqual(extras["server_version"], effective.server_version)
        self.assertTrue(effective.server_version)
        # The effective parameters say the same.
        self.assertEqual(effective.seed, 42)
        self.assertAlmostEqual(effective.guidance_scale, 2.5, places=5)
        self.assertAlmostEqual(effective.top_p, 0.9, places=5)
        self.assertEqual(effective.resolution_base, RES)
        self.assertEqual(effective.format, e2e.pb.MESH_FORMAT_GLB)
        self.assertEqual(effective.target_face_count, 500)
        self.assertEqual(effective.mesh_profile, e2e.pb.MESH_PROFILE_NONE)
        self.assertFalse(effective.HasField("bounding_box"))
        # Defaults: no top_p (greedy), no target, no box.
        plain = self.gen(make_request("a plain provenance stool"))
        extras = glb_extras(plain.encoded)
        for key in PROVENANCE_KEYS:
            self.assertIn(key, extras)
        for key in ("top_p", "target_face_count", "bounding_box"):
            self.assertNotIn(key, extras)
        self.assertEqual(extras["seed"], 0)
        self.assertAlmostEqual(extras["guidance_scale"], 3.0, places=5)  # defaults.guidance_scale
        self.assertEqual(extras["request_id"], plain.request_id)
        self.assertFalse(plain.effective.HasField("top_p"))
        self.assertFalse(plain.effective.HasField("target_face_count"))

    def assert_text_provenance(self, prompt, fmt, request_id, read_metadata):
        """Generates `prompt` (seed 77) as `fmt` and checks the provenance that read_metadata
        finds in the file: every key, and the prompt, seed and request id. Returns the response
        and the provenance."""
        response = self.gen(make_request(prompt, seed=77, format=fmt, request_id=request_id))
        self.assert_mesh(response, fmt)
        meta = read_metadata(response.encoded)
        for key in PROVENANCE_KEYS:
            self.assertIn(key, meta)
        self.assertEqual(meta["prompt"], prompt)
        self.assertEqual(meta["seed"], 77)
        self.assertEqual(meta["request_id"], request_id)
        return response, meta

    def test_obj_and_ply_provenance(self):
        prompt = "a provenance \"lamp\"\nwith ümlauts"
        obj, meta = self.assert_text_provenance(prompt, e2e.pb.MESH_FORMAT_OBJ, "prov-obj-1",
                                                obj_metadata)
        self.assertEqual(meta["mesh_profile"], "none")
        self.assertEqual(meta["weights_digest"], obj.effective.weights_digest)
        self.assertNotIn("top_p", meta)
        # The header is ASCII (a newline in the prompt cannot start a line of its own).
        head = obj.encoded[:obj.encoded.index(b"\nv ")]
        head.decode("ascii")
        self.assertFalse(any(line and not line.startswith(b"#") for line in head.split(b"\n")))
        self.assert_text_provenance(prompt, e2e.pb.MESH_FORMAT_PLY, "prov-ply-1", ply_metadata)

    def test_roblox_profile_clamps_the_face_target(self):
        # The face target over the limit is clamped, on a mesh that has more faces than it.
        roblox = self.gen(make_request("a roblox statue", resolution_base=BIG_RES,
                                       target_face_count=30000,
                                       mesh_profile=e2e.pb.MESH_PROFILE_ROBLOX))
        self.assert_mesh(roblox)
        self.assertLessEqual(roblox.face_count, ROBLOX_FACES)
        self.assertLessEqual(roblox.vertex_count, ROBLOX_VERTICES)
        self.assertEqual(roblox.effective.mesh_profile, e2e.pb.MESH_PROFILE_ROBLOX)
        self.assertEqual(roblox.effective.target_face_count, ROBLOX_FACES)
        warnings = [w for w in roblox.warnings if "clamp" in w]
        self.assertEqual(len(warnings), 1, list(roblox.warnings))
        self.assertIn("30000", warnings[0])
        self.assertIn(str(ROBLOX_FACES), warnings[0])
        extras = glb_extras(roblox.encoded)
        self.assertEqual(extras["mesh_profile"], "roblox")
        self.assertLessEqual(len(roblox.encoded), 20 * 1000 * 1000)
        # Without the profile the same request keeps its target: the profile made the difference.
        free = self.gen(make_request("a roblox statue", resolution_base=BIG_RES,
                                     target_face_count=30000,
                                     mesh_profile=e2e.pb.MESH_PROFILE_NONE))
        self.assertGreater(free.face_count, ROBLOX_FACES)
        self.assertEqual(free.effective.target_face_count, 30000)
        self.assertEqual(glb_extras(free.encoded)["mesh_profile"], "none")
        # A small mesh: the target is clamped (effective), the mesh is within the limits.
        small = self.gen(make_request("a small roblox cube", target_face_count=30000,
                                      mesh_profile=e2e.pb.MESH_PROFILE_ROBLOX))
        self.assertEqual(small.effective.target_face_count, ROBLOX_FACES)
        self.assertLessEqual(small.face_count, ROBLOX_FACES)
        self.assertLessEqual(small.vertex_count, ROBLOX_VERTICES)
        # A request with no profile takes the server's (none here).
        default = self.gen(make_request("a small roblox cube"))
        self.assertEqual(default.effective.mesh_profile, e2e.pb.MESH_PROFILE_NONE)


class DiskCacheTest(CacheTestCase):
    """cache.dir in the class's temp folder; the test restarts the server on it."""

    TMP_PREFIX = "cube3d-disk-cache-e2e-"

    @classmethod
    def make_server(cls, tmp_dir):
        cls.cache_dir = os.path.join(tmp_dir, "cache")
        return ServerProcess(cls.SERVER_ARGS + ["--set", f"cache.dir={cls.cache_dir}"], tmp_dir,
                             cache=True)

    def entries(self):
        return sorted(glob.glob(os.path.join(self.cache_dir, "*", "*.entry")))

    def wait_entries(self, n, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            found = self.entries()
            if len(found) == n:
                return found
            self.assertLess(time.monotonic(), deadline,
                            f"{len(found)} cache entry files, not {n}: {found}")
            time.sleep(0.05)

    def restart(self, extra_args=None):
        self.server.stop()
        if extra_args is not None:
            self.server.extra_args = extra_args
        self.server.start()

    def test_1_disk_tier_survives_a_restart_and_a_corrupt_entry_is_recomputed(self):
        request = make_request("a disk cached anvil", seed=12, request_id="disk-1")
        first = self.generate(request)
        self.assertEqual(status_name(first), "CACHE_STATUS_MISS")
        [path] = self.wait_entries(1)
        folder, name = os.path.split(os.path.relpath(path, self.cache_dir))
        self.assertRegex(name, r"^[0-9a-f]{64}\.entry$")
        self.assertEqual(folder, name[:2])
        with open(path, "rb") as f:
            original = f.read()
        self.assertGreater(len(original), len(first.encoded))
        self.assertIn(first.encoded, original)  # the payload is the answer, after a header
        samples = self.wait_for_metrics(
            lambda s: metric_value(s, "cube3d_cache_entries", tier="disk") == 1,
            "cube3d_cache_entries{tier=\"disk\"} 1")
        self.assertGreaterEqual(metric_value(samples, "cube3d_cache_bytes", tier="disk"),
                                len(first.encoded))

        # A new server run on the same folder answers from disk.
        self.restart()
        samples = self.server.metrics()
        self.assertEqual(metric_value(samples, "cube3d_cache_entries", tier="disk"), 1)
        self.assertEqual(metric_value(samples, "cube3d_cache_entries", tier="memory"), 0)
        hit = self.generate(make_request("a disk cached anvil", seed=12, request_id="disk-2"))
        self.assertEqual(status_name(hit), "CACHE_STATUS_HIT")
        self.assertEqual(hit.encoded, first.encoded)
        self.assertEqual(hit.effective.computed_by_request_id, "disk-1")
        self.wait_cache_counts(lambda c: c["hit"] == 1, "one hit")

        # A flipped byte near the end of the entry (in the payload): on the next run the entry
        # fails its check, is deleted and the request recomputed; the answer is right.
        corrupt = bytearray(original)
        corrupt[-10] ^= 0x5A
        with open(path, "wb") as f:
            f.write(corrupt)
        self.restart()
        again = self.generate(make_request("a disk cached anvil", seed=12, request_id="disk-1"))
        self.assertEqual(status_name(again), "CACHE_STATUS_MISS")
        self.assertEqual(again.encoded, first.encoded)
        samples = self.wait_for_metrics(
            lambda s: metric_value(s, "cube3d_cache_corrupt_entries_total") == 1,
            "cube3d_cache_corrupt_entries_total 1")
        self.assertEqual(cache_counts(samples)["hit"], 0)
        # The recomputed entry is written again, the same bytes as the first time.
        deadline = time.monotonic() + 30
        while True:
            if os.path.exists(path):
                with open(path, "rb") as f:
                    rewritten = f.read()
                if rewritten == original:
                    break
            self.assertLess(time.monotonic(), deadline, "the entry was not rewritten as it was")
            time.sleep(0.05)
        self.assertEqual(self.entries(), [path])
        log = self.server.log()
        self.assertIn(path, log)
        self.assertRegex(log, r"(?i)sha-256 is not the header's; deleted it")
        # And served again.
        hit = self.generate(make_request("a disk cached anvil", seed=12, request_id="disk-4"))
        self.assertEqual(status_name(hit), "CACHE_STATUS_HIT")
        self.assertEqual(hit.encoded, first.encoded)

    def test_3_a_named_pipe_in_an_entrys_place_hangs_nothing(self):
        # No memory tier: every repeat reads its entry from disk.
        self.restart(["--set", f"cache.dir={self.cache_dir}", "--set", "cache.max_bytes=0",
                      "--set", "drain_grace_seconds=5"])
        before = set(self.entries())
        first = self.generate(make_request("a piped anvil", seed=3, request_id="pipe-1"))
        [path] = set(self.wait_entries(len(before) + 1)) - before
        # The file shows a moment before the cache lets go of its unwritten copy, which would
        # answer the repeat from memory: wait until the entry is counted on disk.
        self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_cache_entries", tier="disk") or 0) >= len(before) + 1,
            "the entry counted on disk")
        os.unlink(path)
        os.mkfifo(path)
        # The repeat reads the pipe's place: refused as corrupt, recomputed, answered in time.
        start = time.monotonic()
        again = self.generate(make_request("a piped anvil", seed=3, request_id="pipe-1"),
                              timeout=60)
        self.assertLess(time.monotonic() - start, 30)
        self.assertEqual(status_name(again), "CACHE_STATUS_MISS")
        self.assertEqual(again.encoded, first.encoded)
        other = self.generate(make_request("another prompt after the pipe", seed=4), timeout=60)
        self.assertEqual(status_name(other), "CACHE_STATUS_MISS")
        self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_cache_corrupt_entries_total") or 0) >= 1,
            "the pipe counted as a corrupt entry")
        self.assertRegex(self.server.log(), r"a named pipe, not a regular file; deleted it")
        # SIGTERM: out within the drain grace (5 s here) and the cache's own budget.
        start = time.monotonic()
        self.server.stop()
        self.assertLess(time.monotonic() - start, 5 + 10)

    def test_4_an_unusable_cache_dir_turns_the_disk_tier_off(self):
        blocker = os.path.join(os.path.dirname(self.cache_dir), "a-file")
        with open(blocker, "w") as f:
            f.write("not a folder")
        unusable = os.path.join(blocker, "cache")
        self.restart(["--set", f"cache.dir={unusable}"])
        self.assertEqual(self.server.health(), "SERVING")
        answer = self.generate(make_request("served without a disk tier", seed=5))
        self.assertEqual(status_name(answer), "CACHE_STATUS_MISS")
        hit = self.generate(make_request("served without a disk tier", seed=5))
        self.assertEqual(status_name(hit), "CACHE_STATUS_HIT")  # from memory
        samples = self.server.metrics()
        self.assertEqual(metric_value(samples, "cube3d_cache_disk_tier_up"), 0)
        log = self.server.log()
        self.assertIn(f"cache.dir: cannot create {unusable}", log)
        self.assertIn("the disk tier is off", log)

    def test_2_cache_off_and_the_roblox_default_profile(self):
        self.restart(["--set", "cache.enabled=false", "--set", "defaults.mesh_profile=roblox"])
        request = make_request("an uncached roblox chair", target_face_count=30000)
        answers = [self.generate(request) for _ in range(2)]
        for answer in answers:
            self.assertEqual(status_name(answer), "CACHE_STATUS_BYPASS")
            self.assertEqual(answer.effective.mesh_profile, e2e.pb.MESH_PROFILE_ROBLOX)
            self.assertEqual(answer.effective.target_face_count, ROBLOX_FACES)
            self.assertEqual(glb_extras(answer.encoded)["mesh_profile"], "roblox")
        self.assertEqual(answers[0].face_count, answers[1].face_count)
        counts = self.wait_cache_counts(lambda c: sum(c.values()) >= 2, "two cache answers")
        self.assertEqual(counts, {"hit": 0, "miss": 0, "coalesced": 0, "bypass": 2})
        # A request's own profile wins over the default.
        none = self.generate(make_request("an uncached chair",
                                          mesh_profile=e2e.pb.MESH_PROFILE_NONE))
        self.assertEqual(none.effective.mesh_profile, e2e.pb.MESH_PROFILE_NONE)
        self.assertEqual(glb_extras(none.encoded)["mesh_profile"], "none")


if __name__ == "__main__":
    unittest.main()
