"""The Kubernetes manifests of deploy/k8s, rendered and checked without a cluster:

  * every kustomization under deploy/k8s (base, overlays, monitoring, examples) renders with
    `kubectl kustomize` (kustomize v5: kubectl >= 1.27);
  * every rendered object validates against the Kubernetes JSON schemas of KUBERNETES_VERSIONS in
    strict mode (unknown fields fail), with kubernetes-validate's bundled schemas (offline); the
    custom resources it has no schema for (ServiceMonitor, PrometheusRule, InferenceService,
    ServingRuntime, RayJob) get their important fields checked here, and their embedded Kubernetes
    types (an InferenceService's pod spec, a ServingRuntime's containers and volumes, a model's
    container fields, a ServiceMonitor's label selector, a RayJob's pod templates) validated
    against those types' schemas;
    an InferenceService whose predictor is a model served by a ServingRuntime is checked as the
    pod KServe makes of the two (the runtime's container under the model's fields, the runtime's
    volumes and scheduling under the predictor's pod fields), like any server pod below;
  * the pieces agree with each other and with the server: probes and Services reach declared
    container ports that the server's config listens on (all interfaces, plaintext for the gRPC
    probes), and an HTTP probe that names a model names the config's; Service,
    PodDisruptionBudget, HorizontalPodAutoscaler and ServiceMonitor select the right objects;
    the HPA's metrics are ones the server exports and the prometheus-adapter rules serve;
    terminationGracePeriodSeconds covers the preStop delay, drain_grace_seconds and the
    server's own wind-down; CUBE3D_CONFIG points at a mounted ConfigMap's key or at a file the
    image installs; the CUDA overlay asks for a GPU and runs on it; every container runs as non-root, read-only, without
    capabilities; the alerts use exported metrics and the scraped job's name;
  * the servers' config files (a ConfigMap's server.yaml, or a server YAML the image installs),
    with the flags and CUBE3D_* variables the pods add, are configs cube3d-server accepts
    (--print-config), and its effective config is the one these checks read;
  * the real-model pieces: one copy of each script and model YAML: no file under deploy/k8s (nor
    a rendered ConfigMap's key) is a copy of a file of scripts/ or models/; the real-model servers
    read their release's server YAML from the image, and the fetch Job's initContainer copies
    fetch_models.py and the YAMLs it reads out of the server image, each from a path the image's
    install rules (cmake/Cube3dInstall.cmake) fill from the checkout; the weights the servers and
    the batch Job read are on a read-only claim, at the paths where the fetch Job
    (fetch_models.py in a pinned Python image with pinned packages, HF_TOKEN from an optional
    Secret) writes them;
  * the Jobs: a TTL, a deadline, restart and pod failure policies that retry crashes and
    evictions but not bad input; the catalog batch is an Indexed Job whose CUBE3D_SHARD_COUNT is
    its completions, reading prompts from a ConfigMap and writing to a ReadWriteMany claim;
  * the catalogue batch on Ray: a KubeRay RayJob whose pod templates (head, worker groups,
    submitter) are validated as core/v1 PodTemplateSpecs and checked like every other pod; its
    entrypoint is `python -m cube3d_ray` with the image's server and config, prompts from a
    ConfigMap on the head and output on a ReadWriteMany claim that the head and every worker
    mount at the same path; the Ray version is the one the image and scripts/setup_python.sh pin,
    the actors fit the workers' CPUs, no actor on the head, and the cluster goes when the job
    ends, with a TTL, a deadline and a bounded retry.

Run by ctest (tests/CMakeLists.txt, test deploy.k8s); by hand, from tests/deploy:

    CUBE3D_BIN_DIR=../../build/bin python3 -m unittest -v test_k8s_manifests

Needs kubectl (KUBECTL to use another) and kubernetes-validate, both from scripts/setup.sh;
CUBE3D_BIN_DIR (or CUBE3D_SERVER, the binary) for the --print-config check, skipped without
either.
"""
import fnmatch
import importlib.resources
import json
import os
import re
import shlex
import subprocess
import tempfile
import unittest

import yaml

try:
    import jsonschema
    import kubernetes_validate
    import kubernetes_validate.utils as kv_utils
    import referencing
except ImportError as e:  # pragma: no cover - the message is the point
    raise SystemExit(f"test_k8s_manifests needs kubernetes-validate from PyPI ({e}); run "
                     "scripts/setup.sh") from e

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.environ.get("CUBE3D_SOURCE_DIR") or os.path.join(HERE, "..", ".."))
K8S_DIR = os.path.join(SOURCE, "deploy", "k8s")
KUBECTL = os.environ.get("KUBECTL", "kubectl")

# The Kubernetes releases the manifests must be valid for (kubernetes-validate's schemas). 1.30 is
# the oldest the manifests support: the preStop `sleep` action is on by default from 1.30.
KUBERNETES_VERSIONS = ("1.30.0", "1.31.0")
# kubectl kustomize must be kustomize v5: the kustomizations use directory resources, `patches`
# and per-generator options, which kustomize v2 (Debian's kubectl 1.20) cannot read.
MIN_KUSTOMIZE = (5, 0)
MIN_KUBECTL_FOR_KUSTOMIZE = "1.27"

IMAGE_REPOSITORY = "ghcr.io/example/cube3d-server"
# The Ray pods' image (docker/Dockerfile.ray: the server image with ray[data] and cube3d-ray).
RAY_IMAGE_REPOSITORY = "ghcr.io/example/cube3d-ray"
# What the RayJob's driver runs, and the ray[data] the image and CI pin.
RAY_ENTRYPOINT = ["python", "-m", "cube3d_ray"]
RAY_DOCKERFILE = os.path.join(SOURCE, "docker", "Dockerfile.ray")
SETUP_PYTHON = os.path.join(SOURCE, "scripts", "setup_python.sh")
# The image's contract (docker/): uid, config path, the demo model.
IMAGE_UID = 10001
DEFAULT_CONFIG_PATH = "/etc/cube3d/server.yaml"
IMAGE_DEMO_MODEL = "/opt/cube3d/share/cube3d/models/demo.yaml"
# models/ of the checkout, installed into the image (cmake/Cube3dInstall.cmake).
IMAGE_MODELS_DIR = "/opt/cube3d/share/cube3d/models"
# Where docker/Dockerfile and docker/Dockerfile.cuda install the build (cmake --install --prefix),
# and the install rules that put the checkout's files there.
IMAGE_PREFIX = "/opt/cube3d"
INSTALL_RULES = os.path.join(SOURCE, "cmake", "Cube3dInstall.cmake")
IMAGE_DOCKERFILES = ("Dockerfile", "Dockerfile.cuda")
# Images other than the project's: pinned to a full version (and optionally a digest).
THIRD_PARTY_IMAGES = (re.compile(r"^python:\d+\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?$"),)
# What fetch_models.py puts in DIR, by the server key that reads it.
FETCHED_FILES = {"gpt_weights": "shape_gpt.safetensors",
                 "shape_weights": "shape_tokenizer.safetensors",
                 "clip_model": "clip-vit-large-patch14", "clip_vocab": "clip-vit-large-patch14"}
# cube3d-generate's flags for the same files.
GENERATE_WEIGHT_FLAGS = {"--gpt-weights": "gpt_weights", "--shape-weights": "shape_weights",
                         "--clip-model": "clip_model", "--clip-vocab": "clip_vocab"}
# cube3d-server's flags and variables over the config file (src/server/app/server_main.cpp):
# config file < CUBE3D_* variables < flags.
SERVER_FLAG_KEYS = {"--listen": "listen", "--metrics-listen": "metrics_listen",
                    "--http-listen": "http_listen", "--log-level": "logging.level",
                    "--log-format": "logging.format", "--device": "device", "--dtype": "dtype",
                    "--batch-buckets": "batching.batch_buckets",
                    "--max-queue-delay-ms": "batching.max_queue_delay_ms"}
SERVER_ENV_KEYS = {"CUBE3D_LISTEN": "listen", "CUBE3D_METRICS_LISTEN": "metrics_listen",
                   "CUBE3D_HTTP_LISTEN": "http_listen", "CUBE3D_LOG_LEVEL": "logging.level",
                   "CUBE3D_LOG_FORMAT": "logging.format"}
# Keys whose override is taken literally (the server reads them as strings, not YAML).
STRING_KEY_PREFIXES = ("listen", "metrics_listen", "http_listen", "device", "dtype", "logging.",
                       "model.", "cuda_graphs", "single_stream_decode", "defaults.format")
MESH_SERVICE = "cube3d.v1.MeshService"
SERVER_CONTAINERS = ("server", "kserve-container")
# The server's HTTP health endpoints (src/server/http): its own, and the Open Inference
# Protocol's (docs/open-inference-protocol.md). /v2/models/{name}[/versions/{v}]/ready is the
# model's readiness: {name} is the model config's file name without .yaml.
LIVE_PATHS = ("/healthz", "/v2/health/live")
READY_PATHS = ("/readyz", "/v2/health/ready")
V2_MODEL_READY = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/ready$")
V2_MODEL_VERSION = "1"  # the server's one model version

# Defaults of the keys read here (models/demo-server.yaml documents them).
CONFIG_DEFAULTS = {"listen": "0.0.0.0:50051", "metrics_listen": "0.0.0.0:9464",
                   "http_listen": "", "drain_grace_seconds": 30, "device": "cpu",
                   "dtype": "float32"}
DEFAULT_BATCH_BUCKETS = [1, 2, 4, 8]
# After drain_grace_seconds the server still waits up to 2 s for the executor to go idle, then
# gives its front doors (the HTTP server's stop and gRPC's Shutdown) 5 s between them
# (src/server/app/server_main.cpp): the pod needs this on top of the grace.
SERVER_WIND_DOWN_S = 7
# The shortest start-up budget worth having: loading and warming up a real model takes minutes.
MIN_STARTUP_BUDGET_S = 300

# The metrics the server exports, name -> type (the contract with src/server/observability/metrics.cpp, which
# e2e.observability checks against a running server; when metrics.cpp is there, the names it
# registers are checked too).
with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "server_metrics.json")) as f:
    EXPORTED_METRICS = json.load(f)
# Custom resources kubernetes-validate has no schema for: checked by hand below.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"),
                ("monitoring.coreos.com/v1", "PrometheusRule"),
                ("serving.kserve.io/v1beta1", "InferenceService"),
                ("serving.kserve.io/v1alpha1", "ServingRuntime"),
                ("ray.io/v1", "RayJob")}
# InferenceService predictor fields that are KServe's own; the rest is a core/v1 PodSpec.
KSERVE_PREDICTOR_FIELDS = {"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric",
                           "scaleMetricType", "containerConcurrency", "timeout",
                           "canaryTrafficPercent", "logger", "batcher", "labels", "annotations",
                           "deploymentStrategy", "autoScaling", "workerSpec", "model"}
# KServe's fields of an InferenceService's predictor.model (ModelSpec: the model format, the
# runtime, PredictorExtensionSpec's own); the rest is a core/v1 Container that KServe lays over the
# runtime's kserve-container.
KSERVE_MODEL_FIELDS = {"modelFormat", "runtime", "protocolVersion", "storageUri", "storage",
                       "runtimeVersion", "confidential"}
# The container KServe runs the predictor in (constants.InferenceServiceContainerName).
KSERVE_CONTAINER = "kserve-container"
# KServe's protocol versions (constants.InferenceServiceProtocol), and its names for a
# container's HTTP/1 and cleartext HTTP/2 (gRPC) ports.
KSERVE_PROTOCOLS = ("v1", "v2", "grpc-v1", "grpc-v2")
KSERVE_HTTP_PORT, KSERVE_GRPC_PORT = "http1", "h2c"
# ServingRuntimeSpec's fields (serving.kserve.io/v1alpha1), and those of its pod fields that KServe
# merges into the predictor's pod (MergePodSpec); the containers are merged by name.
SERVING_RUNTIME_FIELDS = {"supportedModelFormats", "multiModel", "disabled", "protocolVersions",
                          "workerSpec", "containers", "volumes", "nodeSelector", "affinity",
                          "tolerations", "labels", "annotations", "imagePullSecrets", "hostIPC",
                          "schedulerName", "resourceClaims", "grpcEndpoint", "grpcDataEndpoint",
                          "httpDataEndpoint", "replicas", "storageHelper", "builtInAdapter"}
SERVING_RUNTIME_POD_FIELDS = ("volumes", "nodeSelector", "affinity", "tolerations",
                              "imagePullSecrets", "schedulerName", "resourceClaims")
# ServingRuntimePodSpec's fields that are a core/v1 PodSpec's too (validated as one).
SERVING_RUNTIME_PODSPEC_FIELDS = SERVING_RUNTIME_POD_FIELDS + ("containers", "hostIPC")

RENDERED = {}  # kustomization directory, relative to deploy/k8s -> [objects]


# ---------------------------------------------------------------------------------------------
# kubectl and rendering


def kubectl_versions():
    """(kubectl gitVersion, kustomize version or None) of KUBECTL."""
    try:
        out = subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True,
                             text=True, timeout=30)
    except FileNotFoundError:
        raise AssertionError(
            f"kubectl not found ({KUBECTL}): deploy/k8s needs kubectl >= "
            f"{MIN_KUBECTL_FOR_KUSTOMIZE} (kustomize v5); run scripts/setup.sh or set KUBECTL")
    if out.returncode != 0:
        raise AssertionError(f"{KUBECTL} version --client failed: {out.stderr.strip()}")
    info = json.loads(out.stdout)
    return info.get("clientVersion", {}).get("gitVersion", "?"), info.get("kustomizeVersion")


def check_kustomize_version():
    kubectl, kustomize = kubectl_versions()
    numbers = tuple(int(n) for n in re.findall(r"\d+", kustomize or "")[:2])
    if len(numbers) < 2 or numbers < MIN_KUSTOMIZE:
        found = (f"kustomize {kustomize}" if kustomize else
                 "a kustomize too old to report its version (v2.0.3 in kubectl 1.20, as "
                 "Debian's kubernetes-client ships)")
        raise AssertionError(
            f"deploy/k8s needs kustomize >= v{MIN_KUSTOMIZE[0]}.{MIN_KUSTOMIZE[1]}, i.e. kubectl "
            f">= {MIN_KUBECTL_FOR_KUSTOMIZE} (or set KUBECTL to one); {KUBECTL} is kubectl "
            f"{kubectl} with {found}")


def kustomization_roots():
    roots = []
    for folder, _, files in os.walk(K8S_DIR):
        names = {"kustomization.yaml", "kustomization.yml", "Kustomization"} & set(files)
        if names:
            with open(os.path.join(folder, sorted(names)[0])) as f:
                kind = (yaml.safe_load(f) or {}).get("kind")
            if kind == "Component":  # rendered as part of the overlays that use it
                continue
            roots.append(os.path.relpath(folder, K8S_DIR))
    return sorted(roots)


def render(root):
    out = subprocess.run([KUBECTL, "kustomize", os.path.join(K8S_DIR, root)],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize deploy/k8s/{root} failed:\n{out.stderr}")
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def setUpModule():
    check_kustomize_version()
    roots = kustomization_roots()
    for needed in ("base", "overlays/cpu", "overlays/cuda", "monitoring", "examples/kserve",
                   "examples/kserve-v2", "weights", "overlays/cuda-v0.5", "overlays/cpu-v0.5",
                   "examples/batch/demo", "examples/batch/cuda-v0.5", "examples/batch/collect",
                   "examples/redis", "examples/ray"):
        if needed not in roots:
            raise AssertionError(f"deploy/k8s/{needed}/kustomization.yaml is missing")
    for root in roots:
        RENDERED[root] = render(root)


# ---------------------------------------------------------------------------------------------
# Schemas


class Schemas:
    """kubernetes-validate's bundled strict schemas of one Kubernetes version, for whole objects
    (through kubernetes_validate.validate) and for embedded types (a PodSpec inside a custom
    resource)."""

    _cache = {}

    def __init__(self, version):
        self.version = version
        minor = kv_utils.major_minor(version)
        bundled = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) == minor]
        if not bundled:
            raise AssertionError(
                f"kubernetes-validate {kubernetes_validate.__version__} has no schemas for "
                f"Kubernetes {minor}; scripts/setup.sh pins one that has")
        self.folder = f"kubernetes-json-schema/v{bundled[-1]}-local-strict"
        self._registry = None

    @classmethod
    def get(cls, version):
        if version not in cls._cache:
            cls._cache[version] = Schemas(version)
        return cls._cache[version]

    def _load(self, name):
        ref = importlib.resources.files("kubernetes_validate").joinpath(f"{self.folder}/{name}")
        return json.loads(ref.read_text())

    def validate_object(self, obj):
        kubernetes_validate.validate(obj, self.version, strict=True)

    def validate_type(self, value, type_file):
        """Validates `value` against one type's schema, e.g. podspec-v1.json."""
        if self._registry is None:
            definitions = referencing.Resource.from_contents(self._load("_definitions.json"))
            self._registry = definitions @ referencing.Registry()
        schema = self._load(type_file)
        jsonschema.validators.Draft202012Validator(schema, registry=self._registry).validate(value)


def validation_message(error):
    path = ".".join(str(p) for p in error.absolute_path)
    return f"{path or '(top)'}: {error.message[:400]}"


# ---------------------------------------------------------------------------------------------
# Helpers over rendered objects


def of_kind(objects, kind):
    return [o for o in objects if o.get("kind") == kind]


def name_of(obj):
    return f"{obj['kind']}/{obj['metadata']['name']}"


def selector_matches(match_labels, labels):
    return bool(match_labels) and all(labels.get(k) == v for k, v in match_labels.items())


def stateful_set_of(objects, service):
    """The StatefulSet whose pods `service` selects, or None."""
    for sts in of_kind(objects, "StatefulSet"):
        labels = sts["spec"]["template"]["metadata"].get("labels") or {}
        if selector_matches(service["spec"].get("selector"), labels):
            return sts
    return None


def label_selector_matches(selector, labels):
    """A metav1.LabelSelector (matchLabels and matchExpressions) against labels. An empty
    selector, which selects everything, counts as a mistake here."""
    selector = selector or {}
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expr in expressions:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if ((op == "In" and labels.get(key) not in values)
                or (op == "NotIn" and labels.get(key) in values)
                or (op == "Exists" and key not in labels)
                or (op == "DoesNotExist" and key in labels)):
            return False
    return True


class Pod:
    """A pod template among the rendered objects: a Deployment's, or an InferenceService's
    predictor (KServe makes the Deployment from it, with the ServingRuntime `runtime` when the
    predictor is a model)."""

    def __init__(self, owner, spec, labels, annotations, runtime=None, part=None):
        self.owner, self.spec, self.runtime, self.part = owner, spec, runtime, part
        self.labels, self.annotations = labels or {}, annotations or {}
        servers = [c for c in spec.get("containers", []) if c.get("name") in SERVER_CONTAINERS]
        self.server = servers[0] if servers else None

    @property
    def model(self):
        """An InferenceService predictor's model (ModelSpec), or None."""
        if self.owner["kind"] != "InferenceService":
            return None
        return self.owner["spec"]["predictor"].get("model")

    @property
    def protocol(self):
        """The KServe protocol version the predictor's model says, or None."""
        return (self.model or {}).get("protocolVersion")

    @property
    def where(self):
        return name_of(self.owner) + (f" ({self.part})" if self.part else "")

    def container_ports(self, container=None):
        """{port name: number} and {number} of the container's declared ports."""
        c = container or self.server
        ports = c.get("ports") or []
        return {p["name"]: p["containerPort"] for p in ports if "name" in p}, \
            {p["containerPort"] for p in ports}

    def resolve_port(self, port, container=None):
        """A probe's or Service's port (number or name) -> container port number, or None."""
        named, numbers = self.container_ports(container)
        if isinstance(port, int):
            return port if port in numbers else None
        return named.get(port)

    def env(self, name, container=None):
        for e in (container or self.server).get("env") or []:
            if e["name"] == name:
                return e
        return None

    def containers(self):
        return self.spec.get("containers", []) + self.spec.get("initContainers", [])

    @property
    def is_server(self):
        return self.owner["kind"] in ("Deployment", "InferenceService")

    def mount_of(self, container, path):
        """(volumeMount, volume) holding `path` in the container (the deepest mount), or
        (None, None)."""
        def holds(m):
            return path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
        mounts = sorted((m for m in container.get("volumeMounts") or [] if holds(m)),
                        key=lambda m: len(m["mountPath"]), reverse=True)
        if not mounts:
            return None, None
        volumes = {v["name"]: v for v in self.spec.get("volumes") or []}
        return mounts[0], volumes.get(mounts[0]["name"])


def pods(objects, servers_only=True):
    """The pod templates: the servers' (Deployments, InferenceServices), and with
    servers_only=False the Jobs' and bare Pods' too."""
    out = []
    if not servers_only:
        for job in of_kind(objects, "Job"):
            template = job["spec"]["template"]
            out.append(Pod(job, template["spec"], template["metadata"].get("labels"),
                           template["metadata"].get("annotations")))
        for pod in of_kind(objects, "Pod"):
            out.append(Pod(pod, pod["spec"], pod["metadata"].get("labels"),
                           pod["metadata"].get("annotations")))
        for job in of_kind(objects, "RayJob"):
            for part, template in ray_job_templates(job):
                meta = template.get("metadata") or {}
                out.append(Pod(job, template.get("spec") or {}, meta.get("labels"),
                               meta.get("annotations"), part=part))
    for d in of_kind(objects, "Deployment"):
        template = d["spec"]["template"]
        out.append(Pod(d, template["spec"], template["metadata"].get("labels"),
                       template["metadata"].get("annotations")))
    for isvc in of_kind(objects, "InferenceService"):
        predictor = isvc["spec"]["predictor"]
        spec = {k: v for k, v in predictor.items() if k not in KSERVE_PREDICTOR_FIELDS}
        runtime = None
        labels = {**(isvc["metadata"].get("labels") or {}), **(predictor.get("labels") or {})}
        annotations = {**(isvc["metadata"].get("annotations") or {}),
                       **(predictor.get("annotations") or {})}
        if "model" in predictor:
            runtime = serving_runtime_of(objects, isvc)
            if runtime is None:
                raise AssertionError(
                    f"{name_of(isvc)}: its model's runtime "
                    f"({predictor['model'].get('runtime') or 'auto-selected'}) is not a "
                    f"ServingRuntime of its kustomization that supports the model's format and "
                    f"protocol, so its pod cannot be checked")
            spec = predictor_pod_spec(runtime, predictor)
            labels = {**(runtime["spec"].get("labels") or {}), **labels}
            annotations = {**(runtime["spec"].get("annotations") or {}), **annotations}
        out.append(Pod(isvc, spec, labels, annotations, runtime))
    return out


def ray_job_templates(job):
    """[(part, pod template)] of a RayJob: its cluster's head, each worker group, and the
    submitter's when it gives one."""
    cluster = job["spec"].get("rayClusterSpec") or {}
    out = [("head", (cluster.get("headGroupSpec") or {}).get("template") or {})]
    for group in cluster.get("workerGroupSpecs") or []:
        out.append((f"worker group {group.get('groupName')}", group.get("template") or {}))
    if job["spec"].get("submitterPodTemplate"):
        out.append(("submitter", job["spec"]["submitterPodTemplate"]))
    return out


def ray_entrypoint_args(job):
    """cube3d_ray's arguments in a RayJob's entrypoint, or None when it runs something else."""
    words = shlex.split(job["spec"].get("entrypoint") or "")
    if words[:len(RAY_ENTRYPOINT)] != RAY_ENTRYPOINT:
        return None
    return words[len(RAY_ENTRYPOINT):]


def pinned_ray_version():
    """(scripts/setup_python.sh's RAY_VERSION, docker/Dockerfile.ray's)."""
    found = []
    for path, pattern in ((SETUP_PYTHON, r"(?m)^RAY_VERSION=(\S+)$"),
                          (RAY_DOCKERFILE, r"(?m)^ARG RAY_VERSION=(\S+)$")):
        with open(path) as f:
            match = re.search(pattern, f.read())
        found.append(match.group(1) if match else None)
    return tuple(found)


# ---------------------------------------------------------------------------------------------
# KServe: a model's ServingRuntime, and the pod KServe makes of the two


def runtime_supports(runtime, model):
    """Whether a ServingRuntime serves the model as KServe decides it: the model's format (and
    version, when the model gives one) among the runtime's supportedModelFormats (only autoSelect
    ones unless the model names the runtime), its protocol among the runtime's protocolVersions
    (when both say one), and the runtime enabled and single-model (KServe's
    ModelSpec.RuntimeSupportsModel, ServingRuntimeSpec.IsProtocolVersionSupported)."""
    spec = runtime.get("spec") or {}
    if spec.get("disabled") or spec.get("multiModel"):
        return False
    fmt = model.get("modelFormat") or {}
    wanted = f"{fmt.get('name')}:{fmt['version']}" if "version" in fmt else fmt.get("name")
    offered = set()
    for f in spec.get("supportedModelFormats") or []:
        if model.get("runtime") or f.get("autoSelect"):
            offered.add(f.get("name"))
            if "version" in f:
                offered.add(f"{f.get('name')}:{f['version']}")
    protocol = model.get("protocolVersion")
    protocols = spec.get("protocolVersions") or []
    if protocol and protocols and protocol not in protocols:
        return False
    return wanted in offered


def serving_runtime_of(objects, isvc):
    """The ServingRuntime among `objects` that serves the InferenceService's model: the one its
    model names, else the first that supports it with autoSelect; None when there is none."""
    model = isvc["spec"]["predictor"].get("model") or {}
    runtimes = of_kind(objects, "ServingRuntime")
    if model.get("runtime"):
        runtimes = [r for r in runtimes if r["metadata"]["name"] == model["runtime"]]
    for runtime in runtimes:
        if runtime_supports(runtime, model):
            return runtime
    return None


# A core/v1 Container's lists that a strategic merge patch merges item by item, by this key; the
# other lists are replaced.
CONTAINER_MERGE_KEYS = {"env": "name", "ports": "containerPort", "volumeMounts": "mountPath",
                        "volumeDevices": "devicePath", "resizePolicy": "resourceName"}
# The same for the PodSpec fields KServe merges.
POD_MERGE_KEYS = {"volumes": "name", "imagePullSecrets": "name", "resourceClaims": "name"}


def merge_maps(base, over):
    """`over` laid over `base` as a strategic merge patch does for maps: nested maps merged."""
    out = json.loads(json.dumps(base))
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_maps(out[key], value)
        else:
            out[key] = json.loads(json.dumps(value))
    return out


def merge_fields(base, over, list_keys):
    """`over`'s fields over `base`'s: maps merged, the lists of list_keys merged by their key, any
    other value replaced."""
    out = json.loads(json.dumps(base))
    for key, value in over.items():
        if key in list_keys and isinstance(value, list):
            merged = list(out.get(key) or [])
            for item in value:
                at = [i for i, b in enumerate(merged)
                      if b.get(list_keys[key]) == item.get(list_keys[key])]
                if at:
                    merged[at[0]] = merge_maps(merged[at[0]], item)
                else:
                    merged.append(item)
            out[key] = merged
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_maps(out[key], value)
        else:
            out[key] = json.loads(json.dumps(value))
    return out


def model_container_fields(model):
    """The core/v1 Container fields of a predictor's model (what KServe lays over the runtime's)."""
    return {k: v for k, v in model.items() if k not in KSERVE_MODEL_FIELDS}


def predictor_pod_spec(runtime, predictor):
    """The PodSpec KServe makes of a ServingRuntime and an InferenceService predictor whose model
    it serves (the predictor reconciler's buildPodSpec): the runtime's kserve-container with the
    model's container fields over it (args appended), then the runtime's other containers and the
    predictor's own; the runtime's volumes and scheduling with the predictor's pod fields over
    them."""
    spec = runtime["spec"]
    runtime_containers = spec.get("containers") or []
    server = [c for c in runtime_containers if c.get("name") == KSERVE_CONTAINER]
    fields = model_container_fields(predictor["model"])
    containers = []
    if server:
        merged = merge_fields(server[0], {k: v for k, v in fields.items() if k != "args"},
                              CONTAINER_MERGE_KEYS)
        if fields.get("args"):
            merged["args"] = list(server[0].get("args") or []) + list(fields["args"])
        containers.append(merged)
    containers += [c for c in runtime_containers if c.get("name") != KSERVE_CONTAINER]
    containers += predictor.get("containers") or []
    pod = {k: spec[k] for k in SERVING_RUNTIME_POD_FIELDS if k in spec}
    own = {k: v for k, v in predictor.items()
           if k not in KSERVE_PREDICTOR_FIELDS and k != "containers"}
    pod = merge_fields(pod, own, POD_MERGE_KEYS)
    pod["containers"] = containers
    return pod


def model_name(config):
    """The model's name in the Open Inference Protocol: the model config's file name without
    .yaml (src/server/app/model_identity_loader.cpp)."""
    path = (config.get("model") or {}).get("config", "")
    name = os.path.basename(path)
    return name[:-len(".yaml")] if name.endswith(".yaml") else os.path.splitext(name)[0]


def v2_model_names(text):
    """The model names in the /v2/models/{name}/... URLs of a text (routes that name no model,
    /v2/models/stats, and placeholders left out)."""
    return [m for m in re.findall(r"/v2/models/([A-Za-z0-9._-]+)", text) if m != "stats"]


def markdown_section(text, heading):
    """The section of a Markdown text under `heading` (e.g. "## KServe"), up to the next heading of
    the same or a higher level (outside fenced code, whose shell comments start with # too); ""
    when there is none."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    start, fenced = None, False
    for i, line in enumerate(lines):
        if re.match(r"^(```|~~~)", line):
            fenced = not fenced
        elif fenced:
            continue
        elif start is None and line.strip() == heading:
            start = i + 1
        elif start is not None and re.match(r"^#{1,%d}\s" % level, line):
            return "\n".join(lines[start:i])
    return "\n".join(lines[start:]) if start is not None else ""


def config_map_data(objects, name):
    for cm in of_kind(objects, "ConfigMap"):
        if cm["metadata"]["name"] == name:
            return cm.get("data") or {}
    return None


def server_config_file(objects, pod):
    """(path of the config file in the container, ConfigMap name, key, text) for the pod's
    server: where CUBE3D_CONFIG (or --config) points and what is mounted there; or, where nothing
    is mounted there, (path, None, path, text) of a file the image installs (image_files(): its
    text is the checkout's original). Fails with the reason when the file is neither."""
    path = DEFAULT_CONFIG_PATH
    env = pod.env("CUBE3D_CONFIG")
    if env is not None:
        if "value" not in env:
            raise AssertionError(f"{pod.where}: CUBE3D_CONFIG must be a literal path")
        path = env["value"]
    args = list(pod.server.get("command") or []) + list(pod.server.get("args") or [])
    for i, a in enumerate(args):
        if a == "--config" and i + 1 < len(args):
            path = args[i + 1]
        elif a.startswith("--config="):
            path = a.split("=", 1)[1]
    def holds(mount):
        return path == mount["mountPath"] or path.startswith(mount["mountPath"].rstrip("/") + "/")
    mounts = sorted((m for m in pod.server.get("volumeMounts") or [] if holds(m)),
                    key=lambda m: len(m["mountPath"]), reverse=True)
    if not mounts:
        original = image_files().get(path)
        if original is None:
            raise AssertionError(f"{pod.where}: nothing is mounted where the config is read "
                                 f"({path}), and the image installs no such file "
                                 f"({os.path.relpath(INSTALL_RULES, SOURCE)})")
        with open(original) as f:
            return path, None, path, f.read()
    mount = mounts[0]
    volumes = {v["name"]: v for v in pod.spec.get("volumes") or []}
    volume = volumes.get(mount["name"])
    if volume is None or "configMap" not in volume:
        raise AssertionError(f"{pod.where}: {path} is not on a ConfigMap volume "
                             f"(mount {mount['name']})")
    cm_name = volume["configMap"]["name"]
    if "subPath" in mount:
        key_path = mount["subPath"] if path == mount["mountPath"] else None
    else:
        key_path = os.path.relpath(path, mount["mountPath"])
    items = volume["configMap"].get("items")
    key = key_path
    if items is not None:
        by_path = {i["path"]: i["key"] for i in items}
        key = by_path.get(key_path)
    data = config_map_data(objects, cm_name)
    if data is None:
        raise AssertionError(f"{pod.where}: the config volume's ConfigMap {cm_name} is not among "
                             f"the rendered objects")
    if key is None or key not in data:
        raise AssertionError(f"{pod.where}: {path} is not a key of ConfigMap {cm_name} "
                             f"(keys: {sorted(data)})")
    return path, cm_name, key, data[key]


def config_source(cm_name, key):
    """Where a server_config_file() came from, for messages."""
    return f"ConfigMap {cm_name}'s {key}" if cm_name else f"the image's {key}"


def server_overrides(pod):
    """[(dotted key, text)] the pod sets over its config file, in the server's order: CUBE3D_*
    variables (literal values; empty ones count as unset), then the flags in argument order."""
    return env_overrides(pod) + flag_overrides(pod)


def env_overrides(pod):
    out = []
    for env, key in SERVER_ENV_KEYS.items():
        e = pod.env(env)
        if e is not None and e.get("value"):
            out.append((key, e["value"]))
    return out


def flag_overrides(pod):
    out = []
    args = list(pod.server.get("args") or [])
    command = list(pod.server.get("command") or [])
    if command and os.path.basename(command[0]) == "cube3d-server":
        args = command[1:] + args
    i = 0
    while i < len(args):
        flag, value = args[i], None
        if "=" in flag and flag.startswith("--"):
            flag, value = flag.split("=", 1)
            i += 1
        elif flag.startswith("--") and i + 1 < len(args):
            value = args[i + 1]
            i += 2
        else:
            i += 1
        if value is None:
            continue
        if flag in SERVER_FLAG_KEYS:
            out.append((SERVER_FLAG_KEYS[flag], value))
        elif flag == "--set":
            key, sep, text = value.partition("=")
            if not sep:
                raise AssertionError(f"{pod.where}: --set {value}: expected key=value")
            out.append((key, text))
    return out


def override_value(key, text):
    """An override's text as the server reads it: strings literally, lists as comma lists or
    YAML flow lists, the rest as YAML scalars."""
    if key.startswith(STRING_KEY_PREFIXES):
        return text
    if key == "batching.batch_buckets" and not text.strip().startswith("["):
        return [int(v) for v in text.split(",") if v.strip()]
    return yaml.safe_load(text)


def apply_overrides(config, overrides):
    config = json.loads(json.dumps(config))  # a deep copy
    for key, text in overrides:
        node = config
        *sections, name = key.split(".")
        for s in sections:
            if not isinstance(node.get(s), dict):
                node[s] = {}
            node = node[s]
        node[name] = override_value(key, text)
    return config


def server_config(objects, pod):
    """The server's effective config: the ConfigMap's file with the pod's flags and variables."""
    config = yaml.safe_load(server_config_file(objects, pod)[3]) or {}
    return apply_overrides(config, server_overrides(pod))


def config_value(config, key):
    return config.get(key, CONFIG_DEFAULTS.get(key))


def split_address(address):
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def batch_buckets(config):
    return (config.get("batching") or {}).get("batch_buckets") or DEFAULT_BATCH_BUCKETS


def quantity(value):
    """A Kubernetes quantity ("2", "500m", 1) as a float (CPU / count units)."""
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def probes_of(container):
    return {kind: container.get(kind) for kind in ("startupProbe", "livenessProbe",
                                                   "readinessProbe")}


def startup_budget(probe):
    return (probe.get("initialDelaySeconds", 0)
            + probe.get("failureThreshold", 3) * probe.get("periodSeconds", 10))


def prestop_seconds(container):
    """The preStop hook's delay: the kubelet's sleep action or an exec of sleep N."""
    hook = ((container.get("lifecycle") or {}).get("preStop")) or {}
    if "sleep" in hook:
        return hook["sleep"]["seconds"]
    command = " ".join((hook.get("exec") or {}).get("command") or [])
    m = re.search(r"\bsleep\s+(\d+)", command)
    return int(m.group(1)) if m else 0


def exported_metric_names():
    """The metric names the server registers: the contract above, and what
    src/server/observability/metrics.cpp registers when it is there."""
    names = set(EXPORTED_METRICS)
    source = os.path.join(SOURCE, "src", "server", "observability", "metrics.cpp")
    if os.path.exists(source):
        with open(source) as f:
            registered = set(re.findall(r'"(cube3d_[a-z0-9_]+)"', f.read()))
        names &= registered
    return names


def series_names(metric):
    """The Prometheus series a metric family exposes."""
    kind = EXPORTED_METRICS.get(metric)
    if kind == "histogram":
        return {f"{metric}_bucket", f"{metric}_sum", f"{metric}_count"}
    return {metric}


def hpa_metric_names(objects):
    names = []
    for hpa in of_kind(objects, "HorizontalPodAutoscaler"):
        for m in hpa["spec"].get("metrics") or []:
            if m["type"] == "Pods":
                names.append(m["pods"]["metric"]["name"])
    return names


def is_cuda_root(root):
    """Kustomizations whose pods run on a GPU: named so (overlays/cuda, overlays/cuda-v0.5,
    examples/batch/cuda-v0.5)."""
    return any(part == "cuda" or part.startswith("cuda-") for part in root.split("/"))


def flag_value(args, flag):
    """The value of `flag` (--flag V or --flag=V; the last one wins) in an argument list."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def generate_args(container):
    """cube3d-generate's arguments when the container runs it, else None."""
    command = list(container.get("command") or [])
    if not command or os.path.basename(command[0]) != "cube3d-generate":
        return None
    return command[1:] + list(container.get("args") or [])


def fetch_args(container):
    """fetch_models.py's arguments (VERSION DIR ...) when the container runs it, else None:
    `python .../fetch_models.py ARGS`, or `sh -c SCRIPT NAME ARGS` whose script execs it with
    "$@"."""
    command = list(container.get("command") or []) + list(container.get("args") or [])
    for i, word in enumerate(command):
        if word.endswith("fetch_models.py"):
            return command[i + 1:]
    if command[:2] == ["sh", "-c"] and len(command) > 3:
        if re.search(r"fetch_models\.py\"? \"\$@\"", command[2]):
            return command[4:]
    return None


def fetch_script_path(container):
    command = list(container.get("command") or []) + list(container.get("args") or [])
    for word in command:
        for token in word.split():
            if token.endswith("fetch_models.py"):
                return token
    return None


def writable_paths(container, pod=None):
    """Where the container writes: cube3d-generate's --out-dir, fetch_models.py's DIR, and in a
    RayJob's head and workers cube3d_ray's --out (the driver writes the manifest, the actors
    the meshes)."""
    paths = []
    if pod is not None and pod.owner["kind"] == "RayJob" and pod.part != "submitter":
        args = ray_entrypoint_args(pod.owner)
        if args and flag_value(args, "--out"):
            paths.append(flag_value(args, "--out"))
    args = generate_args(container)
    if args is not None and flag_value(args, "--out-dir"):
        paths.append(flag_value(args, "--out-dir"))
    args = fetch_args(container)
    if args and len(args) > 1 and not args[1].startswith("-"):
        paths.append(args[1])
    mounts = container.get("volumeMounts") or []
    return {m["mountPath"] for m in mounts for p in paths
            if p == m["mountPath"] or p.startswith(m["mountPath"].rstrip("/") + "/")}


def pvc_access_modes(name, namespace):
    for objects in RENDERED.values():
        for pvc in of_kind(objects, "PersistentVolumeClaim"):
            if (pvc["metadata"]["name"], pvc["metadata"].get("namespace")) == (name, namespace):
                return pvc["spec"].get("accessModes") or []
    return None


def fetch_jobs():
    """[(root, Pod, container, VERSION, DIR)] of the Jobs that run fetch_models.py."""
    out = []
    for root, objects in RENDERED.items():
        for pod in pods(objects, servers_only=False):
            if pod.owner["kind"] != "Job":
                continue
            for c in pod.containers():
                args = fetch_args(c)
                if args:
                    out.append((root, pod, c, args[0], args[1] if len(args) > 1 else None))
    return out


def claim_path(pod, container, path):
    """(claim name, path inside the claim, mount, volume) of an absolute path in the container,
    or None when no claim holds it."""
    mount, volume = pod.mount_of(container, path)
    if volume is None or "persistentVolumeClaim" not in volume:
        return None
    rel = os.path.relpath(path, mount["mountPath"])
    if mount.get("subPath"):
        rel = os.path.normpath(os.path.join(mount["subPath"], rel))
    return volume["persistentVolumeClaim"]["claimName"], rel, mount, volume


# The checkout's folders whose files the manifests take from the image, never as copies.
ORIGINAL_FOLDERS = ("scripts", "models")


def original_contents():
    """{bytes: path relative to SOURCE} of the files of ORIGINAL_FOLDERS (empty ones left out)."""
    out = {}
    for folder in ORIGINAL_FOLDERS:
        for dirpath, dirnames, files in os.walk(os.path.join(SOURCE, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    content = f.read()
                if content:
                    out.setdefault(content, os.path.relpath(path, SOURCE))
    return out


def cmake_words(text):
    """An install() call's arguments: CMake's words, quotes removed (no nested calls here)."""
    return [a or b for a, b in re.findall(r'"([^"]*)"|([^\s"]+)', text)]


_IMAGE_FILES = {}


def image_files():
    """{path in the image: path in the checkout} of every file that
    cmake/Cube3dInstall.cmake installs from the checkout (install(DIRECTORY ${CMAKE_SOURCE_DIR}/X
    ...) and install(FILES ${CMAKE_SOURCE_DIR}/X ...)), under IMAGE_PREFIX."""
    if _IMAGE_FILES:
        return _IMAGE_FILES
    with open(INSTALL_RULES) as f:
        text = "\n".join(line.split("#", 1)[0] for line in f.read().splitlines())
    source_var = "${CMAKE_SOURCE_DIR}/"
    for kind, body in re.findall(r"\binstall\(\s*(DIRECTORY|FILES)\b([^)]*)\)", text):
        words = cmake_words(body)
        if "DESTINATION" not in words:
            continue
        at = words.index("DESTINATION")
        sources, destination = words[:at], words[at + 1]
        patterns = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "PATTERN"]
        for src in sources:
            if not src.startswith(source_var):
                continue  # a build product (the vocabulary), not a file of the checkout
            local = os.path.join(SOURCE, src[len(source_var):])
            if kind == "FILES":
                _IMAGE_FILES[f"{IMAGE_PREFIX}/{destination}/{os.path.basename(local)}"] = local
                continue
            # DIRECTORY a/ installs a's contents into DESTINATION, DIRECTORY a installs a itself.
            into = destination if src.endswith("/") else \
                f"{destination}/{os.path.basename(local.rstrip('/'))}"
            for dirpath, _, files in os.walk(local):
                for name in files:
                    if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
                        continue
                    rel = os.path.relpath(os.path.join(dirpath, name), local)
                    _IMAGE_FILES[f"{IMAGE_PREFIX}/{into}/{rel}"] = os.path.join(dirpath, name)
    return _IMAGE_FILES


def copy_command(container):
    """(sources, destination) when the container runs `cp -R|-r|-a SRC... DEST` (as its command,
    or a line of `sh -c SCRIPT`), else None."""
    words = list(container.get("command") or []) + list(container.get("args") or [])
    lines = [words]
    if words[:2] == ["sh", "-c"] and len(words) > 2:
        lines = [shlex.split(line) for line in words[2].splitlines()]
    for line in lines:
        if line and os.path.basename(line[0]) == "cp":
            options = [w for w in line[1:] if w.startswith("-")]
            paths = [w for w in line[1:] if not w.startswith("-")]
            if len(paths) >= 2 and any(o in ("-R", "-r", "-a") for o in options):
                return paths[:-1], paths[-1]
    return None


def image_tag(image):
    return image.rpartition(":")[2]


# ---------------------------------------------------------------------------------------------


class K8sManifestsTest(unittest.TestCase):
    maxDiff = None

    # The failure messages name the kustomization (and the pod's owner): a plain loop, no
    # subTest, stops at the first failure of a test but always says where it is.
    def each_root(self):
        return list(RENDERED.items())

    def each_pod(self):
        """The servers' pods."""
        return [(root, objects, pod) for root, objects in RENDERED.items()
                for pod in pods(objects)]

    def each_pod_config(self):
        """The servers' pods, each with its server's effective config: (root, pod, config),
        read pod by pod."""
        for root, objects, pod in self.each_pod():
            yield root, pod, server_config(objects, pod)

    def each_deployment_root(self):
        """The roots that run the server as a Deployment."""
        return [(root, objects) for root, objects in RENDERED.items()
                if of_kind(objects, "Deployment")]

    def each_workload(self):
        """Every pod template: the servers', the Jobs', bare Pods'."""
        return [(root, objects, pod) for root, objects in RENDERED.items()
                for pod in pods(objects, servers_only=False)]

    # -- rendering and schemas ----------------------------------------------------------------

    def test_renders_objects(self):
        for root, objects in self.each_root():
            self.assertTrue(objects, f"deploy/k8s/{root} renders nothing")
            seen = set()
            for o in objects:
                key = (o.get("apiVersion"), o.get("kind"), o["metadata"].get("namespace"),
                       o["metadata"].get("name"))
                self.assertNotIn(key, seen, f"{root}: {key} twice")
                seen.add(key)

    def test_schemas_strict(self):
        for version in KUBERNETES_VERSIONS:
            schemas = Schemas.get(version)
            for root, objects in self.each_root():
                for obj in objects:
                    kind = (obj.get("apiVersion"), obj.get("kind"))
                    if kind in CUSTOM_KINDS:
                        continue
                    problem = None
                    try:
                        schemas.validate_object(obj)
                    except kv_utils.SchemaNotFoundError:
                        problem = (f"{root}: {name_of(obj)} ({obj['apiVersion']}) has no schema "
                                   f"in Kubernetes {version} and is not a known custom resource")
                    except jsonschema.ValidationError as e:
                        problem = (f"{root}: {name_of(obj)} is not a valid {obj['apiVersion']} "
                                   f"{obj['kind']} for Kubernetes {version}: "
                                   f"{validation_message(e)}")
                    if problem:
                        self.fail(problem)

    def test_custom_resources_embedded_types(self):
        """The Kubernetes types inside the custom resources, against their own schemas."""
        for version in KUBERNETES_VERSIONS:
            schemas = Schemas.get(version)
            for root, objects in self.each_root():
                checks = []
                # An InferenceService's pod as KServe makes it (with its ServingRuntime's
                # container and volumes where the predictor is a model), and the model's own
                # container fields (KServe lays them over the runtime's container).
                for pod in pods(objects):
                    if pod.owner["kind"] == "InferenceService":
                        checks.append((pod.owner, pod.spec, "podspec-v1.json"))
                        if pod.model is not None:
                            fields = {"name": KSERVE_CONTAINER,
                                      **model_container_fields(pod.model)}
                            checks.append((pod.owner, fields, "container-v1.json"))
                # A ServingRuntime's own pod fields (containers, volumes, scheduling) as a PodSpec,
                # and its workers' if it has them: valid whichever InferenceService uses it.
                for runtime in of_kind(objects, "ServingRuntime"):
                    for part in (runtime["spec"], runtime["spec"].get("workerSpec")):
                        if part:
                            checks.append((runtime, {k: v for k, v in part.items()
                                                     if k in SERVING_RUNTIME_PODSPEC_FIELDS},
                                           "podspec-v1.json"))
                    for key in ("labels", "annotations"):
                        value = runtime["spec"].get(key) or {}
                        self.assertTrue(all(isinstance(v, str) for v in value.values()),
                                        f"{root}: {name_of(runtime)}: spec.{key} of strings")
                for sm in of_kind(objects, "ServiceMonitor"):
                    checks.append((sm, sm["spec"]["selector"], "labelselector-meta-v1.json"))
                # A RayJob's pod templates (head, worker groups, submitter): KubeRay makes its
                # pods of them as they are, adding Ray's command, ports and probes.
                for job in of_kind(objects, "RayJob"):
                    for part, template in ray_job_templates(job):
                        checks.append(({**job, "metadata": {
                            "name": f"{job['metadata']['name']} ({part})"}}, template,
                            "podtemplatespec-v1.json"))
                for obj, value, type_file in checks:
                    problem = None
                    try:
                        schemas.validate_type(value, type_file)
                    except jsonschema.ValidationError as e:
                        problem = (f"{root}: {name_of(obj)}: not a valid {type_file[:-5]} for "
                                   f"Kubernetes {version}: {validation_message(e)}")
                    if problem:
                        self.fail(problem)

    def test_servicemonitor_structure(self):
        for root, objects in self.each_root():
            for sm in of_kind(objects, "ServiceMonitor"):
                spec = sm["spec"]
                self.assertEqual(sm["apiVersion"], "monitoring.coreos.com/v1")
                self.assertTrue(spec.get("selector", {}).get("matchLabels"),
                                f"{root}: {name_of(sm)} selects no Service")
                endpoints = spec.get("endpoints")
                self.assertTrue(endpoints, f"{root}: {name_of(sm)} has no endpoints")
                for ep in endpoints:
                    self.assertLessEqual(set(ep), {"port", "path", "scheme", "interval",
                                                   "scrapeTimeout", "honorLabels",
                                                   "relabelings", "metricRelabelings"},
                                         f"{root}: {name_of(sm)}: unexpected endpoint fields")
                    self.assertIsInstance(ep.get("port"), str,
                                          f"{root}: {name_of(sm)}: endpoints need a port name")
                    self.assertEqual(ep.get("path", "/metrics"), "/metrics")
                    for field in ("interval", "scrapeTimeout"):
                        if field in ep:
                            self.assertRegex(ep[field], r"^\d+(ms|s|m)$")
                    if "interval" in ep and "scrapeTimeout" in ep:
                        self.assertLessEqual(duration_s(ep["scrapeTimeout"]),
                                             duration_s(ep["interval"]))

    def test_prometheusrule_structure(self):
        for root, objects in self.each_root():
            for rule_obj in of_kind(objects, "PrometheusRule"):
                groups = rule_obj["spec"].get("groups")
                self.assertTrue(groups, f"{root}: {name_of(rule_obj)} has no groups")
                for group in groups:
                    self.assertTrue(group.get("name"))
                    self.assertTrue(group.get("rules"))
                    for rule in group["rules"]:
                        self.assertLessEqual(set(rule), {"alert", "record", "expr", "for",
                                                         "labels", "annotations",
                                                         "keep_firing_for"})
                        self.assertTrue(("alert" in rule) != ("record" in rule),
                                        f"{rule}: alert or record")
                        expr = rule.get("expr", "")
                        self.assertTrue(isinstance(expr, str) and expr.strip())
                        self.assertTrue(balanced(expr), f"{rule.get('alert')}: unbalanced "
                                        f"brackets or quotes in {expr!r}")
                        if "alert" in rule:
                            self.assertRegex(rule.get("for", "0s"), r"^\d+(s|m|h)$")
                            self.assertIn(rule.get("labels", {}).get("severity"),
                                          ("info", "warning", "critical"), rule["alert"])
                            self.assertTrue(rule.get("annotations", {}).get("summary"),
                                            f"{rule['alert']}: no summary")

    def test_inferenceservice_structure(self):
        for root, objects in self.each_root():
            for isvc in of_kind(objects, "InferenceService"):
                where = f"{root}: {name_of(isvc)}"
                predictor = isvc["spec"].get("predictor") or {}
                self.assertEqual(set(isvc["spec"]), {"predictor"}, where)
                if "model" in predictor:
                    self.check_model_predictor(where, objects, isvc)
                else:
                    containers = predictor.get("containers") or []
                    self.assertEqual([c["name"] for c in containers], [KSERVE_CONTAINER],
                                     f"{where}: one custom container named {KSERVE_CONTAINER}")
                    ports = containers[0].get("ports") or []
                    # KServe routes one port; h2c makes it HTTP/2 cleartext (gRPC).
                    self.assertEqual(len(ports), 1, f"{where}: exactly one container port")
                    self.assertEqual(ports[0].get("name"), KSERVE_GRPC_PORT,
                                     f"{where}: the gRPC port is {KSERVE_GRPC_PORT}")
                lo, hi = predictor.get("minReplicas", 1), predictor.get("maxReplicas", 1)
                self.assertGreaterEqual(lo, 1, f"{where}: no scale to zero (minutes to load)")
                self.assertGreaterEqual(hi, lo, where)
                self.assertGreaterEqual(predictor.get("timeout", 60), 60, where)

    def check_model_predictor(self, where, objects, isvc):
        """A predictor that is a model: its format, a ServingRuntime of the kustomization that
        serves it (by name), a protocol KServe knows, and the container KServe makes: the runtime's
        kserve-container, whose first port (where KServe's Service sends port 80, and its ingress
        the traffic) speaks the model's protocol."""
        predictor = isvc["spec"]["predictor"]
        model = predictor["model"]
        self.assertTrue((model.get("modelFormat") or {}).get("name"),
                        f"{where}: model.modelFormat.name")
        self.assertTrue(model.get("runtime"), f"{where}: name the model's runtime (auto-selection "
                        f"picks among every runtime of the namespace and the cluster)")
        runtimes = {r["metadata"]["name"]: r for r in of_kind(objects, "ServingRuntime")}
        self.assertIn(model["runtime"], runtimes,
                      f"{where}: model.runtime {model['runtime']} is not a ServingRuntime of the "
                      f"kustomization ({sorted(runtimes)})")
        runtime = runtimes[model["runtime"]]
        protocol = model.get("protocolVersion")
        self.assertIn(protocol, KSERVE_PROTOCOLS, f"{where}: model.protocolVersion {protocol!r}")
        self.assertTrue(runtime_supports(runtime, model),
                        f"{where}: {name_of(runtime)} does not serve the model's format "
                        f"{model.get('modelFormat')} with protocol {protocol} (its "
                        f"supportedModelFormats {runtime['spec'].get('supportedModelFormats')}, "
                        f"protocolVersions {runtime['spec'].get('protocolVersions')})")
        self.assertFalse(predictor.get("containers"),
                         f"{where}: the model's container comes from its runtime; set its fields "
                         f"in predictor.model")
        self.assertFalse(set(model) & {"image", "name"},
                         f"{where}: the image and container name are the runtime's")
        (pod,) = [p for p in pods(objects) if p.owner is isvc]
        self.assertIsNotNone(pod.server, f"{where}: the runtime has no {KSERVE_CONTAINER}")
        ports = pod.server.get("ports") or []
        self.assertTrue(ports, f"{where}: the runtime's container declares no port")
        first = KSERVE_GRPC_PORT if protocol.startswith("grpc-") else KSERVE_HTTP_PORT
        self.assertEqual(ports[0].get("name"), first,
                         f"{where}: KServe routes the predictor's traffic to the container's first "
                         f"port: {first} for protocol {protocol}")
        for port in ports:
            self.assertIn(port.get("name"), (KSERVE_HTTP_PORT, KSERVE_GRPC_PORT),
                          f"{where}: port {port}: KServe's ports are {KSERVE_HTTP_PORT} (HTTP/1) "
                          f"and {KSERVE_GRPC_PORT} (gRPC)")

    def test_servingruntime_structure(self):
        """Each ServingRuntime: KServe's fields only, its formats and protocols well formed, a
        single-model runtime whose predictor container is kserve-container, and used by an
        InferenceService of its kustomization (whose pod, with this runtime's container, the
        server checks below examine)."""
        for root, objects in self.each_root():
            for runtime in of_kind(objects, "ServingRuntime"):
                where = f"{root}: {name_of(runtime)}"
                spec = runtime.get("spec") or {}
                self.assertEqual(runtime["apiVersion"], "serving.kserve.io/v1alpha1", where)
                self.assertLessEqual(set(spec), SERVING_RUNTIME_FIELDS,
                                     f"{where}: not ServingRuntimeSpec fields: "
                                     f"{sorted(set(spec) - SERVING_RUNTIME_FIELDS)}")
                formats = spec.get("supportedModelFormats") or []
                self.assertTrue(formats, f"{where}: no supportedModelFormats")
                for f in formats:
                    self.assertLessEqual(set(f), {"name", "version", "autoSelect", "priority"},
                                         where)
                    self.assertTrue(isinstance(f.get("name"), str) and f["name"], where)
                    if "version" in f:
                        self.assertIsInstance(f["version"], str, f"{where}: a format's version "
                                              f"is a string (\"1\", not 1)")
                    if "autoSelect" in f:
                        self.assertIsInstance(f["autoSelect"], bool, where)
                    if "priority" in f:
                        self.assertTrue(isinstance(f["priority"], int) and f["priority"] >= 1,
                                        where)
                protocols = spec.get("protocolVersions") or []
                self.assertTrue(protocols, f"{where}: no protocolVersions (KServe would assume "
                                f"the runtime speaks v1)")
                self.assertLessEqual(set(protocols), set(KSERVE_PROTOCOLS), where)
                self.assertFalse(spec.get("multiModel"), f"{where}: not a ModelMesh runtime")
                self.assertFalse(spec.get("disabled"), where)
                names = [c.get("name") for c in spec.get("containers") or []]
                self.assertEqual(names.count(KSERVE_CONTAINER), 1,
                                 f"{where}: KServe runs the predictor in the container named "
                                 f"{KSERVE_CONTAINER} ({names})")
                users = [p.where for p in pods(objects) if p.runtime is runtime]
                self.assertTrue(users, f"{where}: no InferenceService of {root} uses it, so "
                                f"nothing here checks its container as a server")

    def test_kserve_v2_example_wiring(self):
        """examples/kserve-v2: the predictor is a model that says protocolVersion v2 and names its
        ServingRuntime; the runtime serves the model's format with v2 and grpc-v2; the container's
        first port, where KServe sends the traffic, is http1 on http_listen's port, and h2c is
        listen's; readiness is an HTTP GET of /v2/health/ready there, liveness one of
        /v2/health/live; the demo model needs no storage; and the model the config serves is the
        one the probes and the docs (the example's files, the KServe sections of
        deploy/k8s/README.md and docs/open-inference-protocol.md) name in /v2/models/ URLs."""
        root = "examples/kserve-v2"
        self.assertIn(root, RENDERED)
        objects = RENDERED[root]
        isvcs, runtimes = of_kind(objects, "InferenceService"), of_kind(objects, "ServingRuntime")
        self.assertEqual((len(isvcs), len(runtimes)), (1, 1),
                         f"{root}: one InferenceService and its ServingRuntime")
        isvc, runtime = isvcs[0], runtimes[0]
        model = isvc["spec"]["predictor"].get("model") or {}
        self.assertEqual(model.get("protocolVersion"), "v2",
                         f"{root}: the predictor's model must say protocolVersion v2")
        self.assertEqual(model.get("runtime"), runtime["metadata"]["name"],
                         f"{root}: the model names the runtime {runtime['metadata']['name']}")
        formats = [f.get("name") for f in runtime["spec"].get("supportedModelFormats") or []]
        self.assertIn((model.get("modelFormat") or {}).get("name"), formats,
                      f"{root}: the runtime does not support the model's format")
        self.assertTrue(runtime_supports(runtime, model), f"{root}: KServe would refuse the "
                        f"runtime for this model")
        for protocol in ("v2", "grpc-v2"):
            self.assertIn(protocol, runtime["spec"].get("protocolVersions") or [],
                          f"{root}: the runtime does not list {protocol}, which the server speaks")
        (pod,) = pods(objects)
        self.assertIs(pod.runtime, runtime, root)
        config = server_config(objects, pod)
        http = config_value(config, "http_listen")
        self.assertTrue(http, f"{root}: http_listen is off: no v2 REST")
        _, http_port = split_address(http)
        _, grpc_port = split_address(config_value(config, "listen"))
        ports = pod.server.get("ports") or []
        self.assertEqual([(p.get("name"), p["containerPort"]) for p in ports[:1]],
                         [(KSERVE_HTTP_PORT, http_port)],
                         f"{root}: the first port (KServe's Service port 80) must be "
                         f"{KSERVE_HTTP_PORT} on http_listen's port {http_port}")
        self.assertEqual(pod.container_ports()[0].get(KSERVE_GRPC_PORT), grpc_port,
                         f"{root}: {KSERVE_GRPC_PORT} (grpc-v2) is not listen's port")
        for kind, path in (("readinessProbe", "/v2/health/ready"),
                           ("livenessProbe", "/v2/health/live")):
            get = (pod.server.get(kind) or {}).get("httpGet") or {}
            self.assertEqual(get.get("path"), path, f"{root}: {kind} must GET {path}")
            self.assertEqual(pod.resolve_port(get.get("port")), http_port,
                             f"{root}: {kind} is not on http_listen's port {http_port}")
        if (config.get("model") or {}).get("config") == IMAGE_DEMO_MODEL:
            self.assertFalse(set(model) & {"storageUri", "storage"},
                             f"{root}: the demo model is in the image: nothing to download")
        # The model's name: the one every probe and document of the example names.
        name = model_name(config)
        for kind, probe in probes_of(pod.server).items():
            m = V2_MODEL_READY.match(((probe or {}).get("httpGet") or {}).get("path") or "")
            if m:
                self.assertEqual(m.group(1), name, f"{root}: {kind} names model {m.group(1)}, "
                                 f"the server's is {name}")
        texts = {}
        folder = os.path.join(K8S_DIR, root)
        for file in sorted(os.listdir(folder)):
            with open(os.path.join(folder, file)) as f:
                texts[f"deploy/k8s/{root}/{file}"] = f.read()
        for doc in ("deploy/k8s/README.md", "docs/open-inference-protocol.md"):
            with open(os.path.join(SOURCE, doc)) as f:
                texts[f"{doc} (## KServe)"] = markdown_section(f.read(), "## KServe")
        readme = texts["deploy/k8s/README.md (## KServe)"]
        self.assertIn(f"examples/{os.path.basename(root)}", readme,
                      f"{root}: deploy/k8s/README.md's KServe section does not describe it")
        self.assertTrue(v2_model_names(readme), f"deploy/k8s/README.md's KServe section gives no "
                        f"/v2/models/{name}/... URL")
        for where, text in texts.items():
            for named in v2_model_names(text):
                self.assertEqual(named, name, f"{where} names the model {named!r} in a "
                                 f"/v2/models/ URL; {root} serves {name!r} (model.config's file "
                                 f"name)")

    # -- images -------------------------------------------------------------------------------

    def test_images_are_tagged(self):
        for root, objects, pod in self.each_workload():
            gpu = any("nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
                      for c in pod.containers())
            for c in pod.containers():
                image = c["image"]
                if any(p.match(image) for p in THIRD_PARTY_IMAGES):
                    continue
                repo, _, tag = image.rpartition(":")
                project = RAY_IMAGE_REPOSITORY if pod.owner["kind"] == "RayJob" \
                    else IMAGE_REPOSITORY
                self.assertEqual(repo, project, f"{root}: {pod.where}: image {image} "
                                 f"(did kustomize's images: miss it? Other images must be pinned "
                                 f"to a full version: {[p.pattern for p in THIRD_PARTY_IMAGES]})")
                self.assertTrue(tag and tag != "latest", f"{root}: {image} needs a version tag")
                # The CUDA build on GPU pods, the CPU build elsewhere (an overlay's images:
                # entry that matches nothing leaves the base's tag in place).
                self.assertEqual(tag.endswith("-cuda"), gpu,
                                 f"{root}: {pod.where}: image {image} on a "
                                 f"{'GPU' if gpu else 'CPU'} pod")

    # -- the server's config ------------------------------------------------------------------

    def test_config_mounted_where_cube3d_config_points(self):
        for root, objects, pod in self.each_pod():
            self.assertIsNotNone(pod.server, f"{root}: {pod.where}: no server container "
                                 f"(named one of {SERVER_CONTAINERS})")
            path, cm_name, key, text = server_config_file(objects, pod)
            self.assertTrue(path.startswith("/"), path)
            if cm_name is None:
                # A file of the image (server_config_file checked that it installs it): it
                # changes with the image's tag, which rolls the pods.
                self.assertIn(path, image_files(), f"{root}: {pod.where}")
            else:
                # Generated with a content hash, so a config change rolls the pods.
                self.assertRegex(cm_name, r"-[a-z0-9]{10}$",
                                 f"{root}: ConfigMap {cm_name} has no content hash: a config "
                                 f"change would not roll the pods (use configMapGenerator)")
            self.assertIsInstance(yaml.safe_load(text), dict,
                                  f"{root}: {config_source(cm_name, key)}")

    def test_volumes_reference_rendered_configmaps(self):
        # Claims may come from another kustomization (the weights' from deploy/k8s/weights).
        claims = {(o["metadata"].get("namespace"), o["metadata"]["name"])
                  for objects in RENDERED.values()
                  for o in of_kind(objects, "PersistentVolumeClaim")}
        for root, objects, pod in self.each_workload():
            names = {cm["metadata"]["name"] for cm in of_kind(objects, "ConfigMap")}
            for v in pod.spec.get("volumes") or []:
                if "configMap" in v and not v["configMap"].get("optional"):
                    self.assertIn(v["configMap"]["name"], names,
                                  f"{root}: {pod.where}: volume {v['name']} refers to a ConfigMap "
                                  f"that is not rendered (a generated name not substituted?)")
                    data = config_map_data(objects, v["configMap"]["name"])
                    for item in v["configMap"].get("items") or []:
                        self.assertIn(item["key"], data, f"{root}: {pod.where}: volume "
                                      f"{v['name']} maps a key its ConfigMap lacks")
                if "persistentVolumeClaim" in v:
                    claim = (pod.owner["metadata"].get("namespace"),
                             v["persistentVolumeClaim"]["claimName"])
                    self.assertIn(claim, claims, f"{root}: {pod.where}: volume {v['name']} "
                                  f"claims {claim}, which no kustomization here creates")
            mounts = {m["name"] for c in pod.containers() for m in c.get("volumeMounts", [])}
            self.assertLessEqual(mounts, {v["name"] for v in pod.spec.get("volumes") or []})

    def test_config_listens_where_the_pod_expects(self):
        for root, pod, config in self.each_pod_config():
            named, numbers = pod.container_ports()
            host, grpc_port = split_address(config_value(config, "listen"))
            self.assertIn(host, ("0.0.0.0", "::"),
                          f"{root}: listen must be on all interfaces for probes and Services")
            self.assertIn(grpc_port, numbers, f"{root}: {pod.where}: the gRPC port {grpc_port} "
                          f"is not a containerPort")
            kserve = pod.owner["kind"] == "InferenceService"
            grpc_name = KSERVE_GRPC_PORT if kserve else "grpc"
            self.assertEqual(named.get(grpc_name), grpc_port,
                             f"{root}: {pod.where}: the port named {grpc_name} is not listen's")
            http_name = KSERVE_HTTP_PORT if kserve else "http"
            for key, port_name in (("metrics_listen", "metrics"), ("http_listen", http_name)):
                address = config_value(config, key)
                if not address:
                    self.assertNotIn(port_name, named,
                                     f"{root}: port {port_name} declared but {key} is off")
                    continue
                host, port = split_address(address)
                self.assertIn(host, ("0.0.0.0", "::"), f"{root}: {key} {address}")
                if kserve:
                    if port_name == "metrics":
                        self.assertEqual(pod.annotations.get("prometheus.io/port"), str(port),
                                         f"{root}: prometheus.io/port is not metrics_listen's")
                    elif port_name in named or pod.protocol in ("v1", "v2"):
                        # A predictor of an HTTP protocol is reached on its port http1.
                        self.assertEqual(named.get(port_name), port,
                                         f"{root}: {pod.where}: containerPort {port_name} is not "
                                         f"{key}'s port {port}")
                else:
                    self.assertEqual(named.get(port_name), port,
                                     f"{root}: {pod.where}: containerPort {port_name} is not "
                                     f"{key}'s port {port}")
            tls = config.get("tls") or {}
            self.assertFalse(tls.get("cert_file") or tls.get("key_file"),
                             f"{root}: the kubelet's gRPC probes cannot speak TLS: keep tls off")
            model = (config.get("model") or {}).get("config", "")
            self.assertTrue(model.startswith("/"),
                            f"{root}: model.config {model!r}: relative paths resolve against the "
                            f"ConfigMap mount, not the image")

    def test_server_accepts_the_configs(self):
        """cube3d-server --print-config on each server's config file, a ConfigMap's server.yaml or
        the image's server YAML (the image's models/ stands for the checkout's here)."""
        if os.environ.get("CUBE3D_SERVER"):
            server = os.environ["CUBE3D_SERVER"]
        elif os.environ.get("CUBE3D_BIN_DIR"):
            server = os.path.join(os.environ["CUBE3D_BIN_DIR"], "cube3d-server")
        else:  # ctest sets CUBE3D_BIN_DIR when the server is built (CUBE3D_BUILD_SERVER)
            self.skipTest("no cube3d-server to check the configs with (set CUBE3D_BIN_DIR)")
        self.assertTrue(os.access(server, os.X_OK), f"{server} is not built")
        checked = {}
        for root, objects, pod in self.each_pod():
            config_path, cm_name, key, text = server_config_file(objects, pod)
            overrides = server_overrides(pod)
            if (text, tuple(overrides)) in checked:
                continue
            checked[(text, tuple(overrides))] = config_source(cm_name, key)
            with tempfile.TemporaryDirectory() as tmp:
                if cm_name is None:
                    # The image's file is the checkout's: read there, its relative paths resolve
                    # as in the image's models/.
                    path = image_files()[config_path]
                else:
                    path = os.path.join(tmp, key)
                    with open(path, "w") as f:
                        f.write(text)
                # The pod's flags and variables as the server gets them, with the paths in the
                # container mapped here: the image's models/ to the checkout's, a claim's files
                # to empty stand-ins (the config check looks for them, not into them).
                here = lambda value: self.local_path(pod, value, tmp)  # noqa: E731
                args = [server, "--config", path, "--print-config"]
                env = {k: v for k, v in os.environ.items() if not k.startswith("CUBE3D_")}
                for env_name, config_key in SERVER_ENV_KEYS.items():
                    e = pod.env(env_name)
                    if e is not None and e.get("value"):
                        env[env_name] = e["value"]
                model = (yaml.safe_load(text).get("model") or {}).get("config", "")
                if model.startswith(IMAGE_MODELS_DIR + "/"):
                    args += ["--set", "model.config=" + here(model)]
                for config_key, value in flag_overrides(pod):
                    if config_key.startswith("model."):
                        value = here(value)
                    args += ["--set", f"{config_key}={value}"]
                out = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env,
                                     stdin=subprocess.DEVNULL)
                self.assertEqual(out.returncode, 0,
                                 f"{root}: cube3d-server rejects "
                                 f"{config_source(cm_name, key)} with the pod's flags {overrides}:\n{out.stderr.strip()}")
                # The server's effective config is the one these checks read.
                effective = yaml.safe_load(out.stdout)
                ours = server_config(objects, pod)
                for dotted in ("listen", "metrics_listen", "http_listen", "device", "dtype",
                               "batching.batch_buckets", "drain_grace_seconds",
                               "limits.default_deadline_ms", "grpc.max_connection_age_ms",
                               "grpc.max_connection_age_grace_ms", "logging.format"):
                    theirs_value, ours_value = effective, ours
                    for part in dotted.split("."):
                        theirs_value = theirs_value.get(part)
                        ours_value = (ours_value or {}).get(part)
                    if ours_value is None:
                        ours_value = CONFIG_DEFAULTS.get(dotted)
                    if ours_value is None:
                        continue  # a default these checks do not model
                    self.assertEqual(theirs_value, ours_value,
                                     f"{root}: {dotted}: the server's effective config says "
                                     f"{theirs_value!r}, this test read {ours_value!r}")
        self.assertTrue(checked)

    @staticmethod
    def local_path(pod, value, tmp):
        """A path in the server container, for a --print-config run here."""
        if value.startswith(IMAGE_MODELS_DIR + "/"):
            return os.path.join(SOURCE, "models", value[len(IMAGE_MODELS_DIR) + 1:])
        mount, volume = pod.mount_of(pod.server, value)
        if volume is not None and "persistentVolumeClaim" in volume:
            local = os.path.join(tmp, "claims", volume["persistentVolumeClaim"]["claimName"],
                                 os.path.relpath(value, mount["mountPath"]))
            if "." in os.path.basename(local):
                os.makedirs(os.path.dirname(local), exist_ok=True)
                open(local, "a").close()
            else:
                os.makedirs(local, exist_ok=True)
            return local
        return value

    def test_grpc_connections_age_out_within_a_scale_up_and_outlast_a_request(self):
        """Behind a Service, new replicas get traffic from connected gRPC clients only when
        connections age out: an age limit well below the HPA's scale-up cadence, a grace above
        the longest request (so aging never cuts one)."""
        for root, pod, config in self.each_pod_config():
            grpc_section = config.get("grpc") or {}
            age = grpc_section.get("max_connection_age_ms", 30 * 60_000)
            grace = grpc_section.get("max_connection_age_grace_ms", 6 * 60_000)
            deadline = (config.get("limits") or {}).get("default_deadline_ms", 300_000)
            self.assertLessEqual(age, 10 * 60_000,
                                 f"{root}: grpc.max_connection_age_ms {age}: connected clients "
                                 f"would take over 10 minutes to reach new replicas")
            self.assertGreaterEqual(grace, deadline,
                                    f"{root}: grpc.max_connection_age_grace_ms {grace} is shorter "
                                    f"than limits.default_deadline_ms {deadline}: an aging "
                                    f"connection would cut requests")

    # -- probes, shutdown, security -----------------------------------------------------------

    def test_probes(self):
        """Every probe asks a port the server listens on; readiness follows the model's state,
        liveness does not (a draining pod is not restarted), and the startup probe allows a
        model load, within the Deployment's progress deadline."""
        for root, pod, config in self.each_pod_config():
            _, grpc_port = split_address(config_value(config, "listen"))
            probes = probes_of(pod.server)
            for kind, probe in probes.items():
                self.assertIsNotNone(probe, f"{root}: {pod.where}: no {kind}")
                if "grpc" in probe:
                    self.assertEqual(probe["grpc"]["port"], grpc_port,
                                     f"{root}: {kind} probes port {probe['grpc']['port']}, the "
                                     f"server's gRPC port is {grpc_port}")
                    self.assertIn(probe["grpc"].get("service", ""), ("", MESH_SERVICE),
                                  f"{root}: {kind}: the health service knows '' and "
                                  f"{MESH_SERVICE} only")
                elif "httpGet" in probe:
                    self.assertTrue(config_value(config, "http_listen"),
                                    f"{root}: {kind} uses HTTP but http_listen is off")
                    port = pod.resolve_port(probe["httpGet"]["port"])
                    self.assertEqual(port, split_address(config_value(config, "http_listen"))[1],
                                     f"{root}: {kind} probes a port that is not http_listen's")
                    path = probe["httpGet"].get("path")
                    model = V2_MODEL_READY.match(path or "")
                    self.assertTrue(path in LIVE_PATHS + READY_PATHS or model,
                                    f"{root}: {kind} probes {path}, not a health endpoint of the "
                                    f"server ({LIVE_PATHS + READY_PATHS}, "
                                    f"/v2/models/{{name}}/ready)")
                    if model:
                        # 404 for a model the server does not have: the probe would never pass.
                        self.assertEqual(model.group(1), model_name(config),
                                         f"{root}: {pod.where}: {kind} asks for model "
                                         f"{model.group(1)}, the server's is {model_name(config)} "
                                         f"(its model.config's file name)")
                        self.assertIn(model.group(2), (None, V2_MODEL_VERSION),
                                      f"{root}: {kind}: the model's one version is "
                                      f"{V2_MODEL_VERSION}")
                elif "tcpSocket" in probe:
                    self.assertIsNotNone(pod.resolve_port(probe["tcpSocket"]["port"]),
                                         f"{root}: {kind} probes an undeclared port")
            readiness = probes["readinessProbe"]
            if "grpc" in readiness:
                self.assertEqual(readiness["grpc"].get("service"), MESH_SERVICE,
                                 f"{root}: readiness should ask for the MeshService itself")
            else:
                path = readiness.get("httpGet", {}).get("path") or ""
                self.assertTrue(path in READY_PATHS or V2_MODEL_READY.match(path),
                                f"{root}: {pod.where}: readiness on {path!r} must follow the "
                                f"model's state ({READY_PATHS} or /v2/models/{{name}}/ready)")
            liveness = probes["livenessProbe"]
            path = liveness.get("httpGet", {}).get("path") or ""
            self.assertFalse(path in READY_PATHS or V2_MODEL_READY.match(path),
                             f"{root}: {pod.where}: liveness on {path} restarts pods that are "
                             f"draining")
            budget = startup_budget(probes["startupProbe"])
            self.assertGreaterEqual(budget, MIN_STARTUP_BUDGET_S,
                                    f"{root}: the startupProbe allows {budget} s to load")
            if pod.owner["kind"] == "Deployment":
                deadline = pod.owner["spec"].get("progressDeadlineSeconds", 600)
                self.assertGreater(deadline, budget,
                                   f"{root}: progressDeadlineSeconds {deadline} <= the start-up "
                                   f"budget {budget}: a slow load fails the rollout")

    def test_termination_grace_covers_the_drain(self):
        for root, pod, config in self.each_pod_config():
            drain = config_value(config, "drain_grace_seconds")
            pre_stop = prestop_seconds(pod.server)
            grace = pod.spec.get("terminationGracePeriodSeconds", 30)
            self.assertGreater(pre_stop, 0, f"{root}: no preStop delay: the pod would stop "
                               f"accepting before the endpoints and DNS forget it")
            needed = pre_stop + drain + SERVER_WIND_DOWN_S
            self.assertGreater(grace, needed,
                               f"{root}: terminationGracePeriodSeconds {grace} <= preStop "
                               f"{pre_stop} + drain_grace_seconds {drain} + the server's "
                               f"wind-down {SERVER_WIND_DOWN_S} = {needed}: SIGKILL mid-drain")

    def test_containers_run_restricted(self):
        for root, objects, pod in self.each_workload():
            pod_sc = pod.spec.get("securityContext") or {}
            self.assertIs(pod.spec.get("automountServiceAccountToken"), False,
                          f"{root}: the server needs no API token")
            # A Service named cube3d-... would inject CUBE3D_..._* variables next to the
            # server's own CUBE3D_* settings.
            self.assertIs(pod.spec.get("enableServiceLinks"), False, f"{root}: service links")
            self.assertFalse(pod.spec.get("hostNetwork") or pod.spec.get("hostPID")
                             or pod.spec.get("hostIPC"))
            volumes = {v["name"]: v for v in pod.spec.get("volumes") or []}
            for c in pod.spec.get("containers", []) + pod.spec.get("initContainers", []):
                where = f"{root}: {pod.where}: container {c['name']}"
                sc = c.get("securityContext") or {}
                merged = {**pod_sc, **sc}
                self.assertIs(merged.get("runAsNonRoot"), True, f"{where}: runAsNonRoot")
                self.assertEqual(merged.get("runAsUser"), IMAGE_UID, f"{where}: runAsUser")
                self.assertIs(sc.get("allowPrivilegeEscalation"), False, where)
                self.assertIs(sc.get("readOnlyRootFilesystem"), True, where)
                self.assertFalse(sc.get("privileged"), where)
                self.assertEqual((sc.get("capabilities") or {}).get("drop"), ["ALL"], where)
                self.assertFalse((sc.get("capabilities") or {}).get("add"), where)
                self.assertEqual((merged.get("seccompProfile") or {}).get("type"),
                                 "RuntimeDefault", where)
                # A read-only root needs somewhere to write: /tmp on an emptyDir.
                tmp = [m for m in c.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
                self.assertTrue(tmp and "emptyDir" in volumes[tmp[0]["name"]],
                                f"{where}: /tmp is not a writable emptyDir")
                # Nothing else writable but what the container writes (a Job's output): the
                # configs, prompts and weights are mounted read-only.
                for m in c.get("volumeMounts", []):
                    volume = volumes.get(m["name"]) or {}
                    if "configMap" in volume or "secret" in volume:
                        self.assertIs(m.get("readOnly"), True,
                                      f"{where}: {m['mountPath']} (a ConfigMap) is not read-only")
                    if "persistentVolumeClaim" in volume and not m.get("readOnly"):
                        self.assertIn(m["mountPath"], writable_paths(c, pod),
                                      f"{where}: claim {m['mountPath']} is writable but the "
                                      f"container writes nothing there: mount it read-only")
                resources = c.get("resources") or {}
                for need in ("cpu", "memory"):
                    self.assertIn(need, resources.get("requests", {}), f"{where}: requests")
                self.assertIn("memory", resources.get("limits", {}), f"{where}: memory limit")

    # -- Services, PDB, HPA, ServiceMonitor ---------------------------------------------------

    def deployment_pod(self, root, objects):
        deployments = [p for p in pods(objects) if p.owner["kind"] == "Deployment"]
        self.assertEqual(len(deployments), 1, f"{root}: one Deployment")
        return deployments[0]

    def test_services_reach_the_pods(self):
        for root, objects in self.each_root():
            # The server's Services; a backing store's (examples/redis: its StatefulSet's) are
            # checked by that store's own test.
            services = [s for s in of_kind(objects, "Service") if not stateful_set_of(objects, s)]
            if not of_kind(objects, "Deployment"):
                self.assertFalse(services, f"{root}: Services without a Deployment")
                continue
            pod = self.deployment_pod(root, objects)
            config = server_config(objects, pod)
            _, grpc_port = split_address(config_value(config, "listen"))
            headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
            cluster_ip = [s for s in services if s["spec"].get("clusterIP") != "None"]
            self.assertEqual(len(headless), 1, f"{root}: one headless Service (client-side LB)")
            self.assertEqual(len(cluster_ip), 1, f"{root}: one ClusterIP Service")
            self.assertEqual(cluster_ip[0]["spec"].get("type", "ClusterIP"), "ClusterIP")
            self.assertEqual({p["name"] for p in cluster_ip[0]["spec"]["ports"]},
                             {"grpc", "http", "metrics"}, f"{root}: the ClusterIP Service's ports")
            self.assertFalse(headless[0]["spec"].get("publishNotReadyAddresses"),
                             f"{root}: the headless Service must hand out ready pods only")
            for svc in services:
                where = f"{root}: {name_of(svc)}"
                self.assertTrue(selector_matches(svc["spec"].get("selector"), pod.labels),
                                f"{where}: selector {svc['spec'].get('selector')} does not "
                                f"match the pod labels {pod.labels}")
                for port in svc["spec"]["ports"]:
                    target = pod.resolve_port(port.get("targetPort", port["port"]))
                    self.assertIsNotNone(target, f"{where}: port {port['name']} targets "
                                         f"{port.get('targetPort')}, not a container port")
                    if target == grpc_port:
                        self.assertEqual(port.get("appProtocol"), "grpc",
                                         f"{where}: the gRPC port needs appProtocol grpc")
                        self.assertEqual(port["name"], "grpc", where)
                self.assertIn("grpc", {p["name"] for p in svc["spec"]["ports"]}, where)

    def test_redis_example_wiring(self):
        """examples/redis: the servers use the Redis rendered beside them (jobs.store redis,
        cache.redis, redis.url naming its Service and port), and that Redis is a pinned image
        that runs restricted, bounds its memory with volatile-lru and is reachable from the
        server's pods only."""
        root = "examples/redis"
        self.assertIn(root, RENDERED)
        objects = RENDERED[root]
        pod = self.deployment_pod(root, objects)
        config = server_config(objects, pod)
        self.assertEqual((config.get("jobs") or {}).get("store"), "redis")
        self.assertIs((config.get("cache") or {}).get("redis"), True)
        url = (config.get("redis") or {}).get("url", "")
        m = re.fullmatch(r"redis://([a-z0-9.-]+):(\d+)", url)
        self.assertTrue(m, f"{root}: redis.url {url!r}")
        host, port = m.group(1), int(m.group(2))
        services = {s["metadata"]["name"]: s for s in of_kind(objects, "Service")}
        self.assertIn(host.split(".")[0], services, f"{root}: redis.url names no Service")
        service = services[host.split(".")[0]]
        sts = stateful_set_of(objects, service)
        self.assertIsNotNone(sts, f"{root}: {name_of(service)} selects no Redis")
        self.assertIn(port, [p["port"] for p in service["spec"]["ports"]])
        spec = sts["spec"]["template"]["spec"]
        (redis,) = spec["containers"]
        self.assertRegex(redis["image"], r"^redis:\d+\.\d+\.\d+-[a-z]+$",
                         f"{root}: the Redis image must be pinned to a full version")
        self.assertGreaterEqual(int(redis["image"].split(":")[1].split(".")[0]), 7)
        command = redis.get("command", []) + redis.get("args", [])
        self.assertEqual(flag_value(command, "--maxmemory-policy"), "volatile-lru", command)
        self.assertIsNotNone(flag_value(command, "--maxmemory"), command)
        # A restart loses no job: an append-only file, synced at each write, on a volume claim
        # of the StatefulSet's (not an emptyDir, which a rescheduled pod loses).
        self.assertEqual(flag_value(command, "--appendonly"), "yes", command)
        self.assertEqual(flag_value(command, "--appendfsync"), "always", command)
        data_dir = flag_value(command, "--dir")
        mounts = {m["mountPath"]: m["name"] for m in redis.get("volumeMounts", [])}
        self.assertIn(data_dir, mounts, f"{root}: the append-only file's --dir is not a volume")
        claims = [c["metadata"]["name"] for c in sts["spec"].get("volumeClaimTemplates", [])]
        self.assertIn(mounts[data_dir], claims,
                      f"{root}: the append-only file is not on a persistent volume claim")
        pod_security = spec.get("securityContext") or {}
        container_security = redis.get("securityContext") or {}
        self.assertTrue(pod_security.get("runAsNonRoot"))
        self.assertEqual((pod_security.get("seccompProfile") or {}).get("type"), "RuntimeDefault")
        self.assertIs(container_security.get("allowPrivilegeEscalation"), False)
        self.assertIs(container_security.get("readOnlyRootFilesystem"), True)
        self.assertEqual((container_security.get("capabilities") or {}).get("drop"), ["ALL"])
        policies = [n for n in of_kind(objects, "NetworkPolicy")
                    if label_selector_matches(n["spec"]["podSelector"],
                                              sts["spec"]["template"]["metadata"]["labels"])]
        self.assertEqual(len(policies), 1, f"{root}: one NetworkPolicy guards the Redis")
        sources = [peer for rule in policies[0]["spec"].get("ingress", [])
                   for peer in rule.get("from", [])]
        self.assertTrue(sources)
        for peer in sources:
            self.assertTrue(label_selector_matches(peer.get("podSelector") or {}, pod.labels),
                            f"{root}: the Redis admits pods other than the server's: {peer}")

    def test_images_build_without_test_hooks(self):
        """The shipped images' cube3d-server ignores CUBE3D_FAULT_INJECTION: both Dockerfiles
        configure with -DCUBE3D_TEST_HOOKS=OFF (the option CMakeLists.txt gives the hooks)."""
        with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
            self.assertIn("option(CUBE3D_TEST_HOOKS", f.read())
        for dockerfile in IMAGE_DOCKERFILES:
            with open(os.path.join(SOURCE, "docker", dockerfile)) as f:
                configure = [line for line in f.read().split("\n") if "cmake -S" in line]
            self.assertTrue(configure, f"docker/{dockerfile}: no cmake configure line")
            for line in configure:
                self.assertIn("-DCUBE3D_TEST_HOOKS=OFF", line,
                              f"docker/{dockerfile} builds cube3d-server with its test hooks")

    def test_pdb_selects_the_pods(self):
        for root, objects in self.each_deployment_root():
            pdbs = of_kind(objects, "PodDisruptionBudget")
            pod = self.deployment_pod(root, objects)
            self.assertEqual(len(pdbs), 1, f"{root}: one PodDisruptionBudget")
            pdb = pdbs[0]["spec"]
            self.assertTrue(label_selector_matches(pdb["selector"], pod.labels),
                            f"{root}: the PDB's selector misses the pods")
            max_unavailable = pdb.get("maxUnavailable")
            self.assertTrue(max_unavailable is not None or "minAvailable" in pdb, root)
            for hpa in of_kind(objects, "HorizontalPodAutoscaler"):
                if isinstance(max_unavailable, int):
                    self.assertGreaterEqual(hpa["spec"].get("minReplicas", 1) - max_unavailable,
                                            1, f"{root}: a node drain may take every pod")

    def test_hpa(self):
        exported = exported_metric_names()
        for root, objects in self.each_root():
            hpas = of_kind(objects, "HorizontalPodAutoscaler")
            if not of_kind(objects, "Deployment"):
                self.assertFalse(hpas, root)
                continue
            self.assertEqual(len(hpas), 1, f"{root}: one HPA")
            hpa = hpas[0]
            pod = self.deployment_pod(root, objects)
            deployment = pod.owner
            ref = hpa["spec"]["scaleTargetRef"]
            self.assertEqual((ref.get("apiVersion"), ref["kind"], ref["name"]),
                             ("apps/v1", "Deployment", deployment["metadata"]["name"]),
                             f"{root}: the HPA scales something else")
            self.assertFalse("replicas" in deployment["spec"],
                             f"{root}: the Deployment sets replicas: every apply would undo the "
                             f"HPA's count")
            spec = hpa["spec"]
            self.assertGreaterEqual(spec.get("minReplicas", 1), 2, f"{root}: minReplicas")
            self.assertGreaterEqual(spec["maxReplicas"], spec.get("minReplicas", 1), root)
            metrics = spec.get("metrics") or []
            self.assertTrue(metrics, f"{root}: the HPA has no metrics")
            slots = max(batch_buckets(server_config(objects, pod)))
            for m in metrics:
                self.assertEqual(m["type"], "Pods", f"{root}: per-pod custom metrics expected")
                name = m["pods"]["metric"]["name"]
                self.assertIn(name, exported, f"{root}: the HPA scales on {name}, which the "
                              f"server does not export ({sorted(exported)})")
                self.assertEqual(EXPORTED_METRICS[name], "gauge",
                                 f"{root}: {name} is not a per-pod level (a gauge)")
                target = m["pods"]["target"]
                self.assertEqual(target["type"], "AverageValue", root)
                value = quantity(target["averageValue"])
                self.assertGreater(value, 0, root)
                if name == "cube3d_requests_running":
                    self.assertLess(value, slots,
                                    f"{root}: target {value} running per pod is not below the "
                                    f"{slots} decode slots (largest batch bucket): pods fill "
                                    f"up before the HPA adds any")

    def test_servicemonitor_scrapes_the_metrics_port(self):
        for root, objects in self.each_deployment_root():
            monitors = of_kind(objects, "ServiceMonitor")
            self.assertEqual(len(monitors), 1, f"{root}: one ServiceMonitor")
            sm = monitors[0]
            pod = self.deployment_pod(root, objects)
            _, metrics_port = split_address(
                config_value(server_config(objects, pod), "metrics_listen"))
            selected = [s for s in of_kind(objects, "Service")
                        if label_selector_matches(sm["spec"]["selector"],
                                                  s["metadata"].get("labels") or {})]
            self.assertEqual(len(selected), 1,
                             f"{root}: the ServiceMonitor selects {[name_of(s) for s in selected]};"
                             f" exactly one Service, or every pod is scraped once per Service")
            svc = selected[0]
            ns = sm["spec"].get("namespaceSelector") or {}
            self.assertTrue(not ns or ns.get("any") or
                            svc["metadata"].get("namespace") in ns.get("matchNames", []), root)
            for ep in sm["spec"]["endpoints"]:
                ports = {p["name"]: p for p in svc["spec"]["ports"]}
                self.assertIn(ep["port"], ports, f"{root}: the ServiceMonitor's port "
                              f"{ep['port']} is not a port of {name_of(svc)}")
                target = pod.resolve_port(ports[ep["port"]].get("targetPort"))
                self.assertEqual(target, metrics_port,
                                 f"{root}: the ServiceMonitor scrapes port {target}, "
                                 f"metrics_listen is {metrics_port}")

    # -- overlays -----------------------------------------------------------------------------

    def test_cuda_overlay_runs_on_a_gpu(self):
        budgets = {}
        for root, pod, config in self.each_pod_config():
            resources = pod.server.get("resources") or {}
            gpus = {k: str(resources.get(k, {}).get("nvidia.com/gpu", "0"))
                    for k in ("requests", "limits")}
            device = str(config_value(config, "device"))
            budgets[root] = startup_budget(pod.server["startupProbe"])
            if is_cuda_root(root):
                self.assertEqual(gpus, {"requests": "1", "limits": "1"},
                                 f"{root}: one nvidia.com/gpu, requested and limited")
                self.assertTrue(device == "cuda" or device.startswith("cuda:"),
                                f"{root}: device {device}")
                self.assertEqual(config_value(config, "dtype"), "bfloat16", root)
                tolerations = pod.spec.get("tolerations") or []
                self.assertTrue(any(t.get("key") == "nvidia.com/gpu" for t in tolerations),
                                f"{root}: no toleration for GPU nodes' nvidia.com/gpu taint")
                self.assertTrue(pod.spec.get("nodeSelector") or pod.spec.get("affinity"),
                                f"{root}: nothing steers the pods to GPU nodes")
            else:
                self.assertEqual(gpus, {"requests": "0", "limits": "0"}, root)
                self.assertEqual(device, "cpu",
                                 f"{root}: device {device} without a GPU in the pod")
                self.assertEqual(config_value(config, "dtype"), "float32",
                                 f"{root}: the CPU path is built and tested for float32")
        self.assertGreater(budgets["overlays/cuda"], budgets["overlays/cpu"],
                           "the CUDA overlay's start-up (loading + CUDA graph capture) needs a "
                           "bigger budget than the CPU one")

    def test_spread_and_namespace(self):
        for root, objects in self.each_deployment_root():
            pod = self.deployment_pod(root, objects)
            spread = pod.spec.get("topologySpreadConstraints") or []
            anti = ((pod.spec.get("affinity") or {}).get("podAntiAffinity") or {})
            self.assertTrue(spread or anti, f"{root}: replicas may all land on one node")
            for c in spread:
                self.assertTrue(label_selector_matches(c["labelSelector"], pod.labels),
                                f"{root}: a spread constraint selects other pods")
            namespaces = {o["metadata"].get("namespace") for o in objects
                          if o["kind"] not in ("Namespace",)}
            if root.startswith("overlays/"):
                self.assertEqual(len(namespaces), 1, f"{root}: objects in {namespaces}")
                self.assertIn(namespaces.pop(),
                              {n["metadata"]["name"] for n in of_kind(objects, "Namespace")},
                              f"{root}: the namespace is not created")

    # -- the real weights ---------------------------------------------------------------------

    def test_no_copies_of_scripts_or_models(self):
        """One copy of each script and model YAML: no file under deploy/k8s, and no key of a
        ConfigMap any kustomization renders, is byte for byte a file of scripts/ or models/ (the
        manifests take those from the image: test_fetch_job,
        test_real_model_servers_read_the_release_config_from_the_image)."""
        known = original_contents()
        self.assertTrue(any(p.startswith("scripts/") for p in known.values()))
        self.assertTrue(any(p.startswith("models/") for p in known.values()))
        for folder, _, files in os.walk(K8S_DIR):
            for name in files:
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    content = f.read()
                if content in known:  # (assertNotIn would print the whole file)
                    self.fail(f"{os.path.relpath(path, SOURCE)} is a copy of {known[content]}: "
                              f"take the file from the image (it installs "
                              f"{', '.join(f + '/' for f in ORIGINAL_FOLDERS)} under "
                              f"{IMAGE_PREFIX}/share/cube3d/), not from a second copy")
        for root, objects in self.each_root():
            for cm in of_kind(objects, "ConfigMap"):
                for key, text in (cm.get("data") or {}).items():
                    if text.encode() in known:
                        self.fail(f"{root}: ConfigMap {cm['metadata']['name']}'s {key} is a copy "
                                  f"of {known[text.encode()]}")

    def test_image_installs_the_real_model_files(self):
        """The files the manifests take from the image are installed there from the checkout:
        both Dockerfiles install the build under IMAGE_PREFIX, and the install rules put models/
        (every model and server YAML) and the fetch tool in share/cube3d/."""
        for dockerfile in IMAGE_DOCKERFILES:
            with open(os.path.join(SOURCE, "docker", dockerfile)) as f:
                prefix = r"cmake --install \S+ --prefix " + re.escape(IMAGE_PREFIX) + r"\b"
                self.assertRegex(f.read(), prefix,
                                 f"docker/{dockerfile} does not install into {IMAGE_PREFIX}")
        installed = image_files()
        for name in os.listdir(os.path.join(SOURCE, "models")):
            if name.endswith(".yaml"):
                self.assertEqual(installed.get(f"{IMAGE_MODELS_DIR}/{name}"),
                                 os.path.join(SOURCE, "models", name),
                                 f"models/{name} is not installed in {IMAGE_MODELS_DIR}")
        self.assertIn(IMAGE_DEMO_MODEL, installed)
        for name in ("fetch_models.py", "make_random_checkpoint.py"):
            self.assertEqual(installed.get(f"{IMAGE_PREFIX}/share/cube3d/scripts/{name}"),
                             os.path.join(SOURCE, "scripts", name),
                             f"scripts/{name} is not installed beside {IMAGE_MODELS_DIR} "
                             f"(fetch_models.py reads ../models/ of its own folder)")

    def test_real_model_servers_read_the_release_config_from_the_image(self):
        """A real-model overlay (overlays/*-vX.Y) serves its release's server YAML as the image
        installs it (models/cube3d-vX.Y-server.yaml, unchanged: the pod's flags go on top), with
        nothing mounted over it and no server ConfigMap left unread beside it."""
        installed = image_files()
        seen = set()
        for root, objects in self.each_root():
            release = re.search(r"-(v\d+\.\d+)$", root)
            if not (release and root.startswith("overlays/")):
                continue
            seen.add(root)
            name = f"cube3d-{release.group(1)}-server.yaml"
            original = os.path.join(SOURCE, "models", name)
            self.assertTrue(os.path.isfile(original), f"{root}: no models/{name}")
            mounted = set()
            for pod in pods(objects):
                path, cm_name, key, text = server_config_file(objects, pod)
                self.assertEqual(path, f"{IMAGE_MODELS_DIR}/{name}",
                                 f"{root}: {pod.where} reads {config_source(cm_name, key)}, not "
                                 f"the image's {name}")
                self.assertIsNone(cm_name, f"{root}: {path} is mounted over")
                self.assertEqual(installed.get(path), original,
                                 f"{root}: the image does not install models/{name} at {path}")
                mounted |= {v["configMap"]["name"] for v in pod.spec.get("volumes") or []
                            if "configMap" in v}
            for cm in of_kind(objects, "ConfigMap"):
                self.assertIn(cm["metadata"]["name"], mounted,
                              f"{root}: ConfigMap {cm['metadata']['name']} is rendered but no pod "
                              f"reads it (the overlay's server config, which the image's file "
                              f"replaces?)")
        self.assertTrue({"overlays/cuda-v0.5", "overlays/cpu-v0.5"} <= seen, seen)

    def assert_reads_fetched_weights(self, root, pod, container, files, model_config):
        """`files` ({server key: path in the container}) are where a fetch Job puts them: on a
        claim mounted read-only, in cube3d-<version>/ of the model YAML's release."""
        where = f"{root}: {pod.where}"
        release = re.fullmatch(r"cube3d-(v\d+\.\d+)\.yaml", os.path.basename(model_config or ""))
        self.assertTrue(release, f"{where}: model config {model_config} is not a release's "
                        f"cube3d-vX.Y.yaml")
        self.assertTrue(model_config.startswith(IMAGE_MODELS_DIR + "/") and os.path.exists(
            os.path.join(SOURCE, "models", os.path.basename(model_config))),
            f"{where}: {model_config} is not a model YAML the image carries")
        version = release.group(1)
        writers = {}
        for f_root, f_pod, f_container, f_version, f_dir in fetch_jobs():
            found = claim_path(f_pod, f_container, f_dir or "")
            if found:
                writers.setdefault(found[0], set()).add(found[1].split("/")[0])
        self.assertTrue(writers, "no Job runs fetch_models.py into a claim (deploy/k8s/weights)")
        for key, path in files.items():
            found = claim_path(pod, container, path)
            self.assertIsNotNone(found, f"{where}: {key} {path} is not on a claim")
            claim, rel, mount, volume = found
            self.assertIs(mount.get("readOnly"), True, f"{where}: the weights' mount {mount['name']}"
                          f" is writable: mount it read-only")
            self.assertIs(volume["persistentVolumeClaim"].get("readOnly"), True,
                          f"{where}: claim {claim}: set persistentVolumeClaim.readOnly")
            self.assertIn(claim, writers, f"{where}: no fetch Job fills claim {claim}")
            self.assertEqual(rel, f"cube3d-{version}/{FETCHED_FILES[key]}",
                             f"{where}: {key} {path} is not where fetch_models.py puts "
                             f"{version}'s {FETCHED_FILES[key]} "
                             f"(<claim>/cube3d-{version}/{FETCHED_FILES[key]})")
            modes = pvc_access_modes(claim, pod.owner["metadata"].get("namespace"))
            self.assertTrue(set(modes or []) & {"ReadOnlyMany", "ReadWriteMany"},
                            f"{where}: claim {claim} ({modes}) cannot be mounted by pods on "
                            f"several nodes")

    def test_real_model_servers_read_the_fetched_weights(self):
        seen = set()
        for root, pod, config in self.each_pod_config():
            model = config.get("model") or {}
            if model.get("config") == IMAGE_DEMO_MODEL:
                continue
            seen.add(root)
            files = {k: model.get(k) for k in FETCHED_FILES}
            self.assertTrue(all(files.values()), f"{root}: the real model needs {sorted(files)}")
            self.assert_reads_fetched_weights(root, pod, pod.server, files, model.get("config"))
            # A model on a network volume: the start-up budget of the demo's GPU overlay at least.
            self.assertGreaterEqual(startup_budget(pod.server["startupProbe"]), 1200,
                                    f"{root}: too short a start-up for the real weights")
        self.assertTrue({"overlays/cuda-v0.5", "overlays/cpu-v0.5"} <= seen, seen)

    def test_fetch_job(self):
        jobs = fetch_jobs()
        self.assertTrue(jobs, "no Job runs fetch_models.py")
        for root, pod, c, version, directory in jobs:
            where = f"{root}: {pod.where}"
            self.assertIn(version, ("v0.1", "v0.5"), f"{where}: version {version}")
            self.assertEqual(os.path.basename(directory or ""), f"cube3d-{version}",
                             f"{where}: DIR {directory}: the servers read "
                             f"<claim>/cube3d-{version}/")
            found = claim_path(pod, c, directory)
            self.assertIsNotNone(found, f"{where}: DIR {directory} is not on a claim")
            self.assertFalse(found[2].get("readOnly"), f"{where}: the claim is read-only")
            # The tool and what it reads beside itself: <root>/scripts/, <root>/models/, on a
            # volume that initContainers fill from the server image, at paths it installs.
            script = fetch_script_path(c)
            mount, volume = pod.mount_of(c, script)
            self.assertTrue(volume is not None and "emptyDir" in volume,
                            f"{where}: {script} is not on an emptyDir (filled from the server "
                            f"image by an initContainer)")
            self.assertIs(mount.get("readOnly"), True, f"{where}: mount the tool read-only")
            tool_root = os.path.dirname(os.path.dirname(os.path.relpath(script,
                                                                        mount["mountPath"])))
            installed = image_files()
            base_image = self.deployment_pod("base", RENDERED["base"]).server["image"]
            copied = {}  # path in the volume -> path in the image
            fillers = [ic for ic in pod.spec.get("initContainers") or []
                       if any(m["name"] == volume["name"] for m in ic.get("volumeMounts") or [])]
            self.assertTrue(fillers, f"{where}: no initContainer fills volume {volume['name']}")
            for ic in fillers:
                repo, _, tag = ic["image"].rpartition(":")
                self.assertEqual(repo, IMAGE_REPOSITORY,
                                 f"{where}: initContainer {ic['name']} runs {ic['image']}, not "
                                 f"the server image")
                self.assertEqual(tag, image_tag(base_image),
                                 f"{where}: initContainer {ic['name']} runs {ic['image']}, the "
                                 f"base's Deployment {base_image}: the tool and YAMLs are the "
                                 f"release's (set the same tag in both images: entries)")
                copy = copy_command(ic)
                self.assertIsNotNone(copy, f"{where}: initContainer {ic['name']} runs no "
                                     f"`cp -R SRC... DEST`")
                sources, destination = copy
                ic_mount = next(m for m in ic["volumeMounts"] if m["name"] == volume["name"])
                self.assertFalse(ic_mount.get("readOnly"), where)
                into = os.path.relpath(destination, ic_mount["mountPath"])
                self.assertFalse(into.startswith(".."), f"{where}: cp writes to {destination}, "
                                 f"not into volume {volume['name']}")
                self.assertTrue(len(sources) > 1 or into == ".",
                                f"{where}: cp {sources} {destination}: copy into an existing "
                                f"folder (the volume's root), or the layout depends on it")
                for src in sources:
                    src = src.rstrip("/")
                    self.assertTrue(any(p.startswith(src + "/") for p in installed),
                                    f"{where}: initContainer {ic['name']} copies {src}, which the "
                                    f"image's install rules do not fill")
                    for image_path in installed:
                        if image_path.startswith(src + "/"):
                            copied[os.path.normpath(os.path.join(
                                into, os.path.basename(src),
                                os.path.relpath(image_path, src)))] = image_path
            for needed in ("scripts/fetch_models.py", "scripts/make_random_checkpoint.py",
                           f"models/cube3d-{version}.yaml", f"models/cube3d-{version}-server.yaml"):
                at = os.path.normpath(os.path.join(tool_root, needed))
                self.assertIn(at, copied, f"{where}: fetch_models.py needs {needed} beside it "
                              f"({at} of volume {volume['name']}); no initContainer copies it "
                              f"there from a file the image installs")
                self.assertEqual(installed[copied[at]], os.path.join(SOURCE, needed),
                                 f"{where}: {at} is the image's {copied[at]}, not {needed}")
            # Python and its packages, pinned.
            image = c["image"]
            self.assertTrue(any(p.match(image) for p in THIRD_PARTY_IMAGES),
                            f"{where}: {image} is not a pinned Python image")
            script_text = " ".join(c.get("command") or [])
            install = re.search(r"pip install(.*?)(\|\||&&|;|\n\s*\n|$)", script_text, re.S)
            self.assertTrue(install, f"{where}: no pip install of the tool's packages")
            packages = [w for w in install.group(1).replace("\\\n", " ").split()
                        if not w.startswith("-") and w != "/tmp/pydeps"]
            wanted = {"huggingface_hub", "numpy", "pyyaml"}
            names = {re.split(r"[=<>!~]", w)[0].lower().replace("-", "_") for w in packages}
            self.assertLessEqual(wanted, {n.replace("pyyaml", "pyyaml") for n in names},
                                 f"{where}: installs {packages}, needs {sorted(wanted)}")
            for w in packages:
                self.assertRegex(w, r"^[A-Za-z0-9_.-]+==\d+(\.\d+)*$", f"{where}: {w} is not "
                                 f"pinned (name==version)")
            # Hugging Face: the token from an optional Secret, the endpoint overridable.
            token = pod.env("HF_TOKEN", c)
            self.assertTrue(token and "secretKeyRef" in (token.get("valueFrom") or {}),
                            f"{where}: HF_TOKEN must come from a Secret")
            self.assertIs(token["valueFrom"]["secretKeyRef"].get("optional"), True,
                          f"{where}: public repositories need no token: make the Secret optional")
            self.assertIsNotNone(pod.env("HF_ENDPOINT", c), f"{where}: no HF_ENDPOINT")
            # A bad file fails the Job; the network is retried.
            rules = pod.owner["spec"].get("podFailurePolicy", {}).get("rules", [])
            self.assertTrue(any(r["action"] == "FailJob" and 1 in r.get("onExitCodes", {})
                                .get("values", []) for r in rules),
                            f"{where}: exit 1 (a file failed its check) must not be retried")

    # -- Jobs ---------------------------------------------------------------------------------

    def test_jobs(self):
        jobs = [(root, objects, pod) for root, objects, pod in self.each_workload()
                if pod.owner["kind"] == "Job"]
        self.assertTrue(jobs)
        for root, objects, pod in jobs:
            where = f"{root}: {pod.where}"
            spec = pod.owner["spec"]
            self.assertIn(pod.spec.get("restartPolicy"), ("Never", "OnFailure"), where)
            self.assertIsInstance(spec.get("ttlSecondsAfterFinished"), int,
                                  f"{where}: finished Jobs and their pods pile up without a TTL")
            self.assertIsInstance(spec.get("activeDeadlineSeconds"), int,
                                  f"{where}: no bound on the run")
            policy = spec.get("podFailurePolicy")
            self.assertTrue(policy, f"{where}: no podFailurePolicy")
            self.assertEqual(pod.spec.get("restartPolicy"), "Never",
                             f"{where}: a podFailurePolicy needs restartPolicy Never")
            names = {c["name"] for c in pod.spec["containers"]}
            for rule in policy["rules"]:
                codes = rule.get("onExitCodes")
                if codes:
                    self.assertIn(codes.get("containerName"), names, where)
                    self.assertNotIn(0, codes["values"], where)
            self.assertTrue(any(r["action"] == "Ignore" and any(
                c["type"] == "DisruptionTarget" and c.get("status") == "True"
                for c in r.get("onPodConditions", [])) for r in policy["rules"]),
                f"{where}: evictions and preemption should be retried without counting")
            self.assertFalse(any(r["action"] == "Ignore" and r.get("onExitCodes")
                                 for r in policy["rules"]),
                             f"{where}: ignoring an exit code retries it endlessly")

    def test_catalog_batch(self):
        batches = []
        for root, objects, pod in self.each_workload():
            for c in pod.spec["containers"]:
                args = generate_args(c)
                if args is not None and flag_value(args, "--prompts-file"):
                    batches.append((root, objects, pod, c, args))
        self.assertTrue({"examples/batch/demo", "examples/batch/cuda-v0.5"}
                        <= {b[0] for b in batches}, "no catalog batch Job")
        for dockerfile in ("Dockerfile", "Dockerfile.cuda"):
            with open(os.path.join(SOURCE, "docker", dockerfile)) as f:
                self.assertIn("cube3d-generate", f.read(),
                              f"docker/{dockerfile} does not build cube3d-generate")
        for root, objects, pod, c, args in batches:
            where = f"{root}: {pod.where}"
            self.assertEqual(pod.owner["kind"], "Job", where)
            spec = pod.owner["spec"]
            self.assertEqual(spec.get("completionMode"), "Indexed", f"{where}: the pods find "
                             f"their shard in JOB_COMPLETION_INDEX: an Indexed Job")
            completions = spec.get("completions")
            self.assertIsInstance(completions, int, where)
            self.assertGreaterEqual(completions, 1, where)
            parallelism = spec.get("parallelism", 1)
            self.assertTrue(1 <= parallelism <= completions,
                            f"{where}: parallelism {parallelism}, completions {completions}")
            # N for every pod: the shard count is the number of indexes, or lines are lost (N
            # below completions: indexes >= N fail) or never generated (N above).
            count = pod.env("CUBE3D_SHARD_COUNT", c)
            shard_flag = flag_value(args, "--shard-count")
            self.assertIsNone(flag_value(args, "--shard"), f"{where}: --shard fixes one shard "
                              f"for every pod")
            if shard_flag is not None:
                self.assertEqual(shard_flag, str(completions), f"{where}: --shard-count")
            else:
                self.assertTrue(count and "value" in count,
                                f"{where}: CUBE3D_SHARD_COUNT must be a literal")
                self.assertEqual(count["value"], str(completions),
                                 f"{where}: CUBE3D_SHARD_COUNT {count['value']} is not "
                                 f"completions {completions}")
            self.assertIsNone(pod.env("JOB_COMPLETION_INDEX", c),
                              f"{where}: Kubernetes sets JOB_COMPLETION_INDEX")
            self.assertIsInstance(spec.get("backoffLimitPerIndex"), int,
                                  f"{where}: retries per index (a crash of one shard must not "
                                  f"use up the others' retries)")
            rules = spec["podFailurePolicy"]["rules"]

            def action_for(code):
                for r in rules:
                    e = r.get("onExitCodes")
                    if e and e.get("containerName", c["name"]) == c["name"]:
                        if (code in e["values"]) == (e["operator"] == "In"):
                            return r["action"]
                return "Count"

            self.assertEqual(action_for(3), "FailIndex", f"{where}: exit 3 (lines that failed, "
                             f"in the manifest) would fail the same way again")
            self.assertEqual(action_for(2), "FailJob", f"{where}: exit 2 (usage) fails every pod")
            for crash in (1, 134, 137, 139):
                self.assertEqual(action_for(crash), "Count", f"{where}: exit {crash} (a crash) "
                                 f"should be retried")
            # Prompts from a ConfigMap; results on a claim every pod can write.
            prompts = flag_value(args, "--prompts-file")
            mount, volume = pod.mount_of(c, prompts)
            self.assertTrue(volume is not None and "configMap" in volume,
                            f"{where}: {prompts} is not on a ConfigMap")
            key = os.path.relpath(prompts, mount["mountPath"])
            self.assertIn(key, config_map_data(objects, volume["configMap"]["name"]), where)
            out_dir = flag_value(args, "--out-dir")
            self.assertTrue(out_dir, f"{where}: no --out-dir")
            found = claim_path(pod, c, out_dir)
            self.assertIsNotNone(found, f"{where}: --out-dir {out_dir} is not on a claim")
            self.assertFalse(found[2].get("readOnly"), where)
            modes = pvc_access_modes(found[0], pod.owner["metadata"].get("namespace"))
            if parallelism > 1:
                self.assertIn("ReadWriteMany", modes or [], f"{where}: {parallelism} pods at "
                              f"once write claim {found[0]} ({modes})")
            # The model: the image's demo, or a release's weights as the servers read them.
            model_config = flag_value(args, "--model-config")
            self.assertTrue(model_config and model_config.startswith(IMAGE_MODELS_DIR + "/"),
                            f"{where}: --model-config {model_config}")
            files = {key: flag_value(args, flag) for flag, key in GENERATE_WEIGHT_FLAGS.items()
                     if flag_value(args, flag)}
            if model_config == IMAGE_DEMO_MODEL:
                self.assertFalse(files, f"{where}: the demo model has no weights to read")
            else:
                self.assertEqual(set(files), set(FETCHED_FILES), where)
                self.assert_reads_fetched_weights(root, pod, c, files, model_config)
            device = flag_value(args, "--device") or "cpu"
            dtype = flag_value(args, "--dtype") or "float32"
            gpus = str(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
            if is_cuda_root(root):
                self.assertEqual((device, dtype, gpus), ("cuda", "bfloat16", "1"), where)
                self.assertTrue(any(t.get("key") == "nvidia.com/gpu"
                                    for t in pod.spec.get("tolerations") or []), where)
            else:
                self.assertEqual((device, dtype, gpus), ("cpu", "float32", "0"), where)

    def test_ray_job(self):
        jobs = [(root, objects, job) for root, objects in RENDERED.items()
                for job in of_kind(objects, "RayJob")]
        self.assertIn("examples/ray", {j[0] for j in jobs}, "no RayJob (deploy/k8s/examples/ray)")
        setup_version, image_version = pinned_ray_version()
        self.assertTrue(setup_version, f"{SETUP_PYTHON} pins no RAY_VERSION")
        self.assertEqual(image_version, setup_version,
                         "docker/Dockerfile.ray's RAY_VERSION is not scripts/setup_python.sh's")
        for root, objects, job in jobs:
            where = f"{root}: {name_of(job)}"
            spec = job["spec"]
            cluster = spec.get("rayClusterSpec")
            self.assertTrue(cluster, f"{where}: a RayJob of its own cluster (rayClusterSpec), "
                            f"not a clusterSelector")
            self.assertEqual(cluster.get("rayVersion"), setup_version,
                             f"{where}: rayVersion is not the image's ray ({setup_version})")
            # The cluster goes with the job; the RayJob is bounded and cleaned up.
            self.assertIs(spec.get("shutdownAfterJobFinishes"), True, where)
            for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
                self.assertIsInstance(spec.get(key), int, f"{where}: {key}")
            self.assertLessEqual(spec["backoffLimit"], 3, f"{where}: retries of a whole run")
            self.assertIn(spec.get("submissionMode", "K8sJobMode"), ("K8sJobMode", "HTTPMode"),
                          where)
            args = ray_entrypoint_args(job)
            self.assertIsNotNone(args, f"{where}: the entrypoint does not run "
                                 f"{' '.join(RAY_ENTRYPOINT)}")
            # The image's server and config.
            self.assertEqual(flag_value(args, "--binary"), f"{IMAGE_PREFIX}/bin/cube3d-server",
                             f"{where}: --binary")
            config = flag_value(args, "--config")
            self.assertTrue(config == DEFAULT_CONFIG_PATH or config in image_files(),
                            f"{where}: --config {config} is not a file of the image")
            self.assertIsNone(flag_value(args, "--address"), f"{where}: the actors start "
                              f"their own servers here")
            pods_by_part = {p.part: p for p in pods([job], servers_only=False)}
            head = pods_by_part["head"]
            workers = [p for part, p in pods_by_part.items() if part.startswith("worker")]
            self.assertTrue(workers, f"{where}: no worker group")
            head_params = cluster["headGroupSpec"].get("rayStartParams") or {}
            self.assertEqual(str(head_params.get("num-cpus")), "0",
                             f"{where}: actors (and their servers) belong on the workers, not "
                             f"on the head beside the GCS and the driver")
            for pod in [head] + workers:
                names = [c["name"] for c in pod.spec["containers"]]
                self.assertEqual(names[0], "ray-head" if pod is head else "ray-worker",
                                 f"{where}: {pod.part}: Ray's container first")
            # The prompts: a ConfigMap's key, on the head where the driver reads them.
            prompts = flag_value(args, "--prompts")
            mount, volume = head.mount_of(head.spec["containers"][0], prompts)
            self.assertTrue(volume is not None and "configMap" in volume,
                            f"{where}: --prompts {prompts} is not on a ConfigMap in the head")
            self.assertTrue(mount.get("readOnly"), where)
            key = os.path.relpath(prompts, mount["mountPath"])
            self.assertIn(key, config_map_data(objects, volume["configMap"]["name"]), where)
            # The output: one ReadWriteMany claim at the same path, writable, in the head (the
            # manifest) and every worker (the meshes).
            out = flag_value(args, "--out")
            self.assertTrue(out, f"{where}: no --out")
            claims = set()
            for pod in [head] + workers:
                found = claim_path(pod, pod.spec["containers"][0], out)
                self.assertIsNotNone(found, f"{where}: {pod.part}: --out {out} is not on a claim")
                self.assertFalse(found[2].get("readOnly"), f"{where}: {pod.part}")
                claims.add(found[:2])
            self.assertEqual(len(claims), 1, f"{where}: the pods see --out on different claims "
                             f"or paths: {claims}")
            claim = claims.pop()[0]
            self.assertIn("ReadWriteMany", pvc_access_modes(
                claim, job["metadata"].get("namespace")) or [], f"{where}: claim {claim}")
            # The actor pool fits the workers: at most as many actors as their CPUs hold, each
            # with the GPU it asks for when the workers have GPUs.
            pool = [int(n) for n in (flag_value(args, "--concurrency") or "1").split(",")]
            low, high = pool[0], pool[-1]
            actor_cpus = float(flag_value(args, "--actor-cpus") or 1)
            slots_min = slots_max = 0
            for group, pod in zip(cluster["workerGroupSpecs"], workers):
                limits = (pod.spec["containers"][0].get("resources") or {}).get("limits") or {}
                cpus = quantity(str(limits.get("cpu", 0)))
                per_pod = int(cpus // actor_cpus)
                gpus = int(limits.get("nvidia.com/gpu", 0))
                if gpus:
                    per_pod = min(per_pod, gpus)
                slots_min += per_pod * int(group.get("minReplicas", group.get("replicas", 1)))
                slots_max += per_pod * int(group.get("maxReplicas", group.get("replicas", 1)))
                self.assertTrue(group.get("minReplicas", 0) <= group.get("replicas", 1)
                                <= group.get("maxReplicas", group.get("replicas", 1)),
                                f"{where}: {pod.part}: min <= replicas <= max")
            self.assertTrue(1 <= low <= high <= slots_max, f"{where}: --concurrency {low},{high} "
                            f"with {actor_cpus} CPUs an actor: the workers hold {slots_max}")
            self.assertLessEqual(low, slots_min, f"{where}: the pool's minimum needs more "
                                 f"workers than minReplicas start")

    # -- monitoring ---------------------------------------------------------------------------

    def adapter_rules(self):
        rules = []
        for root, objects in RENDERED.items():
            for cm in of_kind(objects, "ConfigMap"):
                for key, text in (cm.get("data") or {}).items():
                    doc = yaml.safe_load(text) if key.endswith((".yaml", ".yml")) else None
                    if isinstance(doc, dict) and "rules" in doc and isinstance(doc["rules"], list):
                        rules += doc["rules"]
        return rules

    def test_adapter_serves_the_hpa_metrics(self):
        rules = self.adapter_rules()
        self.assertTrue(rules, "no prometheus-adapter rules (deploy/k8s/monitoring)")
        for rule in rules:
            self.assertIn("<<.Series>>", rule["metricsQuery"])
            self.assertIn("<<.LabelMatchers>>", rule["metricsQuery"])
            self.assertIn("<<.GroupBy>>", rule["metricsQuery"])
            self.assertTrue(balanced(rule["metricsQuery"]), rule["metricsQuery"])
            for series in adapter_series(rule["seriesQuery"]):
                self.assertIn(series, exported_metric_names(),
                              f"the adapter serves {series}, which the server does not export")
        wanted = {name for objects in RENDERED.values() for name in hpa_metric_names(objects)}
        self.assertTrue(wanted)
        for name in wanted:
            with self.subTest(metric=name):
                serving = [r for r in rules if name in adapter_exposed(r, name)]
                self.assertTrue(serving, f"no prometheus-adapter rule serves the HPA's {name}")
                overrides = serving[0]["resources"]["overrides"]
                self.assertEqual(overrides.get("pod", {}).get("resource"), "pod",
                                 f"{name}: a Pods metric needs the pod label mapped to pods")
                self.assertEqual(overrides.get("namespace", {}).get("resource"), "namespace")

    def test_alerts(self):
        rules = [r for objects in RENDERED.values() for obj in of_kind(objects, "PrometheusRule")
                 for g in obj["spec"]["groups"] for r in g["rules"] if "alert" in r]
        self.assertTrue(rules, "no PrometheusRule alerts (deploy/k8s/monitoring)")
        exported = set().union(*(series_names(m) for m in exported_metric_names()))
        # The scraped job is the Service the ServiceMonitor selects; the Deployment's name.
        jobs, deployments = set(), set()
        for objects in RENDERED.values():
            for sm in of_kind(objects, "ServiceMonitor"):
                jobs |= {s["metadata"]["name"] for s in of_kind(objects, "Service")
                         if label_selector_matches(sm["spec"]["selector"],
                                                   s["metadata"].get("labels") or {})}
            deployments |= {d["metadata"]["name"] for d in of_kind(objects, "Deployment")}
        for rule in rules:
            with self.subTest(alert=rule["alert"]):
                expr = rule["expr"]
                for metric in set(re.findall(r"\bcube3d_[a-z0-9_]+", expr)):
                    self.assertIn(metric, exported, f"{rule['alert']}: {metric} is not a series "
                                  f"the server exports")
                for job in re.findall(r'\bjob\s*=\s*"([^"]*)"', expr):
                    self.assertIn(job, jobs, f"{rule['alert']}: job {job!r} is not scraped")
                for d in re.findall(r'\bdeployment\s*=\s*"([^"]*)"', expr):
                    self.assertIn(d, deployments, f"{rule['alert']}: no Deployment {d!r}")

        def find(pattern):
            return [r["alert"] for r in rules if re.search(pattern, r["expr"], re.S)]

        error_rate = find(r'cube3d_requests_total\{[^}]*code\s*=~\s*"[^"]*INTERNAL[^"]*".*/.*'
                          r'cube3d_requests_total')
        self.assertTrue(error_rate, "no error-rate alert (the share of cube3d_requests_total "
                                    "with server-side codes)")
        # Callers' mistakes must not page.
        for rule in rules:
            if rule["alert"] in error_rate:
                for code in ("INVALID_ARGUMENT", "UNAUTHENTICATED", "CANCELLED"):
                    self.assertNotIn(code, rule["expr"], rule["alert"])
        self.assertTrue(find(r"cube3d_queue_depth"), "no queue-depth alert")
        self.assertTrue(set(find(r"histogram_quantile\(\s*0\.95\s*,"))
                        & set(find(r"cube3d_time_to_first_token_seconds_bucket"))
                        & set(find(r"\bby\s*\([^)]*\ble\b")),
                        "no TTFT p95 alert (histogram_quantile(0.95, ...) over "
                        "cube3d_time_to_first_token_seconds_bucket, summed by le)")
        self.assertTrue(find(r"kube_deployment_status_replicas_(available|ready)\{[^}]*\}\)?\s*"
                             r"==\s*0"),
                        "no alert for a Deployment with no ready replica")


# ---------------------------------------------------------------------------------------------


def duration_s(text):
    value, unit = re.match(r"^(\d+)(ms|s|m)$", text).groups()
    return int(value) * {"ms": 0.001, "s": 1, "m": 60}[unit]


def balanced(expr):
    """Brackets balance outside string literals, and the quotes close."""
    pairs, stack, quote = {")": "(", "]": "[", "}": "{"}, [], None
    for ch in expr:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'`":
            quote = ch
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack and quote is None


def adapter_series(series_query):
    """The metric names a prometheus-adapter seriesQuery selects, when it names them."""
    m = re.match(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{|$)", series_query)
    if m:
        return {m.group(1)}
    m = re.search(r'__name__\s*=\s*"([^"]+)"', series_query)
    return {m.group(1)} if m else set()


def adapter_exposed(rule, candidate):
    """The custom metric names a rule serves, among the series it selects: name.matches /
    name.as, as the adapter applies them (Go's ${1} written Python's way)."""
    out = set()
    series = adapter_series(rule["seriesQuery"])
    regex = re.search(r'__name__\s*=~\s*"([^"]+)"', rule["seriesQuery"])
    if regex and re.fullmatch(regex.group(1), candidate):
        series.add(candidate)
    naming = rule.get("name") or {}
    for s in series:
        matches = naming.get("matches", "")
        as_ = naming.get("as", "")
        m = re.search(matches, s) if matches else None
        if matches and not m:
            continue
        if as_:
            out.add(re.sub(matches, re.sub(r"\$\{?(\d+)\}?", r"\\\1", as_), s))
        else:
            out.add(s)
    return out


if __name__ == "__main__":
    unittest.main()
