"""The project's error types: one hierarchy, mapped to gRPC status codes at the API boundary.

Vendor errors (NVML, ROCm SMI) are translated into these at the telemetry backend boundary.
"""

from __future__ import annotations


class GitmdError(Exception):
    """Base of every error gitmd raises on purpose."""


class ConfigError(GitmdError):
    """The configuration file is malformed or holds a bad value; the message names key and line."""


class StartupError(GitmdError):
    """The daemon cannot start (socket held, state dir not writable, backend unavailable...)."""


class NotFoundError(GitmdError):
    """A named object (GPU index, job, workload) does not exist."""


class InvalidArgumentError(GitmdError):
    """A request carries a value that cannot be honoured; nothing was changed."""


class TelemetryError(GitmdError):
    """A telemetry backend failed; ``field`` names what could not be read, when known."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class BackendUnavailableError(TelemetryError):
    """The vendor library or driver is not present on this host."""


class StoreError(GitmdError):
    """The SQLite store is unusable (corrupt, newer schema than this gitmd knows...)."""


class UnauthenticatedError(GitmdError):
    """The caller's identity could not be established (no, forged, expired or replayed token)."""


class PermissionDeniedError(GitmdError):
    """The caller is known but may not do this; the message says what was refused and why."""


class ResourceExhaustedError(GitmdError):
    """A per-caller or daemon-wide limit was reached; the message says which and what to do."""


class FailedPreconditionError(GitmdError):
    """The request needs something this daemon does not have on (the fleet, capture...)."""


class UnavailableError(GitmdError):
    """Something the request needs is away for now (the fleet store); try again later."""
