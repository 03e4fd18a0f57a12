"""Where the meshes and the manifest go: a local folder or any URI a pyarrow filesystem takes
(s3://bucket/catalog, gs://..., hdfs://...).

  <out>/<name>             one mesh file per request (requests.MeshRequest.file_name)
  <out>/manifest/*.parquet the manifest, a file per block written (manifest.py)

A mesh file is written once. On a local filesystem it is written to "<name>.tmp.<pid>.<random>"
beside its name and then linked to the name, which fails when the name exists, so two writers of
one name (a retried batch beside the attempt it replaces) never overwrite each other; a run
removes the temporary files of killed writers when it starts and when it ends. On an object
store a file is one PUT, whole or absent, made only when the name is not there yet.
"""
from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass

import pyarrow.fs as pafs

from .requests import FORMATS, NAME_DIGITS
from .sources import resolve

MANIFEST_FOLDER = "manifest"
TEMPORARY_MARKER = ".tmp."
# A mesh file's name, and a temporary file of one.
MESH_NAME = re.compile(r"^[0-9a-f]{%d}\.(%s)$" % (NAME_DIGITS, "|".join(set(FORMATS.values()))))
TEMPORARY_NAME = re.compile(r"^[0-9a-f]{%d}\.(%s)\.tmp\..+$"
                            % (NAME_DIGITS, "|".join(set(FORMATS.values()))))


@dataclass(frozen=True)
class OutputLocation:
    """The output folder: a filesystem and a path in it (picklable: it travels to the actors)."""
    filesystem: pafs.FileSystem
    path: str

    @staticmethod
    def of(uri: str, filesystem: pafs.FileSystem | None = None) -> OutputLocation:
        fs, path = resolve(uri, filesystem)
        return OutputLocation(fs, path.rstrip("/") or "/")

    @property
    def local(self) -> bool:
        return isinstance(self.filesystem, pafs.LocalFileSystem)

    @property
    def manifest_path(self) -> str:
        return self.path_of(MANIFEST_FOLDER)

    def path_of(self, name: str) -> str:
        return f"{self.path}/{name}"

    def make(self) -> None:
        self.filesystem.create_dir(self.path, recursive=True)

    def names(self) -> set[str]:
        """The file names in the folder (not recursive); empty when it does not exist."""
        selector = pafs.FileSelector(self.path, allow_not_found=True, recursive=False)
        return {info.base_name for info in self.filesystem.get_file_info(selector)
                if info.type == pafs.FileType.File}

    def has(self, name: str) -> bool:
        info = self.filesystem.get_file_info(self.path_of(name))
        return bool(info.type == pafs.FileType.File)

    def read(self, name: str) -> bytes:
        with self.filesystem.open_input_stream(self.path_of(name)) as f:
            data: bytes = f.read()
        return data

    def remove_leftovers(self) -> int:
        """Removes temporary mesh files that killed writers left; returns how many."""
        doomed = [n for n in self.names() if TEMPORARY_NAME.match(n)]
        for name in doomed:
            try:
                self.filesystem.delete_file(self.path_of(name))
            except (FileNotFoundError, OSError):
                pass
        return len(doomed)

    def write_once(self, name: str, data: bytes) -> bool:
        """Writes `data` as `name` unless a file of that name is there (see above): whether this
        call wrote it."""
        if self.local:
            final = self.path_of(name)
            temporary = f"{final}{TEMPORARY_MARKER}{os.getpid()}.{secrets.token_hex(4)}"
            try:
                with open(temporary, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(temporary, final)
                except FileExistsError:
                    return False
                folder = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
                return True
            finally:
                try:
                    os.unlink(temporary)
                except FileNotFoundError:
                    pass
        if self.has(name):
            return False
        with self.filesystem.open_output_stream(self.path_of(name)) as f:
            f.write(data)
        return True
