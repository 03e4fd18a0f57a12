#!/usr/bin/env python3
"""Fails on an include or a link that the layer table of ARCHITECTURE.md forbids.

Includes: every source and header of a layer (src/<layer>/, include/cube3d/<layer>/, and the
folders listed below) may include only the cube3d layers it may use, and the torch-free layers no
libtorch, gRPC or CUDA header. Inside the server, each part (src/server/<part>/ and
include/cube3d/server/<part>/) may include only the parts SERVER_PARTS gives it: the front doors
(grpc/, http/) use core/ and admission/, never the executor, pipeline or engine; core/ includes
no transport library (Boost.Beast/Asio, gRPC beyond its Status); cache/ and admission/ (in the
gRPC-free server base) no gRPC, protobuf or API header at all; nothing but app/ includes app/;
clients include no server header. A few headers of a layer are allowed where the rest of it is not,
each for a stated reason (Layer.headers, ServerPart.headers). Links (with --build-dir): the binaries that need no tensors
have no libtorch among their shared-library dependencies (readelf -d), and no shipped binary
carries the source tree's path (a default resolved at build time would break on any other machine).
Batches: the unity build (CUBE3D_UNITY_BUILD, and the fuzz project's own groups) compiles several
sources as one translation unit, where their anonymous namespaces are one; so no two sources of
src/ or bench/ may give a file-local name (an anonymous namespace's, or a static one) the same
name, unless both are executables' mains (never in one target) or both lines are the same alias.

  scripts/check_layering.py [--root DIR] [--build-dir DIR]

Exit status 0 when everything holds, 1 with one line per violation otherwise.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

TORCH = ("ATen/", "torch/", "c10/", "caffe2/")
GRPC = ("grpcpp/", "grpc/", "grpc++/", "google/protobuf/")
CUDA = ("cuda_runtime", "cuda.h", "cublas", "cuda_bf16", "cuda_fp16", "nvtx")


@dataclass
class Layer:
    name: str
    folders: list[str]
    uses: set[str]  # cube3d layers it may include besides its own
    torch: bool = False  # may include libtorch headers
    grpc: bool = False  # may include gRPC / protobuf headers (and cube3d/v1)
    cuda: bool = False  # may include CUDA headers
    # Files of a torch-free layer that may include libtorch anyway (tensor I/O in core).
    torch_files: set[str] = field(default_factory=set)
    # Files that may include one more layer than the rest of theirs, each for a stated reason.
    file_uses: dict[str, set[str]] = field(default_factory=dict)
    # Headers of other layers that the whole layer may include, each for a stated reason.
    headers: set[str] = field(default_factory=set)


# The mesh preview (a PNG of a mesh) and the Mesh it draws: what HTTP's Accept: image/png answer
# makes of a response's raw arrays on the connection's thread, with no other part of the mesh
# layer (no meshing, no writers) in reach.
MESH_PREVIEW_HEADERS = {"cube3d/mesh/mesh_preview.h", "cube3d/mesh/mesh.h"}

# ARCHITECTURE.md's table, plus the command-line tools (which, like the bench, may also reach
# the engine for what only the offline tools do: precomputed embeddings, dumps, byte models).
LAYERS = [
    Layer("core", ["src/core", "include/cube3d/core"], set(),
          torch_files={"src/core/safetensors.cpp", "src/core/safetensors_writer.cpp",
                       "include/cube3d/core/safetensors.h", "src/core/pch.h",
                       "src/core/pch.cpp"}),
    Layer("cli", ["src/cli", "include/cube3d/cli"], {"core"}),
    Layer("mesh", ["src/mesh", "include/cube3d/mesh"], {"core"}),
    Layer("scheduler", ["src/scheduler", "include/cube3d/scheduler"], {"core"}),
    Layer("kernels", ["kernels"], set(), cuda=True),
    Layer("model", ["src/model", "include/cube3d/model"], {"core"}, torch=True),
    Layer("engine", ["src/engine", "include/cube3d/engine"], {"core", "model", "kernels"},
          torch=True, cuda=True),
    # model_text.cpp: the one CLIP clean-up function the server's prompt policy needs (the
    # server may not include model/; the pipeline reaches it through the engine anyway).
    Layer("pipeline", ["src/pipeline", "include/cube3d/pipeline"], {"core", "engine", "mesh"},
          torch=True, file_uses={"src/pipeline/model_text.cpp": {"model"}}),
    Layer("api", ["src/api", "include/cube3d/api"], {"core"}, grpc=True),
    Layer("clients", ["src/clients", "include/cube3d/clients"], {"core", "cli", "api"},
          grpc=True),
    Layer("server", ["src/server", "include/cube3d/server"],
          {"core", "cli", "scheduler", "pipeline", "api"}, torch=True, grpc=True,
          headers=MESH_PREVIEW_HEADERS),
    Layer("tools", ["src/tools", "include/cube3d/tools", "bench"],
          {"core", "cli", "pipeline", "engine", "mesh", "model"},
          torch=True),
]

# The server's parts and the parts each may include (besides its own), with the layers outside
# the server a part may not include although the server may, and whether it may include a
# transport library (Boost.Beast/Asio, gRPC's server API; gRPC's Status is the core's own
# vocabulary and allowed everywhere).
@dataclass
class ServerPart:
    uses: set[str]
    forbidden_layers: set[str] = field(default_factory=set)
    transports: bool = True
    # In the server's torch- and gRPC-free base (cube3d_server_base, also tested under TSan):
    # no gRPC or protobuf header at all (not even Status), and no API message (cube3d/v1).
    grpc_free: bool = False
    # Headers of a forbidden layer that the part may include, each for a stated reason.
    headers: set[str] = field(default_factory=set)


FRONT_DOOR_FORBIDDEN = {"pipeline", "engine", "model", "mesh", "scheduler"}
SERVER_PARTS = {
    "core": ServerPart({"admission", "observability", "cache"},
                       {"pipeline", "engine", "model", "mesh"}, transports=False),
    # The result cache's store: bytes in, bytes out, on memory and disk; knows no request.
    "cache": ServerPart(set(), FRONT_DOOR_FORBIDDEN, transports=False, grpc_free=True),
    # Jobs: records (job_store) and the glue that runs them on the core (job_service).
    "jobs": ServerPart({"core", "admission", "observability", "cache"}, FRONT_DOOR_FORBIDDEN,
                       transports=False),
    # API keys, quotas, end users, the prompt policy: what a caller may do, decided before any
    # request is read into a job; knows no transport and no API message.
    "admission": ServerPart(set(), FRONT_DOOR_FORBIDDEN, transports=False, grpc_free=True),
    "observability": ServerPart(set(), FRONT_DOOR_FORBIDDEN, transports=False),
    "grpc": ServerPart({"core", "admission", "observability", "jobs", "cache"},
                       FRONT_DOOR_FORBIDDEN),
    # (The PNG answer draws the mesh: the preview's header, not the mesh layer.)
    "http": ServerPart({"core", "admission", "observability", "jobs", "cache"},
                       FRONT_DOOR_FORBIDDEN, headers=MESH_PREVIEW_HEADERS),
    "executor": ServerPart(set(), transports=False),
    "config": ServerPart({"core", "admission", "observability", "grpc", "http", "executor",
                          "cache", "jobs"}),
    "app": ServerPart({"core", "admission", "observability", "grpc", "http", "executor",
                       "config", "cache", "jobs"}),
}
TRANSPORTS = ("boost/beast", "boost/asio", "grpcpp/", "grpc/", "grpc++/")
TRANSPORT_ALLOWED = {"grpcpp/support/status.h"}

# The headers of core that need libtorch: a torch-free layer must not include them either.
TORCH_CORE_HEADERS = {"cube3d/core/safetensors.h"}

# Binaries that need no tensors: none may link libtorch.
TORCH_FREE_BINARIES = ["cube3d-client", "cube3d-loadgen", "cube3d_mesh_tool",
                       "cube3d_mesh_tests", "cube3d_scheduler_tests", "cube3d_cli_tests",
                       "cube3d_api_tests", "cube3d_clients_tests", "cube3d_server_base_tests"]
# Binaries we ship: none may carry the source tree's path.
SHIPPED_BINARIES = ["cube3d-server", "cube3d-client", "cube3d-loadgen", "cube3d-generate",
                    "cube3d-bench", "cube3d-tokenize"]

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def layer_of_include(root: Path, path: str) -> str | None:
    if path.startswith("cube3d/v1/"):
        return "v1"
    m = re.match(r"cube3d/([a-z_]+)/", path)
    if m:
        return m.group(1)
    # The kernels' headers are included by their bare names (kernels/ is on the include path).
    if "/" not in path and (root / "kernels" / path).is_file():
        return "kernels"
    return None


def source_files(root: Path, folder: str, suffixes=frozenset({".h", ".cpp", ".hpp"})):
    """(path relative to root, text) of every source file below root/folder, sorted."""
    base = root / folder
    if not base.is_dir():
        return
    for f in sorted(base.rglob("*")):
        if f.suffix in suffixes:
            yield f.relative_to(root).as_posix(), f.read_text(errors="replace")


def check_includes(root: Path) -> list[str]:
    problems: list[str] = []
    for layer in LAYERS:
        for folder in layer.folders:
            for rel, text in source_files(root, folder, {".h", ".cpp", ".cu", ".cuh", ".hpp"}):
                for m in INCLUDE.finditer(text):
                    header = m.group(2)
                    line = text.count("\n", 0, m.start()) + 1
                    where = f"{rel}:{line}: {layer.name}"
                    target = layer_of_include(root, header)
                    if target == "v1":
                        if not layer.grpc:
                            problems.append(f"{where} includes {header} (gRPC API)")
                    elif target is not None and target != layer.name:
                        if (target not in layer.uses | layer.file_uses.get(rel, set())
                                and header not in layer.headers):
                            problems.append(f"{where} may not include {header} (layer {target})")
                    torch_ok = layer.torch or rel in layer.torch_files
                    if header.startswith(TORCH) and not torch_ok:
                        problems.append(f"{where} is torch-free but includes <{header}>")
                    if header in TORCH_CORE_HEADERS and not torch_ok:
                        problems.append(f"{where} is torch-free but includes {header} "
                                        "(tensor I/O)")
                    if header.startswith(GRPC) and not layer.grpc:
                        problems.append(f"{where} includes <{header}> (gRPC only in server)")
                    if header.startswith(CUDA) and not layer.cuda:
                        problems.append(f"{where} includes <{header}> (CUDA only in engine and "
                                        "kernels)")
    return problems


def server_part_of(rel: str) -> str | None:
    m = re.match(r"(?:src/server|include/cube3d/server)/([a-z_]+)/", rel)
    return m.group(1) if m else None


def check_server_parts(root: Path) -> list[str]:
    problems: list[str] = []
    for folder in ("src/server", "include/cube3d/server"):
        for rel, text in source_files(root, folder):
            part = server_part_of(rel)
            if part is None:
                problems.append(f"{rel}: server code outside a part folder "
                                f"({', '.join(sorted(SERVER_PARTS))})")
                continue
            rules = SERVER_PARTS.get(part)
            if rules is None:
                problems.append(f"{rel}: unknown server part '{part}' (add it to SERVER_PARTS)")
                continue
            for m in INCLUDE.finditer(text):
                header = m.group(2)
                line = text.count("\n", 0, m.start()) + 1
                where = f"{rel}:{line}: server/{part}"
                target = re.match(r"cube3d/server/([a-z_]+)/", header)
                if target and target.group(1) != part and target.group(1) not in rules.uses:
                    problems.append(f"{where} may not include {header} "
                                    f"(server/{target.group(1)})")
                layer = layer_of_include(root, header)
                if layer in rules.forbidden_layers and header not in rules.headers:
                    problems.append(f"{where} may not include {header} (layer {layer})")
                if (not rules.transports and header.startswith(TRANSPORTS)
                        and header not in TRANSPORT_ALLOWED):
                    problems.append(f"{where} includes <{header}> (a transport library)")
                if rules.grpc_free and (header.startswith(GRPC) or layer == "v1"):
                    problems.append(f"{where} includes {header} (the server base is gRPC-free)")
    # Clients talk to a server over the API: no server header.
    for folder in ("src/clients", "include/cube3d/clients"):
        for rel, text in source_files(root, folder):
            for m in INCLUDE.finditer(text):
                if m.group(2).startswith("cube3d/server/"):
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{rel}:{line}: clients may not include {m.group(2)} "
                                    "(a server header)")
    return problems


def needed_libraries(binary: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


CUDA_BACKEND_LIBRARIES = ("libtorch_cuda", "libc10_cuda", "libtorch.so", "libcudnn", "libnccl",
                          "libcublas", "libcufft", "libcusparse", "libcusolver", "libcurand",
                          "libnvrtc", "libnvshmem")


def cpu_only_build(build_dir: Path) -> bool:
    cache = build_dir / "CMakeCache.txt"
    return cache.exists() and re.search(r"^CUBE3D_TORCH_CUDA:BOOL=(OFF|0|FALSE|NO)$",
                                        cache.read_text(), re.M | re.I) is not None


def check_links(root: Path, build_dir: Path) -> list[str]:
    problems: list[str] = []
    bin_dir = build_dir / "bin"
    for name in TORCH_FREE_BINARIES:
        binary = bin_dir / name
        if not binary.exists():
            continue  # not built in this configuration (e.g. no gRPC on the GPU machine)
        torch_libs = [lib for lib in needed_libraries(binary)
                      if lib.startswith(("libtorch", "libc10", "libcudnn", "libnccl",
                                         "libcublas"))]
        if torch_libs:
            problems.append(f"{binary}: needs no tensors but links {', '.join(torch_libs)}")
    # A CPU-only build (CUBE3D_TORCH_CUDA=OFF, the CPU image's): no binary links libtorch's CUDA
    # backend or a CUDA library beyond the runtime stubs libtorch_cpu itself needs.
    if cpu_only_build(build_dir):
        for binary in sorted(bin_dir.glob("*")):
            if not binary.is_file() or not os.access(binary, os.X_OK):
                continue
            cuda_libs = [lib for lib in needed_libraries(binary)
                         if lib.startswith(CUDA_BACKEND_LIBRARIES)]
            if cuda_libs:
                problems.append(f"{binary}: a CPU-only build (CUBE3D_TORCH_CUDA=OFF) but links "
                                f"{', '.join(cuda_libs)}")
    # Data under the source tree (the CLIP vocabulary in .cache/, model configs, test files):
    # compiler-recorded header paths (__FILE__ in libtorch's checks) are harmless and allowed.
    source_path = str(root.resolve())
    data_path = re.compile(re.escape(source_path.encode()) + rb"/(?:\.cache|models|tests|scripts)/")
    for name in SHIPPED_BINARIES:
        binary = bin_dir / name
        if binary.exists():
            m = data_path.search(binary.read_bytes())
            if m:
                problems.append(f"{binary}: carries the source path {m.group(0).decode()}... (a "
                                "build-time default that breaks on any other machine)")
    return problems


# A declaration at column 0 (clang-format indents no namespace): its kind and the name it declares.
TYPE_DECL = re.compile(r"^(?:template\s*<.*>\s*)?(?:struct|class|union|enum(?:\s+class)?)\s+"
                       r"(?:\[\[[^\]]*\]\]\s*)?(\w+)")
ALIAS_DECL = re.compile(r"^(?:using|namespace)\s+(\w+)\s*=")
VALUE_OR_FUNCTION = re.compile(r"^(?!return\b|case\b|default\b|public\b|private\b)"
                               r"[A-Za-z_][\w:<>,\s*&\[\]]*?[\s*&>](\w+)\s*(?:\(|=|\{|\[|;)")
NOT_A_NAME = {"operator", "if", "for", "while", "switch", "sizeof", "alignas", "decltype"}


def file_local_names(text: str) -> list[tuple[str, int, str]]:
    """(name, line, the line's text) for each name a source declares with internal linkage."""
    names = []
    anonymous = False
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"^namespace\s*\{", line):
            anonymous = True
            continue
        if anonymous and re.match(r"^\}\s*//\s*namespace\s*$", line):
            anonymous = False
            continue
        declaration = line
        if not anonymous:
            if not line.startswith("static "):
                continue
            declaration = line[len("static "):]
        if declaration.startswith("template <") and declaration.rstrip().endswith(">"):
            continue  # the declaration is on the next line
        for pattern in (TYPE_DECL, ALIAS_DECL, VALUE_OR_FUNCTION):
            m = pattern.match(declaration)
            if m:
                if m.group(1) not in NOT_A_NAME:
                    names.append((m.group(1), number, line.strip()))
                break
    return names


def check_batch_names(root: Path) -> list[str]:
    """File-local names that two sources share: one batch of the unity build breaks on them."""
    seen: dict[str, list[tuple[str, int, str, bool]]] = {}
    for folder in ("src", "bench"):
        for rel, text in source_files(root, folder, {".cpp"}):
            is_main = re.search(r"^int main\(", text, re.M) is not None
            for name, line, decl in file_local_names(text):
                seen.setdefault(name, []).append((rel, line, decl, is_main))
    problems = []
    for name, places in sorted(seen.items()):
        first = places[0]
        for other in places[1:]:
            if other[0] == first[0]:
                continue  # one file's own overloads or declaration and definition
            if first[3] and other[3]:
                continue  # two executables' mains: never one target
            if ALIAS_DECL.match(first[2]) and first[2] == other[2]:
                continue  # the same alias twice is allowed
            problems.append(f"{other[0]}:{other[1]}: file-local '{name}' is also {first[0]}:"
                            f"{first[1]}'s (one unity batch would clash; rename one)")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--build-dir", type=Path, help="also check the binaries built here")
    args = parser.parse_args()
    problems = (check_includes(args.root) + check_server_parts(args.root)
                + check_batch_names(args.root))
    if args.build_dir:
        problems += check_links(args.root, args.build_dir)
    for p in problems:
        print(p)
    checked = "includes, file-local names" + (f" and links in {args.build_dir}" if args.build_dir else "")
    print(f"layering: {len(problems)} violation(s) ({checked})", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
