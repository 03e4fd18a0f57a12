#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into fuzz/corpus/<target>/ (committed; rerun after a
format change). A few valid inputs per target, so that the fuzzers start deep inside the
parsers, and a few broken ones near the edges that matter.

Needs numpy, safetensors and grpcio-tools (scripts/setup.sh installs them).
"""
import gzip
import hashlib
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
from safetensors.numpy import save

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def write(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    (folder / name).write_bytes(data)


def raw_safetensors(header, data=b""):
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    t = "safetensors"
    write(t, "valid_f32", save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}))
    write(t, "valid_mixed", save({
        "a": np.array([1.5, -2.0], dtype=np.float16),
        "b": np.array([[1, 2], [3, 4]], dtype=np.int64),
        "c": np.array([7, 8, 9], dtype=np.int32),
        "d": np.frombuffer(b"xyz", dtype=np.uint8),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }, metadata={"format": "pt", "note": "fuzz seed"}))
    # BF16 (numpy has none) and a 9-byte header: misaligned data, the copying path.
    write(t, "valid_bf16", raw_safetensors(
        {"x": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, b"\x80\x3f\x00\x40"))
    misaligned = b'{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    misaligned += b" " * ((len(misaligned) % 2 == 0) * 1)
    write(t, "valid_misaligned", raw_safetensors(misaligned, struct.pack("<2f", 1.0, 2.0)))
    write(t, "bad_truncated", save({"w": np.ones(16, dtype=np.float32)})[:-5])
    write(t, "bad_header_length", struct.pack("<Q", 1 << 40) + b"{}")
    write(t, "bad_json", raw_safetensors(b'{"x": {"dtype": "F32", "shape": [1],'))
    write(t, "bad_overlap", raw_safetensors({
        "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
        "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, b"0123456"))
    write(t, "bad_hole", raw_safetensors({
        "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
        "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}}, b"012345"))
    write(t, "bad_nesting", raw_safetensors(b'{"x":{"shape":[[[1]]]}}'))


def yaml_seeds():
    for name in ("demo.yaml", "cube3d-v0.5.yaml"):
        shutil.copy(ROOT / "models" / name, CORPUS / "model_config" / ("valid_" + name))
    t = "model_config"
    write(t, "bad_type", "gpt_model:\n  n_layer: four\nshape_model: {}\n")
    write(t, "bad_unknown_key", "gpt_model: {n_layer: 1, n_layers: 2}\n")
    write(t, "bad_two_documents", "random_weights_seed: 1\n---\ngpt_model: {}\n")
    # yaml-cpp 0.7.0 makes endless documents of a line starting with ',' (yaml_reader.cpp).
    write(t, "bad_leading_comma", "gpt_model:\n, n_layer: 1\n")
    write(t, "bad_flow", "gpt_model: [1, {a: [b, {c: d}]]\n")

    t = "server_config"
    shutil.copy(ROOT / "models" / "demo-server.yaml", CORPUS / t / "valid_demo-server.yaml")
    write(t, "valid_minimal", "model:\n  config: demo.yaml\n")
    write(t, "valid_overrides", (
        "listen: \"[::1]:50051\"\nmodel: {config: demo.yaml}\nbatching:\n  mode: static\n"
        "  batch_buckets: [1, 3]\nlimits: {max_prompt_bytes: 64, min_resolution_base: 5}\n"
        "defaults: {top_p: 0.9, format: obj, guidance_scale: 0}\nmesh: {occupancy: dense}\n"
        "log_level: debug\nhttp_listen: 127.0.0.1:8080\n"))
    write(t, "bad_missing_file", "model:\n  config: no-such-model.yaml\n")
    write(t, "bad_range", "model: {config: demo.yaml}\nlimits: {max_resolution_base: 99}\n")
    write(t, "bad_leading_comma", "model:\n  config: demo.yaml\n,\n")
    write(t, "bad_anchor", "a: &x [1, 2]\nb: *x\nmodel: {config: demo.yaml}\n")


def prompt_seeds():
    t = "clip_tokenizer"
    write(t, "ascii", "a red wooden chair with four legs")
    write(t, "unicode", "Ünïcödé café — 東京タワー, a ship 🚀 with Ωmega ﬁns")
    write(t, "html", "&amp;lt;b&amp;gt; bold &quot;vase&quot; &#x1F600; &notanentity;")
    write(t, "special_tokens", "<|startoftext|>chair<|endoftext|> it's   \t\n spaced'll")
    write(t, "long_word", "supercalifragilisticexpialidocious" * 8)
    write(t, "numbers", "12345 3.14159 ½ Ⅻ ١٢٣")
    write(t, "invalid_utf8", b"caf\xc3 \xff\xfe chair \xed\xa0\x80")


def request_seeds():
    t = "request"
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'proto'}",
                        f"--python_out={out}", "cube3d/v1/mesh_service.proto"], check=True)
        sys.path.insert(0, out)
        from cube3d.v1 import mesh_service_pb2 as pb

        write(t, "valid_minimal", pb.GenerateMeshRequest(prompt="a chair").SerializeToString())
        full = pb.GenerateMeshRequest(
            prompt="a small boat, ünïcödé ⛵", guidance_scale=3.0, top_p=0.9, seed=42,
            resolution_base=6, format=pb.MESH_FORMAT_PLY, target_face_count=5000,
            return_shape_tokens=True, request_id="req-1.a:b_c")
        write(t, "valid_full", full.SerializeToString())
        write(t, "valid_bbox", pb.GenerateMeshRequest(
            prompt="a table", bounding_box=pb.BoundingBox(x=1.0, y=0.5, z=0.25),
            format=pb.MESH_FORMAT_GLB).SerializeToString())
        # Field 1 (prompt), 10 bytes with a cut-off sequence: Python's protobuf will not build it.
        write(t, "bad_utf8_prompt", b"\x0a\x0acaf\xc3 chair" +
              pb.GenerateMeshRequest(format=pb.MESH_FORMAT_OBJ).SerializeToString())
        write(t, "bad_ranges", pb.GenerateMeshRequest(
            prompt="x", guidance_scale=float("nan"), top_p=1.5, resolution_base=99,
            target_face_count=2, request_id="bad id!",
            bounding_box=pb.BoundingBox(x=-1.0, y=float("inf"))).SerializeToString())
        # An enum value no version knows, and an unknown field (number 99).
        unknown = pb.GenerateMeshRequest(prompt="chair").SerializeToString()
        unknown += bytes([7 << 3, 42]) + bytes([0x9A, 0x06, 3]) + b"abc"  # tag varint of (99 << 3) | 2
        write(t, "bad_enum_unknown_field", unknown)
        write(t, "bad_truncated", full.SerializeToString()[:-3])


def mesh(flags, vertices, indices):
    out = struct.pack("<BHH", flags, len(vertices), len(indices) // 3)
    for v in vertices:
        out += struct.pack("<3f", *v)
    return out + struct.pack(f"<{len(indices)}I", *indices)


def mesh_seeds():
    t = "mesh_writers"
    tetra = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]
    faces = [0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3]
    write(t, "valid_tetrahedron", mesh(0, tetra, faces))
    write(t, "valid_tetrahedron_normals", mesh(1, tetra, faces))
    write(t, "valid_empty", mesh(0, [], []))
    write(t, "valid_vertices_only", mesh(0, tetra, []))
    nan = float("nan")
    write(t, "valid_nonfinite", mesh(1, [(nan, 0, 0), (float("inf"), 1, 0), (0, -0.0, 1e38)],
                                     [0, 1, 2, 2, 2, 2]))
    write(t, "valid_modulo", mesh(2, tetra, [7, 9, 100, 5, 6, 4000000000]))
    write(t, "bad_index", mesh(0, tetra, [0, 1, 4]))
    write(t, "bad_huge_index", mesh(0, tetra, [0, 1, 0xFFFFFFFF]))
    write(t, "bad_not_triples", mesh(4 | 8, tetra, faces))


def mesh_metadata_seeds():
    t = "mesh_metadata"
    write(t, "valid_plain", b"a small wooden chair")
    write(t, "valid_injection", b"a\r\nend_header\nelement vertex 9\n# v 1 2 3\nmtllib x.mtl")
    write(t, "valid_unicode", "un ch\u00e2teau \U0001F3F0 \"q\" \\ \t".encode())
    write(t, "bad_utf8", b"caf\xe9")


def admission_seeds():
    """The first byte picks the input's kind: 0 a keys file, 1 a denylist, 2 an end user id,
    3 a prompt to fold."""
    t = "admission"
    digest = hashlib.sha256(b"secret").hexdigest()
    write(t, "keys_full", b"\x00" + (
        "keys:\n  - name: studio-a\n    sha256: " + digest + "\n    requests_per_minute: 60\n"
        "    max_concurrent: 4\n    shape_tokens_per_minute: 40960\n"
        "    occupancy_points_per_minute: 5.0e7\n    priority: batch\n    per_user:\n"
        "      requests_per_minute: 10\n      max_concurrent: 1\n"
        "      shape_tokens_per_minute: 4096\n"
        "  - name: studio-b\n    sha256: " + "0" * 64 + "\n").encode())
    write(t, "keys_tiny_rates", b"\x00keys:\n  - name: a\n    sha256: " + digest.encode() +
          b"\n    shape_tokens_per_minute: 0.001\n    per_user: {requests_per_minute: 1e15}\n")
    write(t, "keys_bad_priority", b"\x00keys:\n  - name: a\n    sha256: " + digest.encode() +
          b"\n    priority: urgent\n")
    write(t, "denylist", b"\x01# weapons\n\\bforbidden thing\\b\r\n^exact$\n  \n"
          b"caf\xc3\xa9|ch\xc3\xa2teau\n(?i)gun[s]?\n")
    write(t, "denylist_broken", b"\x01(unclosed\nx*\n")
    write(t, "end_user_ok", b"\x02player:42")
    write(t, "end_user_bad", b"\x02player 42\n\x00")
    # Look-alike text: fullwidth, zero-width and tag characters, Cyrillic and Greek, math bold,
    # circled, combining marks, a NUL, spelt out, digits for letters.
    write(t, "prompt_look_alike", ("\x03ｂｏｍｂ b\u200bo\u00adm\u2060b \U000e0062omb "
                                    "\u0431\u043em\u0431 \U0001d41b\U0001d428mb \u24d1omb "
                                    "bo\u0301mb bo\x00mb b o m b b.o.m.b b0mb k1ll $e@t").encode())
    write(t, "prompt_plain", b"\x03a small wooden chair with 4 legs")


def http_request_seeds():
    # The first byte picks the read size (0: all at once; n: pieces of n bytes).
    t = "http_request"
    get = b"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n"
    post = (b"POST /v1/meshes:generate?timeout_ms=500 HTTP/1.1\r\nHost: h\r\n"
            b"Content-Type: application/json\r\nContent-Length: 17\r\n\r\n"
            b'{"prompt": "cat"}')
    chunked = (b"POST /v1/meshes:generateStream HTTP/1.1\r\nHost: h\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n")
    write(t, "valid_get", b"\x00" + get)
    write(t, "valid_post_dripped", b"\x01" + post)
    write(t, "valid_chunked_in_pieces", b"\x07" + chunked)
    write(t, "valid_pipelined", b"\x00" + get + post + get)
    write(t, "valid_http10", b"\x03GET /a%20b?x=%41&y=+ HTTP/1.0\r\n\r\n")
    write(t, "valid_continue", b"\x00POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n"
                               b"Content-Length: 2\r\n\r\nok")
    write(t, "bad_smuggling", b"\x00POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    write(t, "bad_fold", b"\x02GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n")
    write(t, "bad_nul", b"\x00GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\x00j\r\n\r\n")
    write(t, "bad_long_line", b"\x10GET /" + b"a" * 600 + b" HTTP/1.1\r\n\r\n")
    write(t, "bad_version", b"\x00GET / HTTP/2.0\r\nHost: h\r\n\r\n")
    # Request bodies with a Content-Encoding: undone (gzip, deflate), refused (415), mislabelled
    # (400) and a bomb over the body limit (413).
    body = b'{"prompt": "a chair"}'
    gz = gzip.compress(body, mtime=0)
    write(t, "valid_gzip_body", b"\x00POST / HTTP/1.1\r\nHost: h\r\nContent-Encoding: gzip\r\n"
                                b"Content-Length: %d\r\n\r\n" % len(gz) + gz)
    deflated = zlib.compress(body)
    write(t, "valid_deflate_chunked", b"\x03POST / HTTP/1.1\r\nHost: h\r\n"
                                      b"Content-Encoding: deflate\r\nTransfer-Encoding: chunked"
                                      b"\r\n\r\n%x\r\n" % len(deflated) + deflated +
          b"\r\n0\r\n\r\n")
    write(t, "bad_coding_br", b"\x00POST / HTTP/1.1\r\nHost: h\r\nContent-Encoding: br\r\n"
                              b"Content-Length: 2\r\n\r\n{}")
    write(t, "bad_coding_mislabelled", b"\x00POST / HTTP/1.1\r\nHost: h\r\n"
                                       b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
                                       % len(body) + body)
    bomb = gzip.compress(b"\0" * 1_000_000, mtime=0)
    write(t, "bad_coding_bomb", b"\x00POST / HTTP/1.1\r\nHost: h\r\nContent-Encoding: gzip\r\n"
                                b"Content-Length: %d\r\n\r\n" % len(bomb) + bomb)
    # The fuzzer's findings (fixed in request_reader.cpp), kept as seeds.
    write(t, "regression_partial_head",
          b"\x00POST / HTTP/1.1\r\nHost:ut_ms=51.1\r\nHost:" + b"\xb8" * 37 +
          b"00 HTTP/1.1\r\nHost: h\r\nContent-Type: applicati\xb8\xb8")
    write(t, "regression_chunk_after_head", b"\x07" + chunked[:-len(b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n")]
          + b"0\r\nhello\r\n0\r\nX-T: 1\r\n\r\n")
    write(t, "regression_trailers_past_the_field_limit",
          b"\x05POST /v1/jobs HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
          b"5\r\nhello\r\n0\r\n" + b"".join(b"X-T%d: v\r\n" % i for i in range(20)) +
          b"Host: b\r\n\r\n")
    write(t, "regression_last_chunk_dripped", b"\x01" + chunked[:-len(b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n")]
          + b"0\r\nhello\xea")


def compact(vertices, indices, normals=(), quantized=False, indices32=None):
    """A compact mesh payload (docs/mesh-encoding.md), written independently of the C++ encoder."""
    v = len(vertices) // 3
    t = len(indices) // 3
    if indices32 is None:
        indices32 = v > 65536
    flags = (1 if quantized else 0) | (2 if indices32 else 0) | (4 if normals else 0)
    lo = [min(vertices[a::3]) if v else 0.0 for a in range(3)]
    hi = [max(vertices[a::3]) if v else 0.0 for a in range(3)]

    def pad(b):
        return b + b"\0" * (-len(b) % 4)

    out = b"C3DM" + struct.pack("<BBHII3f3f", 1, flags, 40, v, t, *lo, *hi)
    if quantized:
        q = [0 if hi[i % 3] == lo[i % 3] else
             round((p - lo[i % 3]) / (hi[i % 3] - lo[i % 3]) * 65535)
             for i, p in enumerate(vertices)]
        out = pad(out + struct.pack(f"<{len(q)}H", *q))
    else:
        out = pad(out + struct.pack(f"<{len(vertices)}f", *vertices))
    if normals:
        out = pad(out + struct.pack(f"<{len(normals)}b", *[round(n * 127) for n in normals]))
    return pad(out + struct.pack(f"<{len(indices)}{'I' if indices32 else 'H'}", *indices))


def infer_body_seeds():
    """The Open Inference Protocol's REST body: a first byte (bit 0: a header length follows; bit
    1: as the next two bytes' number), then the body."""
    t = "infer_body"
    plain = b"\x00\x00\x00"
    write(t, "json_one_prompt", plain + json.dumps({
        "inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [1, 1], "data": [["a chair"]]},
                   {"name": "SEED", "datatype": "INT64", "shape": [1, 1], "data": [[3]]},
                   {"name": "RESOLUTION_BASE", "datatype": "INT32", "shape": [1], "data": [5]}],
        "outputs": [{"name": "MESH", "parameters": {"binary_data": True}}, {"name": "FACES"}],
        "parameters": {"guidance_scale": 2.5, "format": "obj"}}).encode())
    write(t, "json_batch_bbox", plain + json.dumps({
        "inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]},
                   {"name": "BBOX", "datatype": "FP32", "shape": [2, 3],
                    "data": [[1, 2, 1], [2, 1, 1]]},
                   {"name": "FORMAT", "datatype": "BYTES", "shape": [1], "data": ["glb"]}],
        "parameters": {"binary_data_output": True}}).encode())
    header = json.dumps({"inputs": [
        {"name": "PROMPT", "datatype": "BYTES", "shape": [1],
         "parameters": {"binary_data_size": 11}},
        {"name": "TOP_P", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 4}}]
    }).encode()
    binary = struct.pack("<I", 7) + b"a table" + struct.pack("<f", 0.5)
    write(t, "binary_inputs", bytes([3]) + struct.pack("<H", len(header)) + header + binary)
    write(t, "binary_sizes_short", bytes([3]) + struct.pack("<H", len(header)) + header +
          binary[:-2])
    write(t, "bad_datatype", plain + b'{"inputs": [{"name": "PROMPT", "datatype": "FP32",'
          b' "shape": [1], "data": [1.5]}]}')


def compact_mesh_seeds():
    t = "compact_mesh"
    tetra = [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1]
    faces = [0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3]
    normals = [-0.577, -0.577, -0.577, 1, 0, 0, 0, 1, 0, 0, 0, 1]
    triangle = compact([0, 0, 0, 1, 0, 0, 0, 2, 0], [0, 1, 2])
    write(t, "valid_spec_example", triangle)
    write(t, "valid_tetrahedron_float32", compact(tetra, faces))
    write(t, "valid_tetrahedron_quantized_normals", compact(tetra, faces, normals, quantized=True))
    write(t, "valid_tetrahedron_indices32", compact(tetra, faces, indices32=True))
    write(t, "valid_empty", compact([], []))
    write(t, "bad_version", triangle[:4] + b"\x02" + triangle[5:])
    write(t, "bad_truncated", triangle[:-4])
    write(t, "bad_index", triangle[:80] + b"\x03\x00" + triangle[82:])
    write(t, "bad_padding", triangle[:82] + b"\x01\x00")


def main():
    for target in ("safetensors", "model_config", "server_config", "clip_tokenizer", "request",
                   "mesh_writers", "mesh_metadata", "http_request", "admission",
                   "compact_mesh"):
        # Seeds named regression_* are kept: the fuzzers' findings, saved by hand beside them.
        (CORPUS / target).mkdir(parents=True, exist_ok=True)
        for seed in (CORPUS / target).iterdir():
            if not seed.name.startswith("regression_"):
                seed.unlink()
    safetensors_seeds()
    yaml_seeds()
    prompt_seeds()
    request_seeds()
    mesh_seeds()
    mesh_metadata_seeds()
    http_request_seeds()
    admission_seeds()
    compact_mesh_seeds()
    infer_body_seeds()
    for folder in sorted(CORPUS.iterdir()):
        files = list(folder.iterdir())
        print(f"{folder.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
