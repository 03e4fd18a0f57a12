"""cube3d_ray: catalogue batches of cube3d-server meshes on Ray Data (README.md beside the
package; docs/ray-batch.md in the repository)."""
from .manifest import SCHEMA as MANIFEST_SCHEMA
from .output import OutputLocation
from .pipeline import BatchOptions, RunSummary, generate, init_ray, run
from .requests import MeshRequest, RequestDefaults, RequestError
from .server import ServerSpec
from .worker import MeshWorker, WorkerSettings

__version__ = "0.1.0"
__all__ = ["MANIFEST_SCHEMA", "BatchOptions", "MeshRequest", "MeshWorker", "OutputLocation",
           "RequestDefaults", "RequestError", "RunSummary", "ServerSpec", "WorkerSettings",
           "generate", "init_ray", "run"]
