#!/usr/bin/env python3
"""Fails on an include, a library or a link that the layer tables of docs/architecture.md forbid.

The tables are read from docs/architecture.md (under --root): the layers (a folder, its library,
the layers it may include, the heavy libraries it may use) and the server's parts (the same, one
folder under src/server/ each). Includes: every source and header of a layer may include only its
own layer, the layers of its row and, of the heavy libraries (libtorch, gRPC and the API's
messages, CUDA, TBB, Boost.Beast/Asio), those of its row; inside the server the same holds a part
at a time. A few files or headers are allowed more than their row, each for a stated reason below
(FILE_USES, LAYER_HEADERS, PART_HEADERS). Libraries (when --root has a CMakeLists.txt): every
library of the tables is built by CMakeLists.txt from exactly its row's folder, and every folder
of sources that CMakeLists.txt makes a library of is a row. Links (with --build-dir): the
binaries that need no tensors have no libtorch among their shared-library dependencies
(readelf -d), and no shipped binary carries the source tree's path (a default resolved at build
time would break on any other machine). Batches: the unity build (CUBE3D_UNITY_BUILD, and the
fuzz project's own groups) compiles several sources as one translation unit, where their
anonymous namespaces are one; so no two sources of src/ or bench/ may give a file-local name (an
anonymous namespace's, or a static one) the same name, unless both are executables' mains (never
in one target) or both lines are the same alias.

Written once: the server's TLS policy (cipher lists, groups, security level, gRPC's cipher
variable) only in src/server/httpd/tls_policy.*, and gRPC's log routing (gpr_set_log_function)
only in src/server/grpc/grpc_log.cpp.

  scripts/check_layering.py [--root DIR] [--build-dir DIR]

TBB (the mesh layer's thread pool) is included only by src/mesh/ sources, never by a public
header, whatever the table allows.

Paths: no source of src/, include/, bench/ or kernels/ includes a relative path ("../x.h", or
one with a . or .. part): an include names the public path (cube3d/<layer>/...; a kernel header
its bare name), which the layer checks read. No .cc, .cxx, .c++, .hpp, .hh or .hxx file under
src/ or include/: the sources are .cpp and the headers .h, which CMake's globs and these checks
see. Link edges (when --root has a CMakeLists.txt): every target_link_libraries() of a library of
the tables links only the cube3d_* libraries its row may include (a part: its own row's parts and
layers), the API's messages (cube3d_api_messages) only where its row may use them, and an
INTERFACE library of CMakeLists.txt counts as what it links; the exceptions of FILE_USES,
LAYER_HEADERS and PART_HEADERS hold for links too. hiredis is private to the redis part:
<hiredis/...> is included by src/server/redis/*.cpp alone (no header, no other folder), and in
CMake only the redis part's library links it, PRIVATE (no other target, no link_libraries(), no
helper handed its target or its library variables). A test-only header
(include/cube3d/**/<name>_testing.h) is included by tests and by src/**/<name>.cpp, which defines
it, alone.

The Triton kernels' Python (kernels/*.py) imports triton, the standard library and its own
folder's modules alone: never torch (the kernels know nothing of libtorch, in Python as in C++)
nor any other package.

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

ARCHITECTURE = "docs/architecture.md"
TORCH = ("ATen/", "torch/", "c10/", "caffe2/")
GRPC = ("grpcpp/", "grpc/", "grpc++/")
PROTOBUF = ("google/protobuf/",)
CUDA = ("cuda_runtime", "cuda.h", "cublas", "cuda_bf16", "cuda_fp16", "nvtx")
# oneTBB: the mesh layer's one pool of threads, private to its sources (src/mesh/parallel.h): no
# public header and no other layer sees it.
TBB = ("tbb/", "oneapi/tbb")
TBB_FOLDER = "src/mesh/"
BEAST = ("boost/beast", "boost/asio")
# The heavy libraries a row may name (its "may use" column).
HEAVY = {"libtorch", "gRPC", "messages", "CUDA", "TBB", "Beast"}


def heavy_library(header: str) -> str | None:
    """Which heavy library `header` belongs to: "gRPC" for gRPC itself and the generated stubs,
    "messages" for protobuf and the API's messages; None for anything else."""
    if header.startswith(TORCH):
        return "libtorch"
    if header.startswith("cube3d/v1/"):
        return "gRPC" if header.endswith(".grpc.pb.h") else "messages"
    # The Open Inference Protocol's generated code (proto/inference/) is the gRPC API library's
    # alone: the HTTP door and the inference part speak its JSON and plain values, never these.
    if header.startswith("inference/") and header.endswith(".pb.h"):
        return "gRPC"
    if header.startswith(GRPC):
        return "gRPC"
    if header.startswith(PROTOBUF):
        return "messages"
    if header.startswith(CUDA):
        return "CUDA"
    if header.startswith(TBB):
        return "TBB"
    if header.startswith(BEAST):
        return "Beast"
    return None


def allows(may_use: set[str], library: str) -> bool:
    return library in may_use or (library == "messages" and "gRPC" in may_use)


@dataclass
class Layer:
    name: str
    folders: list[str]
    library: str | None  # None: one library a part (the server)
    uses: set[str]  # cube3d layers it may include besides its own
    may_use: set[str]  # heavy libraries it may include


@dataclass
class ServerPart:
    name: str
    library: str
    parts: set[str]  # server parts it may include besides its own
    layers: set[str]  # layers outside the server it may include
    may_use: set[str]


# Exceptions to a row, each with its reason.
# model_text.cpp: the one CLIP clean-up function the server's prompt policy needs (the server may
# not include model/; the pipeline reaches it through the engine anyway).
FILE_USES = {"src/pipeline/model_text.cpp": {"model"}}
# The mesh preview (a PNG of a mesh): what HTTP's Accept: image/png answer draws of a response's
# raw arrays (a MeshView of them, no Mesh rebuilt) on the connection's thread, with no other part
# of the mesh layer (no meshing, no writers, not even the Mesh type) in reach.
MESH_PREVIEW_HEADERS = {"cube3d/mesh/mesh_preview.h"}
# The mesh layer's options (occupancy sampling, the mesh stage's): what the server config's
# `mesh:` section is, embedded whole (each part owns its options), with none of the mesh layer's
# code in reach; only the config part names them.
MESH_OPTION_HEADERS = {"cube3d/mesh/hierarchical_occupancy.h", "cube3d/mesh/mesh_pipeline.h"}
# The mesh layer's vocabulary: what a mesh request asks for and an answer is (the formats, the
# compact encoding, the Roblox profile, the pivot, the fields a request's digest covers). The
# server's work, the service's policy and cache key, the protocol's model description, the
# config's defaults and the executor speak these words; none of them reaches the mesh layer's
# code (marching cubes, clean-up, writers).
MESH_VOCABULARY_HEADERS = {"cube3d/mesh/compact_mesh.h", "cube3d/mesh/mesh_format.h",
                           "cube3d/mesh/mesh_profile.h", "cube3d/mesh/mesh_frame.h",
                           "cube3d/mesh/shape_fields.h"}
LAYER_HEADERS = {"server": MESH_PREVIEW_HEADERS | MESH_OPTION_HEADERS | MESH_VOCABULARY_HEADERS}
PART_HEADERS = {"http": MESH_PREVIEW_HEADERS,
                "config": MESH_OPTION_HEADERS | MESH_VOCABULARY_HEADERS,
                "work": MESH_VOCABULARY_HEADERS, "service": MESH_VOCABULARY_HEADERS,
                "wire": MESH_VOCABULARY_HEADERS,
                "inference": MESH_VOCABULARY_HEADERS, "executor": MESH_VOCABULARY_HEADERS}

# Binaries that need no tensors: none may link libtorch.
TORCH_FREE_BINARIES = ["cube3d-client", "cube3d-loadgen", "cube3d_mesh_tool",
                       "cube3d_mesh_tests", "cube3d_scheduler_tests", "cube3d_cli_tests",
                       "cube3d_api_tests", "cube3d_clients_tests", "cube3d_server_base_tests",
                       "cube3d_core_tests", "cube3d_kernels_tests", "cube3d_decode_plan_tool"]
# Binaries we ship: none may carry the source tree's path.
SHIPPED_BINARIES = ["cube3d-server", "cube3d-client", "cube3d-loadgen", "cube3d-generate",
                    "cube3d-bench", "cube3d-tokenize"]

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


class TableError(Exception):
    pass


def table_rows(text: str, marker: str, columns: list[str]) -> list[list[str]]:
    """The cells of the Markdown table after `<!-- check_layering: marker -->`, backticks off."""
    m = re.search(r"<!--\s*check_layering:\s*" + re.escape(marker) + r"\s*-->\s*\n", text)
    if not m:
        raise TableError(f"{ARCHITECTURE}: no table marked <!-- check_layering: {marker} -->")
    lines = text[m.end():].splitlines()
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([c.strip().replace("`", "") for c in line.strip().strip("|").split("|")])
    if len(rows) < 2 or [c.lower() for c in rows[0]] != columns:
        raise TableError(f"{ARCHITECTURE}: the {marker} table's columns must be "
                         f"{' | '.join(columns)}")
    body = rows[2:]  # past the header and its --- line
    for row in body:
        if len(row) != len(columns):
            raise TableError(f"{ARCHITECTURE}: {marker} row '{' | '.join(row)}' has "
                             f"{len(row)} cells, not {len(columns)}")
    return body


def names(cell: str) -> set[str]:
    return {n.strip() for n in cell.split(",") if n.strip()}


def read_tables(root: Path) -> tuple[list[Layer], list[ServerPart]]:
    path = root / ARCHITECTURE
    if not path.is_file():
        raise TableError(f"{ARCHITECTURE}: missing (it holds the layer tables this check reads)")
    text = path.read_text()
    layers = []
    for name, folders, library, uses, may_use in table_rows(
            text, "layers", ["layer", "folders", "library", "may include", "may use"]):
        layers.append(Layer(name, sorted(names(folders)),
                            library if library.startswith("cube3d_") else None, names(uses),
                            names(may_use)))
    parts = []
    for name, library, part_uses, layer_uses, may_use in table_rows(
            text, "server parts",
            ["part", "library", "may include parts", "may include layers", "may use"]):
        parts.append(ServerPart(name, library, names(part_uses), names(layer_uses),
                                names(may_use)))
    known_layers = {layer.name for layer in layers} | {"kernels"}
    known_parts = {part.name for part in parts}
    problems = []
    for layer in layers:
        for n in layer.uses - known_layers:
            problems.append(f"layer {layer.name} may include an unknown layer '{n}'")
        for n in layer.may_use - HEAVY:
            problems.append(f"layer {layer.name} may use an unknown library '{n}' "
                            f"(one of {', '.join(sorted(HEAVY))})")
    server = next((layer for layer in layers if layer.name == "server"), None)
    for part in parts:
        for n in part.parts - known_parts:
            problems.append(f"server part {part.name} may include an unknown part '{n}'")
        for n in part.layers - known_layers:
            problems.append(f"server part {part.name} may include an unknown layer '{n}'")
        if server:
            for n in part.layers - server.uses - {"core"}:
                problems.append(f"server part {part.name} may include layer {n}, which the "
                                "server's row does not allow")
            for n in (n for n in part.may_use if not allows(server.may_use, n)):
                problems.append(f"server part {part.name} may use {n}, which the server's row "
                                "does not allow")
        for n in part.may_use - HEAVY:
            problems.append(f"server part {part.name} may use an unknown library '{n}'")
    if problems:
        raise TableError("\n".join(f"{ARCHITECTURE}: {p}" for p in problems))
    return layers, parts


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


def check_includes(root: Path, layers: list[Layer]) -> list[str]:
    problems: list[str] = []
    covered = {folder for layer in layers for folder in layer.folders}
    for top in ("src", "include/cube3d"):
        if (root / top).is_dir():
            for d in sorted(p for p in (root / top).iterdir() if p.is_dir()):
                rel = d.relative_to(root).as_posix()
                if rel not in covered:
                    problems.append(f"{rel}: a folder that no row of {ARCHITECTURE}'s layer "
                                    "table names")
    for layer in layers:
        for folder in layer.folders:
            for rel, text in source_files(root, folder, {".h", ".cpp", ".cu", ".cuh", ".hpp"}):
                for m in INCLUDE.finditer(text):
                    header = m.group(2)
                    line = text.count("\n", 0, m.start()) + 1
                    where = f"{rel}:{line}: {layer.name}"
                    target = layer_of_include(root, header)
                    if (target not in (None, "v1", layer.name)
                            and target not in layer.uses | FILE_USES.get(rel, set())
                            and header not in LAYER_HEADERS.get(layer.name, set())):
                        problems.append(f"{where} may not include {header} (layer {target})")
                    library = heavy_library(header)
                    if library and not allows(layer.may_use, library):
                        shown = header if target == "v1" else f"<{header}>"
                        problems.append(f"{where} includes {shown} ({library}, which its row "
                                        "does not allow)")
                    if header.startswith(TBB) and not rel.startswith(TBB_FOLDER):
                        problems.append(f"{where} includes <{header}> (TBB only in {TBB_FOLDER}"
                                        ", the mesh layer's own threads)")
    return problems


def server_part_of(rel: str) -> str | None:
    m = re.match(r"(?:src/server|include/cube3d/server)/([a-z_]+)/", rel)
    return m.group(1) if m else None


def check_server_parts(root: Path, parts: list[ServerPart]) -> list[str]:
    problems: list[str] = []
    by_name = {part.name: part for part in parts}
    for folder in ("src/server", "include/cube3d/server"):
        for rel, text in source_files(root, folder):
            name = server_part_of(rel)
            if name is None:
                problems.append(f"{rel}: server code outside a part folder "
                                f"({', '.join(sorted(by_name))})")
                continue
            part = by_name.get(name)
            if part is None:
                problems.append(f"{rel}: unknown server part '{name}' (add it to "
                                f"{ARCHITECTURE}'s server parts table)")
                continue
            for m in INCLUDE.finditer(text):
                header = m.group(2)
                line = text.count("\n", 0, m.start()) + 1
                where = f"{rel}:{line}: server/{name}"
                target = re.match(r"cube3d/server/([a-z_]+)/", header)
                if target:
                    if target.group(1) != name and target.group(1) not in part.parts:
                        problems.append(f"{where} may not include {header} "
                                        f"(server/{target.group(1)})")
                    continue
                layer = layer_of_include(root, header)
                if (layer not in (None, "v1") and layer not in part.layers
                        and header not in PART_HEADERS.get(name, set())):
                    problems.append(f"{where} may not include {header} (layer {layer})")
                library = heavy_library(header)
                if library and not allows(part.may_use, library):
                    problems.append(f"{where} includes {header} ({library}, which its row "
                                    "does not allow)")
    # Clients talk to a server over the API: no server header.
    for folder in ("src/clients", "include/cube3d/clients"):
        for rel, text in source_files(root, folder):
            for m in INCLUDE.finditer(text):
                if m.group(2).startswith("cube3d/server/"):
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{rel}:{line}: clients may not include {m.group(2)} "
                                    "(a server header)")
    return problems


# Every C++ file these checks read, the misnamed ones included (so that they are checked too).
CXX_SUFFIXES = frozenset({".h", ".cpp", ".cu", ".cuh", ".cc", ".cxx", ".c++", ".hpp", ".hh",
                          ".hxx"})
# The project's sources are .cpp and its headers .h: CMake globs src/<layer>/*.cpp, and a .cc
# would be built by nothing and seen by no check that reads *.cpp.
MISNAMED_SUFFIXES = {".cc": ".cpp", ".cxx": ".cpp", ".c++": ".cpp", ".hpp": ".h", ".hh": ".h",
                     ".hxx": ".h"}


def check_relative_includes(root: Path) -> list[str]:
    """Includes by a relative path ("../x.h", "./x.h"): the layer checks read public paths."""
    problems = []
    for folder in ("src", "include", "bench", "kernels"):
        for rel, text in source_files(root, folder, CXX_SUFFIXES):
            for m in INCLUDE.finditer(text):
                header = m.group(2)
                if not any(part in (".", "..") for part in header.split("/")):
                    continue
                line = text.count("\n", 0, m.start()) + 1
                shown = f'"{header}"' if m.group(1) == '"' else f"<{header}>"
                problems.append(f"{rel}:{line}: includes {shown}, a relative path (name the "
                                "public path, cube3d/<layer>/..., or a kernel header's bare name)")
    return problems


def check_testing_headers(root: Path) -> list[str]:
    """Test-only headers (include/cube3d/**/<name>_testing.h: hooks such as a store that stops
    renewing its leases on purpose) are included by tests alone, and by the one source that
    defines them (src/<same folders>/<name>.cpp)."""
    problems = []
    for folder in ("src", "include", "bench", "kernels"):
        for rel, text in source_files(root, folder, CXX_SUFFIXES):
            for m in INCLUDE.finditer(text):
                header = m.group(2)
                if not header.endswith("_testing.h"):
                    continue
                owner = "src/" + header.removeprefix("cube3d/").removesuffix("_testing.h") + ".cpp"
                if rel == owner:
                    continue
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{rel}:{line}: includes {header}, a test-only header (tests/ "
                                f"and {owner} alone may)")
    return problems


def check_source_suffixes(root: Path) -> list[str]:
    """Sources and headers under src/ and include/ are .cpp and .h."""
    problems = []
    for folder in ("src", "include"):
        for rel, _ in source_files(root, folder, frozenset(MISNAMED_SUFFIXES)):
            suffix = Path(rel).suffix
            problems.append(f"{rel}: a {suffix} file (the sources are .cpp, the headers .h; "
                            f"CMake's *.cpp globs and these checks miss it): rename it to "
                            f"{MISNAMED_SUFFIXES[suffix]}")
    return problems


def cmake_libraries(text: str) -> dict[str, set[str]]:
    """Each library CMakeLists.txt builds from sources of the tree: the folders of its sources."""
    text = text.replace("${CMAKE_SOURCE_DIR}/", "")
    globs = {m.group(1): m.group(2) for m in re.finditer(
        r"file\(GLOB\s+(\w+)\s+CONFIGURE_DEPENDS\s+([\w/]+)/\*\.\w+\)", text)}
    libraries: dict[str, set[str]] = {}
    for m in re.finditer(r"cube3d_layer_library\((\w+)\s+(\w+)\)", text):
        libraries.setdefault(m.group(1), set()).add(f"src/{m.group(2)}")
    for m in re.finditer(r"cube3d_server_library\((\w+)\s+(\w+)\)", text):
        libraries.setdefault(m.group(1), set()).add(f"src/server/{m.group(2)}")
    for m in re.finditer(r"add_library\((\w+)\s+(?:STATIC|OBJECT|SHARED)\s+([^)]*)\)", text):
        folders = set()
        for item in m.group(2).split():
            var = re.fullmatch(r"\$\{(\w+)\}", item)
            if var and var.group(1) in globs:
                folders.add(globs[var.group(1)])
            elif re.fullmatch(r"[\w/]+\.(cpp|cu)", item):
                folders.add(item.rsplit("/", 1)[0])
        if folders:
            libraries.setdefault(m.group(1), set()).update(folders)
    return libraries


def check_libraries(root: Path, layers: list[Layer], parts: list[ServerPart]) -> list[str]:
    cmake = root / "CMakeLists.txt"
    if not cmake.is_file():
        return []
    built = cmake_libraries(cmake.read_text())
    wanted: dict[str, str] = {}
    for layer in layers:
        if layer.library:
            wanted[layer.library] = next(f for f in layer.folders if not f.startswith("include"))
    for part in parts:
        wanted[part.library] = f"src/server/{part.name}"
    problems = []
    for library, folder in sorted(wanted.items()):
        if library not in built:
            problems.append(f"CMakeLists.txt: no library {library} (the tables' library of "
                            f"{folder}/)")
        elif built[library] != {folder}:
            problems.append(f"CMakeLists.txt: {library} is built from "
                            f"{', '.join(sorted(built[library]))}, not {folder}/ alone")
    for library, folders in sorted(built.items()):
        if library not in wanted:
            problems.append(f"CMakeLists.txt: {library} (from {', '.join(sorted(folders))}) is "
                            f"no row of {ARCHITECTURE}'s tables")
    return problems


def cmake_code(text: str) -> str:
    """CMake text with its comments blanked (line numbers and offsets kept)."""
    out = []
    i, n, quoted = 0, len(text), False
    while i < n:
        c = text[i]
        if quoted:
            if c == "\\":
                out.append(text[i:i + 2])
                i += 2
                continue
            quoted = c != '"'
        elif c == '"':
            quoted = True
        elif c == "#":
            bracket = re.match(r"#\[(=*)\[", text[i:])
            if bracket:
                close = text.find("]" + bracket.group(1) + "]", i)
                end = n if close < 0 else close + len(bracket.group(1)) + 2
            else:
                end = text.find("\n", i)
                end = n if end < 0 else end
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        out.append(c)
        i += 1
    return "".join(out)


CMAKE_ARGUMENT = re.compile(r'"(?:\\.|[^"\\])*"|[^\s"()]+')


def cmake_commands(text: str):
    """(command in lower case, [(argument, line), ...]) for each command of a CMake file."""
    code = cmake_code(text)
    for m in re.finditer(r"^[ \t]*([A-Za-z_]\w*)[ \t]*\(", code, re.M):
        depth, i, quoted = 1, m.end(), False
        while i < len(code) and depth:
            c = code[i]
            if quoted:
                if c == "\\":
                    i += 1
                quoted = c != '"'
            elif c == '"':
                quoted = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
        arguments = [(a.group(0), code.count("\n", 0, a.start()) + 1)
                     for a in CMAKE_ARGUMENT.finditer(code, m.end(), i - 1)]
        yield m.group(1).lower(), arguments


LINK_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "LINK_PUBLIC", "LINK_PRIVATE",
                 "LINK_INTERFACE_LIBRARIES"}


def cmake_links(arguments: list[tuple[str, int]]):
    """(keyword or None, item, line) for each library a target_link_libraries() call links."""
    keyword = None
    for item, line in arguments[1:]:
        if item in LINK_KEYWORDS:
            keyword = item
        elif item not in ("debug", "optimized", "general"):
            yield keyword, item, line


def cube3d_names(item: str) -> list[str]:
    """The cube3d_* libraries a link item names (itself, or inside a generator expression)."""
    if re.fullmatch(r"cube3d_\w+", item):
        return [item]
    if item.startswith("$<"):
        return re.findall(r"\bcube3d_\w+", re.sub(r"\$\{[^}]*\}", "", item))
    return []


def header_layers(root: Path, headers: set[str]) -> set[str]:
    """The layers of an exception's headers (LAYER_HEADERS, PART_HEADERS)."""
    return {layer for layer in (layer_of_include(root, h) for h in headers) if layer}


# The API's messages (protobuf only, generated): "messages" for the tables, as their headers.
API_MESSAGES_LIBRARY = "cube3d_api_messages"


def check_link_edges(root: Path, layers: list[Layer], parts: list[ServerPart]) -> list[str]:
    """Each library of the tables links only the cube3d_* libraries its row may include."""
    cmake = root / "CMakeLists.txt"
    if not cmake.is_file():
        return []
    commands = list(cmake_commands(cmake.read_text()))
    owners: dict[str, Layer | ServerPart] = {layer.library: layer for layer in layers
                                              if layer.library}
    owners.update({part.library: part for part in parts})
    interfaces: dict[str, list[str]] = {}
    for name, arguments in commands:
        if name == "add_library" and [a for a, _ in arguments[1:2]] == ["INTERFACE"]:
            interfaces[arguments[0][0]] = []
    for name, arguments in commands:
        if name == "target_link_libraries" and arguments and arguments[0][0] in interfaces:
            interfaces[arguments[0][0]] += [n for _, item, _ in cmake_links(arguments)
                                            for n in cube3d_names(item)]

    def resolved(library: str, seen: frozenset = frozenset()) -> list[str]:
        if library not in interfaces or library in seen:
            return [library]
        return [n for linked in interfaces[library] for n in resolved(linked, seen | {library})]

    def describe(library: str) -> str:
        owner = owners[library]
        return f"layer {owner.name}" if isinstance(owner, Layer) else f"server/{owner.name}"

    problems = []
    for name, arguments in commands:
        if name != "target_link_libraries" or not arguments or arguments[0][0] not in owners:
            continue
        target = arguments[0][0]
        owner = owners[target]
        if isinstance(owner, Layer):
            who, may_use = owner.name, owner.may_use
            # A file's or a header's exception to its row is its library's too.
            layers_allowed = owner.uses | {layer for rel, uses in FILE_USES.items()
                                           for layer in uses
                                           if any(rel.startswith(f + "/") for f in owner.folders)}
            layers_allowed |= header_layers(root, LAYER_HEADERS.get(owner.name, set()))
            parts_allowed: set[str] = set()
        else:
            who, may_use = f"server/{owner.name}", owner.may_use
            layers_allowed = owner.layers | header_layers(root, PART_HEADERS.get(owner.name, set()))
            parts_allowed = owner.parts | {owner.name}
        for _, item, line in cmake_links(arguments):
            for named in cube3d_names(item):
                through = "" if named not in interfaces else f"through {named}, "
                for library in resolved(named):
                    where = f"CMakeLists.txt:{line}: {who} ({target})"
                    if library == target:
                        continue
                    if library == API_MESSAGES_LIBRARY:
                        if not allows(may_use, "messages"):
                            problems.append(f"{where} links {through}{library} (messages, "
                                            "which its row does not allow)")
                    elif library not in owners:
                        problems.append(f"{where} links {through}{library}, no library of "
                                        f"{ARCHITECTURE}'s tables (link the layers its row "
                                        "names)")
                    elif isinstance(owners[library], Layer):
                        if owners[library].name not in layers_allowed:
                            problems.append(f"{where} may not link {through}{library} "
                                            f"({describe(library)}; link only what its row of "
                                            f"{ARCHITECTURE} may include)")
                    elif isinstance(owner, Layer) or owners[library].name not in parts_allowed:
                        problems.append(f"{where} may not link {through}{library} "
                                        f"({describe(library)}; link only what its row of "
                                        f"{ARCHITECTURE} may include)")
    return problems


# hiredis (the Redis wire format) is the redis part's alone: its sources include it, its library
# links it PRIVATE, and nothing else sees it (docs/architecture.md, the server's parts).
HIREDIS_PART = "redis"
HIREDIS_FOLDER = "src/server/redis/"
# CMake files that may link a library: the tree's own, the tests' and the fuzz project's.
CMAKE_FILES = ("CMakeLists.txt", "tests/CMakeLists.txt", "fuzz/CMakeLists.txt")
# What only links hiredis (its imported target, its library variables): handed to any other
# command (a helper that links its ARGN), it links hiredis there.
HIREDIS_LINK_ITEM = re.compile(r"PkgConfig::\w*HIREDIS|hiredis::|\$\{\w*HIREDIS\w*_(?:LIBRARIES"
                               r"|LINK_LIBRARIES|LDFLAGS|LIBRARY|LIB)\}", re.I)


def check_hiredis(root: Path, parts: list[ServerPart]) -> list[str]:
    """hiredis: included by src/server/redis/*.cpp alone, linked PRIVATE by the redis part alone."""
    redis = next((part.library for part in parts if part.name == HIREDIS_PART),
                 f"the {HIREDIS_PART} part's library")
    problems = []
    for folder in ("src", "include", "bench", "kernels", "tests", "fuzz"):
        for rel, text in source_files(root, folder, CXX_SUFFIXES):
            own = (rel.startswith(HIREDIS_FOLDER) and rel.endswith(".cpp")
                   and "/" not in rel[len(HIREDIS_FOLDER):])
            for m in INCLUDE.finditer(text):
                header = m.group(2)
                if (header.startswith("hiredis/") or header == "hiredis.h") and not own:
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{rel}:{line}: includes <{header}> (hiredis is private to "
                                    f"{HIREDIS_FOLDER}*.cpp: no header, no other folder; use "
                                    "the Redis client of cube3d/server/redis/)")
    for cmake in CMAKE_FILES:
        path = root / cmake
        if not path.is_file():
            continue
        for name, arguments in cmake_commands(path.read_text()):
            if name == "target_link_libraries" and arguments:
                target = arguments[0][0]
                for keyword, item, line in cmake_links(arguments):
                    if "hiredis" not in item.lower():
                        continue
                    if target != redis:
                        problems.append(f"{cmake}:{line}: {target} links {item} (hiredis is "
                                        f"private to {redis}: link it there alone, PRIVATE)")
                    elif keyword not in ("PRIVATE", "LINK_PRIVATE"):
                        problems.append(f"{cmake}:{line}: {target} links {item} "
                                        f"{keyword or 'with no keyword'} (hiredis is private "
                                        "to it: link it PRIVATE)")
            elif name == "link_libraries":
                for item, line in arguments:
                    if "hiredis" in item.lower():
                        problems.append(f"{cmake}:{line}: link_libraries({item}) links hiredis "
                                        f"into every target (link it PRIVATE in {redis} alone)")
            else:
                for item, line in arguments:
                    if HIREDIS_LINK_ITEM.search(item):
                        problems.append(f"{cmake}:{line}: {name}() is handed {item} (hiredis is "
                                        f"private to {redis}: link it there alone, with "
                                        "target_link_libraries(... PRIVATE))")
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


# The server's one TLS policy (docs/security.md): cipher lists, key exchange groups and gRPC's
# cipher variable are written in src/server/httpd/tls_policy.* alone, so that the two doors cannot
# drift apart again (the HTTPS door once took suites the gRPC door refused). And gRPC's own log
# lines reach the log through one function, src/server/grpc/grpc_log.cpp, which rate-limits the
# ones a peer causes.
TLS_POLICY_FILES = {"src/server/httpd/tls_policy.cpp", "include/cube3d/server/httpd/tls_policy.h"}
TLS_POLICY_CALL = re.compile(r"\b(SSL_CTX_set_cipher_list|SSL_set_cipher_list"
                             r"|SSL_CTX_set_ciphersuites|SSL_set_ciphersuites"
                             r"|SSL_CTX_set1_groups_list|SSL_set1_groups_list"
                             r"|SSL_CTX_set_security_level|GRPC_SSL_CIPHER_SUITES)\b")
GRPC_LOG_FILE = "src/server/grpc/grpc_log.cpp"
GRPC_LOG_CALL = re.compile(r"\b(gpr_set_log_function)\b")


def check_written_once(root: Path) -> list[str]:
    """What is written in one file only: the TLS policy, the routing of gRPC's log lines."""
    problems = []
    for folder in ("src", "include"):
        for rel, text in source_files(root, folder):
            for number, line in enumerate(text.splitlines(), 1):
                m = TLS_POLICY_CALL.search(line)
                if m and rel not in TLS_POLICY_FILES:
                    problems.append(f"{rel}:{number}: sets TLS policy ({m.group(1)}) outside "
                                    "src/server/httpd/tls_policy.cpp, the one policy of both doors")
                m = GRPC_LOG_CALL.search(line)
                if m and rel != GRPC_LOG_FILE:
                    problems.append(f"{rel}:{number}: routes gRPC's log lines ({m.group(1)}) "
                                    f"outside {GRPC_LOG_FILE}, which rate-limits the peer-caused "
                                    "ones")
    return problems


def check_triton_sources(root: Path) -> list[str]:
    """kernels/*.py: triton, the standard library and the folder's own modules, nothing else."""
    import ast
    folder = root / "kernels"
    if not folder.is_dir():
        return []
    own = {f.stem for f in folder.glob("*.py")}
    problems = []
    for path in sorted(folder.glob("*.py")):
        rel = path.relative_to(root).as_posix()
        try:
            tree = ast.parse(path.read_text(), rel)
        except SyntaxError as e:
            problems.append(f"{rel}:{e.lineno}: does not parse ({e.msg})")
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top == "triton" or top in own or top in sys.stdlib_module_names:
                    continue
                why = ("the kernels know nothing of libtorch" if top == "torch"
                       else "only triton and the standard library")
                problems.append(f"{rel}:{node.lineno}: a Triton kernel source imports {module} "
                                f"({why})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--build-dir", type=Path, help="also check the binaries built here")
    args = parser.parse_args()
    try:
        layers, parts = read_tables(args.root)
        problems = (check_includes(args.root, layers) + check_server_parts(args.root, parts)
                    + check_libraries(args.root, layers, parts)
                    + check_link_edges(args.root, layers, parts)
                    + check_hiredis(args.root, parts))
    except TableError as e:
        problems = str(e).splitlines()
    problems += check_relative_includes(args.root)
    problems += check_source_suffixes(args.root)
    problems += check_testing_headers(args.root)
    problems += check_batch_names(args.root)
    problems += check_triton_sources(args.root)
    problems += check_written_once(args.root)
    if args.build_dir:
        problems += check_links(args.root, args.build_dir)
    for p in problems:
        print(p)
    checked = ("includes, include paths, file names, test-only headers, libraries, link edges, "
               "hiredis, "
               "file-local names, what is written once, Triton sources"
               + (f" and links in {args.build_dir}" if args.build_dir else ""))
    print(f"layering: {len(problems)} violation(s) ({checked})", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
