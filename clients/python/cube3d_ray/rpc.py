"""The gRPC calls, written by hand over the generated messages: cube3d.v1.MeshService/
GenerateMesh, and grpc.health.v1.Health/Check (whose two one-field messages are encoded here, so
no health proto is generated or registered)."""
from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import grpc

from ._proto import mesh_service_pb2 as pb
from .requests import MeshRequest

GENERATE_MESH = "/cube3d.v1.MeshService/GenerateMesh"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
MESH_SERVICE = "cube3d.v1.MeshService"
# grpc.health.v1.HealthCheckResponse.ServingStatus
SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}

FORMAT_ENUM = {"glb": pb.MESH_FORMAT_GLB, "obj": pb.MESH_FORMAT_OBJ, "ply": pb.MESH_FORMAT_PLY,
               "compact": pb.MESH_FORMAT_COMPACT, "raw": pb.MESH_FORMAT_RAW}
PROFILE_ENUM = {"none": pb.MESH_PROFILE_NONE, "roblox": pb.MESH_PROFILE_ROBLOX}
FORMAT_NAME = {v: k for k, v in FORMAT_ENUM.items()}
PROFILE_NAME = {v: k for k, v in PROFILE_ENUM.items()}
PRIORITY_ENUM = {"interactive": pb.PRIORITY_INTERACTIVE, "batch": pb.PRIORITY_BATCH}

# Loopback and fleets alike: never through a proxy from the environment, answers of any size.
CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0), ("grpc.max_receive_message_length", -1),
                   ("grpc.lb_policy_name", "round_robin")]


def open_channel(target: str, root_certificates: bytes | None = None) -> grpc.Channel:
    if root_certificates is not None:
        credentials = grpc.ssl_channel_credentials(root_certificates=root_certificates)
        return grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
    return grpc.insecure_channel(target, options=CHANNEL_OPTIONS)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_health_request(service: str) -> bytes:
    """grpc.health.v1.HealthCheckRequest{service}."""
    data = service.encode()
    return b"\x0a" + _varint(len(data)) + data if data else b""


def decode_health_response(data: bytes) -> str:
    """grpc.health.v1.HealthCheckResponse's status name (field 1, a varint)."""
    stream, status = io.BytesIO(data), 0
    while True:
        tag = stream.read(1)
        if not tag:
            return SERVING_STATUS.get(status, str(status))
        field, wire = tag[0] >> 3, tag[0] & 7
        value = shift = 0
        if wire == 0:
            while True:
                b = stream.read(1)
                if not b:
                    raise ValueError("truncated health response")
                value |= (b[0] & 0x7F) << shift
                shift += 7
                if not b[0] & 0x80:
                    break
            if field == 1:
                status = value
        elif wire == 2:  # a field this reader does not know: skipped
            length = shift = 0
            while True:
                b = stream.read(1)
                if not b:
                    raise ValueError("truncated health response")
                length |= (b[0] & 0x7F) << shift
                shift += 7
                if not b[0] & 0x80:
                    break
            stream.read(length)
        else:
            raise ValueError(f"unexpected wire type {wire} in a health response")


def health(channel: grpc.Channel, service: str = MESH_SERVICE, timeout: float = 2.0,
           metadata: Sequence[tuple[str, str]] = ()) -> str:
    """The server's health for `service` ("SERVING", ...), or the RPC error's code name."""
    check = channel.unary_unary(HEALTH_CHECK)
    try:
        answer: bytes = check(encode_health_request(service), timeout=timeout,
                              metadata=list(metadata) or None)
    except grpc.RpcError as e:
        code: grpc.StatusCode = e.code()
        return str(code.name)
    return decode_health_response(answer)


def generate_mesh_call(channel: grpc.Channel) -> Any:
    """The channel's GenerateMesh (a grpc.UnaryUnaryMultiCallable)."""
    return channel.unary_unary(GENERATE_MESH,
                               request_serializer=pb.GenerateMeshRequest.SerializeToString,
                               response_deserializer=pb.GenerateMeshResponse.FromString)


def to_proto(request: MeshRequest, request_id: str, priority: str | None) -> Any:
    """The GenerateMeshRequest of a request."""
    message = pb.GenerateMeshRequest(prompt=request.prompt, request_id=request_id,
                                     format=FORMAT_ENUM[request.format])
    if request.seed is not None:
        message.seed = request.seed
    if request.guidance_scale is not None:
        message.guidance_scale = request.guidance_scale
    if request.top_p is not None:
        message.top_p = request.top_p
    if request.bounding_box is not None:
        x, y, z = request.bounding_box
        message.bounding_box.CopyFrom(pb.BoundingBox(x=x, y=y, z=z))
    if request.resolution_base is not None:
        message.resolution_base = request.resolution_base
    if request.target_face_count is not None:
        message.target_face_count = request.target_face_count
    if request.mesh_profile is not None:
        message.mesh_profile = PROFILE_ENUM[request.mesh_profile]
    if priority is not None:
        message.priority = PRIORITY_ENUM[priority]
    return message


def file_bytes(response: Any) -> bytes:
    """The mesh file of an answer: `encoded`, or for RAW a NumPy .npz of its arrays."""
    if response.format != pb.MESH_FORMAT_RAW:
        data: bytes = response.encoded
        return data
    import numpy as np
    buffer = io.BytesIO()
    np.savez(buffer, vertices=np.asarray(response.raw.vertices, np.float32).reshape(-1, 3),
             indices=np.asarray(response.raw.indices, np.uint32).reshape(-1, 3))
    return buffer.getvalue()
