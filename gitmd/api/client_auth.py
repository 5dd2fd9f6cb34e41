"""The API's client side of authentication: fetch tokens from the credential socket, send one with
every RPC.

The daemon takes a local caller for the uid the kernel reports on its credential socket
(``gitmd.auth``); a client fetches single-use tokens there and sends one as the ``gitm-token``
metadata of each call. ``TokenSource`` keeps a small pool (a batch per connection) and drops tokens
near their expiry; ``authenticated(channel, source)`` wraps a channel so every call carries a fresh
token. Used by gitmctl, the benchmarks and any Python scheduler integration.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from gitmd.auth import METADATA_KEY

TOKEN_LIFETIME_S = 50.0  # used well inside the daemon's default 60 s


class CredentialError(grpc.RpcError):
    """The credential socket could not be reached or refused. It is an RpcError with the code
    UNAVAILABLE, so callers handle "gitmd is not there" in one place."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return str(self)


def credential_socket_for(api_socket: Path) -> Path:
    """Where the daemon issues tokens: $GITMD_AUTH_SOCKET, else beside the API socket."""
    env = os.environ.get("GITMD_AUTH_SOCKET")
    if env:
        return Path(env)
    return api_socket.with_name(api_socket.stem + "-auth.sock")


def fetch_tokens(path: Path, n: int = 1, timeout_s: float = 5.0) -> list[str]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(str(path))
            s.sendall(f"TOKENS {n}\n".encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except FileNotFoundError:
            raise CredentialError(f"no credential socket at {path}") from None
        except OSError as e:
            raise CredentialError(f"credential socket {path}: {e.strerror or e}") from None
    text = data.decode("ascii", "replace").strip()
    if not text.startswith("OK "):
        raise CredentialError(f"credential socket {path} refused: {text or 'no answer'}")
    return text[3:].split()


class TokenSource:
    """A pool of single-use tokens for this process's uid."""

    def __init__(self, path: Path, batch: int = 32, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.batch = batch
        self._clock = clock
        self._pool: deque[tuple[float, str]] = deque()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def take(self) -> str:
        with self._lock:
            if self._pid != os.getpid():  # a forked child is another peer: its own tokens
                self._pool.clear()
                self._pid = os.getpid()
            now = self._clock()
            while self._pool and self._pool[0][0] < now:
                self._pool.popleft()
            if not self._pool:
                fetched = fetch_tokens(self.path, self.batch)
                self._pool.extend((now + TOKEN_LIFETIME_S, t) for t in fetched)
            return self._pool.popleft()[1]


class _ClientCallDetails(grpc.ClientCallDetails):
    def __init__(self, base: Any, metadata: list[tuple[str, str | bytes]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = tuple(metadata)
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class TokenInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, source: TokenSource) -> None:
        self.source = source

    def _details(self, details: Any) -> Any:
        metadata = [(k, v) for k, v in (details.metadata or ()) if k != METADATA_KEY]
        metadata.append((METADATA_KEY, self.source.take()))
        return _ClientCallDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)


def authenticated(channel: grpc.Channel, source: TokenSource) -> grpc.Channel:
    """``channel`` with a token from ``source`` on every call."""
    return grpc.intercept_channel(channel, TokenInterceptor(source))


def open_channel(api_socket: Path | str, options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
    """A channel to gitmd's Unix socket whose every call carries a fresh token for this uid."""
    path = Path(str(api_socket).removeprefix("unix:"))
    raw = grpc.insecure_channel(f"unix:{path}", options=options or [])
    return authenticated(raw, TokenSource(credential_socket_for(path)))
