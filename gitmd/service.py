"""The transport-free facade: every API operation as a plain method. No grpc in here.

The servicer converts messages and calls these; tests and other transports can call them directly.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from gitmd import __version__
from gitmd.config import Config
from gitmd.errors import InvalidArgumentError, NotFoundError
from gitmd.store.telemetry import TelemetryStore
from gitmd.telemetry.backend import GpuInfo, GpuSample, TelemetryBackend
from gitmd.telemetry.sampler import Sampler, Watch

DEFAULT_TELEMETRY_LIMIT = 10_000
MAX_TELEMETRY_LIMIT = 1_000_000


@dataclass(frozen=True)
class Status:
    version: str
    uptime_s: float
    started_at_ns: int
    backend: str
    gpu_count: int
    driver_version: str
    socket_path: str
    state_dir: str
    sample_interval_s: float
    samples_taken: int
    sample_field_errors: int
    config: dict[str, str]
    pid: int


@dataclass(frozen=True)
class TelemetryPage:
    samples: list[GpuSample]
    truncated: bool


class Service:
    def __init__(
        self, config: Config, backend: TelemetryBackend, sampler: Sampler, telemetry: TelemetryStore
    ) -> None:
        self.config = config
        self.backend = backend
        self.sampler = sampler
        self.telemetry_store = telemetry
        self.started_at_ns = time.time_ns()
        self._started_mono = time.monotonic()
        self._gpus = backend.gpus()
        self.alive = threading.Event()
        self.alive.set()

    def status(self) -> Status:
        return Status(
            version=__version__,
            uptime_s=time.monotonic() - self._started_mono,
            started_at_ns=self.started_at_ns,
            backend=self.backend.name,
            gpu_count=len(self._gpus),
            driver_version=self.backend.driver_version(),
            socket_path=str(self.config.daemon.socket_path),
            state_dir=str(self.config.daemon.state_dir),
            sample_interval_s=self.config.telemetry.interval_s,
            samples_taken=self.sampler.stats.samples,
            sample_field_errors=self.sampler.stats.field_errors,
            config=self.config.summary(),
            pid=os.getpid(),
        )

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def _check_gpu(self, gpu_index: int | None) -> None:
        if gpu_index is not None and not 0 <= gpu_index < len(self._gpus):
            have = f"0..{len(self._gpus) - 1}" if self._gpus else "none"
            raise NotFoundError(f"no GPU with index {gpu_index} (this host has {len(self._gpus)}: {have})")

    def telemetry(self, gpu_index: int | None, since_ns: int, until_ns: int, limit: int) -> TelemetryPage:
        self._check_gpu(gpu_index)
        if limit < 0 or limit > MAX_TELEMETRY_LIMIT:
            raise InvalidArgumentError(f"limit must be 0..{MAX_TELEMETRY_LIMIT}, got {limit}")
        if since_ns < 0 or until_ns < 0:
            raise InvalidArgumentError("since and until must not be negative")
        if since_ns == 0 and until_ns == 0:
            return TelemetryPage(self.sampler.latest(gpu_index), False)
        until = until_ns or time.time_ns()
        if until <= since_ns:
            raise InvalidArgumentError(f"until ({until}) must be after since ({since_ns})")
        samples, truncated = self.telemetry_store.query(
            gpu_index, since_ns, until, limit or DEFAULT_TELEMETRY_LIMIT
        )
        return TelemetryPage(samples, truncated)

    def watch_telemetry(self, gpu_index: int | None) -> Watch:
        self._check_gpu(gpu_index)
        return self.sampler.watch(gpu_index, self.alive)

    def shutdown(self) -> None:
        self.alive.clear()
        self.sampler.close_all()
