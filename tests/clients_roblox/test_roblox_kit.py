"""The Roblox kit (clients/roblox/*.luau) against the server it talks to, read as text (the kit
runs in a Luau VM in test_roblox_luau.py; this pins what a run would not show as plainly):

- the compact encoding's constants (magic, version, header size, header offsets, flags,
  quantisation steps, normal scale) in Cube3dMesh.luau, the Python reader
  (clients/python/cube3d_compact.py) and the spec's header table (docs/mesh-encoding.md) equal
  the server's (include/cube3d/mesh/compact_mesh.h), and the recommended studs per model unit
  equals mesh_profile.h's;
- the section strides Cube3dMesh.luau reads with (12 or 6 bytes a position, 3 a normal, 2 or 4
  an index) are the spec's;
- every request field, enum value, job state and answer field Cube3dServer.luau and the glue
  use exists in the API (proto/cube3d/v1/mesh_service.proto, in protobuf's JSON spelling), and
  the end user header is the server's;
- the RemoteEvents the client waits for are the ones the glue makes, in the glue's folder, and
  no RemoteEvent shares its name with the kit's ModuleScripts.
"""
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("CUBE3D_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
KIT = os.path.join(SOURCE, "clients", "roblox")


def read(*parts):
    with open(os.path.join(SOURCE, *parts), encoding="utf-8") as f:
        return f.read()


def cpp_constants(text):
    """inline constexpr <type> kName = value; -> {kName: value} (ints, floats, strings)."""
    out = {}
    for name, value in re.findall(r"inline constexpr [\w:]+ (k\w+) = ([^;]+);", text):
        value = value.strip()
        if value.startswith('"'):
            out[name] = value.strip('"')
        else:
            out[name] = float(value.replace("'", "")) if "." in value else int(value.replace("'", ""))
    return out


def luau_constants(text):
    """local NAME = value (top-level upper-case locals) -> {NAME: value}."""
    out = {}
    for name, value in re.findall(r"^local ([A-Z][A-Z0-9_]*) = (\S+)$", text, re.MULTILINE):
        out[name] = value.strip('"') if value.startswith('"') else int(value)
    return out


def camel(name):
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


# Luau / Python name -> the server's (compact_mesh.h) name.
SHARED = {
    "MAGIC": "kCompactMeshMagic",
    "VERSION": "kCompactMeshVersion",
    "HEADER_BYTES": "kCompactMeshHeaderBytes",
    "OFFSET_VERSION": "kCompactOffsetVersion",
    "OFFSET_FLAGS": "kCompactOffsetFlags",
    "OFFSET_HEADER_BYTES": "kCompactOffsetHeaderBytes",
    "OFFSET_VERTEX_COUNT": "kCompactOffsetVertexCount",
    "OFFSET_TRIANGLE_COUNT": "kCompactOffsetTriangleCount",
    "OFFSET_BOUNDS_MIN": "kCompactOffsetBoundsMin",
    "OFFSET_BOUNDS_MAX": "kCompactOffsetBoundsMax",
    "FLAG_QUANTIZED": "kCompactFlagQuantized",
    "FLAG_INDICES32": "kCompactFlagIndices32",
    "FLAG_NORMALS": "kCompactFlagNormals",
    "KNOWN_FLAGS": "kCompactKnownFlags",
    "QUANT_STEPS": "kCompactQuantSteps",
    "NORMAL_SCALE": "kCompactNormalScale",
}


class RobloxKit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = cpp_constants(read("include", "cube3d", "mesh", "compact_mesh.h"))
        cls.profile = cpp_constants(read("include", "cube3d", "mesh", "mesh_profile.h"))
        cls.mesh_luau = read("clients", "roblox", "Cube3dMesh.luau")
        cls.server_luau = read("clients", "roblox", "Cube3dServer.luau")
        cls.glue_luau = read("clients", "roblox", "Cube3dGlue.server.luau")
        cls.proto = read("proto", "cube3d", "v1", "mesh_service.proto")

    def test_the_parsers_see_every_constant(self):
        # A renamed or reformatted constant must fail here, not pass by being skipped.
        for cpp in SHARED.values():
            self.assertIn(cpp, self.server)
        self.assertIn("kRobloxStudsPerModelUnit", self.profile)
        self.assertEqual(set(SHARED) - set(luau_constants(self.mesh_luau)), set())

    def test_luau_constants_are_the_servers(self):
        luau = luau_constants(self.mesh_luau)
        for name, cpp in SHARED.items():
            self.assertEqual(luau[name], self.server[cpp], name)
        self.assertEqual(luau["DEFAULT_STUDS_PER_UNIT"], self.profile["kRobloxStudsPerModelUnit"])

    def test_python_reader_constants_are_the_servers(self):
        sys.path.insert(0, os.path.join(SOURCE, "clients", "python"))
        try:
            import cube3d_compact
        finally:
            sys.path.pop(0)
        for name, cpp in SHARED.items():
            value = getattr(cube3d_compact, name)
            self.assertEqual(value.decode() if isinstance(value, bytes) else value,
                             self.server[cpp], name)

    def test_spec_header_table_is_the_servers(self):
        spec = read("docs", "mesh-encoding.md")
        rows = dict((field.split(":")[0].split(",")[0].strip(), int(offset)) for offset, field in
                    re.findall(r"^\| (\d+) \| \d+ \| [^|]+ \| ([^|]+) \|$", spec, re.MULTILINE))
        expected = {"magic": 0, "version": "kCompactOffsetVersion",
                    "flags (below)": "kCompactOffsetFlags",
                    "header size": "kCompactOffsetHeaderBytes",
                    "V": "kCompactOffsetVertexCount", "T": "kCompactOffsetTriangleCount",
                    "bounds min": "kCompactOffsetBoundsMin",
                    "bounds max": "kCompactOffsetBoundsMax"}
        for field, cpp in expected.items():
            self.assertIn(field, rows)
            self.assertEqual(rows[field], cpp if isinstance(cpp, int) else self.server[cpp], field)
        self.assertIn(f"### Header ({self.server['kCompactMeshHeaderBytes']} bytes)", spec)
        self.assertIn(f"version: `{self.server['kCompactMeshVersion']}`", spec)

    def test_luau_strides_are_the_specs(self):
        for stride in ("m.positionsAt + i * 6", "m.positionsAt + i * 12",
                       "(m.normalsAt :: number) + i * 3", "m.indicesAt + k * 4",
                       "m.indicesAt + k * 2",
                       "positionsAt + v * 3 * (if quantized then 2 else 4)",
                       "align4(nextAt + v * 3)",
                       "align4(indicesAt + t * 3 * (if wide then 4 else 2))"):
            self.assertIn(stride, self.mesh_luau)
        self.assertIn("return (n + 3) // 4 * 4", self.mesh_luau)
        self.assertIn("buffer.readi8(", self.mesh_luau)  # normals are signed

    def test_server_module_speaks_the_api(self):
        fields = set(re.findall(r"^\s+(?:repeated )?[\w.]+ (\w+) = \d+;", self.proto, re.MULTILINE))
        json_names = {camel(f) for f in fields}
        request = re.search(r"local meshRequest = \{(.*?)\n\t\}", self.server_luau, re.S).group(1)
        for key in re.findall(r"(\w+) = ", request):
            self.assertIn(key, json_names, f"request field {key}")
        for key in ("positions", "normals", "pollAfterMs", "encoded", "state", "result", "id"):
            self.assertIn(key, json_names)
        enum_values = set(re.findall(r"^\s+([A-Z][A-Z0-9_]+) = \d+;", self.proto, re.MULTILINE))
        used = set(re.findall(r'"([A-Z][A-Z0-9]*_[A-Z0-9_]+)"', self.server_luau))
        self.assertTrue(used)
        self.assertEqual(used - enum_values, set())
        end_user = read("include", "cube3d", "server", "admission", "end_user.h")
        header = re.search(r'kEndUserHeader = "([^"]+)"', end_user).group(1)
        self.assertIn(f'["{header}"]', self.server_luau)
        self.assertIn('"/v1/jobs"', self.server_luau)
        self.assertIn('AddPrefix("Bearer ")', self.server_luau)

    def test_glue_and_client_use_the_same_remote_events(self):
        client = read("clients", "roblox", "Cube3dClient.client.luau")
        made = set(re.findall(r'remote\("(\w+)"\)', self.glue_luau))
        waited = set(re.findall(r'remote\("(\w+)"\)', client))
        self.assertTrue(waited)
        self.assertEqual(waited - made, set())
        # Both sides name the same folder; no RemoteEvent is named as one of the kit's modules.
        folder = re.search(r'FindFirstChild\("(\w+)"\)', self.glue_luau).group(1)
        self.assertIn(f'folder.Name = "{folder}"', self.glue_luau)
        self.assertIn(f'ReplicatedStorage:WaitForChild("{folder}")', client)
        modules = {f.split(".")[0] for f in os.listdir(KIT)}
        self.assertEqual((made | {folder}) & modules, set())
        self.assertIn("FilterStringAsync", self.glue_luau)


if __name__ == "__main__":
    unittest.main()
