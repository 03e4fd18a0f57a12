"""Checks the mesh stage through the files it writes (cube3d_mesh_tool drives it).

- Marching cubes (no post-processing) against scikit-image's Lewiner marching cubes on the golden
  grids and on analytic fields: the same vertices (edge crossings) within 1e-4 grid units, area and
  enclosed volume within 0.5% (the triangulation of ambiguous cells may differ, so face lists are
  not compared).
- OBJ, PLY and GLB files load in trimesh with the reported counts, watertight where expected.
- pygltflib loads and validates the GLB; POSITION min/max are the true bounds.
- Simplification reaches its face budget within 5%, and floaters are removed.
- A face limit (--max-faces, a mesh profile's) holds: the target is capped, simplification runs
  even when it is off, and a mesh meshopt_simplify will not take under the limit (an open sheet
  with a locked border) gets the sloppy pass; a limit that changes nothing changes no byte.
- Provenance metadata (--metadata): pygltflib reads it back from asset.extras, the OBJ and PLY
  header comments parse back as JSON, and trimesh loads all three formats as without it, even
  with a prompt built to break header parsers (trimesh exposes none of it, so only the loading
  and the counts are checked there).

Environment: CUBE3D_BIN_DIR (the tool's folder, default ../../build/bin), CUBE3D_TEST_DATA_DIR
(the tests folder that holds golden/, default ..).
"""

import json
import os
import subprocess
import tempfile
import unittest
import warnings

import numpy as np
import pygltflib
import trimesh
from pygltflib import validator
from safetensors.numpy import load_file
from scipy.spatial import cKDTree
from skimage import measure

HERE = os.path.dirname(os.path.abspath(__file__))
BIN_DIR = os.environ.get("CUBE3D_BIN_DIR", os.path.join(HERE, "..", "..", "build", "bin"))
DATA_DIR = os.environ.get("CUBE3D_TEST_DATA_DIR", os.path.join(HERE, ".."))
TOOL = os.path.join(BIN_DIR, "cube3d_mesh_tool")
BOUND = 1.05


def grid_axis(n):
    return np.linspace(-BOUND, BOUND, n)


def analytic_grid(n, field):
    x, y, z = np.meshgrid(grid_axis(n), grid_axis(n), grid_axis(n), indexing="ij")
    return field(x, y, z).astype(np.float32)


def sphere(radius, cx=0.0):
    return lambda x, y, z: radius - np.sqrt((x - cx) ** 2 + y**2 + z**2)


def torus(major, minor):
    def field(x, y, z):
        q = np.sqrt(x**2 + y**2) - major
        return minor - np.sqrt(q**2 + z**2)

    return field


def signed_volume(vertices, faces):
    v = vertices.astype(np.float64)
    a, b, c = v[faces[:, 0]], v[faces[:, 1]], v[faces[:, 2]]
    return float(np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6.0)


def area(vertices, faces):
    return float(measure.mesh_surface_area(vertices.astype(np.float64), faces))


def load(path):
    return trimesh.load(path, process=False, force="mesh")


class MeshToolCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(TOOL):
            # A missing driver is a failure, not a skip: ctest must not pass without checking.
            raise RuntimeError(f"{TOOL} is not built (cmake --build ... --target cube3d_mesh_tool)")
        cls.tmp = tempfile.TemporaryDirectory(prefix="cube3d_mesh_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def write_grid(self, name, grid):
        grid = np.ascontiguousarray(grid, dtype=np.float32)
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(np.asarray(grid.shape, dtype="<i8").tobytes())
            f.write(grid.astype("<f4").tobytes())
        return path

    def run_tool(self, grid_path, out_name, *args, check=True):
        out = self.path(out_name)
        command = [TOOL, grid_path, out, *map(str, args)]
        result = subprocess.run(command, capture_output=True, text=True)
        if not check:
            return result
        self.assertEqual(result.returncode, 0, result.stderr)
        return out, json.loads(result.stdout)


class MarchingCubesVersusScikitImage(MeshToolCase):
    def compare(self, grid, level, name):
        level = float(level)
        grid_path = self.write_grid(name + ".grid", grid)
        out, summary = self.run_tool(
            grid_path, name + ".ply", "--no-postprocess", "--index-space", "--level", repr(level)
        )
        ours = load(out)
        theirs_v, theirs_f, _, _ = measure.marching_cubes(grid, float(level), method="lewiner")
        theirs_f = theirs_f[:, ::-1]  # skimage winds towards higher values: flip to outward
        ours_v = np.asarray(ours.vertices)
        self.assertEqual(len(ours_v), len(theirs_v))
        self.assertEqual(summary["vertices"], len(theirs_v))
        self.assertEqual(summary["faces"], len(ours.faces))
        # Same vertex sets, both ways.
        d1, _ = cKDTree(theirs_v).query(ours_v, p=np.inf)
        d2, _ = cKDTree(ours_v).query(theirs_v, p=np.inf)
        self.assertLess(max(d1.max(), d2.max()), 1e-4)
        ours_area = area(ours_v, ours.faces)
        self.assertAlmostEqual(ours_area / area(theirs_v, theirs_f), 1.0, delta=0.005)
        ours_volume = signed_volume(ours_v, np.asarray(ours.faces))
        theirs_volume = signed_volume(theirs_v, theirs_f)
        self.assertAlmostEqual(ours_volume / theirs_volume, 1.0, delta=0.005)
        return ours, summary

    def test_golden_grids(self):
        for model in ("tiny_v01", "tiny_v05"):
            with self.subTest(model=model):
                path = os.path.join(DATA_DIR, "golden", model, "expected.safetensors")
                expected = load_file(path)
                grid = expected["grid_logits_res4"]
                level = float(expected["mc_level"].reshape(-1)[0])
                ours, _ = self.compare(grid, level, model)
                golden_v = expected["mc_vertices_index_space"]
                d, _ = cKDTree(golden_v).query(np.asarray(ours.vertices), p=np.inf)
                self.assertLess(d.max(), 1e-4)
                self.assertEqual(len(golden_v), len(ours.vertices))

    def test_analytic_fields(self):
        for name, field in (("sphere", sphere(0.8)), ("torus", torus(0.6, 0.25))):
            with self.subTest(field=name):
                grid = analytic_grid(65, field)
                ours, summary = self.compare(grid, 0.0, name)
                self.assertTrue(summary["watertight"])
                self.assertTrue(ours.is_watertight)
                self.assertEqual(summary["euler"], 2 if name == "sphere" else 0)


class WrittenFiles(MeshToolCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sphere_grid = analytic_grid(65, sphere(0.7, 0.1))

    def test_formats_load_in_trimesh(self):
        grid_path = self.write_grid("sphere.grid", self.sphere_grid)
        for extension in ("obj", "ply", "glb"):
            with self.subTest(format=extension):
                out, summary = self.run_tool(
                    grid_path, "sphere." + extension, "--target-faces", 4000
                )
                mesh = load(out)
                self.assertEqual(len(mesh.vertices), summary["vertices"])
                self.assertEqual(len(mesh.faces), summary["faces"])
                self.assertTrue(mesh.is_watertight)
                self.assertTrue(mesh.is_winding_consistent)
                self.assertGreater(mesh.volume, 0.0)  # outward normals
                # World coordinates: the sphere of radius 0.7 around x = 0.1.
                centre = np.asarray(mesh.vertices).mean(axis=0)
                self.assertLess(np.abs(centre - [0.1, 0.0, 0.0]).max(), 0.01)
                radii = np.linalg.norm(np.asarray(mesh.vertices) - [0.1, 0.0, 0.0], axis=1)
                self.assertLess(np.abs(radii - 0.7).max(), 0.02)

    def test_obj_normals(self):
        grid_path = self.write_grid("sphere_n.grid", self.sphere_grid)
        out, summary = self.run_tool(grid_path, "sphere_n.obj", "--no-postprocess", "--obj-normals")
        with open(out) as f:
            lines = f.read().splitlines()
        self.assertEqual(sum(line.startswith("vn ") for line in lines), summary["vertices"])
        self.assertEqual(sum(line.startswith("f ") for line in lines), summary["faces"])
        self.assertIn("//", next(line for line in lines if line.startswith("f ")))

    def test_glb_validates_with_pygltflib(self):
        grid_path = self.write_grid("sphere_g.grid", self.sphere_grid)
        out, summary = self.run_tool(grid_path, "sphere.glb", "--target-faces", 3000)
        gltf = pygltflib.GLTF2().load(out)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "provisional function"
            validator.validate(gltf)  # raises on a malformed document
        self.assertEqual(gltf.asset.version, "2.0")
        primitive = gltf.meshes[0].primitives[0]
        self.assertEqual(primitive.mode, pygltflib.TRIANGLES)
        blob = gltf.binary_blob()

        def accessor_array(index, dtype, width):
            accessor = gltf.accessors[index]
            view = gltf.bufferViews[accessor.bufferView]
            start = (view.byteOffset or 0) + (accessor.byteOffset or 0)
            data = np.frombuffer(blob, dtype=dtype, count=accessor.count * width, offset=start)
            return accessor, data.reshape(-1, width) if width > 1 else data

        position, positions = accessor_array(primitive.attributes.POSITION, "<f4", 3)
        normal, normals = accessor_array(primitive.attributes.NORMAL, "<f4", 3)
        indices, index_data = accessor_array(primitive.indices, "<u4", 1)
        self.assertEqual(position.count, summary["vertices"])
        self.assertEqual(indices.count, 3 * summary["faces"])
        self.assertEqual(indices.componentType, pygltflib.UNSIGNED_INT)
        self.assertEqual(position.min, positions.min(axis=0).astype(np.float64).tolist())
        self.assertEqual(position.max, positions.max(axis=0).astype(np.float64).tolist())
        np.testing.assert_allclose(np.linalg.norm(normals, axis=1), 1.0, atol=1e-5)
        self.assertLess(int(index_data.max()), position.count)
        # Normals point away from the centre.
        self.assertGreater(np.einsum("ij,ij->i", normals, positions - [0.1, 0.0, 0.0]).min(), 0.0)

    def test_bad_extension_fails(self):
        grid_path = self.write_grid("sphere_b.grid", self.sphere_grid)
        result = self.run_tool(grid_path, "sphere.stl", check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(".obj, .ply, .glb or .c3dm", result.stderr)
        self.assertIn("sphere.stl", result.stderr)


# A prompt built to break header parsers: line breaks, a PLY end_header of its own, OBJ data
# lines, NUL, quotes, a backslash, non-ASCII, and the words trimesh looks for anywhere in a header.
HOSTILE_PROMPT = ("a chair\n# evil\r\nend_header\nv 1 2 3\nf 1 1 1\n\0 \"quoted\" \\ \x7f "
                  "\U0001F600 caf\u00e9 \u2028 end_header TextureFile x.png mtllib ../evil.mtl "
                  "usemtl \u00fend_header\\")
METADATA = {
    "prompt": HOSTILE_PROMPT,
    "seed": 2**64 - 1,
    "top_p": 0.8999999761581421,
    "guidance_scale": 3.0,
    "resolution_base": 6,
    "greedy": False,
    "bounding_box": [1.0, 0.5, 1.9249999523162842],
    "server_version": "1.2.3 (abc)",
}


class ProvenanceMetadata(MeshToolCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sphere_grid = analytic_grid(65, sphere(0.7, 0.1))

    def setUp(self):
        self.grid_path = self.write_grid("prov.grid", self.sphere_grid)
        self.metadata_path = self.path("metadata.json")
        with open(self.metadata_path, "w") as f:
            json.dump(METADATA, f)

    def write(self, extension, *args):
        return self.run_tool(self.grid_path, "prov." + extension, "--target-faces", 2000,
                             "--metadata", self.metadata_path, *args)

    def comment_values(self, lines, prefix):
        values = {}
        for line in lines:
            if line.startswith(prefix) and ": " in line:
                key, _, value = line[len(prefix):].partition(": ")
                values[key] = json.loads(value)
        return values

    def assert_header_is_safe(self, header):
        self.assertTrue(all(b == 0x0A or 0x20 <= b < 0x7F for b in header), header)
        lower = header.decode("ascii").lower()
        for word in ("texturefile", "mtllib", "usemtl"):
            self.assertNotIn(word, lower)

    def test_glb_extras_read_back_with_pygltflib(self):
        out, summary = self.write("glb")
        gltf = pygltflib.GLTF2().load(out)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "provisional function"
            validator.validate(gltf)
        self.assertEqual(gltf.asset.extras, METADATA)
        self.assertEqual(list(gltf.asset.extras), list(METADATA))  # in order
        self.assertEqual(gltf.asset.generator, "cube3d-server 1.2.3 (abc)")
        mesh = load(out)
        self.assertEqual(len(mesh.vertices), summary["vertices"])
        self.assertEqual(len(mesh.faces), summary["faces"])
        self.assertTrue(mesh.is_watertight)

    def test_obj_comments_read_back(self):
        out, summary = self.write("obj", "--obj-normals")
        with open(out, "rb") as f:
            data = f.read()
        header = data[: data.index(b"\nv ") + 1]
        self.assert_header_is_safe(header)
        lines = header.decode("ascii").splitlines()
        self.assertEqual(lines[:2], ["# cube3d-server", "# cube3d provenance"])
        self.assertEqual(len(lines), 2 + len(METADATA))
        self.assertEqual(self.comment_values(lines[2:], "# "), METADATA)
        mesh = load(out)
        self.assertEqual(len(mesh.vertices), summary["vertices"])
        self.assertEqual(len(mesh.faces), summary["faces"])
        self.assertTrue(mesh.is_watertight)

    def test_ply_comments_read_back(self):
        out, summary = self.write("ply")
        with open(out, "rb") as f:
            data = f.read()
        end = data.index(b"end_header\n") + len(b"end_header\n")
        self.assert_header_is_safe(data[:end])
        lines = data[:end].decode("ascii").splitlines()
        self.assertEqual(lines[:3], ["ply", "format binary_little_endian 1.0",
                                     "comment cube3d-server"])
        self.assertEqual(self.comment_values(lines[3:], "comment "), METADATA)
        self.assertTrue(lines[3 + len(METADATA)].startswith("element vertex "))
        # No line but the last has an end_header token (trimesh's test for the header's end).
        self.assertTrue(all("end_header" not in line.split() for line in lines[:-1]))
        mesh = load(out)
        self.assertEqual(len(mesh.vertices), summary["vertices"])
        self.assertEqual(len(mesh.faces), summary["faces"])
        self.assertTrue(mesh.is_watertight)
        # The same geometry as without metadata.
        plain, _ = self.run_tool(self.grid_path, "plain.ply", "--target-faces", 2000)
        with open(plain, "rb") as f:
            self.assertEqual(f.read().split(b"end_header\n", 1)[1], data[end:])

    def test_bad_metadata_is_refused_naming_the_key(self):
        with open(self.metadata_path, "w") as f:
            json.dump({"Prompt": "x"}, f)
        result = self.run_tool(self.grid_path, "bad.glb", "--metadata", self.metadata_path,
                               check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("'Prompt'", result.stderr)


class FaceLimit(MeshToolCase):
    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def test_limit_caps_the_default_target(self):
        grid_path = self.write_grid("limit_sphere.grid", analytic_grid(65, sphere(0.8)))
        plain, plain_summary = self.run_tool(grid_path, "limit_plain.ply")
        self.assertFalse(plain_summary["capped"])
        # A limit over the default target changes no byte.
        loose, loose_summary = self.run_tool(grid_path, "limit_loose.ply", "--max-faces", 10**9)
        self.assertEqual(self.read(loose), self.read(plain))
        self.assertFalse(loose_summary["capped"])
        out, summary = self.run_tool(grid_path, "limit.ply", "--max-faces", 3000)
        self.assertTrue(summary["capped"])
        self.assertEqual(summary["uncapped_target_faces"], plain_summary["target_faces"])
        self.assertEqual(summary["target_faces"], 3000)
        self.assertLessEqual(summary["faces"], 3000)
        self.assertGreater(summary["faces"], 2700)
        self.assertEqual(summary["faces_before_sloppy_pass"], 0)  # meshopt reached it
        mesh = load(out)
        self.assertEqual(len(mesh.faces), summary["faces"])
        self.assertTrue(mesh.is_watertight)

    def test_sloppy_pass_takes_a_stuck_mesh_under_the_limit(self):
        # A wavy sheet cut by the grid's sides: its locked border keeps meshopt_simplify near 290
        # faces whatever the target.
        grid_path = self.write_grid(
            "sheet.grid", analytic_grid(65, lambda x, y, z: 0.1 * np.sin(3 * x) * np.cos(3 * y) - z))
        _, stuck = self.run_tool(grid_path, "sheet_stuck.ply", "--target-faces", 100)
        self.assertGreater(stuck["faces"], 200)
        for args in ((), ("--no-postprocess",)):
            with self.subTest(args=args):
                out, summary = self.run_tool(grid_path, "sheet.ply", "--max-faces", 100, *args)
                self.assertTrue(summary["capped"])
                self.assertGreater(summary["faces_before_sloppy_pass"], 100)
                self.assertTrue(summary["sloppy"])
                self.assertLessEqual(summary["faces"], 100)
                self.assertGreater(summary["faces"], 50)
                self.assertEqual(len(load(out).faces), summary["faces"])

    def test_limit_decimates_with_simplification_off(self):
        grid_path = self.write_grid("limit_raw.grid", analytic_grid(65, sphere(0.8)))
        _, raw = self.run_tool(grid_path, "limit_raw.ply", "--no-postprocess")
        out, summary = self.run_tool(grid_path, "limit_raw_capped.ply", "--no-postprocess",
                                     "--max-faces", 2000)
        self.assertTrue(summary["capped"])
        self.assertEqual(summary["uncapped_target_faces"], 0)  # no target of its own
        self.assertLessEqual(summary["faces"], 2000)
        self.assertLess(summary["faces"], raw["faces"])
        self.assertTrue(load(out).is_watertight)


class PostProcessing(MeshToolCase):
    def test_default_and_explicit_budgets(self):
        # About 100k marching-cubes faces: the default budget max(10000, 10%) is about 11k.
        grid_path = self.write_grid("big.grid", analytic_grid(129, sphere(0.9)))
        for args in ((), ("--target-faces", 5000)):
            with self.subTest(args=args):
                out, summary = self.run_tool(grid_path, "big.ply", *args)
                self.assertGreater(summary["marching_cubes_faces"], 90000)
                default = max(10000, summary["marching_cubes_faces"] // 10)
                expected = int(args[1]) if args else default
                self.assertEqual(summary["target_faces"], expected)
                self.assertAlmostEqual(summary["faces"] / expected, 1.0, delta=0.05)
                mesh = load(out)
                self.assertEqual(len(mesh.faces), summary["faces"])
                self.assertTrue(mesh.is_watertight)
                self.assertAlmostEqual(mesh.volume / (4 / 3 * np.pi * 0.9**3), 1.0, delta=0.02)

    def test_floater_removed(self):
        field = lambda x, y, z: np.maximum(sphere(0.6, -0.2)(x, y, z), sphere(0.08, 0.85)(x, y, z))
        grid_path = self.write_grid("floater.grid", analytic_grid(65, field))
        raw, raw_summary = self.run_tool(grid_path, "floater_raw.ply", "--no-postprocess")
        self.assertEqual(len(load(raw).split(only_watertight=False)), 2)
        out, summary = self.run_tool(grid_path, "floater.ply", "--no-simplify")
        self.assertGreater(summary["floater_faces"], 0)
        mesh = load(out)
        self.assertEqual(len(mesh.split(only_watertight=False)), 1)
        self.assertEqual(len(mesh.faces), raw_summary["faces"] - summary["floater_faces"])


if __name__ == "__main__":
    unittest.main()
