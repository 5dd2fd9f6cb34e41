"""A thin client over the Unix socket: the channel, the stub, and errors turned into clear messages."""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from gitmctl.errors import (
    DEFAULT_SOCKET,
    EXIT_DENIED,
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    ClientError,
    default_socket,
    not_running,
    status_error,
)
from gitmd.api.client_auth import TokenSource, authenticated, credential_socket_for
from gitmd.api.pb import pb, pb_grpc


class Client:
    def __init__(self, socket_path: Path, timeout_s: float = 10.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        try:
            mode = socket_path.stat().st_mode
        except FileNotFoundError:
            raise not_running(socket_path, "no socket there") from None
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
        return status_error(e.code().name, e.details() or "", self.socket_path, self.timeout_s)


__all__ = [
    "DEFAULT_SOCKET",
    "EXIT_DENIED",
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "Client",
    "ClientError",
    "default_socket",
    "pb",
]
