"""gitmctl's exit codes and its one error type, with what each gRPC status code becomes: without
grpc, so that `gitmctl run` (gitmctl/launch_client.py) can say them without importing it."""

from __future__ import annotations

import os
from pathlib import Path

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


def not_running(socket_path: Path, why: str) -> ClientError:
    return ClientError(
        f"gitmd is not running or not reachable at {socket_path} ({why}).\n"
        "  Start it with `sudo systemctl start gitmd`, or `make run` in a source checkout,\n"
        "  or point gitmctl at another socket with --socket PATH or GITMD_SOCKET.",
        EXIT_UNAVAILABLE,
    )


def status_error(code: str, details: str, socket_path: Path, timeout_s: float) -> ClientError:
    """The error a call answered with gRPC status ``code`` (its name) and ``details`` is to the user."""
    if code == "UNAVAILABLE":
        return not_running(socket_path, details or "unavailable")
    if code == "NOT_FOUND":
        return ClientError(details, EXIT_NOT_FOUND)
    if code == "INVALID_ARGUMENT":
        return ClientError(details, EXIT_USAGE)
    if code == "PERMISSION_DENIED":
        return ClientError(f"permission denied: {details}", EXIT_DENIED)
    if code == "UNAUTHENTICATED":
        return ClientError(f"not authenticated: {details}", EXIT_DENIED)
    if code == "RESOURCE_EXHAUSTED":
        return ClientError(f"refused, a limit was reached: {details}", EXIT_UNAVAILABLE)
    if code == "DEADLINE_EXCEEDED":
        return ClientError(f"gitmd did not answer within {timeout_s:g} s", EXIT_UNAVAILABLE)
    return ClientError(f"{code}: {details}", EXIT_ERROR)
