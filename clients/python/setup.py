"""Generates cube3d_ray/_proto/mesh_service_pb2.py (and its .pyi) from proto/ while the package
is built, with grpcio-tools' protoc: the repository's proto/cube3d/v1/mesh_service.proto (two
folders up), or the copy an sdist carries (proto/ beside this file). Nothing generated is
committed. The gRPC calls themselves are written by hand (cube3d_ray/rpc.py), so only the
messages are generated, and the wheel asks for a protobuf runtime no older than this protoc."""
import os
import re
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
PROTO = "cube3d/v1/mesh_service.proto"
GENERATED = ("mesh_service_pb2.py", "mesh_service_pb2.pyi")


def proto_root():
    for root in (HERE / "proto", HERE.parent.parent / "proto"):
        if (root / PROTO).is_file():
            return root
    raise SystemExit(f"cube3d-ray: {PROTO} not found beside setup.py (an sdist's copy) nor in "
                     f"{HERE.parent.parent / 'proto'} (the repository's): build from the "
                     f"repository or from an sdist made there")


_generated = None


def generate():
    """{file name: text} of the generated modules (protoc run once per build)."""
    global _generated
    if _generated is None:
        from grpc_tools import protoc  # a build requirement (pyproject.toml)
        import grpc_tools
        include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        with tempfile.TemporaryDirectory(prefix="cube3d-ray-protoc-") as out:
            args = ["grpc_tools.protoc", f"-I{proto_root()}", f"-I{include}",
                    f"--python_out={out}", f"--pyi_out={out}", PROTO]
            if protoc.main(args) != 0:
                raise SystemExit(f"cube3d-ray: protoc failed on {PROTO}")
            folder = Path(out) / os.path.dirname(PROTO)
            _generated = {name: (folder / name).read_text() for name in GENERATED}
    return _generated


def protobuf_floor():
    """The protobuf runtime the generated code needs at least (its gencode version)."""
    match = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,"
                      r"\s*(\d+),\s*(\d+),\s*(\d+)", generate()["mesh_service_pb2.py"])
    return ".".join(match.groups()) if match else "4.21"


class BuildPyWithProto(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "cube3d_ray" / "_proto"
        target.mkdir(parents=True, exist_ok=True)
        for name, text in generate().items():
            (target / name).write_text(text)

    def get_outputs(self, include_bytecode=True):
        target = Path(self.build_lib) / "cube3d_ray" / "_proto"
        return super().get_outputs(include_bytecode) + [str(target / n) for n in GENERATED]


class SdistWithProto(sdist):
    """An sdist carries its own copy of the proto (proto/ beside setup.py)."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        copy = Path(base_dir) / "proto" / PROTO
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(proto_root() / PROTO, copy)


setup(
    cmdclass={"build_py": BuildPyWithProto, "sdist": SdistWithProto},
    install_requires=[
        "ray[data]>=2.50",
        "grpcio>=1.62",
        "pyarrow>=14",
        "pyyaml>=6",
        f"protobuf>={protobuf_floor()}",
    ],
)
