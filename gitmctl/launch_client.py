"""The launcher's two calls (RegisterJob, ReportJobExit), by gitmd's launch socket where it has one,
else by gRPC: requests and responses are protobuf's JSON mapping of the API's messages (dicts,
proto field names). Over the launch socket nothing but Python's standard library is imported: that
is what it is for (gitmd/api/launch_socket.py says why and the protocol). gRPC stays the way for a
daemon without it (an older gitmd) and for a request too large for it."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from gitmctl.errors import EXIT_DENIED, EXIT_USAGE, ClientError, not_running, status_error
from gitmd.api.sockets import MAX_REQUEST_BYTES, fits_unix_socket, launch_socket_for

MAX_ANSWER_BYTES = 64 << 20


class NoLaunchSocket(Exception):
    """gitmd serves no launch socket beside ``api_socket`` (none there, or nobody listening)."""


def _exchange(path: Path, line: bytes, timeout_s: float) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise NoLaunchSocket(str(e)) from None
        try:
            s.sendall(line)
        except (BrokenPipeError, ConnectionResetError):
            pass  # it answered and closed before taking it all (a refusal when busy): read the answer
        data = bytearray()
        while not data.endswith(b"\n") and len(data) <= MAX_ANSWER_BYTES:
            try:
                chunk = s.recv(1 << 16)
            except ConnectionResetError:  # closed with our request unread: what it sent is all
                break
            if not chunk:
                break
            data += chunk
    return bytes(data)


def call_socket(api_socket: Path, rpc: str, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """``rpc``'s response over the launch socket beside ``api_socket``. NoLaunchSocket where there is
    none (or ``request`` is too large for it); ClientError as the gRPC client says it, otherwise."""
    line = (
        json.dumps({"rpc": rpc, "request": request}, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    )
    if len(line) > MAX_REQUEST_BYTES:
        raise NoLaunchSocket(f"the request is over {MAX_REQUEST_BYTES} bytes")
    path = launch_socket_for(api_socket)
    if not fits_unix_socket(path):  # gitmd serves none there (and connect would fail otherwise)
        raise NoLaunchSocket(f"{path} is too long for a Unix socket")
    try:
        data = _exchange(path, line, timeout_s)
    except TimeoutError:
        raise status_error("DEADLINE_EXCEEDED", "", api_socket, timeout_s) from None
    except PermissionError:
        raise ClientError(f"permission denied connecting to {path}", EXIT_DENIED) from None
    except OSError as e:
        raise not_running(api_socket, f"launch socket {path}: {e.strerror or e}") from None
    try:
        answer = json.loads(data)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise not_running(api_socket, f"launch socket {path}: no answer")
    if "error" in answer:
        err = answer["error"] if isinstance(answer["error"], dict) else {}
        raise status_error(
            str(err.get("code", "UNKNOWN")), str(err.get("message", "")), api_socket, timeout_s
        )
    response = answer.get("response")
    if not isinstance(response, dict):
        raise not_running(api_socket, f"launch socket {path}: an answer without a response")
    return response


def call_grpc(api_socket: Path, rpc: str, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """``rpc``'s response by gRPC (the API socket), for a daemon with no launch socket."""
    from google.protobuf import json_format

    from gitmctl.client import Client, pb

    client = Client(api_socket, timeout_s=timeout_s)
    try:
        try:
            message = json_format.ParseDict(request, getattr(pb, f"{rpc}Request")())
        except json_format.ParseError as e:
            raise ClientError(f"{rpc}: {e}", EXIT_USAGE) from None
        response = client.call(getattr(client.stub, rpc), message)
    finally:
        client.close()
    return json_format.MessageToDict(
        response, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def call(api_socket: Path, rpc: str, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """``rpc``'s response (a dict: protobuf's JSON mapping, proto field names, every field there),
    by the launch socket, else by gRPC; ClientError as gitmctl's other verbs raise it."""
    try:
        return call_socket(api_socket, rpc, request, timeout_s)
    except NoLaunchSocket:
        pass
    # no API socket either (gitmd is down): said as the gRPC client says it, without importing grpc
    # (~0.2 s on every job's launch while gitmd is down, before the command runs untraced)
    try:
        os.stat(api_socket)
    except FileNotFoundError:
        raise not_running(api_socket, "no socket there") from None
    except OSError:
        pass  # the gRPC client says what else is wrong with it
    return call_grpc(api_socket, rpc, request, timeout_s)
