"""A thin client over the Unix socket: the channel, the stub, and errors turned into clear messages."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from gitmd.api.client_auth import TokenSource, authenticated, credential_socket_for
from gitmd.api.pb import pb, pb_grpc

DEFAULT_SOCKET = Path("/run/gitmd/gitmd.sock")

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_NOT_FOUND = 4
EXIT_DENIED = 5


def default_socket() -> Path:
    return Path(os.environ.get("GITMD_SOCKET") or DEFAULT_SOCKET)


class ClientError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _not_running(socket_path: Path, why: str) -> ClientError:
    return ClientError(
        f"gitmd is not running or not reachable at {socket_path} ({why}).\n"
        "  Start it with `sudo systemctl start gitmd`, or `make run` in a source checkout,\n"
        "  or point gitmctl at another socket with --socket PATH or GITMD_SOCKET.",
        EXIT_UNAVAILABLE,
    )


class Client:
    def __init__(self, socket_path: Path, timeout_s: float = 10.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        try:
            mode = socket_path.stat().st_mode
        except FileNotFoundError:
            raise _not_running(socket_path, "no socket there") from None
        except PermissionError:
            raise ClientError(f"permission denied reading {socket_path}", EXIT_ERROR) from None
        if not stat.S_ISSOCK(mode):
            raise ClientError(f"{socket_path} is not a Unix socket", EXIT_USAGE)
        self._raw = grpc.insecure_channel(
            f"unix:{socket_path}",
            options=[
                ("grpc.max_receive_message_length", 80 << 20),
                ("grpc.max_send_message_length", 80 << 20),
            ],
        )
        # Every call carries a single-use token for our uid from the credential socket.
        self.credential_socket = credential_socket_for(socket_path)
        self.channel = authenticated(self._raw, TokenSource(self.credential_socket, batch=4))
        self.stub = pb_grpc.GitmdStub(self.channel)

    @property
    def raw_channel(self) -> grpc.Channel:
        """The channel without tokens (health checking needs none)."""
        return self._raw

    def close(self) -> None:
        self._raw.close()

    def call(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout_s)
        except grpc.RpcError as e:
            raise self._translate(e) from None

    def stream(self, method: Callable[..., Any], request: Any) -> Iterator[Any]:
        try:
            yield from method(request)
        except grpc.RpcError as e:
            raise self._translate(e) from None

    def _translate(self, e: grpc.RpcError) -> ClientError:
        code = e.code()
        details = e.details() or ""
        if code == grpc.StatusCode.UNAVAILABLE:
            return _not_running(self.socket_path, details or "unavailable")
        if code == grpc.StatusCode.NOT_FOUND:
            return ClientError(details, EXIT_NOT_FOUND)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return ClientError(details, EXIT_USAGE)
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return ClientError(f"permission denied: {details}", EXIT_DENIED)
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return ClientError(f"not authenticated: {details}", EXIT_DENIED)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return ClientError(f"refused, a limit was reached: {details}", EXIT_UNAVAILABLE)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return ClientError(f"gitmd did not answer within {self.timeout_s:g} s", EXIT_UNAVAILABLE)
        return ClientError(f"{code.name}: {details}", EXIT_ERROR)


__all__ = ["Client", "ClientError", "default_socket", "pb"]
