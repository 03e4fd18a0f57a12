"""The Roblox kit (clients/roblox/*.luau), run: its four files, unmodified, in a real Luau VM
(PyPI's pluau) over a stand-in for the Roblox engine (roblox_mock.luau, driven by luau_vm.py:
one game server and a client per player, ReplicatedStorage replicated, RemoteEvents between
them, HttpService making real requests over loopback), each object placed where
docs/roblox-kit.md's tables say. It checks:

- the glue: a prompt the text filter changes, one too long or empty, and a filter that is down
  are refused before any request; one request in flight per player;
- the layout: every object where the docs put it, the glue's RemoteEvents as the docs list
  them, each client finding its RemoteEvents and the mesh module (no name shared by two
  objects); a name the kit needs taken by another kind of object is an error naming it;
- the mesh module on payloads made here: the spec's worked example built exactly; every
  payload docs/mesh-encoding.md says a reader must refuse (a NaN or infinite bound, min > max, a
  float32 position outside the bounds or NaN, a non-zero padding byte in each gap, an index >=
  the vertex count), an empty mesh and one past EditableMesh's limits, each refused with a
  message naming what is wrong before any EditableMesh exists, called directly and through the
  client script; a spent memory budget freeing the oldest mesh (its EditableMesh too);
- end to end against demo servers (tests/e2e/server_process.py), with the kit's URL mapped to
  them: a player's prompt -> glue -> Cube3dServer -> a real /v1/jobs job -> every client builds
  the MeshPart (counts, triangles, positions and normals equal to the server's answer read by
  clients/python/cube3d_compact.py), placed in front of the player who asked, with the request
  fields, key and end user the server expects and polls spaced by pollAfterMs; a player who
  leaves while the job runs (the others still get the mesh); a 429 of a
  per_user requests_per_minute quota retried after its Retry-After; a wrong key; a server that
  is down; a job cancelled (DELETE /v1/jobs/{id}) while the kit polls; a job past the kit's
  time-out, which the kit cancels.

Run by ctest (clients.roblox_luau), or by hand from this folder:

    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_roblox_luau

CUBE3D_ROBLOX_KIT_DIR runs another copy of the four files (e.g. an older one, to see these tests
fail on its defects); CUBE3D_LUAU_ECHO=1 prints the machines' output as it comes.
"""
import base64
import json
import math
import os
import re
import struct
import sys
import time
import unittest

from luau_vm import Vm, load_pluau

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("CUBE3D_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
KIT = os.environ.get("CUBE3D_ROBLOX_KIT_DIR") or os.path.join(SOURCE, "clients", "roblox")
sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
sys.path.insert(0, os.path.join(SOURCE, "clients", "python"))
import server_process as e2e  # noqa: E402
import cube3d_compact  # noqa: E402

KEY = "roblox-game-key-for-tests"
SECRET_NAME = "cube3d_api_key"
ALICE, BOB, CAROL, DAVE, ERIN = 101, 202, 303, 404, 505
RATE_PER_USER = 20      # per_user requests_per_minute: when spent, Retry-After is 3 s
POLL_AFTER_MS = 600     # the servers' jobs.poll_after_ms
RUN_TIMEOUT_S = 90      # one scenario, generously (a loaded 2-core machine)


def setUpModule():
    load_pluau()  # no pluau: every test errors with how to install it, none is skipped
    e2e.setUpModule()


def tearDownModule():
    e2e.tearDownModule()


def read(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as f:
        return f.read()


def kit_source(file):
    return read(KIT, file)


def docs_layout():
    """docs/roblox-kit.md's tables: ([(file, class, path)], [(object path, class)]): where each
    file goes in Studio, and what the glue makes."""
    files, made = [], []
    for first, kind, where in re.findall(r"^\| `([\w.]+)` \| (\w+) \| ([^|]+?) \|",
                                         read(SOURCE, "docs", "roblox-kit.md"), re.MULTILINE):
        if first.endswith(".luau"):
            files.append((first, kind, ".".join(p.strip() for p in where.split(">"))))
        else:
            made.append((first, kind))
    return files, made


def kit_url():
    """The URL the glue's CONFIG names (the tests map it to their server)."""
    return re.search(r'baseUrl = "([^"]+)"', kit_source("Cube3dGlue.server.luau")).group(1)


def lua_string(text):
    """A Luau string literal of `text`."""
    safe = b" .,:;-_/+=" + bytes(range(48, 58)) + bytes(range(65, 91)) + bytes(range(97, 123))
    return '"' + "".join(chr(b) if b in safe else f"\\x{b:02x}" for b in text.encode()) + '"'


# --- payloads ------------------------------------------------------------------------------------

def payload(positions, indices, bounds=None, quantized=False, normals=None, wide=False,
            pad=None):
    """A compact mesh (docs/mesh-encoding.md) from float positions [(x, y, z)] and indices, as
    base64. bounds defaults to the positions' box; pad={gap: byte} puts a byte into a padding
    gap ("positions", "normals", "end")."""
    v, t = len(positions), len(indices) // 3
    if bounds is None:
        bounds = ([min(p[a] for p in positions) for a in range(3)] if positions else [0, 0, 0],
                  [max(p[a] for p in positions) for a in range(3)] if positions else [0, 0, 0])
    flags = (cube3d_compact.FLAG_QUANTIZED if quantized else 0) | \
        (cube3d_compact.FLAG_INDICES32 if wide else 0) | \
        (cube3d_compact.FLAG_NORMALS if normals is not None else 0)
    pos_at, normals_at, indices_at, end = cube3d_compact.layout(v, t, flags)
    data = bytearray(end)
    struct.pack_into("<4sBBHII3f3f", data, 0, b"C3DM", 1, flags, 40, v, t, *bounds[0], *bounds[1])
    at = pos_at
    for p in positions:
        if quantized:
            q = [0 if bounds[1][a] == bounds[0][a] else
                 round((p[a] - bounds[0][a]) / (bounds[1][a] - bounds[0][a]) * 65535)
                 for a in range(3)]
            struct.pack_into("<3H", data, at, *q)
            at += 6
        else:
            struct.pack_into("<3f", data, at, *p)
            at += 12
    gaps = {"positions": at}
    if normals is not None:
        for i, n in enumerate(normals):
            struct.pack_into("<3b", data, normals_at + 3 * i, *n)
        gaps["normals"] = normals_at + 3 * v
    struct.pack_into(f"<{len(indices)}{'I' if wide else 'H'}", data, indices_at, *indices)
    gaps["end"] = indices_at + len(indices) * (4 if wide else 2)
    for gap, byte in (pad or {}).items():
        data[gaps[gap]] = byte
    return base64.b64encode(bytes(data)).decode()


# The spec's worked example: one triangle (0, 0, 0), (1, 0, 0), (0, 2, 0), 84 bytes.
SPEC_TRIANGLE = [(0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 2.0, 0.0)]
NAN, INF = float("nan"), float("inf")


class LuauWorlds(unittest.TestCase):
    """Makes kit worlds (a Vm with the kit placed as the docs say) and prints a failed test's
    worlds: their output, script errors and HTTP exchanges."""

    def setUp(self):
        self.vms = []

    def run(self, result=None):
        before = len(result.failures) + len(result.errors) if result else 0
        outcome = super().run(result)
        if result is not None and len(result.failures) + len(result.errors) > before:
            for i, vm in enumerate(getattr(self, "vms", [])):
                lines = [f"[{e['peer']} {e['kind']}] {e['text']}" for e in vm.log()]
                lines += [f"{x['method']} {x['url']} -> {x.get('status', x.get('error'))}"
                          for x in vm.exchanges]
                sys.stderr.write(f"\n----- Luau world {i} ({self.id()}) -----\n" +
                                 "\n".join(lines) + "\n----- end -----\n")
        return outcome

    def world(self, url_map=None, secret=KEY, start=True):
        vm = Vm(url_map)
        self.vms.append(vm)
        vm.call("setSecret", SECRET_NAME, secret)
        files, _ = docs_layout()
        for file, kind, where in files:
            name = file.split(".")[0]
            vm.call("place", where, kind, name, kit_source(file))
        if start:
            vm.call("startServer")
        return vm

    def assert_no_script_errors(self, vm):
        errors = vm.errors()
        self.assertFalse(errors, "\n".join(f"[{e['peer']}] {e['message']}" for e in errors or []))

    def build(self, vm, who, encoded):
        """Cube3dMesh.build(encoded) on a client: (part built?, message)."""
        result = vm.call_raw("runAs", who, f"""
            local ReplicatedStorage = game:GetService("ReplicatedStorage")
            local Cube3dMesh = require(ReplicatedStorage:WaitForChild("Cube3dMesh"))
            local part, problem = Cube3dMesh.build({lua_string(encoded)})
            result.built = part ~= nil
            result.problem = problem
            if part then part.Parent = workspace end
        """)[0]
        self.assertTrue(vm.run(30, lambda: bool(result.get("done"))), "the build never ended")
        answer = vm.to_py(result)
        return answer["built"], answer.get("problem")


class KitLayout(LuauWorlds):
    def test_every_object_is_where_the_docs_say_and_the_clients_find_them(self):
        files, made = docs_layout()
        self.assertEqual(sorted(f for f, _, _ in files),
                         sorted(n for n in os.listdir(KIT) if n.endswith(".luau")))
        self.assertTrue(made, "docs/roblox-kit.md lists no object the glue makes")
        # alice's client starts before the glue has made the remotes (they reach it later, as
        # replication would bring them); bob joins once they exist.
        vm = self.world(start=False)
        vm.call_raw("join", ALICE, "alice")
        vm.run(0.5)
        vm.call("startServer")
        vm.run(0.5)
        vm.call_raw("join", BOB, "bob")
        vm.run(0.5)
        self.assert_no_script_errors(vm)
        for who in ("server", ALICE, BOB):
            names = [c["name"] for c in vm.call("describeChildren", who, "ReplicatedStorage")[0]]
            self.assertEqual(len(names), len(set(names)),
                             f"{who}: ReplicatedStorage holds two objects of one name: {names}")
            for path, kind in made:
                parent, _, name = path.rpartition(".")
                children = vm.call("describeChildren", who, parent)[0]
                self.assertIn({"name": name, "className": kind}, children, f"{who}: {path}")
        request, mesh, error = (p for p, k in made if k == "RemoteEvent")
        self.assertEqual(vm.call("connections", "server", request, "OnServerEvent")[0], 1)
        for who in (ALICE, BOB):
            self.assertEqual(vm.call("connections", who, mesh, "OnClientEvent")[0], 1, who)
            self.assertEqual(vm.call("connections", who, error, "OnClientEvent")[0], 1, who)

    def test_a_name_the_kit_needs_taken_by_another_object_is_an_error_naming_it(self):
        vm = self.world(start=False)
        vm.call("place", "ReplicatedStorage", "ModuleScript", "Cube3dRemotes", "return {}")
        vm.call("startServer")
        vm.run(0.3)
        errors = vm.errors()
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("ReplicatedStorage.Cube3dRemotes is a ModuleScript", errors[0]["message"])


class GlueRefusals(LuauWorlds):
    """What the glue refuses before asking any server."""

    def test_prompts_the_glue_refuses_never_leave_the_game(self):
        vm = self.world({kit_url(): "http://127.0.0.1:9"})
        vm.world.get("filteredWords").push("badword")
        vm.call_raw("join", ALICE, "alice")
        vm.run(0.3)
        cases = [("a badword chair", "that prompt cannot be used"),
                 ("x" * 201, "a prompt is 1 to 200 characters"),
                 ("", "a prompt is 1 to 200 characters")]
        for prompt, message in cases:
            with self.subTest(message):
                before = len(vm.output("alice", "warn"))
                vm.call_raw("runAs", ALICE, f"""
                    local remotes = game:GetService("ReplicatedStorage"):WaitForChild("Cube3dRemotes")
                    remotes:WaitForChild("Request"):FireServer({lua_string(prompt)})
                """)
                self.assertTrue(vm.run(10, lambda: len(vm.output("alice", "warn")) > before))
                self.assertEqual(vm.output("alice", "warn")[-1], "cube3d: " + message)
        vm.world.set("textFilterDown", True)
        vm.call_raw("runAs", ALICE, """
            local remotes = game:GetService("ReplicatedStorage"):WaitForChild("Cube3dRemotes")
            remotes:WaitForChild("Request"):FireServer("a fine chair")
        """)
        self.assertTrue(vm.run(10, lambda: len(vm.output("alice", "warn")) > len(cases)))
        self.assertEqual(vm.output("alice", "warn")[-1],
                         "cube3d: the text filter is unavailable, try again")
        self.assertEqual(vm.exchanges, [])
        self.assert_no_script_errors(vm)


class MeshPayloads(LuauWorlds):
    """Cube3dMesh on payloads made here, on a client."""

    def client(self):
        vm = self.world()
        vm.call_raw("join", ALICE, "alice")
        vm.run(0.5)
        return vm

    def test_the_specs_worked_example_is_built_exactly(self):
        vm = self.client()
        encoded = payload(SPEC_TRIANGLE, [0, 1, 2])
        self.assertEqual(len(base64.b64decode(encoded)), 84)
        self.assertEqual(self.build(vm, ALICE, encoded), (True, None))
        (part,) = vm.call("meshParts", ALICE)[0]
        # 4 studs a model unit (DEFAULT_STUDS_PER_UNIT).
        self.assertEqual(part["positions"], [[0, 0, 0], [4, 0, 0], [0, 8, 0]])
        self.assertEqual(part["triangles"], [[0, 1, 2]])
        self.assertEqual(part["normalCount"], 0)

    def test_quantised_positions_with_normals_and_wide_indices(self):
        vm = self.client()
        box = ([-1.0, 0.0, -0.5], [1.0, 2.0, 0.5])
        points = [(-1.0, 0.0, -0.5), (1.0, 0.0, 0.5), (0.25, 2.0, 0.0)]
        encoded = payload(points, [0, 1, 2], bounds=box, quantized=True, wide=True,
                          normals=[(0, 127, 0), (0, 127, 0), (-128, 0, 0)])
        self.assertEqual(self.build(vm, ALICE, encoded), (True, None))
        (part,) = vm.call("meshParts", ALICE)[0]
        for got, want in zip(part["positions"], points):
            for a in range(3):
                self.assertAlmostEqual(got[a], 4 * want[a], delta=4 * 2 / 65535)
        self.assertEqual(part["normalCount"], 3)
        self.assertEqual(part["faceNormals"], [[0, 1, 2]])

    # (name, payload, what the message must say)
    REFUSED = [
        ("a NaN bound",
         lambda: payload(SPEC_TRIANGLE, [0, 1, 2], bounds=([0, NAN, 0], [1, 2, 0])),
         r"the bounds on y are \[-?nan, 2\]: not finite"),
        ("an infinite bound", lambda: payload(SPEC_TRIANGLE, [0, 1, 2],
                                              bounds=([0, 0, 0], [INF, 2, 0])),
         r"the bounds on x are \[0, inf\]: not finite"),
        ("min > max", lambda: payload(SPEC_TRIANGLE, [0, 1, 2], bounds=([0, 0, 1], [1, 2, 0])),
         r"the bounds on z are \[1, 0\]: min > max"),
        ("a float32 position outside the bounds",
         lambda: payload(SPEC_TRIANGLE, [0, 1, 2], bounds=([0, 0, 0], [1, 1.5, 0])),
         r"vertex 2's y is 2, outside the bounds \[0, 1\.5\]"),
        ("a NaN position", lambda: payload([(0, 0, 0), (1, 0, 0), (0, NAN, 0)], [0, 1, 2],
                                           bounds=([0, 0, 0], [1, 2, 0])),
         r"vertex 2's y is -?nan, outside the bounds"),
        ("a non-zero padding byte after the indices",
         lambda: payload(SPEC_TRIANGLE, [0, 1, 2], pad={"end": 7}), r"padding byte 82 is 7, not 0"),
        ("a non-zero padding byte after the positions",
         lambda: payload(SPEC_TRIANGLE, [0, 1, 2], quantized=True, pad={"positions": 1}),
         r"padding byte 58 is 1, not 0"),
        ("a non-zero padding byte after the normals",
         lambda: payload(SPEC_TRIANGLE, [0, 1, 2], normals=[(0, 127, 0)] * 3,
                         pad={"normals": 255}), r"padding byte 85 is 255, not 0"),
        ("an index >= the vertex count", lambda: payload(SPEC_TRIANGLE, [0, 1, 3]),
         r"triangle 0 names vertex 3; the mesh has 3 vertices"),
        ("an empty mesh", lambda: payload([], []),
         r"the mesh is empty \(0 vertices, 0 triangles\)"),
        ("vertices without triangles", lambda: payload(SPEC_TRIANGLE, []),
         r"the mesh is empty \(3 vertices, 0 triangles\)"),
        ("more triangles than EditableMesh takes",
         lambda: payload(SPEC_TRIANGLE, [0, 1, 2] * 20001),
         r"3 vertices and 20001 triangles: past EditableMesh's limits \(60000 and 20000\)"),
    ]

    def test_what_the_spec_refuses_is_refused_before_any_editable_mesh(self):
        vm = self.client()
        for name, make, message in self.REFUSED:
            with self.subTest(name):
                built, problem = self.build(vm, ALICE, make())
                self.assertFalse(built)
                self.assertRegex(problem or "", message)
        self.assertEqual(vm.call("editableCounts", ALICE)[0], {"made": 0, "live": 0})
        self.assertEqual(vm.call("meshPartCount", ALICE)[0], 0)
        self.assert_no_script_errors(vm)

    def test_a_refused_payload_sent_to_every_client_is_a_warning_and_no_mesh(self):
        vm = self.client()
        vm.call_raw("join", BOB, "bob")
        vm.run(0.3)
        for name, make, message in self.REFUSED:
            with self.subTest(name):
                before = len(vm.output("bob", "warn"))
                vm.call_raw("runAs", "server", f"""
                    local ReplicatedStorage = game:GetService("ReplicatedStorage")
                    local remotes = ReplicatedStorage:WaitForChild("Cube3dRemotes")
                    remotes:WaitForChild("Mesh"):FireAllClients({lua_string(make())}, {ALICE})
                """)
                self.assertTrue(vm.run(10, lambda: len(vm.output("bob", "warn")) > before))
                self.assertRegex(vm.output("bob", "warn")[-1], "^cube3d: " + message)
        for who in (ALICE, BOB):
            self.assertEqual(vm.call("editableCounts", who)[0]["made"], 0)
            self.assertEqual(vm.call("meshPartCount", who)[0], 0)
        self.assert_no_script_errors(vm)

    def test_a_spent_memory_budget_frees_the_oldest_mesh_and_its_editable_mesh(self):
        vm = self.client()
        vm.world.set("editableBudget", 1)
        for size in (1.0, 3.0):
            encoded = payload([(0, 0, 0), (size, 0, 0), (0, size, 0)], [0, 1, 2])
            vm.call_raw("runAs", "server", f"""
                local remotes = game:GetService("ReplicatedStorage"):WaitForChild("Cube3dRemotes")
                remotes:WaitForChild("Mesh"):FireAllClients({lua_string(encoded)}, {ALICE})
            """)
            vm.run(0.5)
        self.assert_no_script_errors(vm)
        self.assertEqual(vm.output("alice", "warn"), [])
        (part,) = vm.call("meshParts", ALICE)[0]
        self.assertEqual(part["positions"][1], [12, 0, 0])  # the second mesh is the one shown
        self.assertEqual(vm.call("editableCounts", ALICE)[0], {"made": 2, "live": 1})


class KitServerCase(LuauWorlds, e2e.KeyedServerTestCase):
    """A demo server (HTTP, the result cache on) with the game's key, whose end users may each
    make RATE_PER_USER requests a minute, and kit worlds whose URL leads to it. No tests of its
    own: a subclass sets the server's default resolution."""

    HTTP = True
    CACHE = True
    TMP_PREFIX = "cube3d-roblox-luau-"
    KEYS = [("roblox-game", KEY, {"per_user": f"{{requests_per_minute: {RATE_PER_USER}}}"})]

    def setUp(self):
        super().setUp()
        self.url = kit_url()

    def server_world(self, secret=KEY, port=None):
        return self.world({self.url: f"http://127.0.0.1:{port or self.server.http_port}"}, secret)

    def ask(self, vm, who, prompt):
        """The player's client sends a prompt, as a game's UI would."""
        vm.call_raw("runAs", who, f"""
            local remotes = game:GetService("ReplicatedStorage"):WaitForChild("Cube3dRemotes")
            remotes:WaitForChild("Request"):FireServer({lua_string(prompt)})
        """)

    def kit_requests(self, vm, method=None):
        return [x for x in vm.exchanges if method is None or x["method"] == method]


class KitAgainstServer(KitServerCase):
    """Against a demo server at resolution 4 by default (the kit asks for none): jobs of well
    under a second."""

    SERVER_ARGS = ["--set", "defaults.resolution_base=4",
                   "--set", f"jobs.poll_after_ms={POLL_AFTER_MS}"]

    def test_a_players_prompt_becomes_a_mesh_on_every_client(self):
        vm = self.server_world()
        vm.call_raw("join", ALICE, "alice")
        vm.call_raw("join", BOB, "bob")
        vm.call("setCharacter", ALICE, 10, 5, 20, math.pi / 2)
        vm.run(0.3)
        self.ask(vm, ALICE, "a small red chair")
        self.ask(vm, ALICE, "and a table")  # one request in flight per player
        self.assertTrue(vm.run(RUN_TIMEOUT_S, lambda: all(
            vm.call("meshPartCount", who)[0] == 1 for who in (ALICE, BOB))),
            "the mesh never reached both clients")
        self.assert_no_script_errors(vm)
        self.assertEqual(vm.output("alice", "warn"),
                         ["cube3d: your previous mesh is still being made"])
        for who in ("server", "bob"):
            self.assertEqual(vm.output(who, "warn"), [], who)

        # What the kit sent: one submit, then polls spaced by pollAfterMs.
        posts, gets = self.kit_requests(vm, "POST"), self.kit_requests(vm, "GET")
        self.assertEqual(len(posts), 1)
        post = posts[0]
        self.assertEqual(post["url"], f"{self.url}/v1/jobs")
        self.assertEqual(post["status"], 202)
        self.assertEqual(post["headers"]["Authorization"], f"Bearer {KEY}")
        self.assertEqual(post["headers"]["X-End-User-Id"], str(ALICE))
        # A key of its own, so that the submit is safe to retry (the IETF draft's quoted form).
        self.assertRegex(post["headers"]["Idempotency-Key"],
                         r'^"[0-9A-F]{8}-[0-9A-F]{4}-4[0-9A-F]{3}-[89AB][0-9A-F]{3}-[0-9A-F]{12}"$')
        self.assertEqual(post["body"], {
            "prompt": "a small red chair", "format": "MESH_FORMAT_COMPACT",
            "compact": {"positions": "COMPACT_POSITIONS_QUANTIZED16", "normals": True},
            "meshProfile": "MESH_PROFILE_ROBLOX", "pivot": "PIVOT_BOTTOM_CENTER",
            "targetFaceCount": 5000})
        job_id = post["response"]["id"]
        self.assertTrue(gets)
        self.assertTrue(all(g["url"] == f"{self.url}/v1/jobs/{job_id}" and g["status"] == 200
                            for g in gets), [g["url"] for g in gets])
        starts = [post["finished"]] + [g["started"] for g in gets]
        for a, b in zip(starts, starts[1:]):
            self.assertGreaterEqual(b - a, POLL_AFTER_MS / 1000 - 0.02)
        answer = gets[-1]["response"]
        self.assertEqual(answer["state"], "JOB_STATE_SUCCEEDED")
        result = answer["result"]

        # What every client built: the server's mesh.
        mesh = cube3d_compact.decode(base64.b64decode(result["encoded"]))
        vertices = len(mesh.vertices) // 3
        self.assertEqual(vertices, int(result["vertexCount"]))
        self.assertEqual(len(mesh.indices) // 3, int(result["faceCount"]))
        self.assertGreater(vertices, 0)
        triangles = [mesh.indices[i:i + 3] for i in range(0, len(mesh.indices), 3)]
        root = (10, 5, 20)
        for who in (ALICE, BOB):
            (part,) = vm.call("meshParts", who)[0]
            self.assertEqual(len(part["positions"]), vertices, who)
            self.assertEqual(len(part["triangles"]), int(result["faceCount"]), who)
            self.assertEqual(part["triangles"], triangles, who)
            self.assertEqual(part["normalCount"], vertices, who)
            self.assertEqual(part["faceNormals"], triangles, who)
            worst = max(abs(got[a] - 4 * mesh.vertices[3 * i + a])
                        for i, got in enumerate(part["positions"]) for a in range(3))
            self.assertLess(worst, 1e-4, f"{who}: positions differ from the server's")
            self.assertTrue(part["anchored"])
            # In front of alice (turned a quarter about y: her front is -x), 3 studs down, the
            # mesh's bottom centre on that point.
            for got, want in zip(part["origin"], (root[0] - 8, root[1] - 3, root[2])):
                self.assertAlmostEqual(got, want, places=3)
            self.assertAlmostEqual(part["lowestY"], root[1] - 3, places=3)

    def test_a_player_who_leaves_while_the_job_runs(self):
        vm = self.server_world()
        vm.call_raw("join", ALICE, "alice")
        vm.call_raw("join", BOB, "bob")
        vm.run(0.3)
        self.ask(vm, BOB, "a chair for someone who left")
        self.assertTrue(vm.run(RUN_TIMEOUT_S, lambda: self.kit_requests(vm, "POST")))
        vm.call_raw("leave", BOB)
        # The others still get the mesh; the glue forgets the player.
        self.assertTrue(vm.run(RUN_TIMEOUT_S, lambda: vm.call("meshPartCount", ALICE)[0] == 1))
        self.assert_no_script_errors(vm)
        self.assertEqual(vm.output("server", "warn"), [])
        self.assertEqual(vm.output("alice", "warn"), [])

    def test_a_429_is_retried_after_its_retry_after(self):
        # Spend carol's per-user quota (cache hits count as requests and cost no work).
        headers = {**e2e.auth(KEY), "X-End-User-Id": str(CAROL)}
        body = {"prompt": "spending a quota", "resolutionBase": 4, "format": "MESH_FORMAT_RAW"}
        for _ in range(RATE_PER_USER + 5):
            status, _, data = self.server.http("POST", "/v1/meshes:generate", body, headers)
            if status == 429:
                break
            self.assertEqual(status, 200, data)
        self.assertEqual(status, 429, "the per-user quota never ran out")
        vm = self.server_world()
        vm.call_raw("join", CAROL, "carol")
        vm.run(0.3)
        self.ask(vm, CAROL, "a tall blue lamp")
        self.assertTrue(vm.run(RUN_TIMEOUT_S, lambda: vm.call("meshPartCount", CAROL)[0] == 1),
                        "no mesh after the 429")
        self.assert_no_script_errors(vm)
        posts = self.kit_requests(vm, "POST")
        self.assertEqual([p["status"] for p in posts], [429, 202])
        self.assertIn("per_user.requests_per_minute", posts[0]["response"]["error"]["message"])
        self.assertEqual(posts[0]["headers"]["Idempotency-Key"], posts[1]["headers"]["Idempotency-Key"])
        # A Roblox script reads Headers as a plain table: the server spells it Retry-After on
        # every answer (the kit looks up both spellings all the same).
        retry_after = int(posts[0]["response_headers"]["Retry-After"])
        self.assertGreaterEqual(retry_after, 2)  # more than the kit's own first back-off would be
        self.assertGreaterEqual(posts[1]["started"] - posts[0]["finished"], retry_after - 0.02)

    def test_a_submit_whose_answer_was_lost_is_retried_and_gets_its_job(self):
        vm = self.server_world()
        vm.lose_answer = lambda entry: entry["method"] == "POST" and not any(
            e.get("lost") for e in vm.exchanges)
        vm.call_raw("join", ALICE, "alice")
        vm.run(0.3)
        self.ask(vm, ALICE, "a bench whose answer got lost")
        self.assertTrue(vm.run(RUN_TIMEOUT_S, lambda: vm.call("meshPartCount", ALICE)[0] == 1),
                        "no mesh after the lost answer")
        self.assert_no_script_errors(vm)
        posts = self.kit_requests(vm, "POST")
        self.assertEqual([(p["status"], p.get("lost", False)) for p in posts],
                         [(202, True), (200, False)])
        # The retry carried the same key and got the job the lost answer named: one job made.
        self.assertEqual(posts[0]["headers"]["Idempotency-Key"], posts[1]["headers"]["Idempotency-Key"])
        self.assertEqual(posts[1]["response"]["id"], posts[0]["response"]["id"])

    def test_a_wrong_key_is_refused_with_the_servers_message(self):
        vm = self.server_world(secret="not-the-key")
        vm.call_raw("join", DAVE, "dave")
        vm.run(0.3)
        self.ask(vm, DAVE, "a green teapot")
        self.assertTrue(vm.run(RUN_TIMEOUT_S, lambda: vm.output("dave", "warn")))
        self.assertEqual(vm.output("server", "warn"),
                         ["cube3d: submit: 401 UNAUTHENTICATED: unknown API key"])
        self.assertEqual(vm.output("dave", "warn"), ["cube3d: the mesh could not be made"])
        self.assertEqual(len(vm.exchanges), 1)

    def test_a_server_that_is_down(self):
        closed = e2e.free_ports(1)[0]  # nothing listens there
        vm = self.server_world(port=closed)
        vm.call_raw("join", DAVE, "dave")
        vm.call_raw("join", ERIN, "erin")
        vm.run(0.3)
        for attempt in (1, 2):  # the player may ask again: the glue is not left busy
            self.ask(vm, DAVE, "a wooden boat")
            self.assertTrue(vm.run(RUN_TIMEOUT_S,
                                   lambda: len(vm.output("dave", "warn")) == attempt))
        self.assertEqual(vm.output("server", "warn"),
                         ["cube3d: request failed: HttpError: ConnectFail"] * 2)
        self.assertEqual(vm.output("dave", "warn"), ["cube3d: the mesh could not be made"] * 2)
        self.assertEqual(vm.output("erin", "warn"), [])
        for who in (DAVE, ERIN):
            self.assertEqual(vm.call("meshPartCount", who)[0], 0)
        self.assert_no_script_errors(vm)


class KitAgainstSlowServer(KitServerCase):
    """Against a demo server whose jobs stay open for seconds (resolution 8 by default: seconds
    of meshing), to cancel them."""

    SERVER_ARGS = ["--set", "defaults.resolution_base=8",
                   "--set", f"jobs.poll_after_ms={POLL_AFTER_MS}"]

    def job_state(self, job_id):
        status, _, data = self.server.http("GET", f"/v1/jobs/{job_id}", None, e2e.auth(KEY))
        self.assertEqual(status, 200, data)
        return json.loads(data)["state"]

    def test_a_job_cancelled_while_the_kit_polls(self):
        vm = self.server_world()
        cancelled = {}

        def cancel_on_first_poll(entry):
            if not cancelled and entry["method"] == "GET" and entry.get("status") == 200 and \
                    entry["response"]["state"] in ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING"):
                job_id = entry["response"]["id"]
                status, _, data = self.server.http("DELETE", f"/v1/jobs/{job_id}", None,
                                                   e2e.auth(KEY))
                cancelled.update(id=job_id, status=status, at=time.monotonic(), body=data)

        vm.on_exchange = cancel_on_first_poll
        vm.call_raw("join", ALICE, "alice")
        vm.run(0.3)
        self.ask(vm, ALICE, "a slow cancelled castle")
        self.assertTrue(vm.run(RUN_TIMEOUT_S, lambda: vm.output("alice", "warn")))
        self.assertEqual(cancelled.get("status"), 200, cancelled)
        self.assertEqual(self.job_state(cancelled["id"]), "JOB_STATE_CANCELLED")
        (warning,) = vm.output("server", "warn")
        self.assertRegex(warning, r"^cube3d: job CANCELLED: ")
        self.assertEqual(vm.output("alice", "warn"), ["cube3d: the mesh could not be made"])
        # The kit saw it at its next poll and asked nothing more.
        last = vm.exchanges[-1]
        self.assertEqual((last["method"], last["response"]["state"]),
                         ("GET", "JOB_STATE_CANCELLED"))
        self.assertLess(last["started"] - cancelled["at"], POLL_AFTER_MS / 1000 + 1.0)
        self.assertEqual(vm.call("meshPartCount", ALICE)[0], 0)
        self.assert_no_script_errors(vm)

    def test_a_job_past_the_time_out_is_cancelled(self):
        vm = self.server_world()
        vm.call_raw("join", ERIN, "erin")
        vm.run(0.3)
        result = vm.call_raw("runAs", "server", f"""
            local ServerScriptService = game:GetService("ServerScriptService")
            local Cube3dServer = require(ServerScriptService:WaitForChild("Cube3dServer"))
            local player = game:GetService("Players"):GetPlayerByUserId({ERIN})
            local started = os.clock()
            local payload, why = Cube3dServer.generate({{
                baseUrl = {lua_string(self.url)}, secretName = "{SECRET_NAME}",
                timeoutSeconds = 1.5,
            }}, player, "a slow tower past its time")
            result.payload = payload
            result.why = why
            result.took = os.clock() - started
        """)[0]
        self.assertTrue(vm.run(RUN_TIMEOUT_S, lambda: bool(result.get("done"))))
        answer = vm.to_py(result)
        self.assertIsNone(answer.get("payload"))
        job_id = self.kit_requests(vm, "POST")[0]["response"]["id"]
        self.assertEqual(answer["why"], f"no mesh within 1.5 s (job {job_id} cancelled)")
        self.assertGreaterEqual(answer["took"], 1.5)
        self.assertLess(answer["took"], 1.5 + 1.0)
        delete = vm.exchanges[-1]
        self.assertEqual((delete["method"], delete["url"], delete["status"]),
                         ("DELETE", f"{self.url}/v1/jobs/{job_id}", 200))
        self.assertEqual(delete["response"]["state"], "JOB_STATE_CANCELLED")
        self.assertEqual(self.job_state(job_id), "JOB_STATE_CANCELLED")
        self.assert_no_script_errors(vm)


if __name__ == "__main__":
    unittest.main()
